#pragma once
/// \file Metrics and per-device memory timelines computed from a timed plan, exactly as
/// docs/formats.md defines them.

#include <cstdint>
#include <vector>

#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

/// Every virtual stage's costs (CostedModel::stages over the plan's stages).
std::vector<StageCosts> stageCosts(const Plan& plan);

/// ZeRO stage in effect: the plan's, or 1 for a model whose optimizer says "distributed".
int effectiveZeroStage(const Plan& plan);

/// Static memory per GPU of each device: parameters, gradients, optimizer state (ZeRO-sharded),
/// plus the largest collective buffer of its stages. Activations and margin are left zero.
std::vector<MemoryBreakdown> staticBreakdownPerDevice(const Plan& plan, const std::vector<StageCosts>& costs);

/// Static memory (parameters, gradients, optimizer state, collective buffers) of each device.
std::vector<std::int64_t> staticMemoryPerDevice(const Plan& plan, const std::vector<StageCosts>& costs);

/// What a GPU's capacity keeps back from the plan: the CUDA context, cuBLAS/NCCL/userbuffers
/// workspaces (1 GiB) and the caching allocator's fragmentation with expandable segments (2 % of
/// the capacity). Stated in docs/fidelity.md.
std::int64_t memoryMarginBytes(const GpuSpec& gpu);

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

/// Memory over time under the activation convention of docs/formats.md (F start → B/BW end;
/// weightGradBytes until W end). Partial-batch ops scale by samples.
MemoryTimeline memoryTimeline(const Plan& plan);
MemoryTimeline memoryTimeline(const Plan& plan, const std::vector<StageCosts>& costs);

/// makespan, busy/span, bubble ratio, peaks with their breakdown, and the whole training step:
/// exposed data-parallel gradient synchronisation (overlapped with each device's last
/// backward passes when config.parallel.overlapGradReduce), the optimizer step (and the
/// ZeRO-1/2 parameter all-gather), iteration time (steady state under post-validation:
/// the longest device span plus its own synchronisation and step), throughput, tokens/s,
/// model TFLOP/s per GPU and MFU.
Metrics computeMetrics(const Plan& plan);
/// The same with the plan's costs already derived (makePlan derives them once per request).
Metrics computeMetrics(const Plan& plan, const CostedModel& costs);

}  // namespace pipestudio
