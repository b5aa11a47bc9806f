#include "pipestudio/plan/PlanIO.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/ConfigCheck.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/SequenceSplits.hpp"

namespace pipestudio {
namespace {

constexpr std::int64_t kMaxDevices = kMaxPlanDevices;
constexpr std::int64_t kMaxMicrobatches = kMaxPlanMicrobatches;
constexpr double kMaxTimeMs = 1.0e12;
constexpr std::int64_t kMaxCommBytes = std::int64_t{1} << 50;

// Ops are the bulk of a plan (hundreds of thousands): read them without building a JSON
// pointer per field, and build one only when reporting a problem.
struct FastFields {
  JsonReader& r;
  const JsonNode& arrayNode;
  std::size_t index;
  const Json& obj;

  std::string ptr(const char* key) const {
    return arrayNode.pointer + "/" + std::to_string(index) + (key ? std::string("/") + key : std::string());
  }
  std::optional<std::int64_t> integer(const char* key, std::int64_t min, std::int64_t max, bool required) {
    const auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) r.error(ptr(nullptr), std::string("missing required field '") + key + "' (expected an integer)");
      return std::nullopt;
    }
    if (it->is_number_integer() || it->is_number_unsigned()) {
      if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
        r.error(ptr(key), "is " + std::to_string(it->get<std::uint64_t>()) + " (expected an integer in [" +
                              std::to_string(min) + ", " + std::to_string(max) + "])");
        return std::nullopt;
      }
      const auto v = it->get<std::int64_t>();
      if (v >= min && v <= max) return v;
      r.error(ptr(key), "is " + std::to_string(v) + " (expected an integer in [" + std::to_string(min) + ", " +
                            std::to_string(max) + "])");
      return std::nullopt;
    }
    r.error(ptr(key), "is " + jsonTypeWithArticle(*it) + " (expected an integer)");
    return std::nullopt;
  }
  std::optional<double> number(const char* key, double min, double max) {
    const auto it = obj.find(key);
    if (it == obj.end()) {
      r.error(ptr(nullptr), std::string("missing required field '") + key + "' (expected a number)");
      return std::nullopt;
    }
    if (!it->is_number()) {
      r.error(ptr(key), "is " + jsonTypeWithArticle(*it) + " (expected a number)");
      return std::nullopt;
    }
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < min || v > max) {
      r.error(ptr(key), "is " + it->dump() + " (expected a finite number in [" + std::to_string(min) + ", " +
                            std::to_string(max) + "])");
      return std::nullopt;
    }
    return v;
  }
  std::optional<OpKind> kind() {
    const auto it = obj.find("kind");
    if (it == obj.end()) {
      r.error(ptr(nullptr), "missing required field 'kind' (expected one of " + std::string(opKindChoices()) + ")");
      return std::nullopt;
    }
    if (it->is_string()) {
      if (auto k = opKindFromName(it->get_ref<const std::string&>())) return k;
    }
    r.error(ptr("kind"), "is " + it->dump().substr(0, 64) + " (expected one of " + std::string(opKindChoices()) + ")");
    return std::nullopt;
  }
};

// The plan's devices (× data-parallel replicas) fit its cluster's GPUs: readPlan checks it before
// sizing anything by the device count, validatePlanStructure again for plans built in memory.
Status checkDevicesFitCluster(const PlanConfig& config, const ClusterSpec& cluster) {
  // Every device lane is a pipeline rank of T·C·D GPUs of the plan's cluster.
  const std::int64_t gpus = cluster.totalGpus();
  const std::int64_t perRank = config.parallel.gpusPerPipelineRank();
  const std::int64_t needed = std::int64_t{config.devices} * std::max<std::int64_t>(1, perRank);
  if (gpus <= 0 || needed <= gpus) return {};
  return Error{std::to_string(config.devices) + " devices" +
               (perRank > 1 ? " × " + std::to_string(perRank) + " GPUs each (tp·cp·dp)" : "") +
               " but the plan's cluster '" + excerpt(cluster.name) + "' has " + std::to_string(gpus) +
               " GPUs (expected at most that many)"};
}

// The expert and context layouts of issue 26; absent keys keep Megatron's defaults (ETP = TP,
// each layer's own capacity factor, no all-to-all overlap, the p2p ring).
void readMoeAndContext(JsonReader& r, const JsonNode& cfg, Parallelism& par) {
  par.expertTensor = static_cast<int>(r.integer(cfg, "etp", Presence::Optional, 1, 1024).value_or(0));
  par.moeCapacityFactor = r.number(cfg, "moe_capacity_factor", Presence::Optional, 0.0, 1000.0);
  par.moeA2aOverlap = r.boolean(cfg, "moe_a2a_overlap", Presence::Optional).value_or(false);
  par.moeSharedExpertOverlap = r.boolean(cfg, "moe_shared_expert_overlap", Presence::Optional).value_or(false);
  if (auto dispatcher = r.string(cfg, "moe_token_dispatcher", Presence::Optional)) {
    if (*dispatcher == "alltoall" || *dispatcher == "flex") {
      par.moeFlexDispatcher = *dispatcher == "flex";
    } else {
      r.error(cfg.child("moe_token_dispatcher"),
              "'" + *dispatcher + "' is not a token dispatcher (expected alltoall or flex)");
    }
  }
  if (auto backend = r.string(cfg, "moe_flex_backend", Presence::Optional)) {
    if (auto b = flexBackendFromName(*backend)) {
      par.moeFlexBackend = *b;
    } else {
      r.error(cfg.child("moe_flex_backend"),
              "'" + *backend + "' is not a flex dispatcher backend (expected deepep or hybridep)");
    }
  }
  par.moeCommSms = static_cast<int>(r.integer(cfg, "moe_comm_sms", Presence::Optional, 1, 1024).value_or(0));
  par.moePermuteFusion = r.boolean(cfg, "moe_permute_fusion", Presence::Optional).value_or(true);
  par.moePermuteFusionIntoDispatcher =
      r.boolean(cfg, "moe_permute_fusion_into_hybridep", Presence::Optional).value_or(false);
  par.moeCombineChunkTokens =
      static_cast<int>(r.integer(cfg, "moe_combine_chunk_tokens", Presence::Optional, 32, 65536).value_or(0));
  // HybridEP's rank budget and the paged stash (Megatron's sync-free MoE): multiples of a balanced
  // router's copies, at least 1 (below it HybridEP drops a balanced router's tokens).
  par.moeRankCapacityFactor = r.number(cfg, "moe_expert_rank_capacity_factor", Presence::Optional, 1.0, 64.0);
  par.moePagedStash = r.boolean(cfg, "moe_paged_stash", Presence::Optional).value_or(false);
  par.moePagedStashBufferFactor =
      r.number(cfg, "moe_paged_stash_buffer_size_factor_cuda", Presence::Optional, 1.0, 64.0).value_or(0.0);
  if (auto impl = r.string(cfg, "cuda_graph_impl", Presence::Optional)) {
    if (auto i = cudaGraphImplFromName(*impl)) {
      par.cudaGraphImpl = *i;
    } else {
      r.error(cfg.child("cuda_graph_impl"), "'" + excerpt(*impl) + "' is not a CUDA graph implementation (expected " +
                                                std::string(cudaGraphImplChoices()) + ")");
    }
  }
  if (auto modules = r.string(cfg, "cuda_graph_modules", Presence::Optional)) {
    std::string unknown;
    if (auto bits = cudaGraphModulesFromNames(*modules, &unknown)) {
      par.cudaGraphModules = *bits;
    } else {
      r.error(cfg.child("cuda_graph_modules"), "'" + excerpt(unknown) + "' is not a CUDA graph module (expected " +
                                                   std::string(cudaGraphModuleChoices()) + ")");
    }
  }
  if (auto backend = r.string(cfg, "attention_backend", Presence::Optional)) {
    if (auto b = attentionBackendFromName(*backend)) {
      par.attentionBackend = *b;
    } else {
      r.error(cfg.child("attention_backend"), "'" + *backend + "' is not an attention backend (expected " +
                                                  std::string(attentionBackendChoices()) + ")");
    }
  }
  if (auto type = r.string(cfg, "cp_comm_type", Presence::Optional)) {
    if (auto t = cpCommTypeFromName(*type)) {
      par.cpCommType = *t;
    } else {
      r.error(cfg.child("cp_comm_type"), "'" + *type + "' is not a context-parallel communication type (expected " +
                                             std::string(cpCommTypeChoices()) + ")");
    }
  }
}
}  // namespace

