#pragma once
/// \file The discrete-event simulator behind `simulate` / `resimulate`, exposed for
/// generators and solvers that time many candidate orders (zb-auto, configurator).

#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/planner/Planner.hpp"
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

}  // namespace pipestudio
