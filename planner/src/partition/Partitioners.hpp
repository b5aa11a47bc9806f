#pragma once
// Dispatch of the partitioners this folder implements (balanced, dp, diffusionpipe) from
// makePlan's extension point. Private to the planner.

#include <cstdint>
#include <optional>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Request.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::partition {

/// How one candidate of a search is partitioned (passed explicitly down makePlan's steps).
struct PartitionHints {
  /// Keep the backbones' default stage shares (uniform's, or the V's legs) instead of
  /// searching how many stages each backbone gets.
  bool keepBackboneShares = false;
  /// The request's costs, derived once by makeCandidatePlan (nullptr: derived here).
  const CostedModel* costs = nullptr;
  /// false: `dp` splits without the stages' memory budgets (solveDp's second candidate; the
  /// simulator's memory check has the last word either way).
  bool dpMemoryBudgets = true;
  /// The peak the schedule's order keeps every device under where it can (ScheduleInput::
  /// peakCapBytes): for a memory-saving schedule, the peak of the one it saves against.
  std::optional<std::int64_t> peakCapBytes = std::nullopt;
  /// How `balanced` meets the memory budgets when its most even split did not fit the devices
  /// (makeCandidatePlan asks again with these); the default: as it does first.
  BalancedMemory balancedMemory;
  /// Where set, `balanced` writes here the largest share of its scaled budget a stage of the
  /// split needs, among the components whose split meets them (0: none does): just below it,
  /// the split a smaller memory limit gives (makeCandidatePlan walks those).
  double* budgetShare = nullptr;
  /// The split to plan, already made (makeCandidatePlan's walk over smaller budgets).
  std::optional<std::vector<VirtualStage>> stages = std::nullopt;
  bool repairingMemory() const { return balancedMemory.overrunSlack > 0 || balancedMemory.withinBudgets > 0; }
};

/// makePlan for exactly the request's schedule and partition, without the joint schedule
/// search that `--partition diffusionpipe` starts (the search's own candidates come here).
Expected<Plan> makeCandidatePlan(const PlanRequest& request, const SolveControl& control, const PartitionHints& hints);

/// Fills component and layer ranges into `placement` with `request.config.partition`
/// (balanced | dp | diffusionpipe). Several trainable components take consecutive blocks of
/// the chain in data-flow order; the number of stages each gets is searched (the estimate:
/// Σ stage times of the longest chain of dependent backbones — independent ones, with no
/// `feeds` path between them, run concurrently — + (m − 1) × the busiest device), and each
/// one's layers are split over its stages by the named algorithm. Pipeline 1 of a bidirectional placement mirrors
/// pipeline 0's ranges.
Expected<std::vector<VirtualStage>> partitionNamed(const PlanRequest& request, std::vector<VirtualStage> placement,
                                                   const SolveControl& control, const PartitionHints& hints = {});

/// Partition with the peak live-microbatch counts of `generator`'s order (dp's memory term).
Expected<std::vector<VirtualStage>> partitionWith(const PlanRequest& request, const ScheduleGenerator& generator,
                                                  std::vector<VirtualStage> placement, const std::string& algorithm,
                                                  const SolveControl& control, const PartitionHints& hints = {});

/// `dp`: the split with the shortest simulated iteration that fits, among dpPartition's (within
/// the stages' memory budgets and without them), balanced's and uniform's (DpPlan.cpp).
Expected<Plan> solveDp(const PlanRequest& request, const SolveControl& control, const PartitionHints& hints);
/// `diffusionpipe`: dp jointly with the schedule choice; returns the fastest filled plan.
Expected<Plan> solveDiffusionPipe(const PlanRequest& request, const SolveControl& control);
/// The schedules (with chunks) the joint search tries for `request`.
std::vector<PlanConfig> diffusionPipeCandidates(const PlanRequest& request);
/// V-shaped placement and exactly two trainable backbones: first backbone on the down leg,
/// second on the up leg (opposite directions). false: placement left as it was.
bool assignLegs(const ModelSpec& model, std::vector<VirtualStage>& stages);

/// Trainable components grouped by `feeds` paths (in either direction, through any
/// components): components of one group depend on each other, different groups are
/// independent backbones (cascaded models) that the simulator times as separate chains.
std::vector<std::vector<int>> dependentBackboneGroups(const ModelSpec& model);
/// Exactly two trainable components and no `feeds` path between them.
bool independentBackbonePair(const ModelSpec& model);
/// partitionWith(…, "dp") with the V's legs kept: first backbone on the down leg, second on
/// the up leg, each split by dp over its leg.
Expected<std::vector<VirtualStage>> partitionWithLegs(const PlanRequest& request, const ScheduleGenerator& generator,
                                                      std::vector<VirtualStage> placement, const SolveControl& control);
/// The V's legs (`legs`: 2p trainable stages, A on 0..p−1 over devices 0..p−1, B on p..2p−1
/// over devices p−1..0) re-split jointly so the busiest device's F+B+W+send time per
/// microbatch is minimal (each device holds one stage of each). nullopt when the instance
/// is too large for the exact search or `legs` is not such a V.
std::optional<std::vector<VirtualStage>> balanceOpposedLegs(const PlanRequest& request,
                                                            const std::vector<VirtualStage>& legs,
                                                            const SolveControl& control = {});
/// Two independent backbones on zb-v's V placement in opposite directions (A down, B up),
/// ordered as two concurrent chains (Opposed.cpp), filled and simulated. Error when the model
/// has no independent pair or the shape does not allow zb-v.
Expected<Plan> solveOpposedBackbones(const PlanRequest& request, const SolveControl& control);

}  // namespace pipestudio::partition