// The recipe settings of issue 25 (precision, overlaps, recomputation details); absent keys
// keep PlanConfig's defaults, which are Megatron-Bridge's.
void readRecipeFields(JsonReader& r, const JsonNode& cfg, PlanConfig& c) {
  Parallelism& par = c.parallel;
  par.overlapParamGather = r.boolean(cfg, "overlap_param_gather", Presence::Optional).value_or(true);
  par.tpCommOverlap = r.boolean(cfg, "tp_comm_overlap", Presence::Optional).value_or(true);
  if (auto dtype = r.string(cfg, "grad_reduce_dtype", Presence::Optional)) {
    if (*dtype == "fp32" || *dtype == "bf16") {
      par.gradReduceInFp32 = *dtype == "fp32";
    } else {
      r.error(cfg.child("grad_reduce_dtype"),
              "'" + *dtype + "' is not a gradient reduction type (expected bf16 or fp32)");
    }
  }
  if (auto name = r.string(cfg, "precision", Presence::Optional)) {
    if (auto p = precisionFromName(*name)) {
      c.precision = *p;
    } else {
      r.error(cfg.child("precision"),
              "'" + *name + "' is not a precision (expected " + std::string(precisionChoices()) + ")");
    }
  }
  par.recomputeNumLayers =
      static_cast<int>(r.integer(cfg, "recompute_num_layers", Presence::Optional, 0, 100000).value_or(0));
  if (auto method = r.string(cfg, "recompute_method", Presence::Optional)) {
    if (auto m = recomputeMethodFromName(*method)) {
      par.recomputeMethod = *m;
    } else {
      r.error(cfg.child("recompute_method"), "'" + *method + "' is not a recompute method (expected uniform or block)");
    }
  }
  readMoeAndContext(r, cfg, par);
  par.lowPrecisionParams = r.boolean(cfg, "low_precision_params", Presence::Optional);
  par.cpuOffloadingNumLayers =
      static_cast<int>(r.integer(cfg, "cpu_offloading_num_layers", Presence::Optional, 0, 100000).value_or(0));
  if (auto modules = r.string(cfg, "offload_modules", Presence::Optional)) {
    std::string unknown;
    if (auto bits = offloadModulesFromNames(*modules, &unknown)) {
      par.offloadModules = *bits;
    } else {
      r.error(cfg.child("offload_modules"),
              "'" + unknown + "' is not an offload module (expected " + std::string(offloadModuleChoices()) + ")");
    }
  }
  par.activationOffloadFraction =
      r.number(cfg, "activation_offload_fraction", Presence::Optional, 0.0, 1.0).value_or(1.0);
  par.deltaOffloadBytesAcrossPpRanks =
      r.integer(cfg, "delta_offload_bytes_across_pp_ranks", Presence::Optional, 0, std::int64_t{1} << 60).value_or(0);
  if (auto framework = r.string(cfg, "framework", Presence::Optional)) {
    if (auto f = frameworkFromName(*framework)) {
      par.framework = *f;
    } else {
      r.error(cfg.child("framework"),
              "'" + excerpt(*framework) + "' is not a framework (expected " + std::string(frameworkChoices()) + ")");
    }
  }
  par.torchCompile = r.boolean(cfg, "compile", Presence::Optional).value_or(true);
  if (auto modules = r.string(cfg, "recompute_modules", Presence::Optional)) {
    std::string unknown;
    if (auto bits = recomputeModulesFromNames(*modules, &unknown)) {
      par.recomputeModules = *bits;
    } else {
      r.error(cfg.child("recompute_modules"),
              "'" + unknown + "' is not a recompute module (expected " + std::string(recomputeModuleChoices()) + ")");
    }
  }
}

void readSeqSplit(JsonReader& r, const JsonNode& cfg, PlanConfig& c) {
  if (auto split = r.string(cfg, "seq_split", Presence::Optional)) {
    if (*split == "balanced" || *split == "even") {
      c.seqSplit = *split;
    } else {
      r.error(cfg.child("seq_split"), "'" + excerpt(*split) + "' is not a sequence split (expected balanced or even)");
    }
  }
}

std::vector<std::string_view> withRecipeFieldKeys(std::initializer_list<std::string_view> own) {
  std::vector<std::string_view> keys(own);
  for (std::string_view k : {"overlap_param_gather",
                             "tp_comm_overlap",
                             "grad_reduce_dtype",
                             "precision",
                             "recompute_num_layers",
                             "recompute_method",
                             "recompute_modules",
                             "etp",
                             "moe_capacity_factor",
                             "moe_a2a_overlap",
                             "moe_shared_expert_overlap",
                             "moe_token_dispatcher",
                             "moe_flex_backend",
                             "moe_comm_sms",
                             "attention_backend",
                             "cp_comm_type",
                             "low_precision_params",
                             "cpu_offloading_num_layers",
                             "offload_modules",
                             "activation_offload_fraction",
                             "delta_offload_bytes_across_pp_ranks",
                             "moe_permute_fusion",
                             "moe_permute_fusion_into_hybridep",
                             "moe_combine_chunk_tokens",
                             "moe_expert_rank_capacity_factor",
                             "moe_paged_stash",
                             "moe_paged_stash_buffer_size_factor_cuda",
                             "cuda_graph_impl",
                             "cuda_graph_modules",
                             "framework",
                             "compile"}) {
    keys.push_back(k);
  }
  return keys;
}

void writeParallelDegrees(const Parallelism& par, Json& cfg) {
  cfg["tp"] = par.tensor;
  cfg["cp"] = par.context;
  cfg["ep"] = par.expert;
  cfg["dp"] = par.data;
  cfg["sequence_parallel"] = par.sequenceParallel;
  cfg["recompute"] = std::string(recomputeName(par.recompute));
  cfg["zero"] = par.zeroStage;
}

void writeRecipeFields(const PlanConfig& c, Json& cfg) {
  const Parallelism& par = c.parallel;
  cfg["overlap_param_gather"] = par.overlapParamGather;
  cfg["tp_comm_overlap"] = par.tpCommOverlap;
  cfg["grad_reduce_dtype"] = par.gradReduceInFp32 ? "fp32" : "bf16";
  cfg["precision"] = std::string(precisionName(c.precision));
  if (par.recomputeNumLayers > 0) {
    cfg["recompute_num_layers"] = par.recomputeNumLayers;
    cfg["recompute_method"] = std::string(recomputeMethodName(par.recomputeMethod));
  }
  if (par.recomputeModules != 0) cfg["recompute_modules"] = recomputeModulesName(par.recomputeModules);
  // Written where the plan states it (a file read back keeps "unset"); absent: Megatron-Bridge's preset.
  if (par.lowPrecisionParams) cfg["low_precision_params"] = *par.lowPrecisionParams;
  // Activation offloading, where the recipe offloads.
  if (par.cpuOffloadingNumLayers > 0) cfg["cpu_offloading_num_layers"] = par.cpuOffloadingNumLayers;
  if (par.offloadModules != 0) {
    cfg["offload_modules"] = offloadModulesName(par.offloadModules);
    cfg["activation_offload_fraction"] = par.activationOffloadFraction;
    cfg["delta_offload_bytes_across_pp_ranks"] = par.deltaOffloadBytesAcrossPpRanks;
  }
  // The expert and context layouts only where they differ from Megatron's defaults (plans written
  // before them read back and write out unchanged).
  if (par.expertTensor > 0) cfg["etp"] = par.expertTensor;
  if (par.moeCapacityFactor) cfg["moe_capacity_factor"] = *par.moeCapacityFactor;
  if (par.moeA2aOverlap) cfg["moe_a2a_overlap"] = true;
  if (par.moeSharedExpertOverlap) cfg["moe_shared_expert_overlap"] = true;
  if (par.moeFlexDispatcher) {
    cfg["moe_token_dispatcher"] = "flex";
    cfg["moe_flex_backend"] = std::string(flexBackendName(par.moeFlexBackend));
  }
  if (par.moeCommSms > 0) cfg["moe_comm_sms"] = par.moeCommSms;
  if (!par.moePermuteFusion) cfg["moe_permute_fusion"] = false;
  if (par.moePermuteFusionIntoDispatcher) cfg["moe_permute_fusion_into_hybridep"] = true;
  if (par.moeCombineChunkTokens > 0) cfg["moe_combine_chunk_tokens"] = par.moeCombineChunkTokens;
  if (par.moeRankCapacityFactor) cfg["moe_expert_rank_capacity_factor"] = *par.moeRankCapacityFactor;
  if (par.moePagedStash) cfg["moe_paged_stash"] = true;
  if (par.moePagedStashBufferFactor > 0) cfg["moe_paged_stash_buffer_size_factor_cuda"] = par.moePagedStashBufferFactor;
  if (par.cudaGraphImpl != CudaGraphImpl::None) {
    cfg["cuda_graph_impl"] = std::string(cudaGraphImplName(par.cudaGraphImpl));
    if (par.cudaGraphModules != 0) cfg["cuda_graph_modules"] = cudaGraphModulesName(par.cudaGraphModules);
  }
  if (par.cpCommType != CpCommType::P2p) cfg["cp_comm_type"] = std::string(cpCommTypeName(par.cpCommType));
  if (par.attentionBackend != AttentionBackend::Fused) {
    cfg["attention_backend"] = std::string(attentionBackendName(par.attentionBackend));
  }
  if (par.framework != Framework::Megatron) {
    cfg["framework"] = std::string(frameworkName(par.framework));
    cfg["compile"] = par.torchCompile;
  }
}

