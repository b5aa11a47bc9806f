#pragma once
/// \file The one place a plan's costs are derived (docs/architecture.md): layer costs under the plan's
/// hybrid parallelism on its devices' GPUs, the pipeline-rank → GPU placement, and transfers
/// between pipeline ranks. The simulator, memory accounting, bubble filling, partitioners,
/// configurator, executor and GUI read costs through a CostedModel, never from the cost model
/// directly.
///
/// A plan's device is a pipeline rank. Its first GPU is device · T·C·D (Megatron order: TP,
/// then CP, then DP inside, PP outermost; Parallelism.hpp); a pure pipeline maps device k to
/// GPU k.

#include <cstdint>
#include <utility>
#include <vector>

#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

/// Index of the first GPU of pipeline rank `device`, clamped to int (cluster lookups).
int deviceFirstGpu(const PlanConfig& config, int device);
/// The GPU spec of pipeline rank `device` (a node may have its own GPU type).
const GpuSpec& deviceGpu(const ClusterSpec& cluster, const PlanConfig& config, int device);

/// What the cost model needs to cost a layer of `device` under `config`.
CostContext costContext(const ClusterSpec& cluster, const PlanConfig& config, std::int64_t samplesPerMicrobatch,
                        int device, bool trainable);

/// Time for pipeline rank `from` to send `bytesPerGpu` to pipeline rank `to`: each of its T·C
/// GPUs sends its shard to its counterpart at once, so when they cross nodes they share the
/// node's NICs (ClusterSpec::nicsPerNode). 0 when from == to.
double deviceTransferMs(const ClusterSpec& cluster, const PlanConfig& config, int from, int to, double bytesPerGpu);

/// The PCIe switches pipeline rank `device`'s GPUs hang off (ClusterSpec::hostSwitchGpus: GPUs
/// g·k … g·k + g − 1 share switch k), each as (k, the rank's GPUs on it); empty when the cluster
/// shares none.
std::vector<std::pair<std::int64_t, int>> hostSwitchesOf(const ClusterSpec& cluster, const PlanConfig& config,
                                                         int device);

/// The per-GPU host-link rate (GB/s) of pipeline rank `device`'s host copies: its GPU's
/// host_link_gbps, or less where GPUs share a PCIe switch (ClusterSpec::hostSwitchGpus): each
/// at most the uplink over the GPUs copying through it, which are the rank's own GPUs when no
/// other rank copies, or every GPU on the switch (`everyGpuCopies`: the rate a copy can count
/// on whatever the other ranks do). 0: the GPU names no host link.
double hostCopyGBps(const ClusterSpec& cluster, const PlanConfig& config, int device, bool everyGpuCopies = false);

/// Time for a stage's output (activations forward, their gradients back) to reach the next
/// stage on pipeline rank `to`: deviceTransferMs, and never less than the link's latency when
/// the ranks differ. A pipeline stage always sends its output (Megatron-LM's p2p send of the
/// hidden states), so a layer whose output size is not stated (`output_bytes` absent on a
/// measured layer) still pays the latency instead of crossing for free.
double stageSendMs(const ClusterSpec& cluster, const PlanConfig& config, int from, int to, double bytesPerGpu);

/// Tokens per sample: the sequence length of the model's first trainable transformer-shaped
/// layer, or 0 when no layer has a shape.
std::int64_t tokensPerSample(const ModelSpec& model);

/// The sequence chunk of unit `microbatch` of a plan with sequence splits (PlanConfig::
/// seqSplits); 0 without them.
inline int seqChunkOf(const PlanConfig& config, int microbatch) {
  return config.seqSplits > 1 && microbatch >= 0 ? microbatch % config.seqSplits : 0;
}

/// One transformer layer of a stage as its activation copies see it: its forward and backward
/// times and the time its offloaded activations take over the host link each way.
struct OffloadedLayer {
  double forwardMs = 0, backwardMs = 0, copyMs = 0;
};
struct OffloadWaits {
  double forwardMs = 0, backwardMs = 0;
};
/// How long a stage's passes wait for its activation copies, the copies running one at a time
/// on a copy stream beside the compute, in layer order forward (each once its layer's forward
/// has ended) and in reverse backward. `forwardLead` > 0: layer i's copy to the host must have
/// ended before layer i + forwardLead starts (Transformer Engine's default offload scheduling
/// keeps at most that many layers' activations on the GPU: lead L − N); 0: the forward never
/// waits (Megatron-Core's fine-grained offloading frees memory as copies end). Layer i's copy back
/// starts when the backward of layer i + backwardLead starts (TE: L − 1 − N; fine-grained: 1, the
/// next group), the stage's last layers at the start of its backward, and its backward waits for
/// it to end; `preloadLast`: the stage's last offloaded layer was brought back during the
/// previous backward (Megatron-Core's pre_reload_last_layer) and never waits.
OffloadWaits offloadWaits(const std::vector<OffloadedLayer>& layers, int forwardLead, int backwardLead,
                          bool preloadLast);

