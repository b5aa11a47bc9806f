#pragma once
/// \file Hybrid parallelism of a plan in Megatron-LM's vocabulary (docs/formats.md, issues 13 and
/// 25): tensor (T), context (C), expert (E) and data (D) parallel degrees around the pipeline
/// (P), sequence parallelism, activation recomputation, the ZeRO stage and how the recipe
/// overlaps its collectives with compute.
///
/// Placement follows Megatron-LM's rank order: TP innermost, then CP, then DP, PP outermost; the
/// expert layers re-divide the same T·C·D GPUs as ETP innermost, then EP, then expert DP. GPU index of (pipeline rank
/// k, data rank r, context rank c, tensor rank t) = t + T·(c + C·(r + D·k)). A plan's device lane is one pipeline rank;
/// its T·C GPUs move together (their collectives are part of its ops' durations).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pipestudio/model/AttentionBackend.hpp"
#include "pipestudio/model/Precision.hpp"

namespace pipestudio {

/// Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in
/// Large Transformer Models"): `Selective` recomputes the modules named by recomputeModules
/// (Megatron's default: the attention core, the s² terms), `Full` keeps only each layer's input
/// and recomputes its forward inside its backward.
enum class Recompute : std::uint8_t { None, Selective, Full };

std::string_view recomputeName(Recompute recompute);
std::optional<Recompute> recomputeFromName(std::string_view name);

/// Megatron-LM's --recompute-method for full recomputation of only some layers
/// (--recompute-num-layers N): `Uniform` divides each virtual stage's layers into groups of N
/// and keeps only each group's input; `Block` recomputes the first N layers of each virtual
/// stage and keeps every activation of the others.
enum class RecomputeMethod : std::uint8_t { Uniform, Block };

std::string_view recomputeMethodName(RecomputeMethod method);
std::optional<RecomputeMethod> recomputeMethodFromName(std::string_view name);

/// Megatron-Core's selective recomputation modules (--recompute-modules), as bits.
enum RecomputeModule : std::uint32_t {
  kRecomputeCoreAttn = 1u << 0,       ///< attention core (scores, softmax, dropout)
  kRecomputeLayerNorm = 1u << 1,      ///< the two norms: their outputs are not kept
  kRecomputeMlp = 1u << 2,            ///< the dense MLP: only its input is kept
  kRecomputeMoeAct = 1u << 3,         ///< the experts' activation function
  kRecomputeMoe = 1u << 4,            ///< the whole MoE block: only its input is kept
  kRecomputeSharedExperts = 1u << 5,  ///< the shared experts
  kRecomputeMlaUpProj = 1u << 6,      ///< multi-head latent attention's up projections
};
/// "core_attn,mlp": the modules of `bits` in Megatron's spelling.
std::string recomputeModulesName(std::uint32_t bits);
/// Parses a comma-separated list; nullopt (with the first unknown name in `unknown`) when a
/// name is not one of Megatron's modules.
std::optional<std::uint32_t> recomputeModulesFromNames(std::string_view names, std::string* unknown = nullptr);
/// The module names Megatron accepts, comma-separated.
std::string_view recomputeModuleChoices();

/// Megatron-Core's fine-grained activation offloading modules (--fine-grained-activation-offloading
/// --offload-modules, megatron/core/transformer/transformer_config.py), as bits in a layer's
/// execution order: each offloads what its module saves for the backward to host memory after its
/// forward and reloads it before its backward.
enum OffloadModule : std::uint32_t {
  kOffloadAttnNorm = 1u << 0,   ///< the attention's input norm (when it is not fused into the QKV GEMM)
  kOffloadQkvLinear = 1u << 1,  ///< the QKV projection (with Transformer Engine's fused input norm)
  kOffloadCoreAttn = 1u << 2,   ///< the attention core: Q, K, V, its output, the softmax statistics
  kOffloadAttnProj = 1u << 3,   ///< the output projection's input (needs core_attn)
  kOffloadMlpNorm = 1u << 4,    ///< the MLP's input norm (when it is not fused into FC1)
  kOffloadExpertFc1 = 1u << 5,  ///< the routed experts' FC1 input
  kOffloadMoeAct = 1u << 6,     ///< the experts' activation input
};
inline constexpr int kOffloadModuleCount = 7;
/// "core_attn,attn_proj": the modules of `bits` in Megatron's spelling.
std::string offloadModulesName(std::uint32_t bits);
/// Parses a comma-separated list; nullopt (the first unknown name in `unknown`) for a name that
/// is not one of them.
std::optional<std::uint32_t> offloadModulesFromNames(std::string_view names, std::string* unknown = nullptr);
std::string_view offloadModuleChoices();

/// How context parallelism exchanges keys and values (Transformer Engine's cp_comm_type,
/// Megatron --cp-comm-type): `P2p` passes K/V chunks around a ring, overlapped step by step with
/// the attention of the chunk in hand (Liu et al. 2023, ring attention); `A2a` all-to-alls Q, K,
/// V (heads scattered, sequence gathered) before the attention and its output after it
/// (DeepSpeed-Ulysses, Jacobs et al. 2023), not overlapped; `A2aP2p` all-to-alls inside groups
/// that share an NVLink domain and runs the ring across them (TE's hierarchical CP,
/// --hierarchical-context-parallel-sizes).
enum class CpCommType : std::uint8_t { P2p, A2a, A2aP2p };

/// The flex dispatcher's library (Megatron --moe-flex-dispatcher-backend): DeepEP's normal
/// kernels (Megatron-Core's default) or NVIDIA's HybridEP. They move the same tokens at different
/// rates across nodes (MoeCosts.cpp: each as its published benchmark measures it).
enum class FlexBackend : std::uint8_t { DeepEp, HybridEp };

std::string_view flexBackendName(FlexBackend backend);
std::optional<FlexBackend> flexBackendFromName(std::string_view name);

/// CUDA graph capture as Megatron-Core runs it (--cuda-graph-impl; TransformerConfig.cuda_graph_impl
/// of NVIDIA/Megatron-LM at d98e8a64): `Local` (Megatron-Core's per-layer graphs) and
/// `TransformerEngine` (TE's make_graphed_callables per layer) capture the modules named by
/// --cuda-graph-modules; `FullIteration` one graph of the whole forward-backward path.
enum class CudaGraphImpl : std::uint8_t { None, Local, TransformerEngine, FullIteration };

std::string_view cudaGraphImplName(CudaGraphImpl impl);
std::optional<CudaGraphImpl> cudaGraphImplFromName(std::string_view name);
/// "none|local|transformer_engine|full_iteration".
std::string_view cudaGraphImplChoices();

/// Megatron-Core's --cuda-graph-modules (CudaGraphModule in megatron/core/transformer/enums.py), as
/// bits; none named: the whole layer.
enum CudaGraphModule : std::uint32_t {
  kGraphAttn = 1u << 0,           ///< TransformerLayer._forward_attention
  kGraphMlp = 1u << 1,            ///< a dense layer's MLP
  kGraphMoe = 1u << 2,            ///< a MoE layer's MLP whole (drop-and-pad MoE only)
  kGraphMoeRouter = 1u << 3,      ///< a MoE layer up to its router (and unoverlapped shared experts)
  kGraphMoePreprocess = 1u << 4,  ///< MoELayer.preprocess (needs moe_router)
  kGraphMamba = 1u << 5,          ///< a Mamba layer
};
/// "attn,moe_router": the modules of `bits` in Megatron's spelling.
std::string cudaGraphModulesName(std::uint32_t bits);
/// Parses a comma-separated list; nullopt (with the first unknown name in `unknown`) when a name
/// is not one of Megatron's modules.
std::optional<std::uint32_t> cudaGraphModulesFromNames(std::string_view names, std::string* unknown = nullptr);
/// The module names Megatron accepts, comma-separated.
std::string_view cudaGraphModuleChoices();
/// The framework whose kernels and policies carry out a recipe (docs/fidelity.md). `Megatron`:
/// Megatron-Core with Transformer Engine — fused element-wise kernels, userbuffers for the TP
/// overlap, Megatron's recompute modules. `Torchtitan`: PyTorch's FSDP2 and DTensor as
/// torchtitan applies them (torchtitan/parallelisms/parallelize_llama.py): the TP overlap is
/// AsyncTP (symmetric-memory micro-pipelining of the collectives torch.compile's micro_pipeline_tp
/// pass matches), selective recomputation is torchtitan's per-op policy, and each transformer
/// block is compiled or eager (Parallelism::torchCompile).
enum class Framework : std::uint8_t { Megatron, Torchtitan };

std::string_view frameworkName(Framework framework);
std::optional<Framework> frameworkFromName(std::string_view name);
/// "megatron|torchtitan": the choices, for messages and help texts.
std::string_view frameworkChoices();

std::string_view cpCommTypeName(CpCommType type);
std::optional<CpCommType> cpCommTypeFromName(std::string_view name);
/// "p2p|a2a|a2a+p2p": the choices, for messages and help texts.
std::string_view cpCommTypeChoices();

struct Parallelism {
  int tensor = 1;   ///< T: Megatron tensor parallelism (QKV/MLP split over T GPUs of a node)
  int context = 1;  ///< C: context parallelism (ring attention, sequence split over C)
  /// E: expert parallelism. Megatron-Core's MoE parallel folding (Liu et al. 2025, "MoE Parallel
  /// Folding") lays the expert layers' ETP × E × EDP grid over the same T·C·D GPUs of a pipeline
  /// rank as the attention's T × C × D, so E may exceed D: ETP·E must divide T·C·D.
  int expert = 1;
  /// ETP: tensor parallelism inside each expert (Megatron --expert-tensor-parallel-size); 0: the
  /// attention's T, as Megatron defaults it.
  int expertTensor = 0;
  int data = 1;                   ///< D: data-parallel replicas of the whole pipeline
  bool sequenceParallel = false;  ///< Korthikanti 2022 §4.2.2; the CLI turns it on when T > 1
  Recompute recompute = Recompute::None;
  /// With Recompute::Full: how many layers of each virtual stage (Block) or per group
  /// (Uniform) are recomputed; 0 = every layer, one per group (Megatron's full recomputation).
  int recomputeNumLayers = 0;
  RecomputeMethod recomputeMethod = RecomputeMethod::Uniform;
  /// With Recompute::Selective: RecomputeModule bits; 0 = the attention core (Megatron's default).
  std::uint32_t recomputeModules = 0;
  int zeroStage =
      0;  ///< 0 none, 1 optimizer state (Megatron's distributed optimizer), 2 + gradients, 3 + parameters (FSDP)
  /// Gradient reduction overlapped with the last backward passes (Megatron `--overlap-grad-reduce`,
  /// PyTorch DDP/FSDP buckets). Off: it runs after the pipeline drains.
  bool overlapGradReduce = true;
  /// The distributed optimizer's parameter all-gather overlapped with the next iteration's
  /// forward passes, bucket by bucket (Megatron `--overlap-param-gather`). Off: it follows the
  /// optimizer step, exposed.
  bool overlapParamGather = true;
  /// Gradients reduced (and accumulated) in fp32 (Megatron `--grad-reduce-in-fp32`); off: in
  /// bf16, as Megatron-Bridge's recipes reduce them.
  bool gradReduceInFp32 = false;
  /// Tensor-parallel collectives overlapped with the GEMMs they feed or follow (Transformer
  /// Engine userbuffers, `--tp-comm-overlap`; PyTorch AsyncTP). Needs sequence parallelism.
  bool tpCommOverlap = true;