namespace {

// /config's parallelism: dp (or its old name data_parallel), tp, cp, ep, sequence_parallel,
// recompute, zero, overlap_grad_reduce.
void readParallelism(JsonReader& r, const JsonNode& cfg, Parallelism& par) {
  // `data_parallel` is the name plans used before hybrid parallelism; `dp` is today's.
  if (cfg.value->contains("dp") && cfg.value->contains("data_parallel")) {
    r.error(cfg.child("data_parallel"), "is the old name of 'dp' (expected only one of them)");
  }
  const char* dpKey = cfg.value->contains("data_parallel") ? "data_parallel" : "dp";
  par.data = static_cast<int>(r.integer(cfg, dpKey, Presence::Optional, 1, kMaxDevices).value_or(1));
  par.tensor = static_cast<int>(r.integer(cfg, "tp", Presence::Optional, 1, 1024).value_or(1));
  par.context = static_cast<int>(r.integer(cfg, "cp", Presence::Optional, 1, 1024).value_or(1));
  par.expert = static_cast<int>(r.integer(cfg, "ep", Presence::Optional, 1, kMaxDevices).value_or(1));
  par.sequenceParallel = r.boolean(cfg, "sequence_parallel", Presence::Optional).value_or(par.tensor > 1);
  if (auto rc = r.string(cfg, "recompute", Presence::Optional)) {
    if (auto v = recomputeFromName(*rc)) {
      par.recompute = *v;
    } else {
      r.error(cfg.child("recompute"), "'" + *rc + "' is not a recompute mode (expected none, selective or full)");
    }
  }
  par.zeroStage = static_cast<int>(r.integer(cfg, "zero", Presence::Optional, 0, 3).value_or(0));
  par.overlapGradReduce = r.boolean(cfg, "overlap_grad_reduce", Presence::Optional).value_or(true);
}

void readConfig(JsonReader& r, const JsonNode& cfg, PlanConfig& c) {
  static const std::vector<std::string_view> kKeys = withRecipeFieldKeys({"schedule",
                                                                          "devices",
                                                                          "microbatches",
                                                                          "chunks_per_device",
                                                                          "partition",
                                                                          "layout",
                                                                          "fill",
                                                                          "memory_limit_bytes",
                                                                          "data_parallel",
                                                                          "dp",
                                                                          "tp",
                                                                          "cp",
                                                                          "ep",
                                                                          "sequence_parallel",
                                                                          "recompute",
                                                                          "zero",
                                                                          "overlap_grad_reduce",
                                                                          "global_batch",
                                                                          "micro_batch_size",
                                                                          "optimizer_sync",
                                                                          "vocab_barriers",
                                                                          "overlap_forward_backward",
                                                                          "unit_microbatches",
                                                                          "seq_splits",
                                                                          "seq_split",
                                                                          "offload_ratio"});
  r.rejectUnknown(cfg, kKeys);
  c.schedule = r.string(cfg, "schedule", Presence::Required).value_or("");
  c.devices = static_cast<int>(r.integer(cfg, "devices", Presence::Required, 1, kMaxDevices).value_or(1));
  c.microbatches =
      static_cast<int>(r.integer(cfg, "microbatches", Presence::Required, 1, kMaxMicrobatches).value_or(1));
  c.chunksPerDevice = static_cast<int>(r.integer(cfg, "chunks_per_device", Presence::Optional, 1, 1024).value_or(1));
  c.partition = r.string(cfg, "partition", Presence::Optional).value_or("uniform");
  c.layout = r.string(cfg, "layout", Presence::Optional).value_or("");
  c.fill = r.string(cfg, "fill", Presence::Optional).value_or("none");
  c.memoryLimitBytes = r.integer(cfg, "memory_limit_bytes", Presence::Optional, 1, std::int64_t{1} << 60);
  readParallelism(r, cfg, c.parallel);
  readRecipeFields(r, cfg, c);
  c.globalBatch = r.integer(cfg, "global_batch", Presence::Optional, 1, std::int64_t{1} << 40);
  c.microBatchSize = r.integer(cfg, "micro_batch_size", Presence::Optional, 1, 1'000'000);
  if (auto sync = r.string(cfg, "optimizer_sync", Presence::Optional)) {
    if (*sync == "global" || *sync == "post-validation") {
      c.optimizerSync = *sync;
    } else {
      r.error(cfg.child("optimizer_sync"),
              "'" + *sync + "' is not an optimizer sync (expected global or post-validation)");
    }
  }
  // Plans written before vocab_barriers existed timed their S/T passes with two barriers.
  c.vocabBarriers = static_cast<int>(r.integer(cfg, "vocab_barriers", Presence::Optional, 1, 2).value_or(2));
  c.overlapForwardBackward = r.boolean(cfg, "overlap_forward_backward", Presence::Optional).value_or(false);
  c.unitMicrobatches =
      static_cast<int>(r.integer(cfg, "unit_microbatches", Presence::Optional, 1, kMaxMicrobatches).value_or(0));
  // Sequence-level pipelining (Seq1F1B) and activation offloading (PipeOffload).
  c.seqSplits = static_cast<int>(r.integer(cfg, "seq_splits", Presence::Optional, 1, kMaxSeqSplits).value_or(1));
  if (c.seqSplits > 1 && c.microbatches % c.seqSplits != 0) {
    r.error(cfg.child("microbatches"), "is " + std::to_string(c.microbatches) + " (expected a multiple of seq_splits " +
                                           std::to_string(c.seqSplits) + ": microbatches counts sequence chunks)");
  }
  readSeqSplit(r, cfg, c);
  c.offloadRatio = r.number(cfg, "offload_ratio", Presence::Optional, 0.0, 1.0).value_or(0.0);
}

// Virtual stage `i` of /virtual_stages, appended to plan.virtualStages unless its component is
// unknown.
void readVirtualStage(JsonReader& r, const JsonNode& s, std::size_t i, Plan& plan) {
  r.rejectUnknown(s, {"id", "device", "chunk", "component", "first_layer", "last_layer", "pipeline"});
  VirtualStage vs;
  const auto id = r.integer(s, "id", Presence::Required, 0, kMaxDevices * 1024);
  vs.id = static_cast<int>(id.value_or(static_cast<std::int64_t>(i)));
  vs.device = static_cast<int>(r.integer(s, "device", Presence::Required, 0, plan.config.devices - 1).value_or(0));
  vs.chunk = static_cast<int>(r.integer(s, "chunk", Presence::Optional, 0, 1023).value_or(0));
  vs.pipeline = static_cast<int>(r.integer(s, "pipeline", Presence::Optional, 0, 1).value_or(0));
  if (auto comp = r.string(s, "component", Presence::Required)) {
    vs.component = plan.model.componentIndex(*comp);
    if (vs.component < 0) {
      std::string known;
      for (const auto& other : plan.model.components) known += (known.empty() ? "" : ", ") + other.name;
      r.error(s.child("component"),
              "'" + excerpt(*comp) + "' is not a component of the plan's model (expected one of: " + known + ")");
      return;
    }
  }
  const auto& layers = plan.model.component(std::max(0, vs.component)).layers;
  const auto maxLayer = static_cast<std::int64_t>(layers.size()) - 1;
  const auto first = r.integer(s, "first_layer", Presence::Required, 0, maxLayer);
  const auto last = r.integer(s, "last_layer", Presence::Required, 0, maxLayer);
  vs.firstLayer = static_cast<int>(first.value_or(0));
  vs.lastLayer = static_cast<int>(last.value_or(0));
  if (first && last && vs.lastLayer < vs.firstLayer) {
    r.error(s.child("last_layer"), "is before first_layer (expected first_layer ≤ last_layer)");
  }
  if (id && vs.id != static_cast<int>(i)) {
    r.error(s.child("id"), "is " + std::to_string(vs.id) + " (expected " + std::to_string(i) +
                               ": virtual stages are listed in id order)");
  }
  plan.virtualStages.push_back(vs);
}

// /`key` when present, an array of at most kMaxPlanOps `noun` (ops, actions, waits: what a plan
// may hold). nullopt when it is absent or longer; `tooLong` says which (the error is reported).
std::optional<JsonNode> boundedArray(JsonReader& r, const JsonNode& at, const char* key, Presence presence,
                                     const char* noun, bool& tooLong) {
  tooLong = false;
  auto array = r.array(at, key, presence);
  if (array && array->value->size() > kMaxPlanOps) {
    r.error(*array, "has " + std::to_string(array->value->size()) + " " + noun + " (expected at most " +
                        std::to_string(kMaxPlanOps) + ")");
    tooLong = true;
    return std::nullopt;
  }
  return array;
}

// /ops; false when there are more than a plan may hold (nothing else is read then).
bool readOps(JsonReader& r, const JsonNode& at, Plan& plan) {
  const auto stageCount = static_cast<std::int64_t>(plan.virtualStages.size());
  bool tooLong = false;
  auto ops = boundedArray(r, at, "ops", Presence::Required, "ops", tooLong);
  if (!ops) return !tooLong;
  plan.ops.reserve(ops->value->size());
  for (std::size_t i = 0; i < ops->value->size() && r.errors().size() < 100; ++i) {
    const Json& o = (*ops->value)[i];
    FastFields f{r, *ops, i, o};
    if (!o.is_object()) {
      r.error(f.ptr(nullptr), "is " + jsonTypeWithArticle(o) + " (expected an op object)");
      continue;
    }
    Op op;
    op.device = static_cast<std::int32_t>(f.integer("device", 0, plan.config.devices - 1, true).value_or(0));
    op.virtualStage = static_cast<std::int32_t>(
        f.integer("virtual_stage", 0, std::max<std::int64_t>(0, stageCount - 1), true).value_or(0));
    op.kind = f.kind().value_or(OpKind::F);
    op.microbatch = static_cast<std::int32_t>(f.integer("microbatch", -1, kMaxMicrobatches, true).value_or(0));
    op.startMs = f.number("start_ms", -kMaxTimeMs, kMaxTimeMs).value_or(0);
    op.endMs = f.number("end_ms", -kMaxTimeMs, kMaxTimeMs).value_or(0);
    op.samples = static_cast<std::int32_t>(f.integer("samples", 1, 1'000'000, false).value_or(0));
    if (op.endMs < op.startMs) r.error(f.ptr("end_ms"), "is before start_ms (expected end_ms ≥ start_ms)");
    plan.ops.push_back(op);
  }
  return true;
}

void readComms(JsonReader& r, const JsonNode& at, Plan& plan) {
  const auto stageCount = static_cast<std::int64_t>(plan.virtualStages.size());
  auto comms = r.array(at, "comms", Presence::Optional);
  if (!comms) return;
  plan.comms.reserve(comms->value->size());
  for (std::size_t i = 0; i < comms->value->size() && r.errors().size() < 100; ++i) {
    const Json& o = (*comms->value)[i];
    FastFields f{r, *comms, i, o};
    if (!o.is_object()) {
      r.error(f.ptr(nullptr), "is " + jsonTypeWithArticle(o) + " (expected a comm object)");
      continue;
    }
    Comm c;
    c.fromDevice = static_cast<int>(f.integer("from_device", 0, plan.config.devices - 1, true).value_or(0));
    c.toDevice = static_cast<int>(f.integer("to_device", 0, plan.config.devices - 1, true).value_or(0));
    c.microbatch = static_cast<int>(f.integer("microbatch", -1, kMaxMicrobatches, true).value_or(0));
    c.kind = f.kind().value_or(OpKind::F);
    c.virtualStage =
        static_cast<int>(f.integer("virtual_stage", 0, std::max<std::int64_t>(0, stageCount - 1), false).value_or(0));
    c.startMs = f.number("start_ms", -kMaxTimeMs, kMaxTimeMs).value_or(0);
    c.endMs = f.number("end_ms", -kMaxTimeMs, kMaxTimeMs).value_or(0);
    c.bytes = f.integer("bytes", 0, kMaxCommBytes, false).value_or(0);
    plan.comms.push_back(c);
  }
}

// /fsdp_actions; false when there are more than a plan may hold.
bool readFsdpActions(JsonReader& r, const JsonNode& at, Plan& plan) {
  const auto stageCount = static_cast<std::int64_t>(plan.virtualStages.size());
  bool tooLong = false;
  auto actions = boundedArray(r, at, "fsdp_actions", Presence::Optional, "actions", tooLong);
  if (!actions) return !tooLong;
  for (std::size_t i = 0; i < actions->value->size() && r.errors().size() < 100; ++i) {
    const JsonNode a = actions->child(i);
    if (!r.isObject(a)) continue;
    r.rejectUnknown(a, {"device", "virtual_stage", "action", "before_pass"});
    FsdpAction fa;
    fa.device =
        static_cast<std::int32_t>(r.integer(a, "device", Presence::Required, 0, plan.config.devices - 1).value_or(0));
    fa.virtualStage = static_cast<std::int32_t>(
        r.integer(a, "virtual_stage", Presence::Required, 0, std::max<std::int64_t>(0, stageCount - 1)).value_or(0));
    fa.beforePass = static_cast<std::int32_t>(
        r.integer(a, "before_pass", Presence::Required, 0, static_cast<std::int64_t>(kMaxPlanOps)).value_or(0));
    if (auto name = r.string(a, "action", Presence::Required)) {
      if (auto kind = fsdpActionFromName(*name)) {
        fa.kind = *kind;
      } else {
        r.error(a.child("action"),
                "'" + excerpt(*name) + "' is not an FSDP action (expected UNSHARD, RESHARD or REDUCE_GRAD)");
      }
    }
    plan.fsdpActions.push_back(fa);
  }
  plan.config.fsdpWindows = !plan.fsdpActions.empty();
  return true;
}

// /offload_waits; false when there are more than a plan may hold.
bool readOffloadWaits(JsonReader& r, const JsonNode& at, Plan& plan) {
  const auto stageCount = static_cast<std::int64_t>(plan.virtualStages.size());
  bool tooLong = false;
  auto waits = boundedArray(r, at, "offload_waits", Presence::Optional, "waits", tooLong);
  if (!waits) return !tooLong;
  auto opKey = [&](const JsonNode& w, const char* name, std::int32_t& stage, std::int32_t& microbatch) {
    auto o = r.object(w, name, Presence::Required);
    if (!o) return;
    r.rejectUnknown(*o, {"virtual_stage", "microbatch"});
    stage = static_cast<std::int32_t>(
        r.integer(*o, "virtual_stage", Presence::Required, 0, std::max<std::int64_t>(0, stageCount - 1)).value_or(0));
    microbatch = static_cast<std::int32_t>(
        r.integer(*o, "microbatch", Presence::Required, 0, std::max(0, plan.config.microbatches - 1)).value_or(0));
  };
  for (std::size_t i = 0; i < waits->value->size() && r.errors().size() < 100; ++i) {
    const JsonNode w = waits->child(i);
    if (!r.isObject(w)) continue;
    r.rejectUnknown(w, {"forward", "after_offload"});
    OffloadWait ow;
    opKey(w, "forward", ow.forwardStage, ow.forwardMicrobatch);
    opKey(w, "after_offload", ow.offloadStage, ow.offloadMicrobatch);
    plan.offloadWaits.push_back(ow);
  }
  return true;
}

}  // namespace

