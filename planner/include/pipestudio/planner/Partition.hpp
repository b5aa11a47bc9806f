#pragma once
/// \file Stage partitioners: contiguous layer ranges of one trainable component over the
/// virtual stages of a pipeline (`--partition balanced|dp`, docs/architecture.md, issue 4).
///
/// The algorithms work on a PartitionProblem (plain numbers, no plan types) so they can be
/// tested against brute force; buildPartitionProblem() derives one from a request and a
/// schedule's placement.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/planner/Request.hpp"

namespace pipestudio {

/// One virtual stage of the pipeline, in pipeline order, as the partitioner sees it.
struct PartitionStage {
  int device = 0;            ///< for messages
  int liveMicrobatches = 1;  ///< peak number of microbatches whose activations it holds
  double memoryBudgetBytes = std::numeric_limits<double>::infinity();  ///< for this virtual stage
};

/// Layers 0..layers-1 of one component over `stages.size()` contiguous, non-empty stages.
struct PartitionProblem {
  int layers = 0;
  int microbatches = 1;
  std::vector<PartitionStage> stages;
  /// computeMs[s][l]: F + B + W time of layer l when it runs on stage s's device.
  std::vector<std::vector<double>> computeMs;
  /// sendMs[s][l]: activation + gradient transfer time when stage s ends with layer l
  /// (to stage s+1's device); all zero for the last stage.
  std::vector<std::vector<double>> sendMs;
  std::vector<double> activationBytes;  ///< per layer, one microbatch
  std::vector<double> staticBytes;      ///< per layer: parameters, gradients, optimizer state
};

/// The most (virtual stage, layer) pairs one partition problem may have. The problem and the
/// `balanced` and `dp` partitioners keep tables of that size (times, sends, prefix sums, their
/// DP's values and choices: some 60 bytes a pair, and a few microseconds of work), so a split
/// past it is refused before any is allocated: 10,000 virtual stages over 10,000 layers would
/// take 6 GB.
inline constexpr std::int64_t kMaxPartitionCells = 4'000'000;

/// Refuses a split of `layers` layers over `stages` virtual stages past kMaxPartitionCells,
/// naming both numbers and what would fit.
Status checkPartitionSize(std::int64_t stages, std::int64_t layers);

/// A partition: stage s holds layers [firstLayer[s], firstLayer[s+1]) (the last up to `layers`).
struct PartitionResult {
  std::vector<int> firstLayer;
  std::vector<double> stageMs;  ///< compute + send time per stage
  double sumMs = 0;
  double maxMs = 0;
  double objectiveMs = 0;  ///< sumMs + (microbatches − 1) · maxMs
  /// The largest share of its memory budget a stage needs (stageMemoryBytes / memoryBudgetBytes);
  /// 0 when no stage has a budget. The split meets budgets scaled by any factor ≥ this.
  double budgetShare = 0;
};

/// Evaluates a partition (stage times, objective). Does not check memory.
PartitionResult evaluatePartition(const PartitionProblem& problem, const std::vector<int>& firstLayer);

/// Memory need of stage s holding layers [first, end): static + live × activations.
double stageMemoryBytes(const PartitionProblem& problem, int stage, int first, int end);

/// How `balanced` treats the stages' memory budgets when no split at its bottleneck meets them
/// (the planner asks again this way when the most even split did not fit the devices).
struct BalancedMemory {
  /// ≥ 1: the most even split at the bottleneck within the budgets scaled by this times the
  /// smallest common factor that admits one; 0: not asked.
  double overrunSlack = 0;
  /// > 0: the most even split at the smallest bottleneck that meets the budgets scaled by this
  /// (the bottleneck gives way to memory, as `dp`'s does); an error when no split meets them.
  double withinBudgets = 0;
  /// The stages' budgets scaled by this before the most even split within them is sought (the
  /// default path): below 1, the split `balanced` takes under a smaller memory limit.
  double budgetScale = 1.0;
};

/// `balanced`: minimises the largest stage compute time (sends and memory ignored) by binary
/// search on the bottleneck with a greedy fill per stage; exact for contiguous ranges. Among the
/// splits at that bottleneck, the most even one within the stages' memory budgets (scaled by
/// `memory.budgetScale`), else (unless `memory` says otherwise) the most even one.
Expected<PartitionResult> balancedPartition(const PartitionProblem& problem, const BalancedMemory& memory = {});

/// `dp`: the partition minimising Σ stage time + (m − 1) · max stage time (Alpa / AMP form,
/// Zheng et al. 2022 §5.2, Li et al. 2022) with sends, per-device speeds and the memory
/// budget of every stage. Infeasible memory → Error naming the stage and the bytes.
/// O(levels · log(1/ε) · S · L log L): an inner DP minimises the sum under a bottleneck bound
/// (prefix sums, range minimum over a window found by binary search), an outer search walks
/// the bottleneck values where the minimum sum changes.
Expected<PartitionResult> dpPartition(const PartitionProblem& problem, const SolveControl& control = {});

/// Builds the problem for component `component` of the request, split over `stages`
/// (devices, peak live microbatches, budgets) on the request's cluster. Static memory uses
/// the model's optimizer and config.parallel (ZeRO stage, data parallel degree).
PartitionProblem buildPartitionProblem(const PlanRequest& request, int component,
                                       const std::vector<PartitionStage>& stages);
/// The same with the request's costs already derived.
PartitionProblem buildPartitionProblem(const PlanRequest& request, const CostedModel& costs, int component,
                                       const std::vector<PartitionStage>& stages);

/// Peak live microbatches per virtual stage of a skeleton (F/S start one, B/BW/T end one):
/// the schedule's activation count that the memory constraint multiplies.
std::vector<int> liveMicrobatchesPerStage(const ScheduleSkeleton& skeleton);

/// The split a Megatron-LM layout names, as layer counts per virtual stage (index = virtual rank ·
/// P + pipeline rank) of the model's one trainable component: GPTModel's
/// --pipeline-model-parallel-layout (`Et*2|(t*2|)*34,t*3|(t*2|)*3,tL`; E and L take the model's
/// embedding and lm_head where it has them, m one MTP depth) or HybridModel's --hybrid-layer-pattern
/// (`*-*-|*-*E/*E`; each decoder layer is its attention and MLP symbol as the model has them, the
/// embedding joins the first segment, MTP and the lm_head the last). A layout that leaves a layer
/// out, names a layer the model does not have there, leaves a stage without a costed layer, or
/// cuts a decoder layer between attention and MLP is an Error naming the stage.
Expected<std::vector<int>> megatronLayoutSplit(const ModelSpec& model, std::string_view layout);

/// `model` with every splittable decoder block of its trainable components replaced by its two
/// halves, the attention then the MLP (layers of kinds kAttentionHalfKind / kMlpHalfKind,
/// BlockHalves.hpp, named `<block>.attention` and `<block>.mlp`), so a partition may end a stage
/// between them. Blocks of measured costs, the embedding, the head and MTP modules stay whole;
/// halves are left as they are (splitting twice changes nothing).
ModelSpec splitTransformerBlocks(const ModelSpec& model);

/// For `balanced-split` and `dp-split` (partitions over the halves of the blocks): `balanced` or
/// `dp`; nullopt for any other name.
std::optional<std::string> splitPartitionBase(std::string_view partition);

/// Whether `layout` (a hybrid layer pattern) ends a segment between a block's attention and its
/// MLP: it does not fit `model`'s whole blocks and fits their halves (splitTransformerBlocks),
/// which `--partition layout` then plans.
bool layoutCutsBlocks(const ModelSpec& model, std::string_view layout);

/// Names of the partitioners (config.partition), `uniform` first: what the CLI and GUI offer.
std::vector<std::string> partitionNames();

}  // namespace pipestudio
