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
/// low-precision weights, the largest collective buffer and recomputation of its stages, the
/// GEMM workspaces, userbuffers and CUDA-graph pools, and the margin the GPU keeps back (context,
/// fragmentation). Activations are left zero.
std::vector<MemoryBreakdown> staticBreakdownPerDevice(const Plan& plan, const std::vector<StageCosts>& costs);

/// What each device allocates before any activation: staticBreakdownPerDevice's allocated parts.
std::vector<std::int64_t> staticMemoryPerDevice(const Plan& plan, const std::vector<StageCosts>& costs);

/// What a GPU's capacity keeps back from the plan (MemoryBreakdown's kept-back lines): the CUDA
/// context with NCCL's communicators (memoryContextBytes, 1 GiB) and the caching allocator's
/// fragmentation with expandable segments (memoryFragmentationBytes, 2 % of the capacity). Stated
/// in docs/fidelity.md.
std::int64_t memoryContextBytes();
std::int64_t memoryFragmentationBytes(const GpuSpec& gpu);
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

/// Activation offloading (PlanConfig::offloadRatio r, PipeOffload §4): the share of virtual
/// stage `stage`'s activation bytes its D2H op offloads, r of each device's V chunks with
/// chunk 0 first (the longest-lived activations: a better-than-linear saving, PipeOffload's
/// selective offload), the boundary chunk in part: clamp(r·V − chunk, 0, 1).
double offloadFraction(const PlanConfig& config, const VirtualStage& stage);
/// The bytes that D2H moves to the host and H2D brings back, for one op of `stage` whose
/// (unit) costs are `unitCosts`.
std::int64_t offloadBytes(const PlanConfig& config, const VirtualStage& stage, const StageCosts& unitCosts);

/// Memory over time under the activation convention of docs/formats.md (F start → B/BW end;
/// weightGradBytes until W end; an offloaded share from its D2H end to its H2D start is on
/// the host). Partial-batch ops scale by samples; sequence-split plans use each chunk's costs.
MemoryTimeline memoryTimeline(const Plan& plan);
MemoryTimeline memoryTimeline(const Plan& plan, const CostedModel& costs);
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