std::optional<Plan> readPlan(JsonReader& r, const JsonNode& at) {
  if (!r.isObject(at)) return std::nullopt;
  if (!r.checkSchema(at, kPlanSchema)) return std::nullopt;  // first: a model given as a plan is named
  r.rejectUnknown(at, {"schema", "config", "model", "cluster", "virtual_stages", "ops", "comms", "fsdp_actions",
                       "offload_waits", "metrics", "generator", "notes"});
  Plan plan;
  std::optional<JsonNode> seqSplitsAt;  // where seq_splits is, for the chunk-layer check below
  if (auto cfg = r.object(at, "config", Presence::Required)) {
    readConfig(r, *cfg, plan.config);
    seqSplitsAt = cfg->child("seq_splits");
  }
  if (auto m = r.field(at, "model", Presence::Required)) {
    if (auto model = readModel(r, *m)) plan.model = std::move(*model);
  }
  if (plan.config.seqSplits > 1 && seqSplitsAt) {
    std::int64_t layers = 0;
    for (const Component& comp : plan.model.components) layers += static_cast<std::int64_t>(comp.layers.size());
    if (layers * plan.config.seqSplits > kMaxSeqChunkLayers) {
      r.error(*seqSplitsAt, "is " + std::to_string(plan.config.seqSplits) + " for a model of " +
                                std::to_string(layers) + " layers (expected at most " +
                                std::to_string(kMaxSeqChunkLayers) + " chunk-layers in all)");
    }
  }
  if (auto c = r.field(at, "cluster", Presence::Required)) {
    if (auto cluster = readCluster(r, *c)) plan.cluster = std::move(*cluster);
  }
  if (!r.ok()) return std::nullopt;
  // Before anything is sized by the device count (per-device metrics, lanes).
  if (auto st = checkDevicesFitCluster(plan.config, plan.cluster); !st) {
    r.error("/config/devices", st.message());
    return std::nullopt;
  }

  if (auto stages = r.array(at, "virtual_stages", Presence::Required)) {
    if (stages->value->empty()) r.error(*stages, "no virtual stages (expected at least one)");
    for (std::size_t i = 0; i < stages->value->size(); ++i) {
      const JsonNode s = stages->child(i);
      if (r.isObject(s)) readVirtualStage(r, s, i, plan);
    }
  }
  if (!r.ok()) return std::nullopt;

  if (!readOps(r, at, plan)) return std::nullopt;
  readComms(r, at, plan);
  if (!readFsdpActions(r, at, plan)) return std::nullopt;
  if (!readOffloadWaits(r, at, plan)) return std::nullopt;
  if (!r.ok()) return std::nullopt;
  // Metrics are derived data: recomputed rather than trusted.
  plan.metrics = computeMetrics(plan);
  return plan;
}

std::string locatePlanProblem(const JsonDocument& doc, const std::string& message) {
  // validatePlanStructure speaks in "/pointer: what"; put the file:line:col in front.
  if (!message.empty() && message.front() == '/') {
    if (const auto colon = message.find(": "); colon != std::string::npos) {
      return doc.where(message.substr(0, colon)) + message.substr(colon);
    }
  }
  return doc.path + ": " + message;
}

Expected<Plan> loadPlan(const std::string& path) {
  PS_ASSIGN_OR_RETURN(auto doc, loadJsonFile(path));
  JsonReader reader(doc);
  auto plan = readPlan(reader, reader.root());
  if (!reader.ok() || !plan) return reader.ok() ? Error{path + ": invalid plan"} : reader.toError();
  if (auto st = validatePlanStructure(*plan); !st) return Error{locatePlanProblem(doc, st.message())};
  return std::move(*plan);
}

