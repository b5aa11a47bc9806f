#include "pipestudio/plan/Memory.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pipestudio {
namespace {

// Byte counts saturate instead of overflowing: a hostile plan (10^5 layers of 1 PiB each,
// millions of ops) must not reach signed-overflow undefined behaviour.
void addSaturating(std::int64_t& total, std::int64_t delta) {
  if (__builtin_add_overflow(total, delta, &total)) {
    total = delta > 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::min();
  }
}

std::int64_t sumSaturating(std::int64_t a, std::int64_t b) {
  addSaturating(a, b);
  return a;
}

}  // namespace

std::vector<StageCosts> stageCosts(const Plan& plan) {
  std::vector<StageCosts> out(plan.virtualStages.size());
  for (std::size_t i = 0; i < plan.virtualStages.size(); ++i) {
    const VirtualStage& vs = plan.virtualStages[i];
    if (vs.component < 0 || static_cast<std::size_t>(vs.component) >= plan.model.components.size()) continue;
    const Component& comp = plan.model.components[static_cast<std::size_t>(vs.component)];
    const GpuSpec& gpu = plan.cluster.gpuOfDevice(vs.device);
    StageCosts& s = out[i];
    for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && l < static_cast<int>(comp.layers.size()); ++l) {
      const LayerCosts c =
          layerCosts(comp.layers[static_cast<std::size_t>(l)], gpu, plan.model.samplesPerMicrobatch, comp.trainable);
      s.forwardMs += c.forwardMs;
      s.backwardInputMs += c.backwardInputMs;
      s.backwardWeightMs += c.backwardWeightMs;
      addSaturating(s.activationBytes, c.activationBytes);
      addSaturating(s.weightGradBytes, c.weightGradBytes);
      s.outputBytes = c.outputBytes;
      (comp.trainable ? s.trainableParameters : s.frozenParameters) += c.parameterCount();
    }
  }
  return out;
}

std::vector<std::int64_t> staticMemoryPerDevice(const Plan& plan, const std::vector<StageCosts>& costs) {
  std::vector<double> bytes(static_cast<std::size_t>(std::max(0, plan.config.devices)), 0.0);
  for (std::size_t i = 0; i < plan.virtualStages.size() && i < costs.size(); ++i) {
    const int d = plan.virtualStages[i].device;
    if (d < 0 || d >= static_cast<int>(bytes.size())) continue;
    bytes[static_cast<std::size_t>(d)] += staticMemoryBytes(costs[i].trainableParameters, costs[i].frozenParameters,
                                                            plan.model.optimizer, plan.config.dataParallel);
  }
  std::vector<std::int64_t> out;
  out.reserve(bytes.size());
  for (double b : bytes) out.push_back(static_cast<std::int64_t>(std::llround(b)));
  return out;
}

