#pragma once
/// \file Metrics and per-device memory timelines computed from a timed plan, exactly as
/// DESIGN.md §2 defines them.

#include <cstdint>
#include <vector>

#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

/// Resolved costs of every virtual stage (sum over its layers, on its device's GPU).
struct StageCosts {
  double forwardMs = 0;
  double backwardInputMs = 0;
  double backwardWeightMs = 0;
  std::int64_t activationBytes = 0;
  std::int64_t weightGradBytes = 0;
  std::int64_t outputBytes = 0;  ///< of the stage's last layer: what is sent downstream
  double trainableParameters = 0;
  double frozenParameters = 0;
};
std::vector<StageCosts> stageCosts(const Plan& plan);

/// Static memory (parameters, gradients, optimizer state) of each device.
std::vector<std::int64_t> staticMemoryPerDevice(const Plan& plan, const std::vector<StageCosts>& costs);

/// One step of a device's memory curve: from `timeMs` on, `bytes` are in use.
struct MemoryPoint {
  double timeMs = 0;
  std::int64_t bytes = 0;
};
struct MemoryTimeline {
  std::vector<std::vector<MemoryPoint>> devices;  ///< static + live activations, step function
  std::vector<std::int64_t> peakBytes;
  std::vector<std::int64_t> peakActivationBytes;
  std::vector<std::int64_t> staticBytes;
};

/// Memory over time under the activation convention of DESIGN.md §2 (F start → B/BW end;
/// weightGradBytes until W end). Partial-batch ops scale by samples.
MemoryTimeline memoryTimeline(const Plan& plan);

/// makespan, busy/span, bubble ratio, throughput, peaks.
Metrics computeMetrics(const Plan& plan);

}  // namespace pipestudio