namespace {

Json opToJson(const Plan& plan, const Op& op) {
  Json o{{"device", op.device},         {"virtual_stage", op.virtualStage}, {"kind", std::string(opKindName(op.kind))},
         {"microbatch", op.microbatch}, {"start_ms", op.startMs},           {"end_ms", op.endMs}};
  if (op.samples > 0) o["samples"] = op.samples;
  if (op.kind == OpKind::N) {
    const auto& vs = plan.virtualStages.at(static_cast<std::size_t>(op.virtualStage));
    o["component"] = plan.model.components.at(static_cast<std::size_t>(vs.component)).name;
  }
  return o;
}

Json commToJson(const Comm& cm) {
  return Json{{"from_device", cm.fromDevice},
              {"to_device", cm.toDevice},
              {"microbatch", cm.microbatch},
              {"kind", std::string(opKindName(cm.kind))},
              {"virtual_stage", cm.virtualStage},
              {"start_ms", cm.startMs},
              {"end_ms", cm.endMs},
              {"bytes", cm.bytes}};
}

std::string dumpCompact(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

Json memoryBreakdownJson(const MemoryBreakdown& memory) {
  Json out = Json::object();
  for (const MemoryPart& part : memoryParts()) out[std::string(part.jsonKey)] = memory.*part.bytes;
  // The kept-back parts together, as plans before the context and fragmentation lines wrote it.
  out["margin_bytes"] = memory.marginBytes();
  return out;
}

Json configToJson(const PlanConfig& c) {
  Json cfg{{"schedule", c.schedule},         {"devices", c.devices},
           {"microbatches", c.microbatches}, {"chunks_per_device", c.chunksPerDevice},
           {"partition", c.partition},       {"fill", c.fill}};
  if (c.memoryLimitBytes) cfg["memory_limit_bytes"] = *c.memoryLimitBytes;
  if (!c.layout.empty()) cfg["layout"] = c.layout;
  const Parallelism& par = c.parallel;
  // Degrees are always written (scripts read them); the memory options only when set.
  writeParallelDegrees(par, cfg);
  if (!par.overlapGradReduce) cfg["overlap_grad_reduce"] = false;
  writeRecipeFields(c, cfg);
  if (c.globalBatch) cfg["global_batch"] = *c.globalBatch;
  if (c.microBatchSize) cfg["micro_batch_size"] = *c.microBatchSize;
  if (c.optimizerSync != "global") cfg["optimizer_sync"] = c.optimizerSync;
  if (c.overlapForwardBackward) cfg["overlap_forward_backward"] = true;
  if (c.unitMicrobatches > 0) cfg["unit_microbatches"] = c.unitMicrobatches;
  if (c.seqSplits > 1) {
    cfg["seq_splits"] = c.seqSplits;
    cfg["seq_split"] = c.seqSplit;
  }
  if (c.offloadRatio > 0) cfg["offload_ratio"] = c.offloadRatio;
  return cfg;
}

Json planToJson(const Plan& plan) {
  const PlanConfig& c = plan.config;
  Json cfg = configToJson(c);
  // Only vocabulary-parallel plans (S/T ops) say how their passes synchronise.
  if (std::any_of(plan.ops.begin(), plan.ops.end(),
                  [](const Op& op) { return op.kind == OpKind::S || op.kind == OpKind::T; })) {
    cfg["vocab_barriers"] = c.vocabBarriers;
  }
  Json stages = Json::array();
  for (const auto& vs : plan.virtualStages) {
    Json s{{"id", vs.id},
           {"device", vs.device},
           {"chunk", vs.chunk},
           {"component", plan.model.components.at(static_cast<std::size_t>(vs.component)).name},
           {"first_layer", vs.firstLayer},
           {"last_layer", vs.lastLayer}};
    if (vs.pipeline != 0 || plan.config.schedule.find("dual") != std::string::npos ||
        plan.config.schedule == "bitpipe") {
      s["pipeline"] = vs.pipeline;
    }
    stages.push_back(std::move(s));
  }
  Json ops = Json::array();
  for (const auto& op : plan.ops) ops.push_back(opToJson(plan, op));
  Json comms = Json::array();
  for (const auto& cm : plan.comms) comms.push_back(commToJson(cm));
  Json fsdp = Json::array();
  for (const FsdpAction& a : plan.fsdpActions) {
    fsdp.push_back(Json{{"device", a.device},
                        {"virtual_stage", a.virtualStage},
                        {"action", std::string(fsdpActionName(a.kind))},
                        {"before_pass", a.beforePass}});
  }
  Json waits = Json::array();
  for (const OffloadWait& w : plan.offloadWaits) {
    waits.push_back(Json{{"forward", {{"virtual_stage", w.forwardStage}, {"microbatch", w.forwardMicrobatch}}},
                         {"after_offload", {{"virtual_stage", w.offloadStage}, {"microbatch", w.offloadMicrobatch}}}});
  }
  Json devices = Json::array();
  for (const auto& d : plan.metrics.devices) {
    devices.push_back(Json{{"busy_ms", d.busyMs},
                           {"span_ms", d.spanMs},
                           {"exposed_comm_ms", d.exposedCommMs},
                           {"hidden_comm_ms", d.hiddenCommMs},
                           {"peak_memory_bytes", d.peakMemoryBytes},
                           {"peak_activation_bytes", d.peakActivationBytes},
                           {"memory", memoryBreakdownJson(d.memory)}});
    // Offloading plans: what the host copies save at the peak (not a part of it).
    if (d.memory.offloadSavedBytes > 0) devices.back()["memory"]["offload_saved_bytes"] = d.memory.offloadSavedBytes;
  }
  const Metrics& mt = plan.metrics;
  Json metrics{{"makespan_ms", mt.makespanMs},
               {"iteration_ms", mt.iterationMs},
               {"gradient_sync_ms", mt.gradientSyncMs},
               {"optimizer_ms", mt.optimizerMs},
               {"bubble_ratio", mt.bubbleRatio},
               {"throughput_samples_per_s", mt.throughputSamplesPerS},
               {"tokens_per_s", mt.tokensPerS},
               {"model_tflops_per_gpu", mt.modelTflopsPerGpu},
               {"mfu", mt.mfu},
               {"devices", std::move(devices)}};
  Json doc{{"schema", kPlanSchema},
           {"config", std::move(cfg)},
           {"model", modelToJson(plan.model)},
           {"cluster", clusterToJson(plan.cluster)},
           {"virtual_stages", std::move(stages)},
           {"ops", std::move(ops)},
           {"comms", std::move(comms)},
           {"metrics", std::move(metrics)}};
  if (!fsdp.empty()) doc["fsdp_actions"] = std::move(fsdp);
  if (!waits.empty()) doc["offload_waits"] = std::move(waits);
  return doc;
}

bool writePlanJson(std::ostream& out, const Plan& plan) {
  // Everything but ops and comms is small: build it as JSON; stream the two big arrays one
  // element per line, in the document's (sorted) key order.
  Plan head;
  head.config = plan.config;
  head.model = plan.model;
  head.cluster = plan.cluster;
  head.virtualStages = plan.virtualStages;
  head.fsdpActions = plan.fsdpActions;    // a few per virtual stage
  head.offloadWaits = plan.offloadWaits;  // at most one per forward
  head.metrics = plan.metrics;
  const Json doc = planToJson(head);
  out << "{";
  bool firstKey = true;
  for (const auto& [key, value] : doc.items()) {
    out << (firstKey ? "\n" : ",\n") << dumpCompact(Json(key)) << ": ";
    firstKey = false;
    if (key == "ops" || key == "comms") {
      out << '[';
      const bool ops = key == "ops";
      const std::size_t n = ops ? plan.ops.size() : plan.comms.size();
      for (std::size_t i = 0; i < n && out; ++i) {
        out << (i ? ",\n" : "\n") << dumpCompact(ops ? opToJson(plan, plan.ops[i]) : commToJson(plan.comms[i]));
      }
      out << (n ? "\n]" : "]");
    } else {
      out << dumpCompact(value);
    }
  }
  out << "\n}\n";
  return static_cast<bool>(out);
}

Status savePlan(const std::string& path, const Plan& plan) {
  return writeOutputFile(path, [&plan](std::ostream& out, std::string&) { return writePlanJson(out, plan); });
}

Status checkPlanSize(std::int64_t devices, std::int64_t chunksPerDevice, std::int64_t microbatches) {
  // Up to F, B and W per virtual stage and microbatch; computed in double so it cannot overflow.
  const double ops =
      3.0 * static_cast<double>(devices) * static_cast<double>(chunksPerDevice) * static_cast<double>(microbatches);
  if (ops <= static_cast<double>(kMaxPlanOps)) return {};
  std::array<char, 32> count{};
  std::snprintf(count.data(), count.size(), "%.3g", ops);
  return Error{std::to_string(devices) + " devices × " + std::to_string(chunksPerDevice) + " chunk(s) × " +
               std::to_string(microbatches) + " microbatches would make up to " + count.data() +
               " ops (F, B and W per virtual stage and microbatch), more than the limit of " +
               std::to_string(kMaxPlanOps) + " ops per plan (expected fewer devices, chunks or microbatches)"};
}

Status checkStageTables(std::int64_t virtualStages, std::int64_t microbatches) {
  if (static_cast<double>(virtualStages) * static_cast<double>(microbatches) <= static_cast<double>(kMaxPlanOps)) {
    return {};
  }
  return Error{std::to_string(virtualStages) + " virtual stages × " + std::to_string(microbatches) +
               " microbatches exceed the limit of " + std::to_string(kMaxPlanOps) +
               " (stage, microbatch) pairs per plan"};
}

namespace {

std::string opPointer(std::size_t i, const char* field = nullptr) {
  return "/ops/" + std::to_string(i) + (field ? std::string("/") + field : std::string());
}

std::string opLabel(const Op& op) {
  return std::string(opKindName(op.kind)) + "(stage " + std::to_string(op.virtualStage) + ", microbatch " +
         std::to_string(op.microbatch) + ")";
}

// The plan's unique ops by (kind class, stage, microbatch), looked up by what needs them: F, B
// (with BW: a stage's microbatch has one backward, split or fused), W and S. A flat table
// (stages × microbatches is bounded by kMaxPlanOps before it is built), not a node per op.
class UniqueOps {
 public:
  UniqueOps(std::size_t stages, int microbatches)
      : m_stages(stages),
        m_microbatches(static_cast<std::size_t>(microbatches)),
        m_slots(kClasses * stages * m_microbatches, -1) {}
  /// The op index stored for the key (−1: none); `kind` is one of F, B, BW, W, S, D2H, H2D.
  std::int32_t& slot(OpKind kind, int stage, int microbatch) {
    return m_slots[(classOf(kind) * m_stages + static_cast<std::size_t>(stage)) * m_microbatches +
                   static_cast<std::size_t>(microbatch)];
  }

 private:
  static constexpr std::size_t kClasses = 6;
  static std::size_t classOf(OpKind kind) {
    switch (kind) {
      case OpKind::F:
        return 0;
      case OpKind::B:
      case OpKind::BW:
        return 1;
      case OpKind::W:
        return 2;
      case OpKind::D2H:
        return 4;
      case OpKind::H2D:
        return 5;
      default:
        return 3;  // S
    }
  }
  std::size_t m_stages;
  std::size_t m_microbatches;
  std::vector<std::int32_t> m_slots;
};

Status checkStages(const Plan& plan) {
  const int devices = plan.config.devices;
  for (std::size_t i = 0; i < plan.virtualStages.size(); ++i) {
    const VirtualStage& vs = plan.virtualStages[i];
    const std::string at = "/virtual_stages/" + std::to_string(i);
    if (vs.id != static_cast<int>(i)) {
      return Error{at + "/id: " + std::to_string(vs.id) + " (expected " + std::to_string(i) +
                   ": virtual stages are listed in id order)"};
    }
    if (vs.device < 0 || vs.device >= devices) {
      return Error{at + "/device: " + std::to_string(vs.device) + " is not a device of the plan (expected 0.." +
                   std::to_string(devices - 1) + ")"};
    }
    if (!inRange(plan.model.components, vs.component)) {
      return Error{at + "/component: not a component of the plan's model"};
    }
    const auto layers = static_cast<int>(plan.model.component(vs.component).layers.size());
    if (vs.firstLayer < 0 || vs.lastLayer < vs.firstLayer || vs.lastLayer >= layers) {
      return Error{at + ": layers " + std::to_string(vs.firstLayer) + ".." + std::to_string(vs.lastLayer) +
                   " are not a range of the component's " + std::to_string(layers) + " layers"};
    }
    if (vs.pipeline < 0 || vs.pipeline > 1) {
      return Error{at + "/pipeline: " + std::to_string(vs.pipeline) + " (expected 0 or 1)"};
    }
  }
  return {};
}

// The ops run the microbatches the config names: every microbatch 0..m−1 has a forward (F, or
// N on a frozen component), and every forward of a trainable stage its backward (B or BW), so
// a config cannot claim more microbatches (or a larger batch) than the plan runs.
Status checkCoverage(const Plan& plan, UniqueOps& unique) {
  const int microbatches = plan.config.microbatches;
  std::vector<char> covered(static_cast<std::size_t>(microbatches), 0);
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (op.kind != OpKind::F && op.kind != OpKind::N) continue;
    covered[static_cast<std::size_t>(op.microbatch)] = 1;
    if (op.kind == OpKind::F && plan.model.component(plan.stage(op.virtualStage).component).trainable &&
        unique.slot(OpKind::B, op.virtualStage, op.microbatch) < 0) {
      return Error{opPointer(i) + ": " + opLabel(op) +
                   " has no backward (expected a B or BW op of the same stage and microbatch: the plan trains)"};
    }
  }
  const auto missing = std::find(covered.begin(), covered.end(), 0);
  if (missing == covered.end()) return {};
  const auto first = missing - covered.begin();
  return Error{"/config/microbatches: " + std::to_string(microbatches) + ", but no op runs microbatch " +
               std::to_string(first) + " (expected the ops to run every microbatch 0.." +
               std::to_string(microbatches - 1) + ": the config's count, and the batch it gives, are the plan's)"};
}

// An offload wait names an F op and a D2H op of the plan, on one device.
Status checkOffloadWaits(const Plan& plan) {
  if (plan.offloadWaits.empty()) return {};
  std::map<std::tuple<OpKind, std::int32_t, std::int32_t>, std::int32_t> device;  // (kind, stage, mb) → device
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::F || op.kind == OpKind::D2H) device[{op.kind, op.virtualStage, op.microbatch}] = op.device;
  }
  for (std::size_t i = 0; i < plan.offloadWaits.size(); ++i) {
    const OffloadWait& w = plan.offloadWaits[i];
    const std::string at = "/offload_waits/" + std::to_string(i);
    const auto f = device.find({OpKind::F, w.forwardStage, w.forwardMicrobatch});
    if (f == device.end()) {
      return Error{at + "/forward: the plan has no F op of virtual stage " + std::to_string(w.forwardStage) +
                   ", microbatch " + std::to_string(w.forwardMicrobatch)};
    }
    const auto d = device.find({OpKind::D2H, w.offloadStage, w.offloadMicrobatch});
    if (d == device.end()) {
      return Error{at + "/after_offload: the plan has no D2H op of virtual stage " + std::to_string(w.offloadStage) +
                   ", microbatch " + std::to_string(w.offloadMicrobatch)};
    }
    if (f->second != d->second) {
      return Error{at + ": the forward runs on device " + std::to_string(f->second) + ", the offload on device " +
                   std::to_string(d->second) + " (expected one device)"};
    }
  }
  return {};
}