  /// Token dropping for every MoE layer (Megatron --moe-expert-capacity-factor): overrides the
  /// model's capacity_factor; 0 = dropless. nullopt: each layer's own setting.
  std::optional<double> moeCapacityFactor;
  /// The expert-parallel all-to-alls of one microbatch's forward hidden under another's backward
  /// and the other way round (Megatron --overlap-moe-expert-parallel-comm, the "1F1B A2A overlap"
  /// of interleaved schedules). DualPipe's F&B pairing (DeepSeek-V3 §3.2.1) is the simulator's
  /// (PlanConfig::overlapForwardBackward), not this flag's.
  bool moeA2aOverlap = false;
  /// The shared experts computed while the routed tokens are dispatched and combined (Megatron
  /// --moe-shared-expert-overlap).
  bool moeSharedExpertOverlap = false;
  /// Megatron's flex token dispatcher (--moe-token-dispatcher-type flex: DeepEP / HybridEP): a
  /// token crosses the network at most once per NVLink domain that holds one of its experts and
  /// is forwarded over NVLink there (DeepSeek-V3 §3.2.2). false: the all-to-all dispatcher sends
  /// every routed copy.
  bool moeFlexDispatcher = false;
  FlexBackend moeFlexBackend = FlexBackend::DeepEp;  ///< with moeFlexDispatcher
  /// The SMs the expert all-to-all kernels occupy while they run (Megatron --moe-deepep-num-sms,
  /// --moe-hybridep-num-sms; NCCL's p2p channels, one thread block each): the compute an
  /// overlap runs beside them gets the rest. 0: the dispatcher's default (moeCommSmsOrDefault).
  int moeCommSms = 0;
  /// The token permutation in Transformer Engine's fused kernels (Megatron --moe-permute-fusion,
  /// which Megatron-Bridge's recipes set). Off: PyTorch's gather and, for the inverse, a scatter-add
  /// with one atomic add per value (megatron/core/transformer/moe/moe_utils.py permute/unpermute).
  bool moePermuteFusion = true;
  /// HybridEP writes the received tokens in expert order and combines from them, so the flex
  /// dispatcher needs no permutation kernels of its own (Megatron --moe-permute-fusion-into-hybridep).
  bool moePermuteFusionIntoDispatcher = false;
  /// HybridEP's combine pipeline: tokens per chunk through its NVLink and network stages
  /// (NUM_OF_TOKENS_PER_CHUNK_COMBINE_API); 0: the library's default, 64.
  int moeCombineChunkTokens = 0;
  /// HybridEP's token budget per expert-parallel rank, as a multiple of a balanced router's
  /// routed copies (Megatron --moe-expert-rank-capacity-factor; TransformerConfig at d98e8a64).
  /// Set, the dispatch is sync-free: its buffers are sized before the step (budget = tokens ·
  /// top_k · factor rows, rounded up) and the routed experts' activations take that shape.
  /// Unset, HybridEP sizes them from the received counts and the host waits for those in every
  /// dispatch (_HybridEPManager.setup_metadata, fused_a2a.py `non_blocking`).
  std::optional<double> moeRankCapacityFactor;
  /// Megatron's paged stash (--moe-paged-stash, needs the rank capacity factor): the routed
  /// experts' activations for the backward are packed into pages sized at
  /// moePagedStashBufferFactorOrDefault() of a balanced router's, not at the budget.
  bool moePagedStash = false;
  /// --moe-paged-stash-buffer-size-factor-cuda; 0: Megatron's default (1.10).
  double moePagedStashBufferFactor = 0;
  /// CUDA graphs (Megatron --cuda-graph-impl, --cuda-graph-modules): what they change in the cost
  /// model is where the all-to-all dispatcher's device-to-host copy sits and the graph pools'
  /// memory (docs/fidelity.md: the published A/Bs found no launch time to remove on H100).
  CudaGraphImpl cudaGraphImpl = CudaGraphImpl::None;
  std::uint32_t cudaGraphModules = 0;  ///< CudaGraphModule bits; 0 with a per-layer impl: the whole layer
  CpCommType cpCommType = CpCommType::P2p;
  /// The attention kernels (Megatron --attention-backend): cuDNN's fused attention as Transformer
  /// Engine picks it on Hopper, FlashAttention-2, or unfused.
  AttentionBackend attentionBackend = AttentionBackend::Fused;
  /// The linear layers' weights kept only in the recipe's low-precision format, with no bf16 copy
  /// (Megatron --fp8-param-gather / --fp4-param-gather: Transformer Engine's quantized weights are
  /// the model's parameters and the distributed optimizer's fp32 master copy is cast straight into
  /// them). nullopt: as Megatron-Bridge's mixed-precision presets set it (lowPrecisionParamsFor).
  std::optional<bool> lowPrecisionParams;
  /// Activation offloading to host memory over the GPU's host link, as Megatron-Core runs it.
  /// Layer level (--cpu-offloading-num-layers N, Transformer Engine's default offload scheduling in
  /// transformer_engine/pytorch/cpu_offload.py): every activation the first N transformer layers of
  /// a pipeline rank save is copied to the host during the forward and back during the backward,
  /// so that at most the other layers' activations are on the GPU at a time; 0: off.
  int cpuOffloadingNumLayers = 0;
  /// Fine-grained (--fine-grained-activation-offloading --offload-modules): OffloadModule bits;
  /// 0: off. Of the eligible groups (one per module and layer) of a (virtual stage, microbatch),
  /// the last 1 − activationOffloadFraction in forward order stay on the GPU
  /// (--activation-offload-fraction), and pipeline rank r keeps r · deltaOffloadBytesAcrossPpRanks
  /// bytes on the GPU (--delta-offload-bytes-across-pp-ranks;
  /// megatron/core/pipeline_parallel/fine_grained_activation_offload.py, post_warmup_callback).
  std::uint32_t offloadModules = 0;
  double activationOffloadFraction = 1.0;
  std::int64_t deltaOffloadBytesAcrossPpRanks = 0;
  bool offloadsActivations() const { return cpuOffloadingNumLayers > 0 || offloadModules != 0; }
  /// The framework that runs the recipe (costs of its kernels, overlaps and recomputation).
  Framework framework = Framework::Megatron;
  /// torchtitan: every transformer block compiled with torch.compile, which fuses its element-wise
  /// ops (torchtitan's apply_compile); false: eager, one kernel per PyTorch op. Megatron-Core's
  /// kernels are fused either way.
  bool torchCompile = true;

