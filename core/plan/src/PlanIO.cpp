#include "pipestudio/plan/PlanIO.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Memory.hpp"

namespace pipestudio {
namespace {

constexpr std::int64_t kMaxDevices = 1'000'000;
constexpr std::int64_t kMaxMicrobatches = 1'000'000;
constexpr std::size_t kMaxOps = 50'000'000;
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

}  // namespace

std::optional<Plan> readPlan(JsonReader& r, const JsonNode& at) {
  if (!r.isObject(at)) return std::nullopt;
  r.rejectUnknown(
      at, {"schema", "config", "model", "cluster", "virtual_stages", "ops", "comms", "metrics", "generator", "notes"});
  if (!r.checkSchema(at, kPlanSchema)) return std::nullopt;
  Plan plan;
  if (auto cfg = r.object(at, "config", Presence::Required)) {
    r.rejectUnknown(*cfg, {"schedule", "devices", "microbatches", "chunks_per_device", "partition", "fill",
                           "memory_limit_bytes", "data_parallel", "dp", "tp", "cp", "ep", "sequence_parallel",
                           "recompute", "zero", "overlap_grad_reduce", "global_batch", "micro_batch_size",
                           "optimizer_sync"});
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
    c.globalBatch = r.integer(*cfg, "global_batch", Presence::Optional, 1, std::int64_t{1} << 40);
    c.microBatchSize = r.integer(*cfg, "micro_batch_size", Presence::Optional, 1, 1'000'000);
    if (auto sync = r.string(*cfg, "optimizer_sync", Presence::Optional)) {
      if (*sync == "global" || *sync == "post-validation") {
        c.optimizerSync = *sync;
      } else {
        r.error(cfg->child("optimizer_sync"), "'" + *sync + "' is not an optimizer sync (expected global or post-validation)");
      }
    }
  }
  if (auto m = r.field(at, "model", Presence::Required)) {
    if (auto model = readModel(r, *m)) plan.model = std::move(*model);
  }
  if (auto c = r.field(at, "cluster", Presence::Required)) {
    if (auto cluster = readCluster(r, *c)) plan.cluster = std::move(*cluster);
  }
  if (!r.ok()) return std::nullopt;

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
                  "'" + *comp + "' is not a component of the plan's model (expected one of: " + known + ")");
          continue;
        }
      }
      const auto& layers = plan.model.components[static_cast<std::size_t>(std::max(0, vs.component))].layers;
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
    if (ops->value->size() > kMaxOps) {
      r.error(*ops,
              "has " + std::to_string(ops->value->size()) + " ops (expected at most " + std::to_string(kMaxOps) + ")");
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
  if (c.globalBatch) cfg["global_batch"] = *c.globalBatch;
  if (c.microBatchSize) cfg["micro_batch_size"] = *c.microBatchSize;
  if (c.optimizerSync != "global") cfg["optimizer_sync"] = c.optimizerSync;
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
  for (const auto& op : plan.ops) {
    Json o{
        {"device", op.device},         {"virtual_stage", op.virtualStage}, {"kind", std::string(opKindName(op.kind))},
        {"microbatch", op.microbatch}, {"start_ms", op.startMs},           {"end_ms", op.endMs}};
    if (op.samples > 0) o["samples"] = op.samples;
    if (op.kind == OpKind::N) {
      const auto& vs = plan.virtualStages.at(static_cast<std::size_t>(op.virtualStage));
      o["component"] = plan.model.components.at(static_cast<std::size_t>(vs.component)).name;
    }
    ops.push_back(std::move(o));
  }
  Json comms = Json::array();
  for (const auto& cm : plan.comms) {
    comms.push_back(Json{{"from_device", cm.fromDevice},
                         {"to_device", cm.toDevice},
                         {"microbatch", cm.microbatch},
                         {"kind", std::string(opKindName(cm.kind))},
                         {"virtual_stage", cm.virtualStage},
                         {"start_ms", cm.startMs},
                         {"end_ms", cm.endMs},
                         {"bytes", cm.bytes}});
  }
  Json devices = Json::array();
  for (const auto& d : plan.metrics.devices) {
    const MemoryBreakdown& mb = d.memory;
    devices.push_back(Json{{"busy_ms", d.busyMs},
                           {"span_ms", d.spanMs},
                           {"peak_memory_bytes", d.peakMemoryBytes},
                           {"peak_activation_bytes", d.peakActivationBytes},
                           {"memory",
                            {{"parameter_bytes", mb.parameterBytes},
                             {"gradient_bytes", mb.gradientBytes},
                             {"optimizer_bytes", mb.optimizerBytes},
                             {"activation_bytes", mb.activationBytes},
                             {"communication_bytes", mb.communicationBytes},
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

Status savePlan(const std::string& path, const Plan& plan) { return saveJsonFile(path, planToJson(plan), 1); }

Status validatePlanStructure(const Plan& plan) {
  const auto stages = plan.virtualStages.size();
  for (std::size_t i = 0; i < stages; ++i) {
    const VirtualStage& vs = plan.virtualStages[i];
    if (vs.device < 0 || vs.device >= plan.config.devices) {
      return Error{"/virtual_stages/" + std::to_string(i) + "/device: " + std::to_string(vs.device) +
                   " is not a device of the plan (expected 0.." + std::to_string(plan.config.devices - 1) + ")"};
    }
  }
  // Each trainable virtual stage has exactly one F per microbatch (partial-batch ops only
  // occur for frozen components).
  std::map<std::pair<int, int>, int> forwards;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (op.virtualStage < 0 || static_cast<std::size_t>(op.virtualStage) >= stages) {
      return Error{"/ops/" + std::to_string(i) + "/virtual_stage: " + std::to_string(op.virtualStage) +
                   " is not a virtual stage of the plan (expected 0.." +
                   std::to_string(static_cast<long long>(stages) - 1) + ")"};
    }
    const VirtualStage& vs = plan.virtualStages[static_cast<std::size_t>(op.virtualStage)];
    if (vs.device != op.device) {
      return Error{"/ops/" + std::to_string(i) + "/device: op runs on device " + std::to_string(op.device) +
                   " but virtual stage " + std::to_string(vs.id) + " is on device " + std::to_string(vs.device) +
                   " (expected the virtual stage's device)"};
    }
    if (op.kind == OpKind::F) ++forwards[{op.virtualStage, op.microbatch}];
  }
  for (const auto& [key, count] : forwards) {
    if (count != 1) {
      return Error{"/ops: virtual stage " + std::to_string(key.first) + " microbatch " + std::to_string(key.second) +
                   " has " + std::to_string(count) + " F ops (expected exactly one)"};
    }
  }
  return {};
}

}  // namespace pipestudio
