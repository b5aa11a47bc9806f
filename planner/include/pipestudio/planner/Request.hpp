#pragma once
/// \file What every solver of the planner shares: the request (PlanRequest), the order a
/// schedule generator produces (ScheduleSkeleton) and the cancel and progress of a solve
/// (SolveControl), and resolveRequest, the check of a request before anything is solved. The
/// solvers (partitioners, schedules, fill, simulator, exports) include this header; Planner.hpp,
/// the planner's entry point (makePlan), includes it too, so the solvers never depend on the
/// entry point. Qt-free.

#include <atomic>
#include <functional>
#include <utility>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

/// What a schedule generator produces: placement and per-device order, no times.
struct ScheduleSkeleton {
  std::vector<VirtualStage> virtualStages;      ///< in id order
  std::vector<std::vector<OrderedOp>> devices;  ///< devices[d] = execution order on device d
  std::vector<OpDependency> extraDependencies;  ///< beyond the data flow; usually empty
  std::vector<FsdpAction> fsdpActions;          ///< Plan::fsdpActions of the order; usually empty
  /// Forwards that wait for an offload (pipeoffload; Plan::offloadWaits): `to` an F, `from` a
  /// D2H of the same device, in the devices' order; kept in the plan, unlike extraDependencies.
  std::vector<OpDependency> offloadWaits;
};

/// Everything a solve needs. `config` names schedule, devices, microbatches, chunks,
/// partition, fill and memory limit exactly as the plan document does.
struct PlanRequest {
  ModelSpec model;
  ClusterSpec cluster;
  PlanConfig config;
};

/// The plan of `request` before it is ordered and timed: its config, model and cluster, and the
/// given virtual stages; no ops.
inline Plan planShell(const PlanRequest& request, std::vector<VirtualStage> virtualStages = {}) {
  Plan shell;
  shell.config = request.config;
  shell.model = request.model;
  shell.cluster = request.cluster;
  shell.virtualStages = std::move(virtualStages);
  return shell;
}

/// Cooperative cancellation and progress for long solves (GUI worker threads).
struct SolveControl {
  const std::atomic<bool>* cancel = nullptr;  ///< polled; true → return Error::cancelled()
  std::function<void(double)> progress;       ///< 0..1, may be empty
  /// false: schedules skip their optional refinement searches (v-half/v-min's building-block
  /// search and critical-path moves) and return the plan as first built, a valid but possibly
  /// slower order. The configurator screens its candidates so, then plans the best in full.
  bool refine = true;
  /// false: a `balanced` split that does not fit the devices is reported at once, instead of
  /// planned again with splits that lean less on the memory budgets (makePlan). The
  /// configurator screens so.
  bool repairMemory = true;
  /// true: the caller reads only the order (which passes each device runs, in which sequence),
  /// not its timing, so a schedule may skip what only adds waits between the passes (pipeoffload's
  /// forwards that wait for offloads). The partitioners count live microbatches so.
  bool orderOnly = false;
  bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
};

/// Resolves and checks the hybrid-parallel part of a request (issue 13), as makePlan does first:
/// a global batch G with micro-batch size B gives microbatches = G / (B·D) and B samples per
/// microbatch (the model's samples_per_microbatch otherwise); sequence parallelism is off at
/// T = 1. Degrees must divide every transformer layer's heads and KV heads (T), the sequence
/// (2·C, Megatron's load-balanced ring; T·C with sequence parallelism), the experts (E), the
/// data-parallel degree (E), and
/// T·C·P·D must fit the cluster. Errors name the flag and the numbers, never round silently.
Expected<PlanRequest> resolveRequest(PlanRequest request);

}  // namespace pipestudio