  /// The expert all-to-alls' SMs as they apply: moeCommSms, or the dispatcher's default — DeepEP's
  /// Buffer.num_sms (20, deep_ep/buffer.py), HybridEP's 8 for a group across NVLink domains and 24
  /// inside one (csrc/hybrid_ep/config.cuh at 94a9f8f, branch hybrid-ep of deepseek-ai/DeepEP), and
  /// for NCCL's all-to-all its p2p channel limit (MAXCHANNELS, 32: src/include/device.h;
  /// p2pnChannels = min(nChannels, NCCL_MAX_P2P_NCHANNELS) in src/graph/paths.cc), one thread block
  /// per channel.
  int moeCommSmsOrDefault(bool acrossDomains = true) const {
    if (moeCommSms > 0) return moeCommSms;
    if (!moeFlexDispatcher) return 32;
    if (moeFlexBackend == FlexBackend::HybridEp) return acrossDomains ? 8 : 24;
    return 20;
  }
  /// HybridEP's combine chunk as it applies (moeCombineChunkTokens, or the library's 64:
  /// docs/README_Hybrid-EP.md, "Chunk Size Tuning").
  int moeCombineChunkTokensOrDefault() const { return moeCombineChunkTokens > 0 ? moeCombineChunkTokens : 64; }
  /// The paged stash's CUDA buffer over a balanced router's activations (Megatron's default 1.10,
  /// TransformerConfig.moe_paged_stash_buffer_size_factor_cuda).
  double moePagedStashBufferFactorOrDefault() const {
    return moePagedStashBufferFactor > 0 ? moePagedStashBufferFactor : 1.10;
  }
  /// Whether CUDA graphs capture `module` (a CudaGraphModule bit) of every layer: all of it under
  /// full-iteration graphs, the named modules (or, none named, the whole layer) under per-layer ones.
  bool graphsModule(std::uint32_t module) const {
    if (cudaGraphImpl == CudaGraphImpl::None) return false;
    if (cudaGraphImpl == CudaGraphImpl::FullIteration || cudaGraphModules == 0) return true;
    return (cudaGraphModules & module) != 0;
  }

