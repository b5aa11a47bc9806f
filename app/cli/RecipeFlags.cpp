#include "RecipeFlags.hpp"

#include <optional>

#include "Flags.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/ModelIO.hpp"

namespace pipestudio::cli {
namespace {

// A --x / --no-x pair: both given is a contradiction; neither keeps `value`.
Status applyPair(bool yes, bool no, const char* flag, bool& value) {
  if (yes && no) return Error{std::string("--") + flag + " and --no-" + flag + " contradict each other"};
  if (yes) value = true;
  if (no) value = false;
  return {};
}

// An optional setting as JSON: its value, or null where it is unset (the framework's default).
template <typename T>
Json valueOrNull(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

}  // namespace

void addRecipeFlags(CLI::App* cmd, RecipeOptions& o) {
  cmd->add_option("--precision", o.precision,
                  "Weight-GEMM format bf16|fp16|fp8|fp8-block|mxfp8|nvfp4 (Transformer Engine recipes; default bf16)");
  cmd->add_flag("--overlap-grad-reduce", o.yesOverlapGradReduce,
                "Reduce gradients bucket by bucket under the last backward passes (default)");
  cmd->add_flag("--no-overlap-grad-reduce", o.noOverlapGradReduce,
                "Reduce gradients after the pipeline drains instead of during the last backward passes");
  cmd->add_flag("--overlap-param-gather", o.yesOverlapParamGather,
                "Distributed optimizer: all-gather parameters under the next forward passes (default)");
  cmd->add_flag("--no-overlap-param-gather", o.noOverlapParamGather,
                "Distributed optimizer: all-gather parameters after the optimizer step, exposed");
  cmd->add_flag("--tp-comm-overlap", o.yesTpCommOverlap,
                "Overlap tensor-parallel collectives with their GEMMs (TE userbuffers; default with sequence "
                "parallelism)");
  cmd->add_flag("--no-tp-comm-overlap", o.noTpCommOverlap, "Tensor-parallel collectives exposed");
  cmd->add_option("--grad-reduce-dtype", o.gradReduceDtype, "Gradient reduction type bf16 (default) | fp32")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd->add_option("--recompute-num-layers", o.recomputeNumLayers,
                  "--recompute full: layers per virtual stage (block) or per group (uniform) to recompute")
      ->check(intIn(1, 100000));
  cmd->add_option("--recompute-method", o.recomputeMethod,
                  "--recompute full with --recompute-num-layers: uniform|block")
      ->check(CLI::IsMember({"uniform", "block"}));
  cmd->add_option("--recompute-modules", o.recomputeModules,
                  "--recompute selective: comma-separated core_attn,layernorm,mlp,moe_act,moe,shared_experts,"
                  "mla_up_proj (default core_attn)")
      ->check(nonEmptyValue());
  cmd->add_option("--etp", o.etp,
                  "Expert tensor parallelism: each expert split over ETP GPUs (default: = --tp); --ep × --etp must "
                  "divide --tp × --cp × --dp (MoE parallel folding)")
      ->check(intIn(1, 1024));
  cmd->add_option("--moe-capacity-factor", o.moeCapacityFactor,
                  "Token dropping: each expert processes at most F × its balanced share, padded to it (0 or "
                  "'dropless': no dropping; default: each MoE layer's own setting)")
      ->check(nonEmptyValue());
  cmd->add_option("--cp-comm-type", o.cpCommType,
                  "Context parallelism's K/V exchange p2p|a2a|a2a+p2p (Transformer Engine; default p2p)")
      ->check(CLI::IsMember({"p2p", "a2a", "a2a+p2p"}));
  cmd->add_flag("--moe-a2a-overlap", o.yesMoeA2aOverlap,
                "Hide the expert all-to-alls of one microbatch's forward under another's backward (Megatron "
                "--overlap-moe-expert-parallel-comm; dualpipe schedules pair F and B themselves)");
  cmd->add_flag("--no-moe-a2a-overlap", o.noMoeA2aOverlap, "Expert all-to-alls exposed (the default)");
  cmd->add_option("--attention-backend", o.attentionBackend,
                  "Attention kernels fused (cuDNN, as Transformer Engine picks on Hopper; default) | flash "
                  "(FlashAttention-2) | unfused")
      ->check(CLI::IsMember({"fused", "flash", "unfused"}));
  cmd->add_option("--moe-token-dispatcher", o.moeTokenDispatcher,
                  "Token dispatcher alltoall (every routed copy sent; default) | flex (DeepEP/HybridEP: once per "
                  "remote NVLink domain, forwarded over NVLink)")
      ->check(CLI::IsMember({"alltoall", "flex"}));
  cmd->add_option("--moe-flex-backend", o.moeFlexBackend,
                  "With --moe-token-dispatcher flex: deepep (default) | hybridep (Megatron "
                  "--moe-flex-dispatcher-backend)")
      ->check(CLI::IsMember({"deepep", "hybridep"}));
  cmd->add_option("--moe-comm-sms", o.moeCommSms,
                  "SMs the expert all-to-all kernels occupy, which compute overlapped with them cannot use "
                  "(Megatron --moe-flex-dispatcher-num-sms; default: DeepEP 20, HybridEP 8 across NVLink domains "
                  "and 24 inside one, 32 for NCCL's all-to-all)")
      ->check(intIn(1, 1024));
  cmd->add_flag("--fp8-param-gather,--fp4-param-gather", o.yesLowPrecisionParams,
                "Keep the linear weights only in the recipe's low-precision format, no bf16 copy (Megatron "
                "--fp8-param-gather / --fp4-param-gather; the default for fp8, mxfp8 and nvfp4, as Megatron-Bridge's "
                "presets set it)");
  cmd->add_flag("--no-fp8-param-gather,--no-fp4-param-gather", o.noLowPrecisionParams,
                "Keep bf16 weights beside Transformer Engine's cached low-precision copies (the default for "
                "fp8-block)");
  cmd->add_flag("--moe-shared-expert-overlap", o.moeSharedExpertOverlap,
                "Compute the shared experts while the routed tokens travel (Megatron --moe-shared-expert-overlap)");
  cmd->add_flag("--moe-permute-fusion", o.yesMoePermuteFusion,
                "Permute the routed tokens with Transformer Engine's fused kernels (default, as the recipes run)");
  cmd->add_flag("--no-moe-permute-fusion", o.noMoePermuteFusion,
                "Permute with PyTorch's gather and atomic scatter-add (Megatron without --moe-permute-fusion)");
  cmd->add_flag("--moe-permute-fusion-into-hybridep", o.moePermuteFusionIntoHybridEp,
                "HybridEP writes and reads the tokens in expert order: no permutation kernels (needs "
                "--moe-flex-backend hybridep)");
  cmd->add_option("--moe-combine-chunk-tokens", o.moeCombineChunkTokens,
                  "HybridEP's combine pipeline chunk in tokens (NUM_OF_TOKENS_PER_CHUNK_COMBINE_API; default 64)")
      ->check(intIn(32, 65536));
  cmd->add_option("--moe-expert-rank-capacity-factor", o.moeRankCapacityFactor,
                  "HybridEP's token budget per rank over a balanced router's (Megatron's sync-free MoE: no host "
                  "wait in the dispatch, the experts' buffers at the budget; needs --moe-flex-backend hybridep)")
      ->check(numberIn(1, 64));
  cmd->add_flag("--moe-paged-stash", o.moePagedStash,
                "Keep the routed experts' activations in paged buffers (Megatron --moe-paged-stash; needs "
                "--moe-expert-rank-capacity-factor)");
  cmd->add_option("--moe-paged-stash-buffer-size-factor-cuda", o.moePagedStashBufferFactor,
                  "The paged stash's buffer over a balanced router's activations (default 1.10)")
      ->check(numberIn(1, 64));
  cmd->add_option("--cuda-graph-impl", o.cudaGraphImpl,
                  "CUDA graphs none (default) | local | transformer_engine | full_iteration (Megatron-Core "
                  "--cuda-graph-impl)")
      ->check(CLI::IsMember({"none", "local", "transformer_engine", "full_iteration"}));
  cmd->add_option("--cuda-graph-modules", o.cudaGraphModules,
                  "With a per-layer --cuda-graph-impl: comma-separated attn,mlp,moe,moe_router,moe_preprocess,mamba "
                  "(default: the whole layer)");
  cmd->add_option("--expert-gemm-curve", o.expertGemmCurve,
                  "Grouped expert GEMM efficiencies measured on the cluster's GPU (the file "
                  "tests/gpu/expert_gemm_curve.py writes) instead of the kernel model");
}

Status applyRecipeFlags(const RecipeOptions& o, PlanConfig& config) {
  Parallelism& par = config.parallel;
  const auto precision = precisionFromName(o.precision);
  if (!precision) {
    return Error{"--precision '" + o.precision + "' is not a precision (expected " + std::string(precisionChoices()) +
                 ")"};
  }
  config.precision = *precision;
  if (auto st = applyPair(o.yesOverlapGradReduce, o.noOverlapGradReduce, "overlap-grad-reduce", par.overlapGradReduce);
      !st)
    return st;
  if (auto st =
          applyPair(o.yesOverlapParamGather, o.noOverlapParamGather, "overlap-param-gather", par.overlapParamGather);
      !st)
    return st;
  PS_RETURN_IF_ERROR(applyPair(o.yesTpCommOverlap, o.noTpCommOverlap, "tp-comm-overlap", par.tpCommOverlap));
  if (o.yesTpCommOverlap && !par.sequenceParallel) {
    return Error{
        "--tp-comm-overlap needs sequence parallelism (Transformer Engine overlaps the sequence-parallel "
        "all-gathers and reduce-scatters; give --tp > 1 without --no-sequence-parallel)"};
  }
  par.gradReduceInFp32 = o.gradReduceDtype == "fp32";
  par.recomputeNumLayers = o.recomputeNumLayers;
  par.recomputeMethod = recomputeMethodFromName(o.recomputeMethod).value_or(RecomputeMethod::Uniform);
  if (o.yesLowPrecisionParams || o.noLowPrecisionParams) {
    bool keep = false;
    PS_RETURN_IF_ERROR(applyPair(o.yesLowPrecisionParams, o.noLowPrecisionParams, "fp8-param-gather", keep));
    if (keep && !isLowPrecision(config.precision)) {
      return Error{
          "--fp8-param-gather needs a low-precision recipe (--precision fp8, fp8-block, mxfp8 or nvfp4), got "
          "--precision " +
          std::string(precisionName(config.precision))};
    }
    par.lowPrecisionParams = keep;
  }
  if (auto st = applyPair(o.yesMoeA2aOverlap, o.noMoeA2aOverlap, "moe-a2a-overlap", par.moeA2aOverlap); !st) {
    return st;
  }
  par.moeSharedExpertOverlap = par.moeSharedExpertOverlap || o.moeSharedExpertOverlap;
  if (o.etp > 0) par.expertTensor = o.etp;
  if (!o.moeTokenDispatcher.empty()) par.moeFlexDispatcher = o.moeTokenDispatcher == "flex";
  if (!o.moeFlexBackend.empty()) {
    // As in Megatron, the backend alone does not select the flex dispatcher.
    if (!par.moeFlexDispatcher) {
      return Error{"--moe-flex-backend " + o.moeFlexBackend +
                   " needs --moe-token-dispatcher flex (the all-to-all dispatcher has no backend)"};
    }
    par.moeFlexBackend = flexBackendFromName(o.moeFlexBackend).value_or(FlexBackend::DeepEp);
  }
  if (o.moeCommSms > 0) par.moeCommSms = o.moeCommSms;
  if (auto st = applyPair(o.yesMoePermuteFusion, o.noMoePermuteFusion, "moe-permute-fusion", par.moePermuteFusion); !st)
    return st;
  par.moePermuteFusionIntoDispatcher = par.moePermuteFusionIntoDispatcher || o.moePermuteFusionIntoHybridEp;
  if (o.moeCombineChunkTokens > 0) par.moeCombineChunkTokens = o.moeCombineChunkTokens;
  if (o.moeRankCapacityFactor > 0) par.moeRankCapacityFactor = o.moeRankCapacityFactor;
  par.moePagedStash = par.moePagedStash || o.moePagedStash;
  if (o.moePagedStashBufferFactor > 0) par.moePagedStashBufferFactor = o.moePagedStashBufferFactor;
  if (!o.cudaGraphImpl.empty())
    par.cudaGraphImpl = cudaGraphImplFromName(o.cudaGraphImpl).value_or(CudaGraphImpl::None);
  if (!o.cudaGraphModules.empty()) {
    if (par.cudaGraphImpl == CudaGraphImpl::None) {
      return Error{"--cuda-graph-modules needs --cuda-graph-impl local or transformer_engine"};
    }
    std::string unknown;
    const auto bits = cudaGraphModulesFromNames(o.cudaGraphModules, &unknown);
    if (!bits) {
      return Error{"--cuda-graph-modules: '" + unknown + "' is not a module (expected " +
                   std::string(cudaGraphModuleChoices()) + ")"};
    }
    par.cudaGraphModules = *bits;
  }
  if (!o.moeCapacityFactor.empty()) {
    if (o.moeCapacityFactor == "dropless" || o.moeCapacityFactor == "none") {
      par.moeCapacityFactor = 0.0;
    } else {
      auto v = parseNumberArg("--moe-capacity-factor", o.moeCapacityFactor, 0.0, 1000.0);
      if (!v) return Error{v.message() + " (or 'dropless')"};
      par.moeCapacityFactor = *v;
    }
  }
  if (!o.attentionBackend.empty()) {
    par.attentionBackend = attentionBackendFromName(o.attentionBackend).value_or(AttentionBackend::Fused);
  }
  if (!o.cpCommType.empty()) par.cpCommType = cpCommTypeFromName(o.cpCommType).value_or(CpCommType::P2p);
  if (!o.recomputeModules.empty()) {
    std::string unknown;
    const auto bits = recomputeModulesFromNames(o.recomputeModules, &unknown);
    if (!bits) {
      return Error{"--recompute-modules: '" + unknown + "' is not a module (expected " +
                   std::string(recomputeModuleChoices()) + ")"};
    }
    if (*bits == 0) {
      return Error{"--recompute-modules '" + o.recomputeModules + "' names no module (expected " +
                   std::string(recomputeModuleChoices()) + "; leave the flag out for the default, core_attn)"};
    }
    par.recomputeModules = *bits;
  }
  return {};
}

Status applyExpertGemmCurve(const RecipeOptions& o, ClusterSpec& cluster) {
  if (o.expertGemmCurve.empty()) return {};
  auto curve = loadExpertGemmCurve(o.expertGemmCurve);
  if (!curve) return curve.error().withPrefix("--expert-gemm-curve: ");
  cluster.gpu.expertGemmCurve = *curve;
  for (NodeSpec& node : cluster.nodes) {
    if (node.gpu) node.gpu->expertGemmCurve = *curve;
  }
  return {};
}

void recipeToJson(const PlanConfig& config, Json& out) {
  const Parallelism& par = config.parallel;
  out["precision"] = std::string(precisionName(config.precision));
  out["overlap_grad_reduce"] = par.overlapGradReduce;
  out["overlap_param_gather"] = par.overlapParamGather;
  out["tp_comm_overlap"] = par.tpCommOverlap;
  out["grad_reduce_dtype"] = par.gradReduceInFp32 ? "fp32" : "bf16";
  out["recompute_num_layers"] = par.recomputeNumLayers;
  out["recompute_method"] = std::string(recomputeMethodName(par.recomputeMethod));
  out["recompute_modules"] = recomputeModulesName(par.selectiveModules());
  out["etp"] = par.expertTensorOrTensor();
  out["moe_capacity_factor"] = valueOrNull(par.moeCapacityFactor);
  out["moe_a2a_overlap"] = par.moeA2aOverlap;
  out["moe_shared_expert_overlap"] = par.moeSharedExpertOverlap;
  out["moe_token_dispatcher"] = par.moeFlexDispatcher ? "flex" : "alltoall";
  if (par.moeFlexDispatcher) out["moe_flex_backend"] = std::string(flexBackendName(par.moeFlexBackend));
  out["moe_comm_sms"] = par.moeCommSmsOrDefault();
  out["cp_comm_type"] = std::string(cpCommTypeName(par.cpCommType));
  out["attention_backend"] = std::string(attentionBackendName(par.attentionBackend));
  out["low_precision_params"] = par.lowPrecisionParamsFor(config.precision);
  out["moe_permute_fusion"] = par.moePermuteFusion;
  out["moe_permute_fusion_into_hybridep"] = par.moePermuteFusionIntoDispatcher;
  out["moe_combine_chunk_tokens"] = par.moeCombineChunkTokensOrDefault();
  out["moe_expert_rank_capacity_factor"] = valueOrNull(par.moeRankCapacityFactor);
  out["moe_paged_stash"] = par.moePagedStash;
  if (par.moePagedStash) out["moe_paged_stash_buffer_size_factor_cuda"] = par.moePagedStashBufferFactorOrDefault();
  out["cuda_graph_impl"] = std::string(cudaGraphImplName(par.cudaGraphImpl));
  out["cuda_graph_modules"] = cudaGraphModulesName(par.cudaGraphModules);
}

}  // namespace pipestudio::cli
