#include "pipestudio/plan/PlanIO.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Memory.hpp"

namespace pipestudio {
namespace {

constexpr std::int64_t kMaxDevices = 1'000'000;
constexpr std::int64_t kMaxMicrobatches = 1'000'000;
constexpr double kMaxTimeMs = 1.0e12;

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
      r.error(ptr(nullptr), "missing required field 'kind' (expected one of F, B, W, BW, N, S, T, OPT)");
      return std::nullopt;
    }
    if (it->is_string()) {
      if (auto k = opKindFromName(it->get_ref<const std::string&>())) return k;
    }
    r.error(ptr("kind"), "is " + it->dump().substr(0, 64) + " (expected one of F, B, W, BW, N, S, T, OPT)");
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

// The recipe settings of issue 25 (precision, overlaps, recomputation details); absent keys
// keep PlanConfig's defaults, which are Megatron-Bridge's.
void readRecipe(JsonReader& r, const JsonNode& cfg, PlanConfig& c) {
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

}  // namespace

std::optional<Plan> readPlan(JsonReader& r, const JsonNode& at) {
  if (!r.isObject(at)) return std::nullopt;
  if (!r.checkSchema(at, kPlanSchema)) return std::nullopt;  // first: a model given as a plan is named
  r.rejectUnknown(
      at, {"schema", "config", "model", "cluster", "virtual_stages", "ops", "comms", "metrics", "generator", "notes"});
  Plan plan;
  if (auto cfg = r.object(at, "config", Presence::Required)) {
    r.rejectUnknown(*cfg, {"schedule",
                           "devices",
                           "microbatches",
                           "chunks_per_device",
                           "partition",
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
                           "overlap_param_gather",
                           "tp_comm_overlap",
                           "grad_reduce_dtype",
                           "precision",
                           "recompute_num_layers",
                           "recompute_method",
                           "recompute_modules",
                           "global_batch",
                           "micro_batch_size",
                           "optimizer_sync",
                           "vocab_barriers",
                           "overlap_forward_backward",
                           "unit_microbatches"});
    PlanConfig& c = plan.config;
    c.schedule = r.string(*cfg, "schedule", Presence::Required).value_or("");
    c.devices = static_cast<int>(r.integer(*cfg, "devices", Presence::Required, 1, kMaxDevices).value_or(1));
    c.microbatches =
        static_cast<int>(r.integer(*cfg, "microbatches", Presence::Required, 1, kMaxMicrobatches).value_or(1));
    c.chunksPerDevice = static_cast<int>(r.integer(*cfg, "chunks_per_device", Presence::Optional, 1, 1024).value_or(1));
    c.partition = r.string(*cfg, "partition", Presence::Optional).value_or("uniform");
    c.fill = r.string(*cfg, "fill", Presence::Optional).value_or("none");
    c.memoryLimitBytes = r.integer(*cfg, "memory_limit_bytes", Presence::Optional, 1, std::int64_t{1} << 60);
    // `data_parallel` is the name plans used before hybrid parallelism; `dp` is today's.
    if (cfg->value->contains("dp") && cfg->value->contains("data_parallel")) {
      r.error(cfg->child("data_parallel"), "is the old name of 'dp' (expected only one of them)");
    }
    Parallelism& par = c.parallel;
    const char* dpKey = cfg->value->contains("data_parallel") ? "data_parallel" : "dp";
    par.data = static_cast<int>(r.integer(*cfg, dpKey, Presence::Optional, 1, kMaxDevices).value_or(1));
    par.tensor = static_cast<int>(r.integer(*cfg, "tp", Presence::Optional, 1, 1024).value_or(1));
    par.context = static_cast<int>(r.integer(*cfg, "cp", Presence::Optional, 1, 1024).value_or(1));
    par.expert = static_cast<int>(r.integer(*cfg, "ep", Presence::Optional, 1, kMaxDevices).value_or(1));
    par.sequenceParallel = r.boolean(*cfg, "sequence_parallel", Presence::Optional).value_or(par.tensor > 1);
    if (auto rc = r.string(*cfg, "recompute", Presence::Optional)) {
      if (auto v = recomputeFromName(*rc)) {
        par.recompute = *v;
      } else {
        r.error(cfg->child("recompute"), "'" + *rc + "' is not a recompute mode (expected none, selective or full)");
      }
    }
    par.zeroStage = static_cast<int>(r.integer(*cfg, "zero", Presence::Optional, 0, 3).value_or(0));
    par.overlapGradReduce = r.boolean(*cfg, "overlap_grad_reduce", Presence::Optional).value_or(true);
    readRecipe(r, *cfg, c);
    c.globalBatch = r.integer(*cfg, "global_batch", Presence::Optional, 1, std::int64_t{1} << 40);
    c.microBatchSize = r.integer(*cfg, "micro_batch_size", Presence::Optional, 1, 1'000'000);
    if (auto sync = r.string(*cfg, "optimizer_sync", Presence::Optional)) {
      if (*sync == "global" || *sync == "post-validation") {
        c.optimizerSync = *sync;
      } else {
        r.error(cfg->child("optimizer_sync"),
                "'" + *sync + "' is not an optimizer sync (expected global or post-validation)");
      }
    }
    // Plans written before vocab_barriers existed timed their S/T passes with two barriers.
    c.vocabBarriers = static_cast<int>(r.integer(*cfg, "vocab_barriers", Presence::Optional, 1, 2).value_or(2));
    c.overlapForwardBackward = r.boolean(*cfg, "overlap_forward_backward", Presence::Optional).value_or(false);
    c.unitMicrobatches =
        static_cast<int>(r.integer(*cfg, "unit_microbatches", Presence::Optional, 1, kMaxMicrobatches).value_or(0));
  }
  if (auto m = r.field(at, "model", Presence::Required)) {
    if (auto model = readModel(r, *m)) plan.model = std::move(*model);
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
      if (!r.isObject(s)) continue;
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
          continue;
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
  }
  if (!r.ok()) return std::nullopt;

  const auto stageCount = static_cast<std::int64_t>(plan.virtualStages.size());
  if (auto ops = r.array(at, "ops", Presence::Required)) {
    if (ops->value->size() > kMaxPlanOps) {
      r.error(*ops, "has " + std::to_string(ops->value->size()) + " ops (expected at most " +
                        std::to_string(kMaxPlanOps) + ")");
      return std::nullopt;
    }
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
  }
  if (auto comms = r.array(at, "comms", Presence::Optional)) {
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
      c.bytes = f.integer("bytes", 0, std::int64_t{1} << 50, false).value_or(0);
      plan.comms.push_back(c);
    }
  }
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
  auto doc = loadJsonFile(path);
  if (!doc) return doc.error();
  JsonReader reader(*doc);
  auto plan = readPlan(reader, reader.root());
  if (!reader.ok() || !plan) return reader.ok() ? Error{path + ": invalid plan"} : reader.toError();
  if (auto st = validatePlanStructure(*plan); !st) return Error{locatePlanProblem(*doc, st.message())};
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

Json planToJson(const Plan& plan) {
  const PlanConfig& c = plan.config;
  Json cfg{{"schedule", c.schedule},         {"devices", c.devices},
           {"microbatches", c.microbatches}, {"chunks_per_device", c.chunksPerDevice},
           {"partition", c.partition},       {"fill", c.fill}};
  if (c.memoryLimitBytes) cfg["memory_limit_bytes"] = *c.memoryLimitBytes;
  const Parallelism& par = c.parallel;
  // Degrees are always written (scripts read them); the memory options only when set.
  cfg["tp"] = par.tensor;
  cfg["cp"] = par.context;
  cfg["ep"] = par.expert;
  cfg["dp"] = par.data;
  cfg["sequence_parallel"] = par.sequenceParallel;
  cfg["recompute"] = std::string(recomputeName(par.recompute));
  cfg["zero"] = par.zeroStage;
  if (!par.overlapGradReduce) cfg["overlap_grad_reduce"] = false;
  cfg["overlap_param_gather"] = par.overlapParamGather;
  cfg["tp_comm_overlap"] = par.tpCommOverlap;
  cfg["grad_reduce_dtype"] = par.gradReduceInFp32 ? "fp32" : "bf16";
  cfg["precision"] = std::string(precisionName(c.precision));
  if (par.recomputeNumLayers > 0) {
    cfg["recompute_num_layers"] = par.recomputeNumLayers;
    cfg["recompute_method"] = std::string(recomputeMethodName(par.recomputeMethod));
  }
  if (par.recomputeModules != 0) cfg["recompute_modules"] = recomputeModulesName(par.recomputeModules);
  if (c.globalBatch) cfg["global_batch"] = *c.globalBatch;
  if (c.microBatchSize) cfg["micro_batch_size"] = *c.microBatchSize;
  if (c.optimizerSync != "global") cfg["optimizer_sync"] = c.optimizerSync;
  // Only vocabulary-parallel plans (S/T ops) say how their passes synchronise.
  if (std::any_of(plan.ops.begin(), plan.ops.end(),
                  [](const Op& op) { return op.kind == OpKind::S || op.kind == OpKind::T; })) {
    cfg["vocab_barriers"] = c.vocabBarriers;
  }
  if (c.overlapForwardBackward) cfg["overlap_forward_backward"] = true;
  if (c.unitMicrobatches > 0) cfg["unit_microbatches"] = c.unitMicrobatches;
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
  Json devices = Json::array();
  for (const auto& d : plan.metrics.devices) {
    const MemoryBreakdown& mb = d.memory;
    devices.push_back(Json{{"busy_ms", d.busyMs},
                           {"span_ms", d.spanMs},
                           {"exposed_comm_ms", d.exposedCommMs},
                           {"hidden_comm_ms", d.hiddenCommMs},
                           {"peak_memory_bytes", d.peakMemoryBytes},
                           {"peak_activation_bytes", d.peakActivationBytes},
                           {"memory",
                            {{"parameter_bytes", mb.parameterBytes},
                             {"gradient_bytes", mb.gradientBytes},
                             {"optimizer_bytes", mb.optimizerBytes},
                             {"low_precision_weight_bytes", mb.lowPrecisionWeightBytes},
                             {"activation_bytes", mb.activationBytes},
                             {"communication_bytes", mb.communicationBytes},
                             {"recompute_bytes", mb.recomputeBytes},
                             {"margin_bytes", mb.marginBytes}}}});
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
  return Json{{"schema", kPlanSchema},
              {"config", std::move(cfg)},
              {"model", modelToJson(plan.model)},
              {"cluster", clusterToJson(plan.cluster)},
              {"virtual_stages", std::move(stages)},
              {"ops", std::move(ops)},
              {"comms", std::move(comms)},
              {"metrics", std::move(metrics)}};
}

bool writePlanJson(std::ostream& out, const Plan& plan) {
  // Everything but ops and comms is small: build it as JSON; stream the two big arrays one
  // element per line, in the document's (sorted) key order.
  Plan head;
  head.config = plan.config;
  head.model = plan.model;
  head.cluster = plan.cluster;
  head.virtualStages = plan.virtualStages;
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
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", ops);
  return Error{std::to_string(devices) + " devices × " + std::to_string(chunksPerDevice) + " chunk(s) × " +
               std::to_string(microbatches) + " microbatches would make up to " + count +
               " ops (F, B and W per virtual stage and microbatch), more than the limit of " +
               std::to_string(kMaxPlanOps) + " ops per plan (expected fewer devices, chunks or microbatches)"};
}

namespace {

std::string opPointer(std::size_t i, const char* field = nullptr) {
  return "/ops/" + std::to_string(i) + (field ? std::string("/") + field : std::string());
}

std::string opLabel(const Op& op) {
  return std::string(opKindName(op.kind)) + "(stage " + std::to_string(op.virtualStage) + ", microbatch " +
         std::to_string(op.microbatch) + ")";
}

// (kind class, stage, microbatch) in one key: the plan's unique ops, looked up by what needs them.
std::uint64_t opKey(OpKind kind, std::int64_t stage, std::int64_t microbatch) {
  return (static_cast<std::uint64_t>(stage) << 24 | static_cast<std::uint64_t>(microbatch) << 3) ^
         static_cast<std::uint64_t>(kind);
}

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

}  // namespace

Status validatePlanStructure(const Plan& plan) {
  const int devices = plan.config.devices;
  const int microbatches = plan.config.microbatches;
  if (devices < 1) return Error{"/config/devices: " + std::to_string(devices) + " (expected at least 1)"};
  if (microbatches < 1)
    return Error{"/config/microbatches: " + std::to_string(microbatches) + " (expected at least 1)"};
  if (auto st = checkDevicesFitCluster(plan.config, plan.cluster); !st)
    return Error{"/config/devices: " + st.message()};
  if (plan.ops.size() > kMaxPlanOps) {
    return Error{"/ops: " + std::to_string(plan.ops.size()) + " ops, more than the limit of " +
                 std::to_string(kMaxPlanOps) + " per plan"};
  }
  // The simulator and executor keep per (virtual stage, microbatch) tables: bound them too.
  if (static_cast<double>(plan.virtualStages.size()) * microbatches > static_cast<double>(kMaxPlanOps)) {
    return Error{"/virtual_stages: " + std::to_string(plan.virtualStages.size()) + " virtual stages × " +
                 std::to_string(microbatches) + " microbatches exceed the limit of " + std::to_string(kMaxPlanOps) +
                 " (stage, microbatch) pairs per plan"};
  }
  if (auto st = checkStages(plan); !st) return st;

  // Per op: references, kind, microbatch, times, frozen components; unique ops by key.
  const auto stages = plan.virtualStages.size();
  std::unordered_map<std::uint64_t, std::size_t> unique;
  unique.reserve(plan.ops.size());
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
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
    const bool backward = op.kind == OpKind::B || op.kind == OpKind::W || op.kind == OpKind::BW;
    if (backward && !plan.model.component(vs.component).trainable) {
      return Error{opPointer(i, "kind") + ": " + opLabel(op) +
                   " is a backward op on a frozen component (expected N ops only)"};
    }
    if (op.kind == OpKind::N || op.kind == OpKind::OPT || op.kind == OpKind::T) continue;
    // B and BW share a key: a stage's microbatch has one backward, split or fused.
    const OpKind cls = op.kind == OpKind::BW ? OpKind::B : op.kind;
    if (const auto [it, inserted] = unique.emplace(opKey(cls, op.virtualStage, op.microbatch), i); !inserted) {
      return Error{opPointer(i) + ": " + opLabel(op) + " appears twice, first at " + opPointer(it->second) +
                   " (expected exactly one)"};
    }
  }

  // What each op needs (the data flow of plan/Dependencies.hpp, as simulator and executor
  // derive it): F the previous stage's F; B/BW its own F and the next stage's backward; W its
  // split B.
  const StageNeighbours chain = stageNeighbours(plan);
  auto find = [&](OpKind kind, int stage, int microbatch) -> const Op* {
    const auto it = unique.find(opKey(kind, stage, microbatch));
    return it == unique.end() ? nullptr : &plan.ops[it->second];
  };
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    const auto s = static_cast<std::size_t>(op.virtualStage);
    const int prev = chain.previous[s];
    const int next = chain.next[s];
    auto missing = [&](OpKind kind, int stage) {
      return Error{opPointer(i) + ": " + opLabel(op) + " needs " + std::string(opKindName(kind)) + "(stage " +
                   std::to_string(stage) + ", microbatch " + std::to_string(op.microbatch) +
                   "), which the plan does not contain"};
    };
    switch (op.kind) {
      case OpKind::F:
        if (prev >= 0 && !find(OpKind::F, prev, op.microbatch)) return missing(OpKind::F, prev);
        break;
      case OpKind::B:
      case OpKind::BW:
        if (!find(OpKind::F, op.virtualStage, op.microbatch)) return missing(OpKind::F, op.virtualStage);
        if (next >= 0 && !find(OpKind::B, next, op.microbatch)) return missing(OpKind::B, next);
        break;
      case OpKind::W: {
        const Op* b = find(OpKind::B, op.virtualStage, op.microbatch);
        if (!b || b->kind != OpKind::B) {
          return Error{opPointer(i) + ": " + opLabel(op) + " has no split B of its own (a W follows a B, not a BW)"};
        }
        break;
      }
      default:
        break;
    }
  }
  return {};
}

}  // namespace pipestudio
