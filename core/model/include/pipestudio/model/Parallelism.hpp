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
  CpCommType cpCommType = CpCommType::P2p;
  /// The attention kernels (Megatron --attention-backend): cuDNN's fused attention as Transformer
  /// Engine picks it on Hopper, FlashAttention-2, or unfused.
  AttentionBackend attentionBackend = AttentionBackend::Fused;
  /// The framework that runs the recipe (costs of its kernels, overlaps and recomputation).
  Framework framework = Framework::Megatron;
  /// torchtitan: every transformer block compiled with torch.compile, which fuses its element-wise
  /// ops (torchtitan's apply_compile); false: eager, one kernel per PyTorch op. Megatron-Core's
  /// kernels are fused either way.
  bool torchCompile = true;

  /// The expert all-to-alls' SMs as they apply: moeCommSms, or the dispatcher's default —
  /// Megatron-Core's moe_deepep_num_sms (20, TransformerConfig) for the flex dispatcher, and for
  /// NCCL's all-to-all its p2p channel limit (MAXCHANNELS, 32: src/include/device.h; p2pnChannels
  /// = min(nChannels, NCCL_MAX_P2P_NCHANNELS) in src/graph/paths.cc), one thread block per channel.
  int moeCommSmsOrDefault() const {
    if (moeCommSms > 0) return moeCommSms;
    return moeFlexDispatcher ? 20 : 32;
  }

  /// ETP as it applies (expertTensor, or T when unset).
  int expertTensorOrTensor() const { return expertTensor > 0 ? expertTensor : tensor; }
  /// Expert data parallelism EDP = T·C·D / (ETP·E): the replicas of each expert's weights, over
  /// which their gradients are reduced and the distributed optimizer shards them.
  std::int64_t expertData() const {
    const std::int64_t grid = static_cast<std::int64_t>(expertTensorOrTensor()) * expert;
    return std::max<std::int64_t>(1, gpusPerPipelineRank() / std::max<std::int64_t>(1, grid));
  }
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

}  // namespace pipestudio