/// Resolved costs of one virtual stage (sum over its layers, on its device's GPU, under the
/// plan's hybrid parallelism). Byte and parameter counts are per GPU.
struct StageCosts {
  double forwardMs = 0;
  double backwardInputMs = 0;
  double backwardWeightMs = 0;
  double forwardCommMs = 0;  ///< collective share of forwardMs (TP/CP/EP/ZeRO-3)
  double backwardInputCommMs = 0;
  double backwardWeightCommMs = 0;
  /// Collective time hidden under the passes' compute (LayerCosts), not part of their durations.
  double forwardHiddenCommMs = 0;
  double backwardInputHiddenCommMs = 0;
  double backwardWeightHiddenCommMs = 0;
  std::int64_t activationBytes = 0;
  std::int64_t weightGradBytes = 0;
  std::int64_t outputBytes = 0;  ///< of the stage's last layer: what is sent downstream
  /// Largest transient collective buffer of its layers; under ZeRO-3 also a layer's FSDP unit
  /// (gathered weights and unsharded gradients) together with a neighbour's, the one prefetched
  /// or still reducing.
  std::int64_t communicationBytes = 0;
  std::int64_t lowPrecisionWeightBytes = 0;  ///< low-precision weight copies of its layers
  /// Largest set of activations its backward rebuilds at once (a recomputed layer, or a group of
  /// them under uniform recomputation).
  std::int64_t recomputeBytes = 0;
  std::int64_t workspaceBytes = 0;   ///< largest GEMM workspaces of its layers (LayerCosts)
  std::int64_t userbufferBytes = 0;  ///< largest userbuffers of its layers
  std::int64_t cudaGraphBytes = 0;   ///< its layers' CUDA-graph pools
  double trainableParameters = 0;    ///< this GPU's shard
  double expertParameters = 0;       ///< part of trainableParameters in routed experts
  double frozenParameters = 0;
  double tiedParameters = 0;  ///< part of trainableParameters in a tied LM head
  /// Part of trainableParameters kept only in low precision (LayerCosts::quantizedParameters),
  /// and the part of those in routed experts.
  double quantizedParameters = 0;
  double quantizedExpertParameters = 0;
  double modelFlopsForward = 0;  ///< one microbatch, whole pipeline rank (Korthikanti App. A)
  /// Blockwise plans under ZeRO-3 (PlanConfig::unitMicrobatches) and plans with FSDP windows
  /// (PlanConfig::fsdpWindows): the parameter gathers not hidden under the pass (part of
  /// forwardMs / backwardInputMs) and W's gradient reduce-scatter (part of backwardWeightMs). A
  /// pass that continues a run of passes of its stage in the same direction on its device, or
  /// follows another pass of its stage in one UNSHARD…RESHARD window, pays none of it. Zero for
  /// other plans.
  /// Activation offloading (Parallelism::offloadsActivations): the bytes of one microbatch's
  /// activations held in host memory from its forward to its backward (part of activationBytes),
  /// and the time the forward and the backward wait for their copies over the host link (part of
  /// forwardMs / backwardInputMs; offloadStalls).
  std::int64_t offloadBytes = 0;
  double offloadWaitForwardMs = 0;
  double offloadWaitBackwardMs = 0;
  double zeroGatherForwardMs = 0;
  double zeroGatherBackwardMs = 0;
  double zeroScatterWeightMs = 0;
};

/// The costs of a plan request, derived once: every layer of every component under the
/// config's hybrid parallelism and training recipe, on each GPU type the pipeline ranks use.
/// Runs of identical layers are costed once. Everything downstream of a request (partition,
/// schedule estimates, fill, simulation, memory, metrics, executor, GUI) reads this value;
/// functions that take only a Plan derive it from the plan.
class CostedModel {
 public:
  CostedModel() = default;
  /// `samplesPerMicrobatch` 0: the model's (a resolved request's model carries the micro-batch
  /// size); the configurator and the GUI's layer table cost other sizes without a copy.
  CostedModel(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config,
              std::int64_t samplesPerMicrobatch = 0);
  explicit CostedModel(const Plan& plan) : CostedModel(plan.model, plan.cluster, plan.config) {}

