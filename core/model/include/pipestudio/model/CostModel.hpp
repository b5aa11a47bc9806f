#pragma once
/// \file Layer shapes → per-microbatch costs (times, bytes) on a given GPU under a given hybrid
/// parallelism and training recipe (issues 13 and 25). Every formula cites its source in
/// CostModel.cpp.
///
/// Compute time comes from FLOPs at the GPU's calibrated GEMM efficiency for the recipe's
/// precision, with a shape term (GEMM wave quantization over the GPU's SMs and a
/// memory-bandwidth roofline), plus the memory-bound element-wise kernels (norms, dropout,
/// residual adds, activations, non-flash softmax, low-precision casts) at the GPU's memory
/// bandwidth. The attention core runs in bf16 whatever the precision (Transformer Engine keeps
/// it there). Tensor-, context- and expert-parallel collectives run on the links their groups
/// cross; the part of each that the recipe overlaps with compute is hidden, the rest is part of
/// the pass that issues it (both are reported). Measured per-layer fields always win over
/// shape formulas.

#include <array>
#include <cstdint>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/model/Parallelism.hpp"
#include "pipestudio/model/Precision.hpp"

namespace pipestudio {

/// A collective's link, as seen by one GPU: bandwidth it gets while every GPU of its group
/// communicates at once, and the per-hop latency. A group that crosses NVLink domains
/// (`crossesNodes`) gets its NIC share here; when several of its ranks share each domain
/// (`ranksPerDomain` > 1) NCCL runs it hierarchically, those ranks over `nvlinkGBps` and the
/// domains over their NICs together (allGatherMs, allReduceMs).
struct CollectiveLink {
  double bandwidthGBps = 0;
  double latencyUs = 0;
  bool crossesNodes = false;
  /// Ranks of the group inside one NVLink domain (1: each in a domain of its own, or the group
  /// inside one domain).
  int ranksPerDomain = 1;
  double nvlinkGBps = 0;  ///< the domain's NVLink rate (crossing groups with ranksPerDomain > 1)
  double nvlinkLatencyUs = 0;
  /// NVLink SHARP in the domain's switches: NCCL's NVLS all-reduce bus bandwidth over its ring's
  /// (nvlsAllReduceFactor); 0: no NVLS.
  double nvlsFactor = 0;
};

/// NCCL's NVLS all-reduce bus bandwidth as a multiple of its ring's on the same NVLink, from
/// NCCL's tuning model (src/graph/tuning.cc at 5067397c: per channel bwIntra · nvlsEfficiency ·
/// (nChannels − 1) / nChannels, doubled for all-reduce because NVLS pipelines its reduce-scatter
/// and all-gather through the switch): 2 · efficiency · (channels − 1) / channels. 0 without NVLS.
double nvlsAllReduceFactor(const GpuSpec& gpu);

/// The links the tensor-, context-, expert- and data-parallel groups of a placement cross
/// (Megatron order: TP innermost, then CP, then DP; the expert group is ETP·E consecutive GPUs,
/// its data-parallel group every ETP·E-th GPU of the pipeline rank). A group stays on NVLink while
/// it fits in one NVLink domain (a node, or a whole NVL72 rack).
struct CollectiveLinks {
  CollectiveLink tensor, context, expert, data, expertData;
  /// The two kinds of link any group uses, and how many consecutive GPUs share an NVLink domain
  /// (groups whose size depends on the layer: hierarchical CP, the expert all-to-all's peers).
  CollectiveLink nvlink, network;
  std::int64_t domainGpus = 1;
};
CollectiveLinks collectiveLinks(const ClusterSpec& cluster, const Parallelism& parallel);

/// Collective times over `ranks` GPUs on `link` (bytes are the full tensor, per GPU), as NCCL
/// runs them (CostModel.cpp cites each): all-reduce the fastest of ring (2(n−1)/n·B/bw +
/// 2(n−1)·α), tree (2·B/bw + 2·⌈log2 n⌉·α) and, where the link has NVLS, NVLink SHARP;
/// all-gather / reduce-scatter a ring, (n−1)/n·B/bw + (n−1)·α; all-to-all (n−1)/n·B/bw +
/// (n−1)·α. A group over N domains of p > 1 ranks each (link.ranksPerDomain) is a ring whose p
/// channels each leave a domain through another rank's NIC: of what each GPU sends, 1/p crosses
/// its NIC and the rest stays on NVLink, both at once; its latency is n − N NVLink steps and
/// N − 1 network steps.
double allReduceMs(const CollectiveLink& link, int ranks, double bytes);
double allGatherMs(const CollectiveLink& link, int ranks, double bytes);
double allToAllMs(const CollectiveLink& link, int ranks, double bytes);

/// The fraction of `gpu`'s SMs the expert all-to-alls take while compute runs beside them
/// (Parallelism::moeCommSmsOrDefault over the GPU's SM count, at most 1; `acrossDomains`: the
/// expert group spans NVLink domains); 0 when the GPU's SM count is unknown. The layers' 1F1B A2A
/// overlap and the simulator's F&B groups charge it.
double moeCommSmShare(const GpuSpec& gpu, const Parallelism& parallel, bool acrossDomains = true);

/// Of the time an expert all-to-all ran beside GEMM and attention kernels, the share that came
/// off the step on H100 (Megatron-Core's EP overlap with HybridEP, BF16, Qwen3-30B-A3B on 16
/// GPUs): Megatron-Bridge's Nsight A/B of that run (skills/nemo-mbridge-perf-moe-comm-overlap/
/// SKILL.md at 067f987df03b) found 3,958.997 ms of communication beside compute and the union of
/// GPU-active intervals down from 22.821 s to 21.221 s, 1.600 / 3.959 = 0.404. A GPU states its
/// own as `ep_overlap_efficiency`; every GPU without one uses this measurement. It is charged
/// where the cost model times Megatron-Core's overlaps (1F1B A2A, shared experts); the
/// simulator's DualPipe F&B groups keep DeepSeek-V3's account (efficiency 1: the SMs alone).
inline constexpr double kMeasuredEpOverlapEfficiency = 0.404;

/// `gpu`'s ep_overlap_efficiency, or kMeasuredEpOverlapEfficiency.
double epOverlapEfficiency(const GpuSpec& gpu);

/// How long `computeMs` of compute takes beside `commMs` of an expert all-to-all on another
/// stream that holds a share `smShare` of the SMs, where only a share `efficiency` of the time
/// they run together comes off (epOverlapEfficiency): the longer of the collective, the compute
/// on the SMs the collective leaves it (computeMs + smShare·commMs), and
/// max(comm, compute) + (1 − efficiency)·min(comm, compute).
double besideSpanMs(double commMs, double computeMs, double smShare, double efficiency);

/// The all-to-all group of hierarchical context parallelism (`a2a+p2p`) as the cost model forms
/// it for `shape` on `cluster`: the largest divisor C_a of C whose T·C_a GPUs share an NVLink
/// domain and that divides each tensor rank's query and key/value heads (Megatron's
/// --hierarchical-context-parallel-sizes C_a C/C_a). 1 without context parallelism.
int hierarchicalContextA2aRanks(const ClusterSpec& cluster, const Parallelism& parallel, const TransformerShape& shape);

/// Everything the cost of a layer depends on besides the layer.
struct CostContext {
  GpuSpec gpu;
  Parallelism parallel;
  CollectiveLinks links;
  /// The format of the weight GEMMs (the recipe's --precision).
  Precision precision = Precision::Bf16;
  std::int64_t samplesPerMicrobatch = 1;
  bool trainable = true;
};

/// Costs of one layer for one microbatch on one GPU of its pipeline rank. Frozen layers have
/// zero backward. Byte counts are per GPU (sharded by TP/CP/EP as the layer is).
struct LayerCosts {
  double forwardMs = 0;
  double backwardInputMs = 0;
  double backwardWeightMs = 0;
  /// Collective time (TP/SP all-reduce or gather/scatter, CP ring exchange, EP all-to-all,
  /// ZeRO-3 gathers) inside the three passes above, not overlapped with their compute.
  double forwardCommMs = 0;
  double backwardInputCommMs = 0;
  double backwardWeightCommMs = 0;
  /// Collective time the recipe hides under the compute of the same pass (TP overlap with the
  /// GEMMs, the CP ring under the attention core, prefetched ZeRO-3 gathers): not part of the
  /// durations above.
  double forwardHiddenCommMs = 0;
  double backwardInputHiddenCommMs = 0;
  double backwardWeightHiddenCommMs = 0;
  std::int64_t activationBytes = 0;
  std::int64_t weightGradBytes = 0;
  std::int64_t parameterBytes = 0;  ///< bf16 weights of this GPU's shard (before ZeRO-3 sharding)
  /// The part of parameterBytes in routed experts: replicated over D/E data-parallel ranks, not D.
  std::int64_t expertParameterBytes = 0;
  /// Low-precision copies of the linear weights that Transformer Engine caches across the
  /// microbatches of an iteration (fp8 on Hopper: the weight and its transpose).
  std::int64_t lowPrecisionWeightBytes = 0;
  /// Of parameterCount(), the linear weights kept only in the recipe's low-precision format
  /// (Parallelism::lowPrecisionParamsFor): they have no bf16 copy, lowPrecisionWeightBytes holds
  /// them; and the part of those in routed experts.
  double quantizedParameters = 0;
  double quantizedExpertParameters = 0;
  /// ZeRO-3 (an FSDP unit per layer): the weights one pass gathers (bf16, or the low-precision
  /// weights in their format) and the unsharded gradient its backward produces before the
  /// reduce-scatter (in the reduce type). The stage holds them for this layer and a neighbour
  /// (StageCosts::communicationBytes). 0 without ZeRO-3.
  /// Fine-grained activation offloading: per OffloadModule (bit order), the bytes of this layer's
  /// activations that module's offload group holds (what the module saves for its backward); 0
  /// for a module the layer does not run or keeps in a recomputed region.
  std::array<std::int64_t, kOffloadModuleCount> offloadGroupBytes{};
  std::int64_t fsdpGatherBytes = 0;
  std::int64_t fsdpGradientBytes = 0;
  std::int64_t outputBytes = 0;         ///< what one GPU sends to the next virtual stage
  std::int64_t communicationBytes = 0;  ///< transient collective buffers while a pass runs
  /// Transient bytes while the backward runs that the held activations do not count: the
  /// recomputed activations of a layer (a group under uniform recomputation).
  std::int64_t recomputeBytes = 0;
  /// Process-wide buffers this layer's kernels need (one set per process, sized for its largest
  /// layer): the cuBLAS and Transformer Engine GEMM workspaces, and TE's userbuffers for the TP
  /// communication overlap.
  std::int64_t workspaceBytes = 0;
  std::int64_t userbufferBytes = 0;
  /// The private memory pools this layer's captured CUDA graphs keep (static inputs, outputs and
  /// intermediates; summed over a device's layers). 0 unless the recipe captures graphs.
  std::int64_t cudaGraphBytes = 0;
  /// Model FLOPs of one forward pass of the whole layer over the microbatch (all GPUs of the
  /// pipeline rank together; no recomputation; Korthikanti et al. 2022 Appendix A counting).
  double modelFlopsForward = 0;
  /// Parameters of the whole layer (unsharded): model size, tied weights counted once.
  double modelParameters = 0;
  double parameterCount() const { return static_cast<double>(parameterBytes) / 2.0; }  // bf16 weights, this GPU
  double backwardMs() const { return backwardInputMs + backwardWeightMs; }
};

/// Resolves a layer: measured fields win, missing ones come from the shape formulas.
/// `context.trainable` false zeroes the backward costs and the weight-gradient bytes.
LayerCosts layerCosts(const Layer& layer, const CostContext& context);

/// Costs of one layer for the sequence chunk of query tokens [queryBegin, queryEnd) of each
/// sample of a `sequenceTokens`-token sequence, under causal attention (Seq1F1B, Sun et al.
/// 2024 §3): the chunk's tokens attend to every key up to their own, so a later chunk of
/// equal length costs more. A transformer block is costed as the chunk alone (its GEMMs,
/// element-wise kernels, collectives and activations over the chunk's tokens, its attention
/// core over its own causal diagonal block) plus the attention core of its queries against
/// the queryBegin keys of the earlier chunks (the attention-core model, unmasked). Other
/// layers, and measured fields, scale with the chunk's share of the tokens.
LayerCosts layerChunkCosts(const Layer& layer, const CostContext& context, std::int64_t sequenceTokens,
                           std::int64_t queryBegin, std::int64_t queryEnd);

/// Pure pipeline shorthand (one GPU per device, no TP/CP/EP, no recomputation, bf16).
LayerCosts layerCosts(const Layer& layer, const GpuSpec& gpu, std::int64_t samplesPerMicrobatch, bool trainable);

/// FLOPs of one forward pass of a transformer layer over `batch` samples as Korthikanti et al.
/// 2022 Appendix A count them (24·b·s·h² + 4·b·s²·h for a 4h GELU MLP and multi-head attention;
/// grouped-query attention, SwiGLU and MoE generalise the h² terms; full attention, no causal
/// halving).
double transformerForwardFlops(const TransformerShape& shape, std::int64_t batch);

/// Static bytes per parameter of trainable weights under ZeRO stage `zeroStage` over
/// `dataParallel` replicas: bf16 weight 2 + gradient (bf16 2, or fp32 4 when reduced in fp32)
/// + fp32 master, momentum and variance 12 (mixed-precision Adam), the latter sharded by D from
/// stage 1, the gradient from stage 2, the weight from stage 3 (Rajbhandari et al. 2020).
/// Stage 1 is Megatron's distributed optimizer: 2 + g + 12/d.
struct StaticBytesPerParameter {
  double parameter = 2, gradient = 4, optimizer = 12;
  double total() const { return parameter + gradient + optimizer; }
};
StaticBytesPerParameter staticBytesPerParameter(int zeroStage, int dataParallel, bool gradientsInFp32 = true);
/// Legacy form: `optimizer.distributed` is ZeRO-1, gradients in fp32.
double staticBytesPerParameter(const OptimizerSpec& optimizer, int dataParallel);

/// Static memory of a set of layers: trainable parameters × staticBytesPerParameter,
/// frozen parameters × 2 (bf16 weights only).
double staticMemoryBytes(double trainableParameters, double frozenParameters, const OptimizerSpec& optimizer,
                         int dataParallel);

/// Adam step time for `parameters` of this GPU's optimizer shard: memory-bound, ~34 bytes
/// read or written per parameter (fp32 gradient, master weight, two moments, bf16 weight, the
/// gradient-norm pass).
double optimizerStepMs(const GpuSpec& gpu, double parameters);

}  // namespace pipestudio
