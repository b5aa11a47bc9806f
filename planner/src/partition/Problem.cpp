// Building partition problems from requests and schedules (issue 4).
#include <algorithm>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/planner/Partition.hpp"

namespace pipestudio {

Status checkPartitionSize(std::int64_t stages, std::int64_t layers) {
  if (static_cast<double>(stages) * static_cast<double>(layers) <= static_cast<double>(kMaxPartitionCells)) return {};
  const std::int64_t mostStages = std::max<std::int64_t>(1, kMaxPartitionCells / std::max<std::int64_t>(1, layers));
  return Error{std::to_string(stages) + " virtual stages over " + std::to_string(layers) + " layers make " +
               std::to_string(stages * layers) + " (stage, layer) pairs, more than the partitioner's limit of " +
               std::to_string(kMaxPartitionCells) + " (expected at most " + std::to_string(mostStages) +
               " virtual stages for this component, fewer chunks or devices, or --partition uniform, which keeps no "
               "table)"};
}

PartitionProblem buildPartitionProblem(const PlanRequest& request, int component,
                                       const std::vector<PartitionStage>& stages) {
  return buildPartitionProblem(request, CostedModel(request.model, request.cluster, request.config), component, stages);
}

PartitionProblem buildPartitionProblem(const PlanRequest& request, const CostedModel& costs, int component,
                                       const std::vector<PartitionStage>& stages) {
  PartitionProblem p;
  const Component& comp = request.model.components.at(static_cast<std::size_t>(component));
  p.layers = static_cast<int>(comp.layers.size());
  p.microbatches = request.config.microbatches;
  p.stages = stages;
  const auto L = comp.layers.size();
  const auto S = stages.size();
  p.computeMs.assign(S, std::vector<double>(L, 0.0));
  p.sendMs.assign(S, std::vector<double>(L, 0.0));
  p.activationBytes.assign(L, 0.0);
  p.staticBytes.assign(L, 0.0);
  // D·C ranks share the dense weights (Parallelism::denseData).
  const int dataParallel = static_cast<int>(std::min<std::int64_t>(request.config.parallel.denseData(), 1 << 30));
  const StaticBytesPerParameter perParam = staticBytesPerParameter(
      std::max(request.config.parallel.zeroStage, request.model.optimizer.distributed ? 1 : 0), dataParallel);
  for (std::size_t s = 0; s < S; ++s) {
    const std::vector<LayerCosts>& c = costs.component(component, stages[s].device);
    // Consecutive layers mostly send the same hidden state: time each distinct size once
    // (the link lookup walks the cluster's nodes).
    double lastBytes = -1, lastMs = 0;
    for (std::size_t l = 0; l < L; ++l) {
      p.computeMs[s][l] = c[l].forwardMs + c[l].backwardInputMs + c[l].backwardWeightMs;
      if (s + 1 < S) {
        const auto bytes = static_cast<double>(c[l].outputBytes);
        if (bytes != lastBytes) {
          lastBytes = bytes;
          lastMs = stageSendMs(request.cluster, request.config, stages[s].device, stages[s + 1].device, bytes);
        }
        // Activations go forward and their gradients come back: two transfers of the output.
        p.sendMs[s][l] = 2.0 * lastMs;
      }
      if (s == 0) {
        p.activationBytes[l] = static_cast<double>(c[l].activationBytes);
        const double params = c[l].parameterCount();
        p.staticBytes[l] = comp.trainable ? params * perParam.total() : params * 2.0;
      }
    }
  }
  return p;
}

std::vector<int> liveMicrobatchesPerStage(const ScheduleSkeleton& skeleton) {
  std::vector<int> live(skeleton.virtualStages.size(), 0);
  std::vector<int> peak(skeleton.virtualStages.size(), 0);
  for (const auto& order : skeleton.devices) {
    for (const OrderedOp& op : order) {
      if (!inRange(live, op.virtualStage)) continue;
      const auto v = static_cast<std::size_t>(op.virtualStage);
      switch (op.kind) {
        case OpKind::F:
          ++live[v];
          peak[v] = std::max(peak[v], live[v]);
          break;
        case OpKind::B:
        case OpKind::BW:
          --live[v];
          break;
        default:
          break;
      }
    }
  }
  for (int& p : peak) p = std::max(1, p);
  return peak;
}

std::vector<std::string> partitionNames() {
  return {"uniform", "balanced", "dp", "diffusionpipe", "megatron", "balanced-split", "dp-split"};
}

}  // namespace pipestudio