  /// Costs of layer `layer` of component `component` on pipeline rank `device`; zero costs for
  /// ids out of range (an edited plan may name layers that do not exist).
  const LayerCosts& layer(int component, int layer, int device = 0) const;
  /// Layers of `component` on `device` (empty for an unknown component).
  const std::vector<LayerCosts>& component(int component, int device = 0) const;
  /// A virtual stage's costs: the sum over its layers on its device. With full recomputation of
  /// only some layers (Parallelism::recomputeNumLayers), the stage decides which: the first N
  /// transformer layers (block), or every layer in groups of N that keep one input (uniform).
  StageCosts stage(const VirtualStage& stage) const;
  std::vector<StageCosts> stages(const std::vector<VirtualStage>& stages) const;

  /// Sequence splits (PlanConfig::seqSplits): the chunks' token boundaries, seqSplits + 1 of
  /// them from 0 to the sequence's tokens (tokensPerSample; seqSplits nominal tokens for a
  /// model without shapes). "balanced": each chunk takes an equal share of the transformer
  /// blocks' F + B + W time on pipeline rank 0's GPU (Seq1F1B §3.3's computation-wise
  /// partition, with the attention-core model instead of FLOPs; equal tokens for a model
  /// without blocks); "even": equal tokens.
  /// Boundaries are multiples of the tensor-parallel degree (sequence-parallel shards).
  /// {0, tokens} without splits.
  const std::vector<std::int64_t>& seqChunkBounds() const { return m_seqBounds; }
  int seqSplits() const { return static_cast<int>(m_seqBounds.size()) - 1; }
  /// A virtual stage's costs for sequence chunk `seqChunk` (layerChunkCosts over its layers);
  /// the whole microbatch without sequence splits.
  StageCosts stage(const VirtualStage& stage, int seqChunk) const;
  /// Per virtual stage, per sequence chunk ([stage][chunk]; one chunk without splits): what a
  /// plan's op of unit u costs is [its stage][seqChunkOf(config, u)].
  std::vector<std::vector<StageCosts>> unitStages(const std::vector<VirtualStage>& stages) const;

 private:
  using Tables = std::vector<std::vector<std::vector<LayerCosts>>>;  ///< [class][component][layer]
  int gpuClass(int device) const;
  StageCosts sumStage(const VirtualStage& vs, const Tables& costs, const Tables* unrecomputed) const;

  /// Activation offloading: the stage's transformer layers' costs for offloadWaits, and what they
  /// offload (the first N whole layers, or the fine-grained groups after the fraction).
  void addOffload(const VirtualStage& vs, const std::vector<LayerCosts>& blocks, StageCosts& s) const;

  bool m_blockwiseGathers = false;
  int m_cpuOffloadLayers = 0;
  std::uint32_t m_offloadModules = 0;
  double m_offloadFraction = 1.0;
  std::vector<double> m_hostGBps;  ///< per device: its host copies' rate (hostCopyGBps, every GPU copying)
  RecomputeMethod m_recomputeMethod = RecomputeMethod::Uniform;
  int m_recomputeNumLayers = 0;    ///< > 0 only with full recomputation
  std::vector<int> m_deviceClass;  ///< GPU class per device; empty: one GPU type for all
  /// [class][component][layer], and the same with resident parameters (ZeRO-1) for blockwise
  /// ZeRO-3 plans, whose gathers are the difference.
  Tables m_costs;
  Tables m_resident;
  /// [class][component][layer] without recomputation, for the layers block recomputation skips.
  Tables m_unrecomputed;
  /// Per sequence chunk, the same two tables (sequence splits only).
  std::vector<Tables> m_chunkCosts, m_chunkUnrecomputed;
  std::vector<std::int64_t> m_seqBounds{0, 0};
  /// Per component: whether layer l is a tied LM head (static memory rules) / a transformer
  /// block (what Megatron's --recompute-num-layers counts).
  std::vector<std::vector<char>> m_tiedHead;
  std::vector<std::vector<char>> m_block;
  std::vector<char> m_trainable;
};

}  // namespace pipestudio