// FSDP actions name a virtual stage of their device and a place in that device's passes.
Status checkFsdpActions(const Plan& plan) {
  if (plan.fsdpActions.empty()) return {};
  std::vector<std::int64_t> passes(static_cast<std::size_t>(plan.config.devices), 0);
  for (const Op& op : plan.ops) {
    const bool pass = op.kind == OpKind::F || op.kind == OpKind::B || op.kind == OpKind::W || op.kind == OpKind::BW;
    if (pass && op.device >= 0 && op.device < plan.config.devices) ++passes[static_cast<std::size_t>(op.device)];
  }
  std::vector<std::int64_t> lastPass(passes.size(), 0);
  for (std::size_t i = 0; i < plan.fsdpActions.size(); ++i) {
    const FsdpAction& a = plan.fsdpActions[i];
    const std::string at = "/fsdp_actions/" + std::to_string(i);
    if (a.device < 0 || a.device >= plan.config.devices) {
      return Error{at + "/device: " + std::to_string(a.device) + " is not a device of the plan"};
    }
    if (a.virtualStage < 0 || static_cast<std::size_t>(a.virtualStage) >= plan.virtualStages.size() ||
        plan.stage(a.virtualStage).device != a.device) {
      return Error{at + "/virtual_stage: " + std::to_string(a.virtualStage) + " is not a virtual stage of device " +
                   std::to_string(a.device)};
    }
    const std::int64_t count = passes[static_cast<std::size_t>(a.device)];
    if (a.beforePass < 0 || a.beforePass > count) {
      return Error{at + "/before_pass: " + std::to_string(a.beforePass) + " (expected 0.." + std::to_string(count) +
                   ": device " + std::to_string(a.device) + " runs " + std::to_string(count) + " passes)"};
    }
    std::int64_t& last = lastPass[static_cast<std::size_t>(a.device)];
    if (a.beforePass < last) {
      return Error{at + "/before_pass: " + std::to_string(a.beforePass) + " comes after an action of device " +
                   std::to_string(a.device) + " before pass " + std::to_string(last) +
                   " (expected each device's actions in execution order)"};
    }
    last = a.beforePass;
  }
  return {};
}

// The data flow of frozen-component N ops (partial batches, as the executor reads them): the
// j-th N op of a (stage, microbatch) covers samples up to its cumulative count and needs the
// first N op of the previous stage, same microbatch, whose cumulative count reaches it.
Status frozenNeeds(const Plan& plan, const StageNeighbours& chain,
                   std::vector<std::pair<std::int32_t, std::int32_t>>& needs) {
  std::map<std::pair<int, int>, std::vector<std::int32_t>> frozen;  // (stage, microbatch) → N ops
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (op.kind == OpKind::N) frozen[{op.virtualStage, op.microbatch}].push_back(static_cast<std::int32_t>(i));
  }
  const auto perMicrobatch = static_cast<double>(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch));
  auto samplesOf = [&](std::int32_t i) {
    const Op& o = plan.ops[static_cast<std::size_t>(i)];
    return o.samples > 0 ? static_cast<double>(o.samples) : perMicrobatch;
  };
  for (const auto& [key, mine] : frozen) {
    const int prev = chain.previous[static_cast<std::size_t>(key.first)];
    if (prev < 0) continue;
    const auto it = frozen.find({prev, key.second});
    double need = 0;
    double have = 0;
    std::size_t k = 0;  // producers counted into `have`
    for (const std::int32_t consumer : mine) {
      need += samplesOf(consumer);
      while (it != frozen.end() && have + 1e-9 < need && k < it->second.size()) have += samplesOf(it->second[k++]);
      if (it == frozen.end() || have + 1e-9 < need) {
        const Op& op = plan.ops[static_cast<std::size_t>(consumer)];
        return Error{opPointer(static_cast<std::size_t>(consumer)) + ": " + opLabel(op) + " needs " +
                     std::to_string(static_cast<long long>(need)) + " samples of virtual stage " +
                     std::to_string(prev) +
                     ", which its N ops do not cover (expected N ops of that stage for the same microbatch)"};
      }
      needs.emplace_back(it->second[k - 1], consumer);
    }
  }
  return {};
}

// Times and sizes within what the document format holds (the reader's ranges): a plan the
// planner simulates from in-range inputs can still compute past them.
Status checkRanges(const Plan& plan) {
  std::array<char, 32> value{};
  auto past = [&](const std::string& at, double ms) {
    std::snprintf(value.data(), value.size(), "%.6g", ms);
    return Error{at + ": " + value.data() +
                 " ms is past the plan format's limit of ±1e12 ms (expected times within it)"};
  };
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (std::abs(op.startMs) > kMaxTimeMs) return past(opPointer(i, "start_ms"), op.startMs);
    if (std::abs(op.endMs) > kMaxTimeMs) return past(opPointer(i, "end_ms"), op.endMs);
  }
  for (std::size_t i = 0; i < plan.comms.size(); ++i) {
    const Comm& c = plan.comms[i];
    const std::string at = "/comms/" + std::to_string(i);
    if (!std::isfinite(c.startMs) || !std::isfinite(c.endMs))
      return Error{at + ": a time is not finite (expected finite start_ms and end_ms)"};
    if (std::abs(c.startMs) > kMaxTimeMs) return past(at + "/start_ms", c.startMs);
    if (std::abs(c.endMs) > kMaxTimeMs) return past(at + "/end_ms", c.endMs);
    if (c.bytes < 0 || c.bytes > kMaxCommBytes) {
      return Error{at + "/bytes: " + std::to_string(c.bytes) + " (expected 0.." + std::to_string(kMaxCommBytes) + ")"};
    }
    if (c.fromDevice < 0 || c.fromDevice >= plan.config.devices || c.toDevice < 0 ||
        c.toDevice >= plan.config.devices) {
      return Error{at + ": devices " + std::to_string(c.fromDevice) + " → " + std::to_string(c.toDevice) +
                   " (expected devices of the plan, 0.." + std::to_string(plan.config.devices - 1) + ")"};
    }
  }
  return {};
}

