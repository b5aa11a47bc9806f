#pragma once
/// \file Bubble filling with frozen components (`--fill greedy|none`, DiffusionPipe, Tian et
/// al., MLSys 2024, §4.3) and the numbers that compare it (FillReport).
///
/// Frozen (non-trainable) components run forward only (N ops). Each frozen component is split
/// into a few layer groups; every (component, microbatch) is computed on one device, group by
/// group, possibly in partial batches (Op::samples). The plan is one steady-state iteration:
/// its N ops compute the frozen outputs of the *next* iteration (cross-iteration overlap), so
/// the backbone never waits for them within the iteration.

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/planner/Request.hpp"

namespace pipestudio {

/// How one device's idle time was used.
struct DeviceFill {
  double bubbleMs = 0;    ///< idle time of the backbone-only iteration on this device
  double filledMs = 0;    ///< frozen work placed inside those bubbles
  double overflowMs = 0;  ///< frozen work that ran after the backbone iteration's end
};

/// Comparison of a filled plan with its baselines (all iteration times in ms).
struct FillReport {
  std::string mode;           ///< "greedy" or "none"
  double backboneOnlyMs = 0;  ///< the pipeline without any frozen work
  double noFillMs = 0;        ///< `--fill none`: frozen components before the pipeline
  double iterationMs = 0;     ///< this plan's iteration (makespan)
  double frozenWorkMs = 0;    ///< Σ N-op durations (the frozen forward work)
  int frozenSamples = 0;      ///< Σ samples over N ops of each component's first group
  std::vector<DeviceFill> devices;
  bool usedNoFillLayout = false;  ///< greedy could not beat `none`, so the plan is `none`'s
  double speedupOverNoFill = 1;   ///< noFillMs / iterationMs
  /// Plain data parallelism on the same devices: one whole-model replica per device,
  /// m·b/p samples each plus a ring all-reduce of the gradients; empty when a replica does
  /// not fit in GPU memory (dataParallelNote says why).
  std::optional<double> dataParallelMs;
  std::string dataParallelNote;
  double speedupOverDataParallel = 0;  ///< dataParallelMs / iterationMs (0 when no DP)
  int frozenTransfers = 0;             ///< frozen outputs sent to a consuming device (kind N comms)
  std::int64_t frozenTransferBytes = 0;
};

/// Cross-iteration overlap (`--fill greedy`): the N ops of a plan compute the next iteration's
/// frozen outputs, so their transfers gate no op of this iteration. Each is timed on its link
/// after the producing N op ends, in the first window the backbone's transfers leave idle, and
/// must end before the consumer's F of that microbatch in the next iteration (its start plus
/// the iteration period). `latenessMs` is the largest amount by which one misses that
/// deadline (≤ 0: every output arrives in time).
struct FrozenTransfers {
  std::vector<Comm> comms;  ///< kind N
  double latenessMs = -std::numeric_limits<double>::infinity();
};
FrozenTransfers frozenTransfers(const Plan& timed);

/// Names the simulator's transfers out of frozen stages kind N and, for cross-iteration fill,
/// appends frozenTransfers(timed).comms. Called by the simulator after timing a plan.
void appendFrozenTransfers(Plan& timed);

/// Adds the frozen components' N ops to `skeleton` (a backbone schedule of `request`) as
/// config.fill says: "greedy" fills the bubbles of the simulated backbone, "none" runs the
/// frozen work before the pipeline. A model without frozen components is left unchanged.
/// Frozen work is never dropped: what does not fit runs after the backbone and lengthens the
/// iteration. `report` (optional) receives the per-device figures of the greedy placement.
Status fillSkeleton(const PlanRequest& request, ScheduleSkeleton& skeleton, const SolveControl& control = {},
                    FillReport* report = nullptr);

/// The fill modes (config.fill), `none` first: what the CLI and GUI offer.
std::vector<std::string> fillModeNames();

/// Solves `request` three ways (backbone only, --fill none, --fill greedy) and compares them
/// with data parallelism. The returned plan is the request's fill mode.
struct FilledPlan {
  Plan plan;
  FillReport report;
};
Expected<FilledPlan> makeFilledPlan(const PlanRequest& request, const SolveControl& control = {});

/// Iteration time of plain data parallelism over `devices` replicas (see FillReport), or an
/// Error saying why a replica does not fit.
Expected<double> dataParallelIterationMs(const ModelSpec& model, const ClusterSpec& cluster, int devices,
                                         int microbatches);

}  // namespace pipestudio
