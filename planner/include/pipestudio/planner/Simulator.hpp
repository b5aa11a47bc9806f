#pragma once
/// \file The discrete-event simulator: `simulate` / `resimulate`, the memory check of a timed
/// plan (`checkMemory`), and the simulator itself (`simulateSkeleton`) for generators and solvers
/// that time many candidate orders (zb-auto, configurator).

#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Request.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio {

struct SimulationOptions {
  bool recordComms = true;     ///< fill Plan::comms
  bool computeMetrics = true;  ///< fill Plan::metrics (memory timeline included)
  /// The shell's costs, derived once by the caller (nullptr: derived from the shell).
  const CostedModel* costs = nullptr;
};

/// Times `skeleton` on `shell` (config, model, cluster; its virtualStages are replaced by the
/// skeleton's). Errors: an op twice, an op on the wrong device, a dependency no device runs,
/// or a deadlock (the message names each waiting device, the op it waits at, what it waits
/// for, and the cycle).
Expected<Plan> simulateSkeleton(Plan shell, const ScheduleSkeleton& skeleton, const SimulationOptions& options = {});

/// The simulated duration of one whole-microbatch op of `kind` on a stage with `costs`:
/// F/N forward, B input gradient, W weight gradient, BW both; the vocabulary passes split the
/// shard's work by the plan's barrier count (PlanConfig::vocabBarriers: with one, S also
/// computes the input-gradient partial sums and T only the weight gradient).
double passDurationMs(OpKind kind, const StageCosts& costs, int vocabBarriers);

/// Per-stage estimates (times, bytes, transfer time to the next stage of its pipeline) of a
/// plan shell whose virtual stages are placed and partitioned — what ScheduleInput carries.
std::vector<StageEstimate> stageEstimates(const Plan& shell);
std::vector<StageEstimate> stageEstimates(const Plan& shell, const CostedModel& costs);

/// Times a skeleton: discrete-event, dependency-driven (F after the previous virtual stage's
/// F plus transfer, B after the next stage's B, W after its B; compute ops on one device never
/// overlap; transfers of one device pair serialise on their link). Returns a Plan with ops,
/// comms and metrics; a deadlock comes back as an Error naming the waiting cycle.
Expected<Plan> simulate(const PlanRequest& request, const ScheduleSkeleton& skeleton);

/// Re-times an existing plan keeping each device's op order (e.g. after editing durations in
/// the embedded model), as `pipestudio-cli simulate` does.
Expected<Plan> resimulate(const Plan& plan);

/// Memory feasibility of a timed plan against the GPU memory (or config.memoryLimitBytes):
/// Error with per-device numbers when a device's peak exceeds it, each device's peak as the sum
/// of its parts (describeMemory).
Status checkMemory(const Plan& plan);

/// "peak 84.54 GiB = parameters 10.75 GiB + …; kept back: CUDA context and NCCL 1 GiB + …": every
/// non-zero allocated part of `memory` (they add up to the peak), then, `withMargin`, the parts
/// the GPU keeps back.
std::string describeMemory(const MemoryBreakdown& memory, bool withMargin);

}  // namespace pipestudio