MemoryTimeline memoryTimeline(const Plan& plan) {
  const auto costs = stageCosts(plan);
  MemoryTimeline t;
  const auto devices = static_cast<std::size_t>(std::max(0, plan.config.devices));
  t.staticBytes = staticMemoryPerDevice(plan, costs);
  t.devices.assign(devices, {});
  t.peakBytes.assign(devices, 0);
  t.peakActivationBytes.assign(devices, 0);

  // (time, delta) events per device; at equal times releases go first (a device finishing a
  // B and starting an F at the same instant does not hold both).
  struct Event {
    double timeMs;
    std::int64_t delta;
  };
  std::vector<std::vector<Event>> events(devices);
  {
    std::vector<std::size_t> perDevice(devices, 0);
    for (const Op& op : plan.ops) {
      if (op.device >= 0 && static_cast<std::size_t>(op.device) < devices) ++perDevice[static_cast<std::size_t>(op.device)];
    }
    for (std::size_t d = 0; d < devices; ++d) events[d].reserve(perDevice[d] + perDevice[d] / 8);
  }
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch));
  // Whole-microbatch bytes per stage, rounded exactly as a fraction of 1.0 would be.
  std::vector<std::int64_t> wholeAct(costs.size()), wholeWgrad(costs.size());
  for (std::size_t i = 0; i < costs.size(); ++i) {
    wholeAct[i] = static_cast<std::int64_t>(std::llround(static_cast<double>(costs[i].activationBytes) * 1.0));
    wholeWgrad[i] = static_cast<std::int64_t>(std::llround(static_cast<double>(costs[i].weightGradBytes) * 1.0));
  }
  for (const Op& op : plan.ops) {
    if (op.device < 0 || static_cast<std::size_t>(op.device) >= devices) continue;
    if (op.virtualStage < 0 || static_cast<std::size_t>(op.virtualStage) >= costs.size()) continue;
    const auto stage = static_cast<std::size_t>(op.virtualStage);
    const StageCosts& c = costs[stage];
    const double fraction = op.samples > 0 ? static_cast<double>(op.samples) / samplesPerMb : 1.0;
    const auto act = op.samples > 0 ? static_cast<std::int64_t>(std::llround(static_cast<double>(c.activationBytes) * fraction))
                                    : wholeAct[stage];
    const auto wgrad = op.samples > 0
                           ? static_cast<std::int64_t>(std::llround(static_cast<double>(c.weightGradBytes) * fraction))
                           : wholeWgrad[stage];
    auto& ev = events[static_cast<std::size_t>(op.device)];
    switch (op.kind) {
      case OpKind::F:
      case OpKind::S:
        ev.push_back({op.startMs, act});
        break;
      case OpKind::B:
        ev.push_back({op.endMs, -(act - wgrad)});
        break;
      case OpKind::W:
        ev.push_back({op.endMs, -wgrad});
        break;
      case OpKind::BW:
      case OpKind::T:
        ev.push_back({op.endMs, -act});
        break;
      case OpKind::N:
        // Frozen forward: no backward, activations live only while the op runs.
        ev.push_back({op.startMs, act});
        ev.push_back({op.endMs, -act});
        break;
      case OpKind::OPT:
        break;
    }
  }
  for (std::size_t d = 0; d < devices; ++d) {
    auto& ev = events[d];
    const auto earlier = [](const Event& a, const Event& b) {
      if (a.timeMs != b.timeMs) return a.timeMs < b.timeMs;
      return a.delta < b.delta;
    };
    // A simulated device's ops do not overlap, so its events usually come in order already.
    if (!std::is_sorted(ev.begin(), ev.end(), earlier)) std::stable_sort(ev.begin(), ev.end(), earlier);
    const std::int64_t base = t.staticBytes[d];
    std::int64_t live = 0;
    std::int64_t peakLive = 0;
    auto& curve = t.devices[d];
    curve.push_back({ev.empty() ? 0.0 : ev.front().timeMs, base});
    for (const Event& e : ev) {
      addSaturating(live, e.delta);
      peakLive = std::max(peakLive, live);
      if (!curve.empty() && curve.back().timeMs == e.timeMs) {
        curve.back().bytes = sumSaturating(base, live);
      } else {
        curve.push_back({e.timeMs, sumSaturating(base, live)});
      }
    }
    t.peakActivationBytes[d] = peakLive;
    t.peakBytes[d] = sumSaturating(base, peakLive);
  }
  return t;
}

