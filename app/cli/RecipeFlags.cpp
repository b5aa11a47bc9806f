#include "RecipeFlags.hpp"

#include "Flags.hpp"

namespace pipestudio::cli {
namespace {

// A --x / --no-x pair: both given is a contradiction; neither keeps `value`.
Status applyPair(bool yes, bool no, const char* flag, bool& value) {
  if (yes && no) return Error{std::string("--") + flag + " and --no-" + flag + " contradict each other"};
  if (yes) value = true;
  if (no) value = false;
  return {};
}

}  // namespace

void addRecipeFlags(CLI::App* cmd, RecipeOptions& o) {
  cmd->add_option("--precision", o.precision,
                  "Weight-GEMM format bf16|fp16|fp8|mxfp8|nvfp4 (Transformer Engine recipes; default bf16)");
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
                  "mla_up_proj (default core_attn)");
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
  if (auto st = applyPair(o.yesTpCommOverlap, o.noTpCommOverlap, "tp-comm-overlap", par.tpCommOverlap); !st) return st;
  if (o.yesTpCommOverlap && !par.sequenceParallel) {
    return Error{
        "--tp-comm-overlap needs sequence parallelism (Transformer Engine overlaps the sequence-parallel "
        "all-gathers and reduce-scatters; give --tp > 1 without --no-sequence-parallel)"};
  }
  par.gradReduceInFp32 = o.gradReduceDtype == "fp32";
  par.recomputeNumLayers = o.recomputeNumLayers;
  par.recomputeMethod = recomputeMethodFromName(o.recomputeMethod).value_or(RecomputeMethod::Uniform);
  if (!o.recomputeModules.empty()) {
    std::string unknown;
    const auto bits = recomputeModulesFromNames(o.recomputeModules, &unknown);
    if (!bits) {
      return Error{"--recompute-modules: '" + unknown + "' is not a module (expected " +
                   std::string(recomputeModuleChoices()) + ")"};
    }
    par.recomputeModules = *bits;
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
}

}  // namespace pipestudio::cli
