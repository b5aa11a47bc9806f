// What a plan's settings may ask of its model and cluster (ConfigCheck.hpp): the checks
// resolveRequest applies to every request and validatePlanStructure to every plan read back.
#include "pipestudio/plan/ConfigCheck.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/Caveats.hpp"
#include "pipestudio/plan/Costs.hpp"

namespace pipestudio {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// Shape checks of one transformer layer against the degrees (Megatron-LM's own requirements:
// heads and query groups split over TP, experts over EP, a sequence that context parallelism
// can cut into 2·C load-balanced chunks).
Status checkLayerAgainstDegrees(const Layer& layer, const Component& comp, const Parallelism& par) {
  const TransformerShape& t = *layer.transformer;
  // Built only for a message: a model of 10,000 layers is checked for every plan.
  const auto where = [&] { return "layer '" + excerpt(layer.name) + "' (component '" + excerpt(comp.name) + "')"; };
  const int T = par.tensor;
  const int C = par.context;
  const int E = par.expert;
  if (layer.kind == "embedding" || layer.kind == "lm_head") return {};
  if (t.heads % T != 0) {
    return Error{"--tp " + str(T) + " does not divide the " + str(t.heads) + " attention heads of " + where() +
                 " (expected a divisor of the heads)"};
  }
  if (t.kvHeadsOrHeads() % T != 0) {
    return Error{"--tp " + str(T) + " does not divide the " + str(t.kvHeadsOrHeads()) + " key/value heads of " +
                 where() +
                 " (expected a divisor of kv_heads: grouped-query attention splits its query groups over TP)"};
  }
  if (t.ffnOrDefault() % T != 0 && !t.isMoe()) {
    return Error{"--tp " + str(T) + " does not divide the MLP size " + str(t.ffnOrDefault()) + " of " + where()};
  }
  if (t.isMoe() && t.experts % E != 0) {
    return Error{"--ep " + str(E) + " does not divide the " + str(t.experts) + " experts of " + where() +
                 " (expected a divisor of the experts)"};
  }
  const int etp = par.expertTensorOrTensor();
  if (t.isMoe() && t.expertFfnOrDefault() % etp != 0) {
    return Error{std::string(par.expertTensor > 0 ? "--etp " : "--tp ") + str(etp) +
                 " does not divide the expert MLP size " + str(t.expertFfnOrDefault()) + " of " + where() +
                 " (expert tensor parallelism splits each expert's MLP)"};
  }
  if (C > 1 && par.cpCommType == CpCommType::A2a) {
    // All-to-all context parallelism scatters each tensor-parallel rank's heads over the C ranks.
    const std::int64_t heads = t.heads / T;
    const std::int64_t kv = (t.mla ? t.heads : t.kvHeadsOrHeads()) / T;
    if (heads % C != 0 || kv % C != 0) {
      return Error{"--cp " + str(C) + " with --cp-comm-type a2a does not divide the " + str(heads) +
                   " query heads and " + str(kv) + " key/value heads per tensor-parallel rank of " + where() +
                   " (the all-to-all scatters heads over the context ranks; use p2p or a2a+p2p)"};
    }
  }
  if (C > 1 && (t.seq % (2 * static_cast<std::int64_t>(C)) != 0)) {
    return Error{"--cp " + str(C) + " needs the sequence length of " + where() + " (" + str(t.seq) +
                 ") to be a multiple of 2·C = " + str(2 * static_cast<std::int64_t>(C)) +
                 " (ring attention's load-balanced chunks)"};
  }
  // Sequence parallelism splits each context-parallel rank's seq / C tokens over the T GPUs
  // (Megatron-LM asserts seq_length % tensor_model_parallel_size == 0).
  if (par.sequenceParallel && T > 1 && t.seq % (static_cast<std::int64_t>(T) * C) != 0) {
    return Error{"--sequence-parallel splits the " + str(t.seq / C) + "-token sequence" +
                 (C > 1 ? " of each context-parallel rank" : std::string()) + " of " + where() + " over --tp " +
                 str(T) + ", which does not divide it (expected a sequence length that is a multiple of " +
                 (C > 1 ? "T·C = " + str(static_cast<std::int64_t>(T) * C) : "T = " + str(T)) +
                 ", or --no-sequence-parallel)"};
  }
  return {};
}

// The recipe's precision needs a peak on every GPU type of the cluster.
Status checkPrecision(const ClusterSpec& cluster, Precision p) {
  std::vector<const GpuSpec*> gpus{&cluster.gpu};
  for (const NodeSpec& n : cluster.nodes) {
    if (n.gpu) gpus.push_back(&*n.gpu);
  }
  for (const GpuSpec* g : gpus) {
    if (g->peakTflopsFor(p) > 0) continue;
    std::string has;
    for (Precision q : kPrecisions) {
      if (g->peakTflopsFor(q) > 0) has += (has.empty() ? "" : ", ") + std::string(precisionName(q));
    }
    return Error{"--precision " + std::string(precisionName(p)) + ": GPU '" + excerpt(g->name) + "' of cluster '" +
                 excerpt(cluster.name) + "' has no " + std::string(precisionName(p)) + " peak (it has " + has +
                 "; name a catalogue GPU that has it, or give peak_tflops." + std::string(precisionName(p)) +
                 " in the cluster file)"};
  }
  return {};
}

// The transformer blocks of the model's trainable components (embedding and head aside): how
// many, and which modules they have among them.
struct TransformerBlocks {
  std::int64_t count = 0;
  bool moe = false, dense = false, mla = false, shared = false;
};

TransformerBlocks transformerBlocks(const ModelSpec& model) {
  TransformerBlocks b;
  for (const Component& comp : model.components) {
    if (!comp.trainable) continue;
    for (const Layer& layer : comp.layers) {
      if (!layer.transformer || layer.kind == "embedding" || layer.kind == "lm_head") continue;
      ++b.count;
      b.moe = b.moe || layer.transformer->isMoe();
      b.dense = b.dense || !layer.transformer->isMoe();
      b.mla = b.mla || layer.transformer->mla.has_value();
      b.shared = b.shared || layer.transformer->sharedExperts > 0;
    }
  }
  return b;
}

// Recomputation settings against the model: modules it has, and layers a virtual stage has.
Status checkRecompute(const ModelSpec& model, const PlanConfig& config) {
  const Parallelism& par = config.parallel;
  if (par.recomputeNumLayers > 0 && par.recompute != Recompute::Full) {
    return Error{"--recompute-num-layers " + str(par.recomputeNumLayers) +
                 " needs --recompute full (it says how many layers full recomputation covers)"};
  }
  if (par.recomputeModules != 0 && par.recompute != Recompute::Selective) {
    return Error{"--recompute-modules " + recomputeModulesName(par.recomputeModules) +
                 " needs --recompute selective (full recomputation replays every module)"};
  }
  const TransformerBlocks tb = transformerBlocks(model);
  const bool moe = tb.moe, shared = tb.shared, dense = tb.dense, mla = tb.mla;
  const std::int64_t blocks = tb.count;
  const std::uint32_t modules = par.recomputeModules;
  const auto missing = [&](std::uint32_t bit, const char* what) -> Status {
    return Error{"--recompute-modules " + recomputeModulesName(bit) + ": model '" + excerpt(model.name) + "' has no " +
                 what + " (its modules: core_attn, layernorm" + (dense ? ", mlp" : "") + (moe ? ", moe, moe_act" : "") +
                 (shared ? ", shared_experts" : "") + (mla ? ", mla_up_proj" : "") + ")"};
  };
  if ((modules & (kRecomputeMoe | kRecomputeMoeAct)) && !moe) {
    return missing(modules & (kRecomputeMoe | kRecomputeMoeAct), "mixture-of-experts layers");
  }
  if ((modules & kRecomputeMlp) && !dense) return missing(kRecomputeMlp, "dense MLP (its MLPs are experts)");
  if ((modules & kRecomputeSharedExperts) && !shared) return missing(kRecomputeSharedExperts, "shared experts");
  if ((modules & kRecomputeMlaUpProj) && !mla) return missing(kRecomputeMlaUpProj, "multi-head latent attention");
  if (par.recomputeNumLayers > 0) {
    const std::int64_t stages =
        static_cast<std::int64_t>(std::max(1, config.devices)) * std::max(1, config.chunksPerDevice);
    const std::int64_t perStage = (blocks + stages - 1) / stages;
    if (par.recomputeNumLayers > perStage) {
      return Error{"--recompute-num-layers " + str(par.recomputeNumLayers) + " exceeds the " + str(perStage) +
                   " transformer layers of a virtual stage (" + str(blocks) + " layers over " + str(stages) +
                   " virtual stages; expected at most " + str(perStage) + ")"};
    }
  }
  return {};
}

// Megatron-Core's sync-free MoE (TransformerConfig.__post_init__ at d98e8a64 and
// docs/user-guide/features/paged_stash.md): the rank budget is HybridEP's, the paged stash needs
// it and keeps the expert modules on the GPU, and a full-iteration CUDA graph cannot hold a
// dispatch that waits on the host for its counts (the all-to-all dispatcher's dropless split
// sizes, DeepEP's received counts, HybridEP without a budget).
Status checkSyncFreeMoe(const Parallelism& par, bool anyExperts, const ModelSpec& model) {
  const bool hybridEp = par.moeFlexDispatcher && par.moeFlexBackend == FlexBackend::HybridEp;
  if (par.moeRankCapacityFactor && !anyExperts) {
    return Error{
        "--moe-expert-rank-capacity-factor needs a mixture-of-experts model (experts in a transformer "
        "shape); '" +
        excerpt(model.name) + "' has none"};
  }
  if (par.moeRankCapacityFactor && !hybridEp) {
    return Error{
        "--moe-expert-rank-capacity-factor is HybridEP's token budget (expected --moe-token-dispatcher flex "
        "--moe-flex-backend hybridep)"};
  }
  if (par.moePagedStash && !par.moeRankCapacityFactor) {
    return Error{
        "--moe-paged-stash needs --moe-expert-rank-capacity-factor (Megatron-Core: there is no need to use paged "
        "stashing without it)"};
  }
  if (par.moePagedStashBufferFactor > 0 && !par.moePagedStash) {
    return Error{"--moe-paged-stash-buffer-size-factor-cuda needs --moe-paged-stash"};
  }
  if (par.moePagedStash && par.cpuOffloadingNumLayers > 0) {
    return Error{"--moe-paged-stash cannot be enabled with --cpu-offloading-num-layers (Megatron-Core refuses both)"};
  }
  if (par.moePagedStash && (par.offloadModules & (kOffloadExpertFc1 | kOffloadMoeAct)) != 0) {
    return Error{
        "--moe-paged-stash keeps the routed experts' activations itself: --offload-modules must not name "
        "expert_fc1 or moe_act"};
  }
  bool waitsOnHost = false;  // some MoE layer's dispatch waits on the host for its token counts
  for (const Component& comp : model.components) {
    for (const Layer& layer : comp.layers) {
      const auto& t = layer.transformer;
      waitsOnHost = waitsOnHost || (t && t->isMoe() && moeDispatchWaitsOnHost(par, moeDropsAndPads(*t, par)));
    }
  }
  if (anyExperts && par.expert > 1 && par.cudaGraphImpl == CudaGraphImpl::FullIteration && waitsOnHost) {
    return Error{"--cuda-graph-impl full_iteration captures the whole step, but the " +
                 std::string(par.moeFlexDispatcher ? std::string(flexBackendName(par.moeFlexBackend)) + " dispatcher"
                                                   : "dropless all-to-all dispatcher") +
                 " waits on the host for its token counts in every MoE layer (expected HybridEP with "
                 "--moe-expert-rank-capacity-factor, Megatron's sync-free MoE, or token dropping with "
                 "--moe-capacity-factor)"};
  }
  return {};
}

// The expert layers' layout (Megatron-Core MoE parallel folding): ETP × EP laid over the T·C·D
// GPUs of a pipeline rank, so E may exceed D but ETP·E must divide T·C·D; expert and
// capacity, dispatcher and overlap settings need a model with experts (Megatron's
// validate_args and MoE config checks refuse them on a dense model).
Status checkExpertLayout(const ModelSpec& model, const Parallelism& par) {
  bool anyExperts = false;
  bool anyShared = false;
  for (const Component& comp : model.components) {
    for (const Layer& layer : comp.layers) {
      anyExperts = anyExperts || (layer.transformer && layer.transformer->isMoe());
      anyShared =
          anyShared || (layer.transformer && layer.transformer->isMoe() && layer.transformer->sharedExperts > 0);
    }
  }
  const auto dense = [&](const std::string& setting) {
    return Error{setting + " needs a mixture-of-experts model (experts in a transformer shape); '" +
                 excerpt(model.name) + "' has none"};
  };
  if (par.expert > 1 && !anyExperts) return dense("--ep " + str(par.expert));
  if (!anyExperts && par.expertTensor > 0) return dense("--etp " + str(par.expertTensor));
  if (!anyExperts && par.moeCapacityFactor) return dense("--moe-capacity-factor");
  if (!anyExperts && par.moeFlexDispatcher) return dense("--moe-token-dispatcher flex");
  if (!anyExperts && par.moeA2aOverlap) return dense("--moe-a2a-overlap");
  if (!anyExperts && par.moeCommSms > 0) return dense("--moe-comm-sms " + str(par.moeCommSms));
  if (par.moePermuteFusionIntoDispatcher && !(par.moeFlexDispatcher && par.moeFlexBackend == FlexBackend::HybridEp)) {
    return Error{
        "--moe-permute-fusion-into-hybridep needs the flex dispatcher with HybridEP (--moe-token-dispatcher flex "
        "--moe-flex-backend hybridep)"};
  }
  PS_RETURN_IF_ERROR(checkSyncFreeMoe(par, anyExperts, model));
  if (!anyShared && par.moeSharedExpertOverlap) {
    return Error{"--moe-shared-expert-overlap needs shared experts (shared_experts in a MoE layer's shape); '" +
                 excerpt(model.name) + "' has none"};
  }
  const std::int64_t grid = static_cast<std::int64_t>(par.expertTensorOrTensor()) * par.expert;
  const std::int64_t gpus = par.gpusPerPipelineRank();
  if (gpus % grid != 0) {
    return Error{"--ep " + str(par.expert) + " × --etp " + str(par.expertTensorOrTensor()) + " = " + str(grid) +
                 " does not divide the --tp " + str(par.tensor) + " × --cp " + str(par.context) + " × --dp " +
                 str(par.data) + " = " + str(gpus) +
                 " GPUs of a pipeline rank (MoE parallel folding lays the expert layers' ETP × EP × expert-DP grid "
                 "over them)"};
  }
  return {};
}

// Megatron-Core's activation offloading (TransformerConfig.__post_init__ in
// megatron/core/transformer/transformer_config.py, Transformer Engine's get_cpu_offload_context):
// a host link to copy over; layer-level offloading on one pipeline rank without recomputation,
// fewer layers than the rank holds (TE keeps at least one layer's activations on the GPU); the
// fine-grained modules the model runs, attn_proj with core_attn, no expert module inside a
// recomputed MoE; never both kinds.
Status checkActivationOffload(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& cfg) {
  const Parallelism& par = cfg.parallel;
  if (!par.offloadsActivations()) return {};
  const std::string flag = par.cpuOffloadingNumLayers > 0
                               ? "--cpu-offloading-num-layers " + str(par.cpuOffloadingNumLayers)
                               : "--offload-modules " + offloadModulesName(par.offloadModules);
  if (par.cpuOffloadingNumLayers > 0 && par.offloadModules != 0) {
    return Error{flag + " and --offload-modules " + offloadModulesName(par.offloadModules) +
                 " exclude each other (Megatron-Core: fine_grained_activation_offloading cannot be enabled with "
                 "cpu_offloading)"};
  }
  for (int d = 0; d < cfg.devices; ++d) {
    const GpuSpec& gpu = deviceGpu(cluster, cfg, d);
    if (gpu.hostLinkGBps <= 0) {
      return Error{flag + ": GPU '" + gpu.name + "' of pipeline rank " + str(d) +
                   " names no host link to offload over (expected host_link_gbps on the cluster's gpu, or a "
                   "catalogue GPU that has it: PCIe, or NVLink-C2C on Grace)"};
    }
  }
  if (!(par.activationOffloadFraction >= 0.0 && par.activationOffloadFraction <= 1.0)) {
    return Error{"--activation-offload-fraction must be in [0, 1], got " +
                 std::to_string(par.activationOffloadFraction)};
  }
  if (par.deltaOffloadBytesAcrossPpRanks < 0) {
    return Error{"--delta-offload-bytes-across-pp-ranks must be at least 0, got " +
                 str(par.deltaOffloadBytesAcrossPpRanks)};
  }
  const TransformerBlocks tb = transformerBlocks(model);
  const std::int64_t blocks = tb.count;
  const bool moe = tb.moe, mla = tb.mla;
  if (par.cpuOffloadingNumLayers > 0) {
    if (cfg.devices > 1 || cfg.chunksPerDevice > 1) {
      return Error{flag + " needs one pipeline rank, got --devices " + str(cfg.devices) + " with " +
                   str(cfg.chunksPerDevice) +
                   " chunk(s) (Megatron-Core: no support for pipeline parallelism with CPU offloading; "
                   "--offload-modules offloads inside pipelines)"};
    }
    if (par.recompute != Recompute::None) {
      return Error{flag + " with --recompute " + std::string(recomputeName(par.recompute)) +
                   ": Megatron-Core's CPU offloading does not work with activation recomputation (expected "
                   "--recompute none)"};
    }
    if (par.cpuOffloadingNumLayers >= blocks) {
      return Error{flag + " offloads more layers than pipeline rank 0 may: it holds " + str(blocks) +
                   " transformer layers and Transformer Engine keeps at least one layer's activations on the GPU "
                   "(expected at most " +
                   str(std::max<std::int64_t>(0, blocks - 1)) + ")"};
    }
    return {};
  }
  const std::uint32_t modules = par.offloadModules;
  if ((modules & kOffloadAttnProj) && !(modules & kOffloadCoreAttn)) {
    return Error{flag +
                 ": attn_proj needs core_attn (the projection's input is the attention core's output, "
                 "which the core's backward needs; Megatron-Core refuses attn_proj alone)"};
  }
  const std::uint32_t expertModules = kOffloadMlpNorm | kOffloadExpertFc1 | kOffloadMoeAct;
  if ((modules & expertModules) && !moe) {
    return Error{"--offload-modules " + offloadModulesName(modules & expertModules) + ": model '" +
                 excerpt(model.name) +
                 "' has no mixture-of-experts layers (its MLP norm is fused into FC1; modules "
                 "it runs: qkv_linear, core_attn, attn_proj" +
                 (mla ? ", attn_norm" : "") + ")"};
  }
  if ((modules & kOffloadAttnNorm) && !mla) {
    return Error{"--offload-modules attn_norm: model '" + excerpt(model.name) +
                 "' fuses its attention's input norm into the QKV GEMM (Transformer Engine's "
                 "LayerNormColumnParallelLinear): offload qkv_linear instead"};
  }
  if ((modules & (kOffloadExpertFc1 | kOffloadMoeAct)) && (par.selectiveModules() & kRecomputeMoe)) {
    return Error{"--offload-modules " + offloadModulesName(modules & (kOffloadExpertFc1 | kOffloadMoeAct)) +
                 " with --recompute-modules moe: the recomputed MoE block keeps nothing to offload (Megatron-Core "
                 "refuses the pair)"};
  }
  return {};
}

// The batch a config names: B samples per microbatch (the model's), and the microbatches a
// global batch G gives, G / (B·D) per pipeline (sequence chunks: × seqSplits).
Status checkBatch(const ModelSpec& model, const PlanConfig& config) {
  const Parallelism& par = config.parallel;
  if (config.microBatchSize) {
    if (*config.microBatchSize < 1)
      return Error{"--micro-batch-size must be at least 1, got " + str(*config.microBatchSize)};
    if (*config.microBatchSize != model.samplesPerMicrobatch) {
      return Error{"--micro-batch-size " + str(*config.microBatchSize) + " but the model's samples_per_microbatch is " +
                   str(model.samplesPerMicrobatch) + " (expected the same: a microbatch is micro_batch_size samples)"};
    }
  }
  if (!config.globalBatch) return {};
  const std::int64_t perMicrobatch = model.samplesPerMicrobatch * par.data;
  if (*config.globalBatch < 1) return Error{"--global-batch must be at least 1, got " + str(*config.globalBatch)};
  if (perMicrobatch < 1 || *config.globalBatch % perMicrobatch != 0) {
    return Error{"--global-batch " + str(*config.globalBatch) + " is not a multiple of micro-batch size " +
                 str(model.samplesPerMicrobatch) + " × --dp " + str(par.data) + " = " + str(perMicrobatch) +
                 " samples (expected microbatches = G / (B·D) to be whole)"};
  }
  const std::int64_t units = *config.globalBatch / perMicrobatch * std::max(1, config.seqSplits);
  if (units != config.microbatches) {
    return Error{"--global-batch " + str(*config.globalBatch) + " gives " + str(units) + " microbatches (G / (B·D)" +
                 (config.seqSplits > 1 ? " × sequence splits" : "") + ") but the config has " +
                 str(config.microbatches) + " (expected the same)"};
  }
  return {};
}

}  // namespace

