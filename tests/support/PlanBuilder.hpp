#pragma once
// The one way tests write plans by hand (issue 18): layers, a one-node cluster, virtual stages
// and, op by op, each device's order as unit-time slots. The generated plans of
// SyntheticPlan.hpp and ListScheduledPlan.hpp are built on it.
//
//   Plan p = test::PlanBuilder("1f1b", 2, 2)
//                .backbone(2)
//                .stagePerDevice()
//                .order(0, "F0 F1 .  .  B0 W0 B1 W1")
//                .order(1, ".  F0 B0 W0 F1 B1 W1")
//                .build();

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::test {

/// Byte sizes of a test layer (unset: as a model file that leaves them out).
struct LayerBytes {
  std::optional<std::int64_t> activation = 100;
  std::optional<std::int64_t> weightGrad = 40;
  std::optional<std::int64_t> parameter = 2000;
  std::optional<std::int64_t> output;
};

/// A trainable layer: forward, backward-input and backward-weight costs in ms.
inline Layer trainableLayer(std::string name, double f, double b, double w, const LayerBytes& bytes = {}) {
  Layer l;
  l.name = std::move(name);
  l.forwardMs = f;
  l.backwardInputMs = b;
  l.backwardWeightMs = w;
  l.activationBytes = bytes.activation;
  l.weightGradBytes = bytes.weightGrad;
  l.parameterBytes = bytes.parameter;
  l.outputBytes = bytes.output;
  return l;
}

/// A frozen layer: forward only, no backward (docs/formats.md).
inline Layer frozenLayer(std::string name, double f, const LayerBytes& bytes = {}) {
  Layer l = trainableLayer(std::move(name), f, 0, 0, bytes);
  l.backwardInputMs.reset();
  l.backwardWeightMs.reset();
  return l;
}

/// One node of `devices` GPUs ("g": 100 TFLOP/s, 80 GB, efficiency 0.5) and the given links.
inline ClusterSpec testCluster(int devices, LinkSpec intraNode = {100, 0}, LinkSpec interNode = {10, 0}) {
  ClusterSpec c;
  c.name = "test";
  c.gpu = GpuSpec{"g", 100, 80, 0.5};
  c.nodes.push_back(NodeSpec{"localhost", devices, std::nullopt, std::nullopt});
  c.intraNode = intraNode;
  c.interNode = interNode;
  return c;
}

class PlanBuilder {
 public:
  /// A plan of `schedule` over `devices` devices and `microbatches` microbatches on
  /// testCluster(devices); no model, stages or ops yet.
  PlanBuilder(std::string schedule, int devices, int microbatches) {
    m_plan.config.schedule = std::move(schedule);
    m_plan.config.devices = devices;
    m_plan.config.microbatches = microbatches;
    m_plan.model.name = "test";
    m_plan.cluster = testCluster(devices);
  }

  PlanBuilder& samplesPerMicrobatch(std::int64_t samples) {
    m_plan.model.samplesPerMicrobatch = samples;
    return *this;
  }
  PlanBuilder& cluster(ClusterSpec c) {
    m_plan.cluster = std::move(c);
    return *this;
  }
  /// Appends a component.
  PlanBuilder& component(Component c) {
    m_plan.model.components.push_back(std::move(c));
    return *this;
  }
  /// Appends a trainable "backbone" of `layers` identical layers "l0", "l1", ...
  PlanBuilder& backbone(int layers, double f = 1, double b = 1, double w = 1, const LayerBytes& bytes = {}) {
    Component c{"backbone", true, {}, {}};
    for (int i = 0; i < layers; ++i) c.layers.push_back(trainableLayer("l" + std::to_string(i), f, b, w, bytes));
    return component(std::move(c));
  }
  /// Appends a virtual stage with the next id.
  PlanBuilder& stage(int device, int component, int firstLayer, int lastLayer, int chunk = 0) {
    const int id = static_cast<int>(m_plan.virtualStages.size());
    m_plan.virtualStages.push_back(VirtualStage{id, device, chunk, component, firstLayer, lastLayer, 0});
    return *this;
  }
  /// Virtual stage d = layer d of the last component, on device d, for every device.
  PlanBuilder& stagePerDevice() {
    const int component = static_cast<int>(m_plan.model.components.size()) - 1;
    for (int d = 0; d < m_plan.config.devices; ++d) stage(d, component, d, d);
    return *this;
  }
  /// Device `device`'s ops in unit-time slots of `slotMs`, separated by spaces: a kind and a
  /// microbatch ("F0", "B1", "W0", "BW2", "N0") or "." for an idle slot. The ops run on
  /// `virtualStage` (default: the device's first stage). Bad text aborts the test binary.
  PlanBuilder& order(int device, std::string_view slots, double slotMs = 1.0, int virtualStage = -1) {
    if (virtualStage < 0) {
      for (const VirtualStage& vs : m_plan.virtualStages) {
        if (vs.device == device) {
          virtualStage = vs.id;
          break;
        }
      }
    }
    std::istringstream in{std::string(slots)};
    std::string token;
    for (int slot = 0; in >> token; ++slot) {
      if (token == ".") continue;
      const auto digit = token.find_first_of("0123456789");
      const auto kind = digit == std::string::npos ? std::nullopt : opKindFromName(token.substr(0, digit));
      if (!kind) std::abort();  // a typo in a test's order, not a case to handle
      Op op;
      op.device = device;
      op.virtualStage = virtualStage;
      op.kind = *kind;
      op.microbatch = std::stoi(token.substr(digit));
      op.startMs = slot * slotMs;
      op.endMs = op.startMs + slotMs;
      m_plan.ops.push_back(op);
    }
    return *this;
  }
  PlanBuilder& op(const Op& op) {
    m_plan.ops.push_back(op);
    return *this;
  }
  PlanBuilder& comm(const Comm& comm) {
    m_plan.comms.push_back(comm);
    return *this;
  }

  /// The plan under construction, for what the builder does not cover.
  Plan& plan() { return m_plan; }
  /// The plan with its metrics computed (executor/README.md).
  Plan build() const {
    Plan p = m_plan;
    p.metrics = computeMetrics(p);
    return p;
  }

 private:
  Plan m_plan;
};

}  // namespace pipestudio::test
