#pragma once
/// \file Plan: `pipestudio.plan/1` (docs/formats.md) — what the solvers produce, the GUI draws
/// and the executor runs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/model/Parallelism.hpp"
#include "pipestudio/model/Precision.hpp"

namespace pipestudio {

inline constexpr const char* kPlanSchema = "pipestudio.plan/1";

/// Most ops a plan may have (10× the 200k-op plans the design is measured on): the planner
/// refuses requests that would pass it before allocating, loaders refuse larger documents.
inline constexpr std::size_t kMaxPlanOps = 2'000'000;
/// Most devices (pipeline ranks) and microbatches a plan may have; loaders refuse more, and
/// trace imports refuse events that name more.
inline constexpr int kMaxPlanDevices = 1'000'000;
inline constexpr int kMaxPlanMicrobatches = 1'000'000;
/// Most virtual stages: each runs at least one op, so no plan has more stages than ops.
inline constexpr int kMaxPlanVirtualStages = static_cast<int>(kMaxPlanOps);

/// F forward, B input-gradient backward, W weight-gradient backward, BW fused backward,
/// N non-trainable forward (bubble filling), S/T vocabulary passes, OPT optimizer step,
/// D2H / H2D activation offload to host memory and reload (PipeOffload, Wan et al. 2025):
/// copies on the device's host link, beside its compute (isHostCopy).
enum class OpKind : std::uint8_t { F, B, W, BW, N, S, T, OPT, D2H, H2D };
inline constexpr int kOpKindCount = 10;

std::string_view opKindName(OpKind kind);
std::optional<OpKind> opKindFromName(std::string_view name);
/// The kinds' names as a message lists them ("F, B, W, BW, N, S, T, OPT, D2H, H2D").
std::string_view opKindChoices();
/// D2H and H2D: copies between the device and host memory over the device's host link (its
/// GPU's host_link_gbps). They run on a lane of their own beside the device's compute (a copy
/// in a device's order is issued when the compute op before it has ended; copies run one at a
/// time, in order); they are not compute: busy time, spans and bubbles leave them out.
/// D2H(stage, microbatch) starts after that F and frees the offloaded activation bytes on the
/// GPU when it ends (offloadBytes in Memory.hpp); H2D holds them again from its start, after
/// the D2H, and the stage's backward of that microbatch waits for it to end.
inline constexpr bool isHostCopy(OpKind kind) { return kind == OpKind::D2H || kind == OpKind::H2D; }
/// What a transfer named by `kind` (Comm::kind, the producing op's kind) carries:
/// "activation" (F), "frozen output" (N), "vocabulary" (S, T), else "gradient".
std::string_view commPayloadName(OpKind kind);

struct PlanConfig {
  std::string schedule;
  int devices = 1;
  int microbatches = 1;
  int chunksPerDevice = 1;
  std::string partition = "balanced";  // uniform refuses layer counts that do not divide (issue 3)
  /// partition "layout": the Megatron-LM layout the split is taken from, as given
  /// (--pipeline-model-parallel-layout or --hybrid-layer-pattern; `plan --megatron-layout`).
  std::string layout;
  std::string fill = "none";
  std::optional<std::int64_t> memoryLimitBytes;
  /// Tensor/context/expert/data parallelism, recomputation and ZeRO around the pipeline
  /// (`devices` is the pipeline degree P). Pure pipeline: all degrees 1.
  Parallelism parallel;
  /// The format of the weight GEMMs (Precision.hpp); what the recipe fixes, never searched.
  Precision precision = Precision::Bf16;
  /// The training recipe, in samples: global batch G and micro-batch size B give
  /// microbatches = G / (B · D). Absent for plans that name their microbatch count directly.
  std::optional<std::int64_t> globalBatch;
  std::optional<std::int64_t> microBatchSize;
  /// global: every device steps the optimizer after the last device's backward (default);
  /// post-validation: Zero Bubble's optimizer post-validation lets iterations overlap, so the
  /// steady-state period is the longest device span.
  std::string optimizerSync = "global";
  /// Vocabulary parallelism (Yeung et al. 2024, S/T ops): all-reduce barriers per microbatch.
  /// 2 (Algorithm 1, "Vocab-2"): S = logits and softmax statistics, T = input and weight
  /// gradients, the last stage's backward waits for every T. 1 (Algorithm 2, "Vocab-1"): S
  /// also computes the local input-gradient partial sums, T only the weight gradient, the last
  /// stage's backward waits for every S. Plans written before the field: 2.
  int vocabBarriers = 1;
  /// DualPipe (DeepSeek-V3 §3.2.1): an F followed on its device by a backward of another
  /// microbatch runs overlapped with it, the collectives of one under the computation of the
  /// other (overlappedGroups in Dependencies.hpp says which ops pair; the simulator times them).
  bool overlapForwardBackward = false;
  /// Blockwise schedules (zeropp, breadth-first): microbatches per scheduling unit; 0 = none.
  /// Under ZeRO-3 such a plan gathers a chunk's parameters once per run of consecutive passes
  /// of that chunk in one direction (one gather per block), not once per pass.
  int unitMicrobatches = 0;
  /// Sequence-level pipelining (Seq1F1B, Sun et al. 2024): each training microbatch runs as
  /// `seqSplits` sequence chunks, each a unit of the schedule. `microbatches` then counts
  /// units (training microbatches × seqSplits) and an op's microbatch u is chunk u mod seqSplits
  /// (tokens seqChunkBounds in Costs.hpp) of training microbatch u / seqSplits. A chunk's
  /// forward needs the earlier chunks' keys and values on its stage, its backward feeds
  /// theirs (sequenceDependencies in Dependencies.hpp). 1: no split.
  int seqSplits = 1;
  /// Where the chunks' boundaries fall: "balanced" (Seq1F1B §3.3: equal compute per chunk, so
  /// later chunks, which attend to more keys, are shorter) or "even" (equal tokens, as the Zero
  /// Bubble authors' runtime splits).
  std::string seqSplit = "balanced";
  /// Activation offloading (PipeOffload, Wan et al. 2025): the share of each device's
  /// activation bytes offloaded to host memory between a forward and its backward, chunk 0's
  /// stages first (the longest-lived), the boundary chunk in part (offloadFraction in
  /// Memory.hpp). The plan's D2H/H2D ops say which (stage, microbatch) pairs are offloaded.
  double offloadRatio = 0;
  /// Training microbatches (microbatches / seqSplits).
  int trainingMicrobatches() const { return seqSplits > 1 ? microbatches / seqSplits : microbatches; }
  /// The plan's order carries FSDP actions (Plan::fsdpActions, from a compute_comms schedule CSV):
  /// under ZeRO-3 its gathers follow their UNSHARD…RESHARD windows. Set with the actions (the
  /// plan document stores only them); it tells the costs to keep the gather shares apart.
  bool fsdpWindows = false;
  /// GPUs the plan uses: T·C·P·D.
  std::int64_t totalGpus() const { return parallel.gpusPerPipelineRank() * devices; }
};

/// A contiguous range of one component's layers placed on one device.
struct VirtualStage {
  int id = 0;
  int device = 0;
  int chunk = 0;
  int component = 0;   ///< index into model.components
  int firstLayer = 0;  ///< inclusive
  int lastLayer = 0;   ///< inclusive
  int pipeline = 0;    ///< 0 or 1 for bidirectional schedules
};

/// One compute op. 16-bit/32-bit fields keep 200k-op plans compact.
struct Op {
  std::int32_t device = 0;
  std::int32_t virtualStage = 0;
  OpKind kind = OpKind::F;
  std::int32_t microbatch = 0;
  double startMs = 0;
  double endMs = 0;
  std::int32_t samples = 0;  ///< partial-batch fill: samples this op covers; 0 = whole microbatch
  double durationMs() const { return endMs - startMs; }
};

/// FSDP inside the pipeline, as torch.distributed.pipelining's runtime runs it
/// (`_PipelineScheduleRuntime`): UNSHARD starts gathering a virtual stage's parameters, its passes
/// wait for it, RESHARD frees them, REDUCE_GRAD reduce-scatters the stage's accumulated
/// gradients. Under ZeRO-3 a plan with these actions gathers once per UNSHARD…RESHARD window and
/// reduces once per iteration, not once per pass.
enum class FsdpActionKind : std::uint8_t { Unshard, Reshard, ReduceGrad };

std::string_view fsdpActionName(FsdpActionKind kind);  ///< UNSHARD, RESHARD, REDUCE_GRAD (PyTorch's spelling)
std::optional<FsdpActionKind> fsdpActionFromName(std::string_view name);

struct FsdpAction {
  std::int32_t device = 0;
  std::int32_t virtualStage = 0;  ///< a virtual stage on `device`
  FsdpActionKind kind = FsdpActionKind::Unshard;
  /// Runs before the device's pass number `beforePass` (its F, B, W and BW ops counted in
  /// execution order from 0; their count: after the last one).
  std::int32_t beforePass = 0;
  friend bool operator==(const FsdpAction&, const FsdpAction&) = default;
};

/// A forward that waits for an offload of its device to end (pipeoffload: the forward needs the
/// room that copy frees, as the authors' runtime holds it at an OFFLOAD_BARRIER). Both ops are
/// named by virtual stage and microbatch, so reordering a plan's ops keeps them.
struct OffloadWait {
  std::int32_t forwardStage = 0;  ///< the F op's virtual stage…
  std::int32_t forwardMicrobatch = 0;
  std::int32_t offloadStage = 0;  ///< …waits for the end of this D2H op of the same device
  std::int32_t offloadMicrobatch = 0;
  friend bool operator==(const OffloadWait&, const OffloadWait&) = default;
};

struct Comm {
  int fromDevice = 0;
  int toDevice = 0;
  int microbatch = 0;
  OpKind kind = OpKind::F;  ///< F: activations forward; B: gradients backward
  int virtualStage = 0;     ///< the producing virtual stage
  double startMs = 0;
  double endMs = 0;
  std::int64_t bytes = 0;
};

/// Where one GPU's memory goes at its peak (bytes per GPU of the pipeline rank). Every part is a
/// line of its own (memoryParts lists them in one place for the plan document, the CLI, the GUI
/// and the out-of-memory message): the plan's own allocations add up to its peak
/// (allocatedBytes, DeviceMetrics::peakMemoryBytes); the margin a GPU keeps back from the plan
/// (the CUDA context and the allocator's fragmentation) comes on top (totalBytes).
struct MemoryBreakdown {
  std::int64_t parameterBytes = 0;  ///< weights as held (bf16; sharded by TP/EP, by D under ZeRO-3)
  /// gradient accumulation buffer (bf16, or fp32 when reduced in fp32; sharded by D under ZeRO-2/3)
  std::int64_t gradientBytes = 0;
  /// fp32 master weights, Adam moments: the distributed optimizer's shard (by D under ZeRO-1+)
  std::int64_t optimizerBytes = 0;
  /// Transformer Engine's low-precision weights: the cached copies (fp8: weight + transpose), or
  /// the weights themselves when the recipe keeps them only in low precision (--fp8-param-gather)
  std::int64_t lowPrecisionWeightBytes = 0;
  std::int64_t activationBytes = 0;     ///< live activations at the peak
  std::int64_t communicationBytes = 0;  ///< collective and transfer buffers (ZeRO-3 gathers, all-to-all)
  std::int64_t recomputeBytes = 0;      ///< activations a recomputing backward rebuilds while it runs
  std::int64_t workspaceBytes = 0;      ///< cuBLAS and Transformer Engine GEMM workspaces
  std::int64_t userbufferBytes = 0;     ///< Transformer Engine's userbuffers (TP communication overlap)
  /// CUDA-graph private memory pools (the plan's CUDA-graph setting; 0 when no graphs are captured)
  std::int64_t cudaGraphBytes = 0;
  std::int64_t contextBytes = 0;        ///< kept back: the CUDA context and NCCL's communicators
  std::int64_t fragmentationBytes = 0;  ///< kept back: what the caching allocator holds but cannot hand out
  /// What the plan allocates at its peak: every part but the kept-back margin.
  std::int64_t allocatedBytes() const;
  /// What a GPU keeps back from the plan (memoryMarginBytes): context and fragmentation.
  std::int64_t marginBytes() const;
  /// Everything the GPU must hold: allocatedBytes() + marginBytes().
  std::int64_t totalBytes() const;
  /// Not a part of the peak: how much higher the device's peak activations would be if the same
  /// timed ops made no host copies (PipeOffload's D2H/H2D): the saving offloading buys.
  std::int64_t offloadSavedBytes = 0;
};

/// One line of a memory breakdown: its name in messages and the GUI, a short label, the plan
/// document's key, the field, and whether it is kept back by the GPU (the margin) rather than
/// allocated by the plan.
struct MemoryPart {
  std::string_view name;       ///< "optimizer state"
  std::string_view shortName;  ///< "optimizer" (table columns, legends)
  std::string_view jsonKey;    ///< "optimizer_bytes"
  std::int64_t MemoryBreakdown::*bytes;
  bool keptBack = false;
};
inline constexpr std::size_t kMemoryPartCount = 12;
/// Every line of a MemoryBreakdown, allocated parts first, in stacking order.
const std::array<MemoryPart, kMemoryPartCount>& memoryParts();
/// The largest allocated part of `memory` (what to attack first when a plan does not fit).
const MemoryPart& largestMemoryPart(const MemoryBreakdown& memory);

struct DeviceMetrics {
  double busyMs = 0;
  double spanMs = 0;
  std::int64_t peakMemoryBytes = 0;
  std::int64_t peakActivationBytes = 0;
  std::int64_t staticMemoryBytes = 0;
  MemoryBreakdown memory;  ///< per GPU; peakMemoryBytes == memory.allocatedBytes()
  /// Collective time on this device's critical path per iteration: the exposed part inside its
  /// ops (TP, CP, EP, ZeRO-3) plus its exposed gradient reduction and parameter all-gather.
  double exposedCommMs = 0;
  /// Collective time the recipe hides under compute (not part of any duration).
  double hiddenCommMs = 0;
};

struct Metrics {
  double makespanMs = 0;
  double bubbleRatio = 0;
  double throughputSamplesPerS = 0;
  /// One training step of the whole job: pipeline, exposed gradient synchronisation and the
  /// optimizer step (in steady state when iterations overlap).
  double iterationMs = 0;
  double gradientSyncMs = 0;  ///< exposed (not overlapped) data-parallel gradient reduction
  double optimizerMs = 0;     ///< optimizer step (and ZeRO-1/2 parameter all-gather)
  double tokensPerS = 0;
  /// Model FLOPs (Korthikanti et al. 2022, Appendix A: no recomputation counted) per GPU per second.
  double modelTflopsPerGpu = 0;
  double mfu = 0;  ///< modelTflopsPerGpu / peak
  std::vector<DeviceMetrics> devices;
};

struct Plan {
  PlanConfig config;
  ModelSpec model;
  ClusterSpec cluster;
  std::vector<VirtualStage> virtualStages;  ///< in pipeline order (by id)
  std::vector<Op> ops;                      ///< per device in execution order
  std::vector<Comm> comms;
  Metrics metrics;
  /// Per device in execution order; empty unless the order came with them (config.fsdpWindows).
  std::vector<FsdpAction> fsdpActions{};
  /// Forwards that wait for an offload (pipeoffload); empty for other orders.
  std::vector<OffloadWait> offloadWaits{};

  /// Virtual stage `id` (ids are their index: a loaded or solved plan has them in order).
  const VirtualStage& stage(int id) const { return virtualStages[static_cast<std::size_t>(id)]; }
  VirtualStage& stage(int id) { return virtualStages[static_cast<std::size_t>(id)]; }
  /// Op `i` of `ops`.
  const Op& op(int i) const { return ops[static_cast<std::size_t>(i)]; }
  Op& op(int i) { return ops[static_cast<std::size_t>(i)]; }
};

}  // namespace pipestudio