Status checkPlanSettings(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config) {
  const Parallelism& par = config.parallel;
  const std::array<std::pair<const char*, int>, 4> degrees = {
      {{"--tp", par.tensor}, {"--cp", par.context}, {"--ep", par.expert}, {"--dp", par.data}}};
  for (const auto& [flag, value] : degrees) {
    if (value < 1) return Error{std::string(flag) + " must be at least 1, got " + str(value)};
  }
  if (par.zeroStage < 0 || par.zeroStage > 3) return Error{"--zero must be 0, 1, 2 or 3, got " + str(par.zeroStage)};
  PS_RETURN_IF_ERROR(checkPrecision(cluster, config.precision));
  PS_RETURN_IF_ERROR(checkRecompute(model, config));
  for (const Component& comp : model.components) {
    for (const Layer& layer : comp.layers) {
      if (!layer.transformer || (par.isPurePipeline() && par.data == 1)) continue;
      PS_RETURN_IF_ERROR(checkLayerAgainstDegrees(layer, comp, par));
    }
  }
  PS_RETURN_IF_ERROR(checkExpertLayout(model, par));
  PS_RETURN_IF_ERROR(checkActivationOffload(model, cluster, config));
  // CUDA graphs as Megatron-Core accepts them; CPU offloading runs outside any graph (Megatron-Core
  // refuses the two together, transformer_config.py).
  if (auto problem = cudaGraphProblem(par)) return Error{"--cuda-graph-impl: " + *problem};
  if (par.cudaGraphImpl != CudaGraphImpl::None && config.offloadRatio > 0) {
    return Error{
        "--offload-ratio: activation offloading is incompatible with CUDA graphs (expected --cuda-graph-impl "
        "none)"};
  }
  return checkBatch(model, config);
}

}  // namespace pipestudio
