// makePlan: validate → place (schedule) → partition → order (schedule) → fill → simulate →
// memory check. Dispatch points for other helpers are marked "extension point".
#include "pipestudio/planner/Planner.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <sstream>

#include "partition/Partitioners.hpp"
#include "partition/Uniform.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/plan/SequenceSplits.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio {
namespace {

std::string knownSchedules() {
  std::string out;
  for (const auto& n : scheduleNames()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Extension point (partitioners): fills component and layer ranges into the placement.
Expected<std::vector<VirtualStage>> partitionStages(const PlanRequest& request, std::vector<VirtualStage> placement,
                                                    const SolveControl& control,
                                                    const partition::PartitionHints& hints) {
  const std::string& name = request.config.partition;
  if (name == "uniform") {
    return partition::partitionUniformStrict(request.model, std::move(placement), request.config.devices,
                                             request.config.schedule);
  }
  if (name == "megatron") return partition::partitionMegatron(request.model, std::move(placement));
  if (name == "layout") return partition::partitionLayout(request.model, std::move(placement), request.config.layout);
  return partition::partitionNamed(request, std::move(placement), control, hints);  // part: balanced, dp, diffusionpipe
}

// Extension point (bubble filling): adds frozen-component N ops to the skeleton.
Status fillBubbles(const PlanRequest& request, ScheduleSkeleton& skeleton, const SolveControl& control) {
  return fillSkeleton(request, skeleton, control);  // part: --fill none|greedy (Fill.hpp)
}

// A memory limit below what one microbatch needs can never be met by any order.
Status checkLimitAgainstOneMicrobatch(const Plan& shell, const std::vector<StageEstimate>& stages,
                                      const std::vector<std::int64_t>& staticBytes) {
  if (!shell.config.memoryLimitBytes) return {};
  const std::int64_t limit = *shell.config.memoryLimitBytes;
  std::vector<std::int64_t> oneMb(static_cast<std::size_t>(shell.config.devices), 0);
  for (std::size_t i = 0; i < shell.virtualStages.size(); ++i) {
    // One microbatch through one pipeline: count pipeline 0's stages.
    if (shell.virtualStages[i].pipeline != 0) continue;
    oneMb[static_cast<std::size_t>(shell.virtualStages[i].device)] += stages[i].activationBytes;
  }
  for (int d = 0; d < shell.config.devices; ++d) {
    const auto du = static_cast<std::size_t>(d);
    const std::int64_t needBytes = staticBytes[du] + oneMb[du];
    if (needBytes > limit) {
      return Error{"memory limit " + formatBytes(static_cast<double>(limit)) +
                   " is below what one microbatch needs on device " + std::to_string(d) + ": " +
                   formatBytes(static_cast<double>(needBytes)) + " (static " +
                   formatBytes(static_cast<double>(staticBytes[du])) + " + activations " +
                   formatBytes(static_cast<double>(oneMb[du])) + "); use more devices or a higher --memory-limit"};
    }
  }
  return {};
}

std::string str(std::int64_t v) { return std::to_string(v); }

// Shape checks of one transformer layer against the degrees (Megatron-LM's own requirements:
// heads and query groups split over TP, experts over EP, a sequence that context parallelism
// can cut into 2·C load-balanced chunks).
Status checkLayerAgainstDegrees(const Layer& layer, const std::string& where, const Parallelism& par) {
  const TransformerShape& t = *layer.transformer;
  const int T = par.tensor;
  const int C = par.context;
  const int E = par.expert;
  if (layer.kind == "embedding" || layer.kind == "lm_head") return {};
  if (t.heads % T != 0) {
    return Error{"--tp " + str(T) + " does not divide the " + str(t.heads) + " attention heads of " + where +
                 " (expected a divisor of the heads)"};
  }
  if (t.kvHeadsOrHeads() % T != 0) {
    return Error{"--tp " + str(T) + " does not divide the " + str(t.kvHeadsOrHeads()) + " key/value heads of " + where +
                 " (expected a divisor of kv_heads: grouped-query attention splits its query groups over TP)"};
  }
  if (t.ffnOrDefault() % T != 0 && !t.isMoe()) {
    return Error{"--tp " + str(T) + " does not divide the MLP size " + str(t.ffnOrDefault()) + " of " + where};
  }
  if (t.isMoe() && t.experts % E != 0) {
    return Error{"--ep " + str(E) + " does not divide the " + str(t.experts) + " experts of " + where +
                 " (expected a divisor of the experts)"};
  }
  const int etp = par.expertTensorOrTensor();
  if (t.isMoe() && t.expertFfnOrDefault() % etp != 0) {
    return Error{std::string(par.expertTensor > 0 ? "--etp " : "--tp ") + str(etp) +
                 " does not divide the expert MLP size " + str(t.expertFfnOrDefault()) + " of " + where +
                 " (expert tensor parallelism splits each expert's MLP)"};
  }
  if (C > 1 && par.cpCommType == CpCommType::A2a) {
    // All-to-all context parallelism scatters each tensor-parallel rank's heads over the C ranks.
    const std::int64_t heads = t.heads / T;
    const std::int64_t kv = (t.mla ? t.heads : t.kvHeadsOrHeads()) / T;
    if (heads % C != 0 || kv % C != 0) {
      return Error{"--cp " + str(C) + " with --cp-comm-type a2a does not divide the " + str(heads) +
                   " query heads and " + str(kv) + " key/value heads per tensor-parallel rank of " + where +
                   " (the all-to-all scatters heads over the context ranks; use p2p or a2a+p2p)"};
    }
  }
  if (C > 1 && (t.seq % (2 * static_cast<std::int64_t>(C)) != 0)) {
    return Error{"--cp " + str(C) + " needs the sequence length of " + where + " (" + str(t.seq) +
                 ") to be a multiple of 2·C = " + str(2 * static_cast<std::int64_t>(C)) +
                 " (ring attention's load-balanced chunks)"};
  }
  // Sequence parallelism splits each context-parallel rank's seq / C tokens over the T GPUs
  // (Megatron-LM asserts seq_length % tensor_model_parallel_size == 0).
  if (par.sequenceParallel && T > 1 && t.seq % (static_cast<std::int64_t>(T) * C) != 0) {
    return Error{"--sequence-parallel splits the " + str(t.seq / C) + "-token sequence" +
                 (C > 1 ? " of each context-parallel rank" : std::string()) + " of " + where + " over --tp " + str(T) +
                 ", which does not divide it (expected a sequence length that is a multiple of " +
                 (C > 1 ? "T·C = " + str(static_cast<std::int64_t>(T) * C) : "T = " + str(T)) +
                 ", or --no-sequence-parallel)"};
  }
  return {};
}

// The recipe's precision needs a peak on every GPU type of the cluster.
Status checkPrecision(const PlanRequest& request) {
  const Precision p = request.config.precision;
  std::vector<const GpuSpec*> gpus{&request.cluster.gpu};
  for (const NodeSpec& n : request.cluster.nodes) {
    if (n.gpu) gpus.push_back(&*n.gpu);
  }
  for (const GpuSpec* g : gpus) {
    if (g->peakTflopsFor(p) > 0) continue;
    std::string has;
    for (Precision q : kPrecisions) {
      if (g->peakTflopsFor(q) > 0) has += (has.empty() ? "" : ", ") + std::string(precisionName(q));
    }
    return Error{"--precision " + std::string(precisionName(p)) + ": GPU '" + g->name + "' of cluster '" +
                 request.cluster.name + "' has no " + std::string(precisionName(p)) + " peak (it has " + has +
                 "; name a catalogue GPU that has it, or give peak_tflops." + std::string(precisionName(p)) +
                 " in the cluster file)"};
  }
  return {};
}

// Recomputation settings against the model: modules it has, and layers a virtual stage has.
Status checkRecompute(const PlanRequest& request) {
  const Parallelism& par = request.config.parallel;
  if (par.recomputeNumLayers > 0 && par.recompute != Recompute::Full) {
    return Error{"--recompute-num-layers " + str(par.recomputeNumLayers) +
                 " needs --recompute full (it says how many layers full recomputation covers)"};
  }
  if (par.recomputeModules != 0 && par.recompute != Recompute::Selective) {
    return Error{"--recompute-modules " + recomputeModulesName(par.recomputeModules) +
                 " needs --recompute selective (full recomputation replays every module)"};
  }
  bool moe = false, shared = false, dense = false, mla = false;
  std::int64_t blocks = 0;
  for (const Component& comp : request.model.components) {
    if (!comp.trainable) continue;
    for (const Layer& layer : comp.layers) {
      if (!layer.transformer || layer.kind == "embedding" || layer.kind == "lm_head") continue;
      ++blocks;
      moe = moe || layer.transformer->isMoe();
      dense = dense || !layer.transformer->isMoe();
      mla = mla || layer.transformer->mla.has_value();
      shared = shared || layer.transformer->sharedExperts > 0;
    }
  }
  const std::uint32_t modules = par.recomputeModules;
  const auto missing = [&](std::uint32_t bit, const char* what) -> Status {
    return Error{"--recompute-modules " + recomputeModulesName(bit) + ": model '" + request.model.name + "' has no " +
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
        static_cast<std::int64_t>(std::max(1, request.config.devices)) * std::max(1, request.config.chunksPerDevice);
    const std::int64_t perStage = (blocks + stages - 1) / stages;
    if (par.recomputeNumLayers > perStage) {
      return Error{"--recompute-num-layers " + str(par.recomputeNumLayers) + " exceeds the " + str(perStage) +
                   " transformer layers of a virtual stage (" + str(blocks) + " layers over " + str(stages) +
                   " virtual stages; expected at most " + str(perStage) + ")"};
    }
  }
  return {};
}

// Sequence splits (Seq1F1B) and activation offloading (PipeOffload) against the schedule
// and the request.
Status checkSequenceAndOffload(const PlanRequest& request, const ScheduleGenerator& generator,
                               const CostedModel& costs) {
  const PlanConfig& cfg = request.config;
  const std::string name(generator.name());
  if (cfg.seqSplits < 1) return Error{"--seq-splits must be at least 1, got " + str(cfg.seqSplits)};
  if (cfg.seqSplits > 1) {
    if (!generator.splitsSequence()) {
      return Error{"--seq-splits " + str(cfg.seqSplits) + ": " + name +
                   " schedules whole microbatches (expected --schedule seq1f1b, or custom)"};
    }
    if (cfg.seqSplit != "balanced" && cfg.seqSplit != "even") {
      return Error{"--seq-split '" + cfg.seqSplit + "' is not a sequence split (expected balanced or even)"};
    }
    if (cfg.microbatches % cfg.seqSplits != 0) {
      return Error{"microbatches " + str(cfg.microbatches) + " is not a multiple of --seq-splits " +
                   str(cfg.seqSplits) + " (a plan's microbatches count sequence chunks)"};
    }
    if (cfg.parallel.context > 1) {
      return Error{"--seq-splits " + str(cfg.seqSplits) +
                   " needs --cp 1 (Seq1F1B splits the sequence over time, "
                   "context parallelism over GPUs; combine them is not modelled)"};
    }
    for (const Component& comp : request.model.components) {
      if (!comp.trainable) {
        return Error{"--seq-splits " + str(cfg.seqSplits) + ": component '" + comp.name +
                     "' is frozen (sequence chunks are scheduled for trainable models only)"};
      }
    }
    const std::int64_t tokens = tokensPerSample(request.model);
    const std::int64_t grain = std::max(1, cfg.parallel.tensor);
    if (tokens > 0 && tokens < cfg.seqSplits * grain) {
      return Error{"--seq-splits " + str(cfg.seqSplits) + " needs at least " + str(cfg.seqSplits * grain) +
                   " tokens per sample (chunks are multiples of --tp " + str(grain) + "); model '" +
                   request.model.name + "' has " + str(tokens)};
    }
    const auto& bounds = costs.seqChunkBounds();
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
      if (bounds[k + 1] <= bounds[k]) {
        return Error{"--seq-splits " + str(cfg.seqSplits) + ": sequence chunk " + str(static_cast<std::int64_t>(k)) +
                     " would be empty (" + str(tokens) + " tokens per sample)"};
      }
    }
  }
  if (!(cfg.offloadRatio >= 0.0 && cfg.offloadRatio <= 1.0)) {
    return Error{"--offload-ratio must be in [0, 1], got " + std::to_string(cfg.offloadRatio)};
  }
  if (cfg.offloadRatio > 0) {
    if (generator.pipelines() != 1 || cfg.overlapForwardBackward) {
      return Error{"--offload-ratio: " + name +
                   " holds the model twice or overlaps forward and backward passes (expected a one-pipeline schedule "
                   "such as pipeoffload, interleaved-1f1b or a V shape)"};
    }
    for (int d = 0; d < cfg.devices; ++d) {
      const GpuSpec& gpu = deviceGpu(request.cluster, cfg, d);
      if (gpu.hostLinkGBps <= 0) {
        return Error{"--offload-ratio: GPU '" + gpu.name + "' of device " + str(d) +
                     " names no host link bandwidth (expected host_link_gbps on the cluster's gpu, or a catalogue "
                     "GPU that has it)"};
      }
    }
  }
  return {};
}

// Megatron-Core's activation offloading (TransformerConfig.__post_init__ in
// megatron/core/transformer/transformer_config.py, Transformer Engine's get_cpu_offload_context):
// a host link to copy over; layer-level offloading on one pipeline rank without recomputation,
// fewer layers than the rank holds (TE keeps at least one layer's activations on the GPU); the
// fine-grained modules the model runs, attn_proj with core_attn, no expert module inside a
// recomputed MoE; never both kinds.
Status checkActivationOffload(const PlanRequest& request) {
  const PlanConfig& cfg = request.config;
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
    const GpuSpec& gpu = deviceGpu(request.cluster, cfg, d);
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
  std::int64_t blocks = 0;
  bool moe = false, mla = false;
  for (const Component& comp : request.model.components) {
    if (!comp.trainable) continue;
    for (const Layer& layer : comp.layers) {
      if (!layer.transformer || layer.kind == "embedding" || layer.kind == "lm_head") continue;
      ++blocks;
      moe = moe || layer.transformer->isMoe();
      mla = mla || layer.transformer->mla.has_value();
    }
  }
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
    return Error{"--offload-modules " + offloadModulesName(modules & expertModules) + ": model '" + request.model.name +
                 "' has no mixture-of-experts layers (its MLP norm is fused into FC1; modules "
                 "it runs: qkv_linear, core_attn, attn_proj" +
                 (mla ? ", attn_norm" : "") + ")"};
  }
  if ((modules & kOffloadAttnNorm) && !mla) {
    return Error{"--offload-modules attn_norm: model '" + request.model.name +
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

// The expert layers' layout (Megatron-Core MoE parallel folding): ETP × EP laid over the T·C·D
// GPUs of a pipeline rank, so E may exceed D but ETP·E must divide T·C·D; expert and
// capacity settings need a model with experts.
Status checkExpertLayout(const PlanRequest& request) {
  const Parallelism& par = request.config.parallel;
  bool anyExperts = false;
  for (const Component& comp : request.model.components) {
    for (const Layer& layer : comp.layers) anyExperts = anyExperts || (layer.transformer && layer.transformer->isMoe());
  }
  if (!anyExperts && par.expertTensor > 0) {
    return Error{"--etp " + str(par.expertTensor) +
                 " needs a mixture-of-experts model (experts in a transformer shape); '" + request.model.name +
                 "' has none"};
  }
  if (!anyExperts && par.moeCapacityFactor) {
    return Error{"--moe-capacity-factor needs a mixture-of-experts model; '" + request.model.name + "' has none"};
  }
  if (par.moePermuteFusionIntoDispatcher && !(par.moeFlexDispatcher && par.moeFlexBackend == FlexBackend::HybridEp)) {
    return Error{
        "--moe-permute-fusion-into-hybridep needs the flex dispatcher with HybridEP (--moe-token-dispatcher flex "
        "--moe-flex-backend hybridep)"};
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

}  // namespace

Expected<PlanRequest> resolveRequest(PlanRequest request) {
  PlanConfig& cfg = request.config;
  Parallelism& par = cfg.parallel;
  const std::array<std::pair<const char*, int>, 4> degrees = {
      {{"--tp", par.tensor}, {"--cp", par.context}, {"--ep", par.expert}, {"--dp", par.data}}};
  for (const auto& [flag, value] : degrees) {
    if (value < 1) return Error{std::string(flag) + " must be at least 1, got " + str(value)};
  }
  if (par.zeroStage < 0 || par.zeroStage > 3) return Error{"--zero must be 0, 1, 2 or 3, got " + str(par.zeroStage)};
  if (par.tensor == 1) par.sequenceParallel = false;
  if (auto st = checkPrecision(request); !st) return st.error();
  if (auto st = checkRecompute(request); !st) return st.error();
  if (auto st = checkActivationOffload(request); !st) return st.error();
  if (cfg.microBatchSize) {
    if (*cfg.microBatchSize < 1) return Error{"--micro-batch-size must be at least 1, got " + str(*cfg.microBatchSize)};
    request.model.samplesPerMicrobatch = *cfg.microBatchSize;
  }
  if (cfg.globalBatch) {
    const std::int64_t perMicrobatch = request.model.samplesPerMicrobatch * par.data;
    if (*cfg.globalBatch < 1) return Error{"--global-batch must be at least 1, got " + str(*cfg.globalBatch)};
    if (*cfg.globalBatch % perMicrobatch != 0) {
      return Error{"--global-batch " + str(*cfg.globalBatch) + " is not a multiple of micro-batch size " +
                   str(request.model.samplesPerMicrobatch) + " × --dp " + str(par.data) + " = " + str(perMicrobatch) +
                   " samples (expected microbatches = G / (B·D) to be whole)"};
    }
    const std::int64_t m = *cfg.globalBatch / perMicrobatch;
    if (m > 1'000'000) {
      return Error{"--global-batch " + str(*cfg.globalBatch) + " gives " + str(m) +
                   " microbatches per pipeline (expected at most 1000000)"};
    }
    // Sequence-split plans count units: K per training microbatch.
    const std::int64_t units = m * std::max(1, cfg.seqSplits);
    if (units > 1'000'000) {
      return Error{"--global-batch " + str(*cfg.globalBatch) + " gives " + str(units) +
                   " microbatches (sequence chunks) per pipeline (expected at most 1000000)"};
    }
    cfg.microbatches = static_cast<int>(units);
    if (!cfg.microBatchSize) cfg.microBatchSize = request.model.samplesPerMicrobatch;
  }
  bool anyExperts = false;
  for (const Component& comp : request.model.components) {
    for (const Layer& layer : comp.layers) {
      if (!layer.transformer) continue;
      anyExperts = anyExperts || layer.transformer->isMoe();
      if (par.isPurePipeline() && par.data == 1) continue;
      if (auto st = checkLayerAgainstDegrees(layer, "layer '" + layer.name + "' (component '" + comp.name + "')", par);
          !st) {
        return st.error();
      }
    }
  }
  if (par.expert > 1 && !anyExperts) {
    return Error{"--ep " + str(par.expert) + " needs a mixture-of-experts model (experts in a transformer shape); '" +
                 request.model.name + "' has none"};
  }
  if (auto st = checkExpertLayout(request); !st) return st.error();
  // CUDA graphs as Megatron-Core accepts them; CPU offloading runs outside any graph (Megatron-Core
  // refuses the two together, transformer_config.py).
  if (auto problem = cudaGraphProblem(par)) return Error{"--cuda-graph-impl: " + *problem};
  if (par.cudaGraphImpl != CudaGraphImpl::None && cfg.offloadRatio > 0) {
    return Error{
        "--offload-ratio: activation offloading is incompatible with CUDA graphs (expected --cuda-graph-impl "
        "none)"};
  }
  const std::int64_t gpus = cfg.totalGpus();
  if (request.cluster.totalGpus() > 0 && gpus > request.cluster.totalGpus() && gpus == cfg.devices) {
    return Error{"--devices " + str(cfg.devices) + " exceeds the " + str(request.cluster.totalGpus()) +
                 " GPUs of cluster '" + request.cluster.name + "'"};
  }
  if (request.cluster.totalGpus() > 0 && gpus > request.cluster.totalGpus()) {
    return Error{"--tp " + str(par.tensor) + " × --cp " + str(par.context) + " × --devices " + str(cfg.devices) +
                 " × --dp " + str(par.data) + " = " + str(gpus) + " GPUs, but cluster '" + request.cluster.name +
                 "' has " + str(request.cluster.totalGpus())};
  }
  return request;
}

namespace {

// The peak (static included, the busiest device) of the schedule a memory-saving schedule saves
// against (ScheduleGenerator::savesMemoryAgainst), planned on the same request with its own
// chunks and no offloading; empty when there is none or it does not plan (then the memory limit
// alone bounds the order).
Expected<std::optional<std::int64_t>> referencePeak(const PlanRequest& request, const SolveControl& control) {
  const ScheduleGenerator* generator = findScheduleGenerator(request.config.schedule);
  if (!generator || generator->savesMemoryAgainst().empty()) return std::optional<std::int64_t>{};
  const ScheduleGenerator* against = findScheduleGenerator(generator->savesMemoryAgainst());
  if (!against) return std::optional<std::int64_t>{};
  PlanRequest r = request;
  r.config.schedule = std::string(against->name());
  r.config.chunksPerDevice = against->defaultChunksPerDevice();
  r.config.offloadRatio = 0;
  SolveControl quiet;
  quiet.cancel = control.cancel;
  quiet.refine = control.refine;
  quiet.repairMemory = control.repairMemory;
  auto plan = makePlan(r, quiet);
  if (plan.isCancelled()) return plan.error();
  if (!plan) return std::optional<std::int64_t>{};
  std::int64_t peak = 0;
  for (const DeviceMetrics& dm : plan->metrics.devices) peak = std::max(peak, dm.peakMemoryBytes);
  return std::optional<std::int64_t>{peak};
}

}  // namespace

Expected<Plan> makePlan(const PlanRequest& original, const SolveControl& control) {
  auto resolved = resolveRequest(original);
  if (!resolved) return resolved.error();
  // DiffusionPipe searches the schedule jointly with the partition; its candidates come back
  // through makeCandidatePlan.
  if (resolved->config.partition == "diffusionpipe") return partition::solveDiffusionPipe(*resolved, control);
  partition::PartitionHints hints;
  auto cap = referencePeak(*resolved, control);
  if (!cap) return cap.error();
  hints.peakCapBytes = *cap;
  if (resolved->config.partition == "dp") return partition::solveDp(*resolved, control, hints);
  return partition::makeCandidatePlan(*resolved, control, hints);
}

Expected<Plan> partition::makeCandidatePlan(const PlanRequest& request, const SolveControl& control,
                                            const PartitionHints& hints) {
  const PlanConfig& cfg = request.config;
  const ScheduleGenerator* generator = findScheduleGenerator(cfg.schedule);
  if (!generator) return Error{"unknown schedule '" + cfg.schedule + "' (known: " + knownSchedules() + ")"};
  if (cfg.devices < 1) return Error{"--devices must be at least 1, got " + std::to_string(cfg.devices)};
  if (cfg.microbatches < 1) return Error{"--microbatches must be at least 1, got " + std::to_string(cfg.microbatches)};
  if (cfg.chunksPerDevice < 1) return Error{"--chunks must be at least 1, got " + std::to_string(cfg.chunksPerDevice)};
  if (cfg.memoryLimitBytes && *cfg.memoryLimitBytes <= 0) return Error{"--memory-limit must be positive"};
  if (auto st = checkPlanSize(cfg.devices, cfg.chunksPerDevice, cfg.microbatches); !st) return st.error();
  const ScheduleShape shape{cfg.devices, cfg.microbatches, cfg.chunksPerDevice, std::max(1, cfg.seqSplits)};
  if (auto st = generator->validate(shape); !st) return st.error();
  if (control.cancelled()) return Error::cancelled();

  // The request's costs under the schedule's own settings, derived once: every step below
  // reads them. The partitioners see the request's config, whose costs are the same unless
  // the schedule's settings change them (blockwise ZeRO-3 gathers one chunk per block).
  PlanConfig configured = cfg;
  configured.schedule = std::string(generator->name());  // PyTorch's name → ours
  generator->configure(configured);
  if (cfg.offloadRatio <= 0 && configured.offloadRatio > 0) {
    // A schedule's default offloading (pipeoffload's) needs a host link on every device; without
    // one the plan is its order alone and says so (offload ratio 0), not a ratio nothing honours.
    for (int d = 0; d < cfg.devices; ++d) {
      if (deviceGpu(request.cluster, cfg, d).hostLinkGBps <= 0) configured.offloadRatio = 0;
    }
  }
  if (configured.seqSplits > 1) {
    // Every layer is costed once per sequence chunk: bound that before costing.
    std::int64_t layers = 0;
    for (const Component& comp : request.model.components) layers += static_cast<std::int64_t>(comp.layers.size());
    if (configured.seqSplits > kMaxSeqSplits || layers * configured.seqSplits > kMaxSeqChunkLayers) {
      return Error{"--seq-splits " + str(configured.seqSplits) + " for a model of " + str(layers) +
                   " layers: expected at most " + str(kMaxSeqSplits) + " chunks and " + str(kMaxSeqChunkLayers) +
                   " chunk-layers in all"};
    }
  }
  const CostedModel costs(request.model, request.cluster, configured);
  if (auto st = checkSequenceAndOffload(request, *generator, costs); !st) return st.error();
  partition::PartitionHints withCosts = hints;
  if (configured.unitMicrobatches == cfg.unitMicrobatches) withCosts.costs = &costs;
  auto stages = partitionStages(request, generator->placement(shape), control, withCosts);
  if (!stages) return stages.error();
  Plan shell;
  shell.config = configured;
  shell.model = request.model;
  shell.cluster = request.cluster;
  shell.virtualStages = std::move(*stages);

  ScheduleInput input;
  input.shape = shape;
  input.virtualStages = shell.virtualStages;
  input.stages = stageEstimates(shell, costs);
  input.staticBytes = staticMemoryPerDevice(shell, costs.stages(shell.virtualStages));
  input.memoryLimitBytes = cfg.memoryLimitBytes;
  input.request = &request;
  input.control = &control;
  input.costs = &costs;
  input.peakCapBytes = hints.peakCapBytes;
  if (auto st = checkLimitAgainstOneMicrobatch(shell, input.stages, input.staticBytes); !st) return st.error();

  auto skeleton = generator->order(input);
  if (!skeleton) return skeleton.error();
  if (control.progress) control.progress(0.5);
  if (auto st = fillBubbles(request, *skeleton, control); !st) return st.error();
  if (control.cancelled()) return Error::cancelled();
  if (configured.seqSplits > 1) {
    // A chunk after the earlier chunks of its microbatch (their keys and values).
    auto sequence = sequenceDependencies(shell, skeleton->devices);
    skeleton->extraDependencies.insert(skeleton->extraDependencies.end(), sequence.begin(), sequence.end());
  }
  // Activation offloading on whatever order the schedule built (pipeoffload offloads its own).
  if (auto st = schedules::addOffload(shell, costs, *skeleton); !st) return st.error().withPrefix(cfg.schedule + ": ");

  SimulationOptions timing;
  timing.costs = &costs;
  auto plan = simulateSkeleton(std::move(shell), *skeleton, timing);
  if (!plan) return plan.error().withPrefix(cfg.schedule + ": ");
  if (auto st = checkMemory(*plan); !st) {
    // `balanced` took its most even split although the stages' memory budgets (which add up
    // peaks the stages of a device reach at different moments) ruled every split out, and that
    // split did not fit. Plan again with splits at the same bottleneck within the budgets scaled
    // by the least factor that admits one and by a little more (closer to the most even split),
    // and with the splits that meet the budgets (and 90 % and 80 % of them) at a larger
    // bottleneck; keep the fastest that fits.
    if (cfg.partition == "balanced" && control.repairMemory && !hints.repairingMemory()) {
      std::vector<BalancedMemory> tries;
      for (const double slack : {1.0, 1.02, 1.05, 1.1, 1.2}) tries.push_back({slack, 0.0});
      for (const double scale : {1.0, 0.9, 0.8}) tries.push_back({0.0, scale});
      std::optional<Plan> fastest;
      for (const BalancedMemory& how : tries) {
        partition::PartitionHints retry = hints;
        retry.balancedMemory = how;
        auto again = makeCandidatePlan(request, control, retry);
        if (again.isCancelled()) return again;
        if (!again) continue;
        if (!fastest || again->metrics.iterationMs < fastest->metrics.iterationMs) fastest = std::move(*again);
      }
      if (fastest) return std::move(*fastest);
    }
    return st.error();
  }
  if (control.progress) control.progress(1.0);
  return plan;
}

std::string describeMemory(const MemoryBreakdown& memory, bool withMargin) {
  const auto gib = [](std::int64_t b) { return formatBytes(static_cast<double>(b)); };
  // Every part of the peak, so that the parts add up to it; zero parts are left out.
  const auto parts = [&](bool keptBack) {
    std::string out;
    for (const MemoryPart& part : memoryParts()) {
      if (part.keptBack != keptBack || memory.*part.bytes == 0) continue;
      out += (out.empty() ? "" : " + ") + std::string(part.name) + " " + gib(memory.*part.bytes);
    }
    return out.empty() ? std::string("0 B") : out;
  };
  std::string out = "peak " + gib(memory.allocatedBytes()) + " = " + parts(false);
  if (withMargin) out += "; kept back: " + parts(true);
  return out;
}

Status checkMemory(const Plan& plan) {
  std::ostringstream msg;
  bool fits = true;
  const auto gib = [](std::int64_t b) { return formatBytes(static_cast<double>(b)); };
  for (std::size_t d = 0; d < plan.metrics.devices.size(); ++d) {
    const DeviceMetrics& dm = plan.metrics.devices[d];
    const bool explicitLimit = plan.config.memoryLimitBytes.has_value();
    // A --memory-limit is what the plan may allocate; a GPU's capacity first keeps back the
    // margin (CUDA context, fragmentation: memoryMarginBytes).
    const std::int64_t capacity = explicitLimit
                                      ? *plan.config.memoryLimitBytes
                                      : deviceGpu(plan.cluster, plan.config, static_cast<int>(d)).memoryBytes();
    const std::int64_t margin = explicitLimit ? 0 : dm.memory.marginBytes();
    if (capacity <= 0 || dm.peakMemoryBytes + margin <= capacity) continue;
    if (fits) {
      msg << plan.config.schedule << " does not fit in memory (" << (explicitLimit ? "--memory-limit " : "GPU memory ")
          << gib(capacity) << " per GPU"
          << (explicitLimit ? "" : ", of which " + gib(margin) + " is kept back as margin") << "):";
    }
    fits = false;
    msg << "\n  device " << d << ": " << describeMemory(dm.memory, !explicitLimit) << "; over by "
        << gib(dm.peakMemoryBytes + margin - capacity) << " (largest part: " << largestMemoryPart(dm.memory).name
        << ")";
  }
  if (fits) return {};
  msg << "\n  (use more devices, tensor parallelism, recomputation, ZeRO, activation offloading "
         "(--cpu-offloading-num-layers, --offload-modules), fewer in-flight microbatches, or a schedule with less "
         "activation memory such as v-half or v-min)";
  return Error{msg.str()};
}

}  // namespace pipestudio