// (producer, consumer) op indices: what each op needs to have run before it.
using Needs = std::vector<std::pair<std::int32_t, std::int32_t>>;

// Per device, its ops in plan order (CSR: lane d is ops[first[d] .. first[d + 1])).
struct LaneOrder {
  std::vector<std::int32_t> first;
  std::vector<std::int32_t> ops;
};

LaneOrder laneOrder(const Plan& plan) {
  const std::size_t n = plan.ops.size();
  const auto devices = static_cast<std::size_t>(plan.config.devices);
  LaneOrder lanes{std::vector<std::int32_t>(devices + 1, 0), std::vector<std::int32_t>(n)};
  for (const Op& op : plan.ops) ++lanes.first[static_cast<std::size_t>(op.device) + 1];
  for (std::size_t d = 0; d < devices; ++d) lanes.first[d + 1] += lanes.first[d];
  std::vector<std::int32_t> fill(lanes.first.begin(), lanes.first.end() - 1);
  for (std::size_t i = 0; i < n; ++i) {
    lanes.ops[static_cast<std::size_t>(fill[static_cast<std::size_t>(plan.ops[i].device)]++)] =
        static_cast<std::int32_t>(i);
  }
  return lanes;
}

// Adds derivedDependencies (frozen outputs, vocabulary passes, sequence chunks) to the needs.
void addDerivedNeeds(const Plan& plan, Needs& needs) {
  // Dependencies beyond the data flow exist only with frozen (N) or vocabulary (S/T) ops, or
  // sequence chunks (their causal order).
  const bool derived = plan.config.seqSplits > 1 || std::any_of(plan.ops.begin(), plan.ops.end(), [](const Op& op) {
                         return op.kind == OpKind::N || op.kind == OpKind::S || op.kind == OpKind::T;
                       });
  if (!derived) return;
  std::vector<std::vector<std::int32_t>> laneOp;
  const auto lanes = planLanes(plan, &laneOp);
  for (const OpDependency& dep : derivedDependencies(plan, lanes)) {
    if (!inRange(laneOp, dep.from.device) || !inRange(laneOp, dep.to.device)) continue;
    const auto& from = laneOp[static_cast<std::size_t>(dep.from.device)];
    const auto& to = laneOp[static_cast<std::size_t>(dep.to.device)];
    if (inRange(from, dep.from.index) && inRange(to, dep.to.index)) {
      needs.emplace_back(from[static_cast<std::size_t>(dep.from.index)], to[static_cast<std::size_t>(dep.to.index)]);
    }
  }
}

// Where the abstract run of the orders ended: the ops that ran and, per device, its next lane
// slot (the op it stopped at, or the lane's end).
struct OrderRun {
  std::vector<char> ran;
  std::vector<std::int32_t> next;
  std::size_t done = 0;
};

OrderRun runOrders(const Plan& plan, const LaneOrder& lanes, const Needs& needs) {
  const std::size_t n = plan.ops.size();
  const std::size_t devices = lanes.first.size() - 1;
  // Consumers of each op (CSR) and, per op, how many of its needs have not run.
  std::vector<std::int32_t> waits(n, 0);
  std::vector<std::int32_t> first(n + 1, 0);
  for (const auto& [from, to] : needs) {
    ++first[static_cast<std::size_t>(from) + 1];
    ++waits[static_cast<std::size_t>(to)];
  }
  for (std::size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  std::vector<std::int32_t> consumers(needs.size());
  {
    std::vector<std::int32_t> fill(first.begin(), first.end() - 1);
    for (const auto& [from, to] : needs)
      consumers[static_cast<std::size_t>(fill[static_cast<std::size_t>(from)]++)] = to;
  }
  // An op runs when its needs have and it is next on its device.
  OrderRun run{std::vector<char>(n, 0), std::vector<std::int32_t>(lanes.first.begin(), lanes.first.end() - 1)};
  std::vector<std::int32_t>& next = run.next;
  std::vector<std::int32_t> ready;
  auto offerHead = [&](std::size_t d) {
    if (next[d] < lanes.first[d + 1]) {
      const auto head = lanes.ops[static_cast<std::size_t>(next[d])];
      if (waits[static_cast<std::size_t>(head)] == 0) ready.push_back(head);
    }
  };
  for (std::size_t d = 0; d < devices; ++d) offerHead(d);
  while (!ready.empty()) {
    const auto op = static_cast<std::size_t>(ready.back());
    ready.pop_back();
    run.ran[op] = 1;
    ++run.done;
    const auto d = static_cast<std::size_t>(plan.ops[op].device);
    ++next[d];
    offerHead(d);
    // After offerHead: an op whose last need this was is pushed here, once, if it is its
    // device's next; otherwise offerHead pushes it when it becomes that.
    for (auto e = first[op]; e < first[op + 1]; ++e) {
      const auto c = consumers[static_cast<std::size_t>(e)];
      if (--waits[static_cast<std::size_t>(c)] != 0) continue;
      const auto cd = static_cast<std::size_t>(plan.ops[static_cast<std::size_t>(c)].device);
      if (next[cd] < lanes.first[cd + 1] && lanes.ops[static_cast<std::size_t>(next[cd])] == c) ready.push_back(c);
    }
  }
  return run;
}

// The stuck devices of a run that deadlocked (at most eight): where each stopped and the first
// of its needs there that never ran.
std::string describeDeadlock(const Plan& plan, const LaneOrder& lanes, const OrderRun& run, const Needs& needs,
                             std::size_t firstWait) {
  const std::size_t devices = lanes.first.size() - 1;
  const std::vector<std::int32_t>& next = run.next;
  // Per device, the op it stopped at and the first need of it that never ran (its index in needs).
  std::vector<std::int64_t> unmet(devices, -1);
  for (std::size_t k = 0; k < needs.size(); ++k) {
    const auto [from, to] = needs[k];
    const auto d = static_cast<std::size_t>(plan.ops[static_cast<std::size_t>(to)].device);
    if (run.ran[static_cast<std::size_t>(from)] == 0 && unmet[d] < 0 && next[d] < lanes.first[d + 1] &&
        lanes.ops[static_cast<std::size_t>(next[d])] == to) {
      unmet[d] = static_cast<std::int64_t>(k);
    }
  }
  std::string stuck;
  int shown = 0;
  for (std::size_t d = 0; d < devices; ++d) {
    if (unmet[d] < 0) continue;
    const auto i = static_cast<std::size_t>(lanes.ops[static_cast<std::size_t>(next[d])]);
    if (++shown > 8) {
      stuck += "; …";
      break;
    }
    const auto k = static_cast<std::size_t>(unmet[d]);
    const auto p = static_cast<std::size_t>(needs[k].first);
    const std::string at = "device " + std::to_string(d) + " at " + opPointer(i) + " (" + opLabel(plan.ops[i]) + ")";
    std::string needed = opPointer(p) + " (" + opLabel(plan.ops[p]) + ")";
    if (k >= firstWait && k - firstWait < plan.offloadWaits.size()) {
      needed += " (its offload wait /offload_waits/" + std::to_string(k - firstWait) + ")";
    }
    if (!stuck.empty()) stuck += "; ";
    stuck += at;
    if (plan.ops[p].device == static_cast<int>(d)) {
      stuck += " runs before ";
      stuck += needed;
      stuck += ", which it needs, later on the same device";
    } else {
      stuck += " waits for ";
      stuck += needed;
      stuck += " on device ";
      stuck += std::to_string(plan.ops[p].device);
    }
  }
  return stuck;
}

// Whether the per-device orders can run: an abstract run in which a device starts its next op
// once every op that op needs has run — the data flow (`needs`, as validatePlanStructure
// derives it) and derivedDependencies (frozen outputs, vocabulary passes), as the simulator and
// the executor use them. What is left waits on itself or on another device in a cycle: a
// deadlock `simulate` and `run` would meet (a need later on its own device is one too).
// Needs [firstWait, firstWait + plan.offloadWaits.size()) are the plan's offload waits, named as such.
Status checkOrdersRun(const Plan& plan, Needs needs, std::size_t firstWait) {
  const LaneOrder lanes = laneOrder(plan);
  addDerivedNeeds(plan, needs);
  const OrderRun run = runOrders(plan, lanes, needs);
  if (run.done == plan.ops.size()) return {};
  return Error{"/ops: the per-device orders deadlock (each device runs its ops in plan order; they wait in a cycle): " +
               describeDeadlock(plan, lanes, run, needs, firstWait) +
               " (expected an order in which every op comes after the ops it needs)"};
}

// The plan's size and settings before its ops: the config against the embedded model and
// cluster, the op count, the stage tables, the virtual stages.
Status checkPlanShape(const Plan& plan) {
  const int devices = plan.config.devices;
  const int microbatches = plan.config.microbatches;
  if (devices < 1) return Error{"/config/devices: " + std::to_string(devices) + " (expected at least 1)"};
  if (microbatches < 1)
    return Error{"/config/microbatches: " + std::to_string(microbatches) + " (expected at least 1)"};
  if (auto st = checkDevicesFitCluster(plan.config, plan.cluster); !st)
    return Error{"/config/devices: " + st.message()};
  // What the settings ask of the embedded model and cluster: the check `plan` applies.
  if (auto st = checkPlanSettings(plan.model, plan.cluster, plan.config); !st)
    return st.error().withPrefix("/config: ");
  if (plan.ops.size() > kMaxPlanOps) {
    return Error{"/ops: " + std::to_string(plan.ops.size()) + " ops, more than the limit of " +
                 std::to_string(kMaxPlanOps) + " per plan"};
  }
  // The simulator and executor keep per (virtual stage, microbatch) tables: bound them too.
  if (auto st = checkStageTables(static_cast<std::int64_t>(plan.virtualStages.size()), microbatches); !st) {
    return st.error().withPrefix("/virtual_stages: ");
  }
  return checkStages(plan);
}

// Op i on its own: its virtual stage and device, kind, microbatch, times, and no backward on a
// frozen component.
Status checkOp(const Plan& plan, std::size_t i) {
  const Op& op = plan.ops[i];
  const auto stages = plan.virtualStages.size();
  const int microbatches = plan.config.microbatches;
  if (op.virtualStage < 0 || static_cast<std::size_t>(op.virtualStage) >= stages) {
    return Error{opPointer(i, "virtual_stage") + ": " + std::to_string(op.virtualStage) +
                 " is not a virtual stage of the plan (expected 0.." +
                 std::to_string(static_cast<long long>(stages) - 1) + ")"};
  }
  const VirtualStage& vs = plan.stage(op.virtualStage);
  if (vs.device != op.device) {
    return Error{opPointer(i, "device") + ": op runs on device " + std::to_string(op.device) + " but virtual stage " +
                 std::to_string(vs.id) + " is on device " + std::to_string(vs.device) +
                 " (expected the virtual stage's device)"};
  }
  if (static_cast<int>(op.kind) >= kOpKindCount) {
    return Error{opPointer(i, "kind") + ": unknown op kind " + std::to_string(static_cast<int>(op.kind))};
  }
  const int lowest = op.kind == OpKind::OPT ? -1 : 0;
  if (op.microbatch < lowest || op.microbatch >= microbatches) {
    return Error{opPointer(i, "microbatch") + ": " + std::to_string(op.microbatch) +
                 " is not a microbatch of the plan (expected 0.." + std::to_string(microbatches - 1) + ")"};
  }
  if (!std::isfinite(op.startMs) || !std::isfinite(op.endMs) || op.endMs < op.startMs) {
    return Error{opPointer(i, "end_ms") + ": is before start_ms (expected end_ms ≥ start_ms, both finite)"};
  }
  const bool backward = op.kind == OpKind::B || op.kind == OpKind::W || op.kind == OpKind::BW || isHostCopy(op.kind);
  if (backward && !plan.model.component(vs.component).trainable) {
    return Error{opPointer(i, "kind") + ": " + opLabel(op) +
                 " is a backward op or an activation copy on a frozen component (expected N ops only)"};
  }
  return {};
}

// Per op: checkOp, then its slot among the unique ops by key (N, OPT and T ops repeat).
Status indexOps(const Plan& plan, UniqueOps& unique) {
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    PS_RETURN_IF_ERROR(checkOp(plan, i));
    const Op& op = plan.ops[i];
    if (op.kind == OpKind::N || op.kind == OpKind::OPT || op.kind == OpKind::T) continue;
    // B and BW share a key: a stage's microbatch has one backward, split or fused.
    std::int32_t& slot = unique.slot(op.kind, op.virtualStage, op.microbatch);
    if (slot >= 0) {
      return Error{opPointer(i) + ": " + opLabel(op) + " appears twice, first at " +
                   opPointer(static_cast<std::size_t>(slot)) + " (expected exactly one)"};
    }
    slot = static_cast<std::int32_t>(i);
  }
  return {};
}

