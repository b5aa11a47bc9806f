#pragma once
/// \file Dependencies a plan implies beyond the data flow of its virtual stages (F after the
/// previous stage's F, B after the next stage's B, W after its B): frozen outputs that reach
/// their consumers and the vocabulary-parallel S/T passes. The plan format (docs/formats.md)
/// stores no dependency list, so the planner's simulator and the executor derive them here,
/// from the plan alone, and agree.

#include <cstdint>
#include <vector>

#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

/// One op of a device's execution order, without times.
struct OrderedOp {
  std::int32_t virtualStage = 0;
  OpKind kind = OpKind::F;
  std::int32_t microbatch = 0;
  std::int32_t samples = 0;  ///< partial batch (frozen fill); 0 = whole microbatch
};

/// An op named by its place in per-device orders: lanes[device][index].
struct OpRef {
  std::int32_t device = 0;
  std::int32_t index = 0;
};

/// A dependency beyond the data flow: `to` starts no earlier than `from` ends plus the
/// transfer of `bytes` between their devices.
struct OpDependency {
  OpRef from;
  OpRef to;
  std::int64_t bytes = 0;
};

/// Whether `stage` names a virtual stage of `shell` whose component exists (edited plans may
/// not; derivations skip such ops rather than fail).
bool validStage(const Plan& shell, int stage);

/// Data-flow neighbours of every virtual stage (−1: none), the one definition the simulator and
/// the executor share. Trainable stages: within a pipeline data flows in id order (docs/formats.md)
/// from a stage to the next stage of its component, and from a component's last stage to
/// the next trainable stage when its component feeds that one (ControlNet → UNet); a
/// trainable component that nothing upstream feeds starts its own chain, so independent
/// backbones (cascaded models) placed on the same devices do not wait on each other. Frozen
/// stages: a frozen component may be placed once per device (bubble filling computes each
/// microbatch's frozen work on one device), so its chains follow the layers: a stage continues
/// the nearest earlier stage of its component that ends at the layer before its first,
/// preferring one on its own device; a stage starting at layer 0 begins a chain.
struct StageNeighbours {
  std::vector<int> previous;
  std::vector<int> next;
};
StageNeighbours stageNeighbours(const Plan& shell);

/// The plan's ops as per-device orders (plan order per device). `opIndex`, when given,
/// receives for every lane entry its index in plan.ops.
std::vector<std::vector<OrderedOp>> planLanes(const Plan& plan,
                                              std::vector<std::vector<std::int32_t>>* opIndex = nullptr);

/// Virtual stages of trainable component `consumer` that read the output of frozen component
/// `feeder`. The model names consuming components (`feeds`), not layers, so the rule is: a
/// feeder whose last layer is a token sequence (kind `transformer` or `embedding`, a text
/// encoder) is read by every consumer stage holding an `attention` layer (cross-attention);
/// any other feeder (VAE latents), or a consumer without attention layers, by the consumer's
/// first stage of each pipeline (the stage holding layer 0).
std::vector<int> frozenConsumerStages(const Plan& shell, int feeder, int consumer);

/// frozenConsumerStages over every trainable component that `feeder` feeds, sorted, unique.
std::vector<int> frozenConsumerStagesOf(const Plan& shell, int feeder);

/// Bytes of frozen component `component`'s output for one whole microbatch (its last layer's
/// output size); partial batches send their share.
std::int64_t frozenOutputBytes(const ModelSpec& model, const ClusterSpec& cluster, int component);

/// `--fill none` (frozen work in the same iteration): one dependency per (frozen component,
/// microbatch, producing device, consuming device) from the last N op of the component's final
/// layer group to the consumer device's first F of that microbatch that reads it, carrying the
/// output bytes. Empty for cross-iteration fill (see crossIterationFrozenOutputs).
std::vector<OpDependency> frozenDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes);

/// The S/T dependencies of a vocabulary-parallel plan (Yeung et al. 2024): the stages whose
/// ops are S/T are the shards; the last trainable stage of pipeline 0 feeds them. Per
/// microbatch, F(last) → S on every device (hidden states) and every S → every T (the softmax
/// statistics' all-reduce, the first barrier); the input-gradient partial sums reach
/// B/BW(last) from every T with two barriers (config.vocabBarriers 2, Algorithm 1), from every
/// S with one (Algorithm 2: S computes them, scaled once the statistics arrive). Empty without
/// S/T ops.
std::vector<OpDependency> vocabDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes);

/// Sequence-split plans (PlanConfig::seqSplits K, Seq1F1B, Sun et al. 2024 §3.2): causal
/// attention makes a chunk's forward need the keys and values of the earlier chunks of its
/// microbatch on the same stage, and its backward produce their gradients. Per virtual stage
/// and unit u with u mod K > 0: F(u − 1) → F(u) and backward(u) → backward(u − 1) (B or BW),
/// on one device, no bytes. Empty without splits.
std::vector<OpDependency> sequenceDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes);

/// frozenDependencies + vocabDependencies + sequenceDependencies: every dependency a plan
/// implies beyond its data flow, as makePlan, resimulate and the executor use them.
std::vector<OpDependency> derivedDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes);

/// DualPipe's overlapped forward and backward (DeepSeek-V3 §3.2.1), for plans with
/// config.overlapForwardBackward: on a device, an F immediately followed by a B or BW of
/// another microbatch runs as one group with it (both start together; the collectives of one
/// run under the computation of the other); a W right after that B, of the same stage and
/// microbatch, joins the group (DualPipe's backward chunk is the full backward). Groups are
/// taken left to right in each device's order and never share an op. Ops of one microbatch
/// never pair (a B may need its own F), nor two passes of one stage (DualPipe pairs a chunk of
/// one direction with a chunk of the other). Each entry: device, lane index of the group's F, and
/// its size (2 or 3). Empty when the plan does not overlap.
struct OverlapGroup {
  std::int32_t device = 0;
  std::int32_t first = 0;
  std::int32_t size = 0;
};
std::vector<OverlapGroup> overlappedGroups(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes);

/// A frozen output computed in this iteration for the next one (cross-iteration overlap, every
/// fill mode but `none`): it leaves the producing N op for a device whose backbone reads it.
struct FrozenHandoff {
  OpRef producer;
  std::int32_t consumerDevice = 0;
  std::int64_t bytes = 0;
};
/// Every such hand-off across devices (producer and consumer on one device need none).
std::vector<FrozenHandoff> crossIterationFrozenOutputs(const Plan& plan,
                                                       const std::vector<std::vector<OrderedOp>>& lanes);

}  // namespace pipestudio