  /// Whether the linear weights are kept only in `precision` (lowPrecisionParams, else
  /// Megatron-Bridge's preset for it, src/megatron/bridge/training/mixed_precision.py: on for FP8
  /// with current scaling, MXFP8 and NVFP4 — bf16_with_fp8_current_scaling_mixed and
  /// bf16_with_mxfp8_mixed set fp8_param_gather, bf16_with_nvfp4_mixed fp4_param_gather — off for
  /// FP8 block scaling, bf16_with_fp8_subchannel_scaling_mixed). Never in a 16-bit recipe.
  bool lowPrecisionParamsFor(Precision precision) const {
    if (!isLowPrecision(precision)) return false;
    return lowPrecisionParams.value_or(precision != Precision::Fp8Block);
  }
  /// ETP as it applies (expertTensor, or T when unset).
  int expertTensorOrTensor() const { return expertTensor > 0 ? expertTensor : tensor; }
  /// Expert data parallelism EDP = T·C·D / (ETP·E): the replicas of each expert's weights, over
  /// which their gradients are reduced and the distributed optimizer shards them.
  std::int64_t expertData() const {
    const std::int64_t grid = static_cast<std::int64_t>(expertTensorOrTensor()) * expert;
    return std::max<std::int64_t>(1, gpusPerPipelineRank() / std::max<std::int64_t>(1, grid));
  }
  /// Ranks that hold the same dense weights, over which their gradients are reduced and the
  /// distributed optimizer (or ZeRO-3) shards them: D·C. Context-parallel ranks compute partial
  /// gradients of the same weights, so Megatron-Core's DDP and distributed optimizer use the
  /// data-parallel group with the context-parallel ranks in it
  /// (parallel_state.get_data_parallel_group(with_context_parallel=True),
  /// megatron/core/distributed/distributed_data_parallel.py).
  std::int64_t denseData() const { return static_cast<std::int64_t>(std::max(1, data)) * std::max(1, context); }
  /// GPUs of one pipeline rank: T·C·D.
  std::int64_t gpusPerPipelineRank() const { return static_cast<std::int64_t>(tensor) * context * data; }
  /// GPU index of the first GPU of pipeline rank `device` (its tensor/context/data rank 0).
  std::int64_t firstGpuOfDevice(int device) const { return static_cast<std::int64_t>(device) * gpusPerPipelineRank(); }
  bool isPurePipeline() const {
    return tensor == 1 && context == 1 && expert == 1 && recompute == Recompute::None && zeroStage == 0;
  }
  /// The selective modules in effect (the default set when none are named).
  std::uint32_t selectiveModules() const {
    if (recompute != Recompute::Selective) return 0;
    return recomputeModules != 0 ? recomputeModules : static_cast<std::uint32_t>(kRecomputeCoreAttn);
  }
  friend bool operator==(const Parallelism&, const Parallelism&) = default;
};

/// Why Megatron-Core refuses this CUDA graph setting (TransformerConfig.__post_init__ at d98e8a64:
/// modules with full-iteration graphs, moe with moe_router, moe_preprocess without moe_router,
/// per-layer graphs under full recomputation, MoE recomputation inside a graphed router), or
/// nullopt when it runs.
std::optional<std::string> cudaGraphProblem(const Parallelism& parallel);

}  // namespace pipestudio