// What each op needs (the data flow of plan/Dependencies.hpp, as simulator and executor
// derive it): F the previous stage's F; B/BW its own F and the next stage's backward; W its
// split B; the activation copies their F, and the backward the reload.
class DataFlow {
 public:
  DataFlow(const Plan& plan, UniqueOps& unique, Needs& needs)
      : m_plan(plan), m_chain(stageNeighbours(plan)), m_unique(unique), m_needs(needs) {}

  const StageNeighbours& chain() const { return m_chain; }

  // Adds op i's needs, or names the op it needs that the plan does not contain.
  Status add(std::size_t i) {
    const Op& op = m_plan.ops[i];
    const auto s = static_cast<std::size_t>(op.virtualStage);
    const int prev = m_chain.previous[s];
    const int next = m_chain.next[s];
    auto missing = [&](OpKind kind, int stage) {
      return Error{opPointer(i) + ": " + opLabel(op) + " needs " + std::string(opKindName(kind)) + "(stage " +
                   std::to_string(stage) + ", microbatch " + std::to_string(op.microbatch) +
                   "), which the plan does not contain"};
    };
    switch (op.kind) {
      case OpKind::F:
        if (prev >= 0) {
          const Op* f = find(OpKind::F, prev, op.microbatch);
          if (!f) return missing(OpKind::F, prev);
          need(f, i);
        }
        break;
      case OpKind::B:
      case OpKind::BW: {
        const Op* f = find(OpKind::F, op.virtualStage, op.microbatch);
        if (!f) return missing(OpKind::F, op.virtualStage);
        need(f, i);
        if (next >= 0) {
          const Op* b = find(OpKind::B, next, op.microbatch);
          if (!b) return missing(OpKind::B, next);
          need(b, i);
        }
        break;
      }
      case OpKind::W: {
        const Op* b = find(OpKind::B, op.virtualStage, op.microbatch);
        if (!b || b->kind != OpKind::B) {
          return Error{opPointer(i) + ": " + opLabel(op) + " has no split B of its own (a W follows a B, not a BW)"};
        }
        need(b, i);
        break;
      }
      case OpKind::D2H: {
        // The offloaded activations come back before their backward: every D2H follows its F
        // and has its H2D, and the (stage, microbatch) its backward, which waits for the H2D.
        const Op* f = find(OpKind::F, op.virtualStage, op.microbatch);
        if (!f) return missing(OpKind::F, op.virtualStage);
        const Op* reload = find(OpKind::H2D, op.virtualStage, op.microbatch);
        if (!reload) return missing(OpKind::H2D, op.virtualStage);
        const Op* b = find(OpKind::B, op.virtualStage, op.microbatch);
        if (!b) return missing(OpKind::B, op.virtualStage);
        need(f, i);
        need(reload, static_cast<std::size_t>(b - m_plan.ops.data()));
        break;
      }
      case OpKind::H2D: {
        const Op* offload = find(OpKind::D2H, op.virtualStage, op.microbatch);
        if (!offload) return missing(OpKind::D2H, op.virtualStage);
        need(offload, i);
        break;
      }
      default:
        break;
    }
    return {};
  }

 private:
  const Op* find(OpKind kind, int stage, int microbatch) const {
    if (stage < 0 || static_cast<std::size_t>(stage) >= m_plan.virtualStages.size() || microbatch < 0 ||
        microbatch >= m_plan.config.microbatches) {
      return nullptr;
    }
    const std::int32_t at = m_unique.slot(kind, stage, microbatch);
    return at < 0 ? nullptr : &m_plan.ops[static_cast<std::size_t>(at)];
  }
  void need(const Op* producer, std::size_t consumer) {
    m_needs.emplace_back(static_cast<std::int32_t>(producer - m_plan.ops.data()), static_cast<std::int32_t>(consumer));
  }

  const Plan& m_plan;
  StageNeighbours m_chain;
  UniqueOps& m_unique;
  Needs& m_needs;
};

}  // namespace

Status validatePlanStructure(const Plan& plan) {
  PS_RETURN_IF_ERROR(checkPlanShape(plan));
  // Per op: references, kind, microbatch, times, frozen components; unique ops by key.
  UniqueOps unique(plan.virtualStages.size(), plan.config.microbatches);
  PS_RETURN_IF_ERROR(indexOps(plan, unique));
  PS_RETURN_IF_ERROR(checkFsdpActions(plan));
  PS_RETURN_IF_ERROR(checkOffloadWaits(plan));

  // (producer, consumer) op indices of the data flow, for the orders check below.
  Needs needs;
  needs.reserve(plan.ops.size() * 2);
  DataFlow flow(plan, unique, needs);
  for (std::size_t i = 0; i < plan.ops.size(); ++i) PS_RETURN_IF_ERROR(flow.add(i));
  PS_RETURN_IF_ERROR(frozenNeeds(plan, flow.chain(), needs));
  // After the needs of each op, which name a missing op by what waits for it: what is left is a
  // microbatch no op runs, or a backward that is missing where nothing else waits for it.
  PS_RETURN_IF_ERROR(checkCoverage(plan, unique));
  // A forward that waits for an offload (pipeoffload) runs after it, as simulator and executor
  // order them: waits in a cycle deadlock like any other order.
  const std::size_t firstWait = needs.size();
  for (const OffloadWait& w : plan.offloadWaits) {
    needs.emplace_back(unique.slot(OpKind::D2H, w.offloadStage, w.offloadMicrobatch),
                       unique.slot(OpKind::F, w.forwardStage, w.forwardMicrobatch));
  }
  PS_RETURN_IF_ERROR(checkRanges(plan));
  return checkOrdersRun(plan, std::move(needs), firstWait);
}

}  // namespace pipestudio