Metrics computeMetrics(const Plan& plan) {
  Metrics m;
  const auto devices = static_cast<std::size_t>(std::max(0, plan.config.devices));
  m.devices.assign(devices, {});
  if (plan.ops.empty()) return m;
  double first = plan.ops.front().startMs;
  double last = plan.ops.front().endMs;
  std::vector<double> devFirst(devices, INFINITY), devLast(devices, -INFINITY);
  // Peak memory in the same pass, without memoryTimeline's per-device event lists and
  // curves: each device's events are replayed in plan order, which is memoryTimeline's
  // order whenever its events are sorted (a simulated plan's are). A device whose events
  // come out of order sends the whole computation to memoryTimeline below.
  const auto costs = stageCosts(plan);
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch));
  std::vector<std::int64_t> wholeAct(costs.size()), wholeWgrad(costs.size());
  for (std::size_t i = 0; i < costs.size(); ++i) {
    wholeAct[i] = static_cast<std::int64_t>(std::llround(static_cast<double>(costs[i].activationBytes) * 1.0));
    wholeWgrad[i] = static_cast<std::int64_t>(std::llround(static_cast<double>(costs[i].weightGradBytes) * 1.0));
  }
  struct Replay {
    double lastTimeMs = -INFINITY;
    std::int64_t lastDelta = 0;
    std::int64_t live = 0;
    std::int64_t peakLive = 0;
  };
  std::vector<Replay> replay(devices);
  bool inOrder = true;
  auto apply = [&](Replay& r, double timeMs, std::int64_t delta) {
    // memoryTimeline's order: by time, releases (smaller deltas) first at one instant.
    if (timeMs < r.lastTimeMs || (timeMs == r.lastTimeMs && delta < r.lastDelta)) inOrder = false;
    r.lastTimeMs = timeMs;
    r.lastDelta = delta;
    addSaturating(r.live, delta);
    r.peakLive = std::max(r.peakLive, r.live);
  };
  for (const Op& op : plan.ops) {
    first = std::min(first, op.startMs);
    last = std::max(last, op.endMs);
    if (op.device < 0 || static_cast<std::size_t>(op.device) >= devices) continue;
    const auto d = static_cast<std::size_t>(op.device);
    m.devices[d].busyMs += op.durationMs();
    devFirst[d] = std::min(devFirst[d], op.startMs);
    devLast[d] = std::max(devLast[d], op.endMs);
    if (!inOrder || op.virtualStage < 0 || static_cast<std::size_t>(op.virtualStage) >= costs.size()) continue;
    // The events of memoryTimeline, in the same order per op.
    const auto stage = static_cast<std::size_t>(op.virtualStage);
    const StageCosts& c = costs[stage];
    const double fraction = op.samples > 0 ? static_cast<double>(op.samples) / samplesPerMb : 1.0;
    const auto act = op.samples > 0 ? static_cast<std::int64_t>(std::llround(static_cast<double>(c.activationBytes) * fraction))
                                    : wholeAct[stage];
    const auto wgrad = op.samples > 0
                           ? static_cast<std::int64_t>(std::llround(static_cast<double>(c.weightGradBytes) * fraction))
                           : wholeWgrad[stage];
    Replay& r = replay[d];
    switch (op.kind) {
      case OpKind::F:
      case OpKind::S:
        apply(r, op.startMs, act);
        break;
      case OpKind::B:
        apply(r, op.endMs, -(act - wgrad));
        break;
      case OpKind::W:
        apply(r, op.endMs, -wgrad);
        break;
      case OpKind::BW:
      case OpKind::T:
        apply(r, op.endMs, -act);
        break;
      case OpKind::N:
        apply(r, op.startMs, act);
        apply(r, op.endMs, -act);
        break;
      case OpKind::OPT:
        break;
    }
  }
  m.makespanMs = last - first;
  double busy = 0;
  for (std::size_t d = 0; d < devices; ++d) {
    if (devLast[d] >= devFirst[d]) m.devices[d].spanMs = devLast[d] - devFirst[d];
    busy += m.devices[d].busyMs;
  }
  if (m.makespanMs > 0 && devices > 0) {
    m.bubbleRatio = 1.0 - busy / (static_cast<double>(devices) * m.makespanMs);
    const double samples = static_cast<double>(plan.config.microbatches) *
                           static_cast<double>(plan.model.samplesPerMicrobatch) *
                           static_cast<double>(std::max(1, plan.config.dataParallel));
    m.throughputSamplesPerS = samples / (m.makespanMs / 1000.0);
  }
  if (!inOrder) {
    const MemoryTimeline mem = memoryTimeline(plan);
    for (std::size_t d = 0; d < devices; ++d) {
      m.devices[d].peakMemoryBytes = mem.peakBytes[d];
      m.devices[d].peakActivationBytes = mem.peakActivationBytes[d];
      m.devices[d].staticMemoryBytes = mem.staticBytes[d];
    }
    return m;
  }
  const std::vector<std::int64_t> staticBytes = staticMemoryPerDevice(plan, costs);
  for (std::size_t d = 0; d < devices; ++d) {
    m.devices[d].peakMemoryBytes = sumSaturating(staticBytes[d], replay[d].peakLive);
    m.devices[d].peakActivationBytes = replay[d].peakLive;
    m.devices[d].staticMemoryBytes = staticBytes[d];
  }
  return m;
}

}  // namespace pipestudio
