#include "pipestudio/workspace/Workspace.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <string_view>
#include <vector>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/plan/SequenceSplits.hpp"
#include "pipestudio/trace/Stream.hpp"

namespace pipestudio {

namespace {

// The largest trace stream the window opens whole (one run's op ranges; larger ones go through
// the history's streaming import).
constexpr std::size_t kMaxOpenedStreamBytes = std::size_t{1} << 30;

// A name the planner knows (schedule, partitioner, fill mode), else an error at `key`.
void checkName(JsonReader& reader, const JsonNode& solver, const char* key, const std::string& value,
               const std::vector<std::string>& known, const char* what) {
  if (std::find(known.begin(), known.end(), value) != known.end()) return;
  reader.error(solver.child(key), "'" + excerpt(value) + "' is not " + what + " (expected " + choiceList(known) + ")");
}

// The solver keys a workspace takes; the recipe keys are the plan file's (readRecipeFields): a
// workspace keeps every setting a plan does.
const std::vector<std::string_view>& solverKeys() {
  static const std::vector<std::string_view> kKeys = withRecipeFieldKeys({"schedule",
                                                                          "devices",
                                                                          "microbatches",
                                                                          "chunks",
                                                                          "partition",
                                                                          "fill",
                                                                          "memory_limit_bytes",
                                                                          "memory_limit",
                                                                          "tp",
                                                                          "cp",
                                                                          "ep",
                                                                          "dp",
                                                                          "sequence_parallel",
                                                                          "recompute",
                                                                          "zero",
                                                                          "global_batch",
                                                                          "micro_batch_size",
                                                                          "optimizer_sync",
                                                                          "overlap_grad_reduce",
                                                                          "seq_splits",
                                                                          "seq_split",
                                                                          "offload_ratio"});
  return kKeys;
}

// What to solve: schedule, devices (at most the cluster's GPUs), microbatches, chunks, sequence
// splits, offloading, partitioner, fill mode and memory limit.
void readSolverSchedule(JsonReader& reader, const JsonNode& solver, const std::optional<ClusterSpec>& cluster,
                        const SolverNames& names, PlanConfig& c) {
  if (auto v = reader.string(solver, "schedule", Presence::Optional)) {
    c.schedule = *v;
    checkName(reader, solver, "schedule", *v, names.schedules, "a schedule");
  }
  if (auto v = reader.integer(solver, "devices", Presence::Optional, 1, 4096)) {
    c.devices = static_cast<int>(*v);
    if (cluster && *v > cluster->totalGpus()) {
      reader.error(solver.child("devices"), "is " + std::to_string(*v) + " but the cluster has " +
                                                std::to_string(cluster->totalGpus()) +
                                                " GPUs (expected at most that many)");
    }
  }
  if (auto v = reader.integer(solver, "microbatches", Presence::Optional, 1, 1 << 20))
    c.microbatches = static_cast<int>(*v);
  if (auto v = reader.integer(solver, "chunks", Presence::Optional, 1, 64)) c.chunksPerDevice = static_cast<int>(*v);
  // seq1f1b and PipeOffload (issue 31): microbatches counts sequence chunks, as in a plan.
  if (auto v = reader.integer(solver, "seq_splits", Presence::Optional, 1, kMaxSeqSplits)) {
    c.seqSplits = static_cast<int>(*v);
  }
  readSeqSplit(reader, solver, c);
  if (auto v = reader.number(solver, "offload_ratio", Presence::Optional, 0.0, 1.0)) c.offloadRatio = *v;
  if (auto v = reader.string(solver, "partition", Presence::Optional)) {
    c.partition = *v;
    checkName(reader, solver, "partition", *v, names.partitions, "a partitioner");
  }
  if (auto v = reader.string(solver, "fill", Presence::Optional)) {
    c.fill = *v;
    checkName(reader, solver, "fill", *v, names.fillModes, "a fill mode");
  }
  if (auto v =
          reader.integer(solver, "memory_limit_bytes", Presence::Optional, 1, std::numeric_limits<std::int64_t>::max()))
    c.memoryLimitBytes = *v;
  if (auto v = reader.string(solver, "memory_limit", Presence::Optional)) {
    const auto bytes = parseBytes(*v);
    if (bytes && *bytes > 0)
      c.memoryLimitBytes = *bytes;
    else
      reader.error(solver.child("memory_limit"), "'" + *v + "' is not a size (expected e.g. 40GiB)");
  }
}

// Hybrid parallelism (issue 13), all optional: workspaces written before it stay pure pipelines.
void readSolverParallelism(JsonReader& reader, const JsonNode& solver, Parallelism& par) {
  if (auto v = reader.integer(solver, "tp", Presence::Optional, 1, 1 << 16)) par.tensor = static_cast<int>(*v);
  if (auto v = reader.integer(solver, "cp", Presence::Optional, 1, 1 << 16)) par.context = static_cast<int>(*v);
  if (auto v = reader.integer(solver, "ep", Presence::Optional, 1, 1 << 16)) par.expert = static_cast<int>(*v);
  if (auto v = reader.integer(solver, "dp", Presence::Optional, 1, 1 << 24)) par.data = static_cast<int>(*v);
  if (auto v = reader.integer(solver, "zero", Presence::Optional, 0, 3)) par.zeroStage = static_cast<int>(*v);
  if (auto v = reader.boolean(solver, "overlap_grad_reduce", Presence::Optional)) par.overlapGradReduce = *v;
  if (auto v = reader.boolean(solver, "sequence_parallel", Presence::Optional))
    par.sequenceParallel = *v;
  else
    par.sequenceParallel = par.tensor > 1;  // as the command line: on when T > 1
  if (auto v = reader.string(solver, "recompute", Presence::Optional)) {
    if (auto r = recomputeFromName(*v))
      par.recompute = *r;
    else
      reader.error(solver.child("recompute"), "'" + *v + "' is not a recomputation (expected none, selective or full)");
  }
}

// The recipe (issue 25, as plan files spell it), the batch and the optimizer sync.
void readSolverRecipe(JsonReader& reader, const JsonNode& solver, PlanConfig& c) {
  readRecipeFields(reader, solver, c);
  if (auto v = reader.integer(solver, "global_batch", Presence::Optional, 1, std::int64_t{1} << 40)) c.globalBatch = *v;
  if (auto v = reader.integer(solver, "micro_batch_size", Presence::Optional, 1, std::int64_t{1} << 30))
    c.microBatchSize = *v;
  if (auto v = reader.string(solver, "optimizer_sync", Presence::Optional)) {
    if (*v == "global" || *v == "post-validation")
      c.optimizerSync = *v;
    else
      reader.error(solver.child("optimizer_sync"),
                   "'" + *v + "' is not an optimizer sync (expected global or post-validation)");
  }
}

}  // namespace

// The one reader of the format (resources/README.md): the GUI opens, `pipestudio-cli validate`
// checks and `pipestudio-cli run` runs what it accepts, and nothing else.
Expected<Workspace> readWorkspace(const JsonDocument& doc, const SolverNames& names) {
  JsonReader reader(doc);
  const JsonNode root = reader.root();
  Workspace ws;
  if (!reader.isObject(root)) return reader.toError();
  if (!reader.checkSchema(root, kWorkspaceSchema)) return reader.toError();
  reader.rejectUnknown(root, {"schema", "name", "named", "description", "model", "cluster", "solver", "plan"});
  if (auto name = reader.string(root, "name", Presence::Optional, true)) ws.name = *name;
  if (auto description = reader.string(root, "description", Presence::Optional, true)) ws.description = *description;
  if (auto named = reader.boolean(root, "named", Presence::Optional)) ws.named = *named;
  std::optional<ClusterSpec> cluster;
  if (auto node = reader.object(root, "model", Presence::Required)) {
    if (auto model = readModel(reader, *node)) ws.model = std::move(*model);
  }
  if (auto node = reader.object(root, "cluster", Presence::Required)) {
    cluster = readCluster(reader, *node);
    if (cluster) ws.cluster = *cluster;
  }
  if (auto solver = reader.object(root, "solver", Presence::Optional)) {
    reader.rejectUnknown(*solver, solverKeys());
    readSolverSchedule(reader, *solver, cluster, names, ws.solver);
    readSolverParallelism(reader, *solver, ws.solver.parallel);
    readSolverRecipe(reader, *solver, ws.solver);
  }
  if (auto node = reader.object(root, "plan", Presence::Optional)) {
    if (auto plan = readPlan(reader, *node)) ws.plan = std::move(*plan);
  }
  if (!reader.ok()) return reader.toError();
  // The saved plan passes what every plan file passes (structure, and its settings against
  // its own model and cluster), located in the workspace.
  if (ws.plan) {
    if (Status st = validatePlanStructure(*ws.plan); !st) return Error{locatePlanProblem(doc, "/plan" + st.message())};
  }
  return ws;
}

Expected<Workspace> loadWorkspace(const std::string& path, const SolverNames& names) {
  PS_ASSIGN_OR_RETURN(auto doc, loadJsonFile(path));
  return readWorkspace(doc, names);
}

Json workspaceToJson(const Workspace& ws) {
  Json j;
  j["schema"] = kWorkspaceSchema;
  j["name"] = ws.name;
  if (!ws.description.empty()) j["description"] = ws.description;
  if (ws.named) j["named"] = true;
  j["model"] = modelToJson(ws.model);
  j["cluster"] = clusterToJson(ws.cluster);
  Json solver;
  solver["schedule"] = ws.solver.schedule;
  solver["devices"] = ws.solver.devices;
  solver["microbatches"] = ws.solver.microbatches;
  solver["chunks"] = ws.solver.chunksPerDevice;
  if (ws.solver.seqSplits > 1) {
    solver["seq_splits"] = ws.solver.seqSplits;
    solver["seq_split"] = ws.solver.seqSplit;
  }
  if (ws.solver.offloadRatio > 0) solver["offload_ratio"] = ws.solver.offloadRatio;
  solver["partition"] = ws.solver.partition;
  solver["fill"] = ws.solver.fill;
  if (ws.solver.memoryLimitBytes) solver["memory_limit_bytes"] = *ws.solver.memoryLimitBytes;
  const Parallelism& par = ws.solver.parallel;
  writeParallelDegrees(par, solver);
  solver["overlap_grad_reduce"] = par.overlapGradReduce;
  writeRecipeFields(ws.solver, solver);
  if (ws.solver.globalBatch) solver["global_batch"] = *ws.solver.globalBatch;
  if (ws.solver.microBatchSize) solver["micro_batch_size"] = *ws.solver.microBatchSize;
  solver["optimizer_sync"] = ws.solver.optimizerSync;
  j["solver"] = std::move(solver);
  if (ws.plan) j["plan"] = planToJson(*ws.plan);
  return j;
}

Status saveWorkspace(const std::string& path, const Workspace& workspace) {
  return saveJsonFile(path, workspaceToJson(workspace));
}

Expected<Plan> planFromTraceStream(const std::string& bytes, const std::string& path) {
  const trace::DecodedStream decoded = trace::decodeAll(bytes);
  Plan plan;
  plan.config.schedule = "measured";
  std::int64_t originNs = std::numeric_limits<std::int64_t>::max();
  std::vector<const trace::OpRange*> ranges;
  int devices = 0;
  for (const trace::Frame& frame : decoded.frames) {
    if (const auto* range = std::get_if<trace::OpRange>(&frame)) {
      if (range->begin || range->iteration != 0) continue;  // one iteration, completed ranges
      ranges.push_back(range);
      originNs = std::min(originNs, range->startNs);
      devices = std::max(devices, range->device + 1);
    } else if (const auto* header = std::get_if<trace::Header>(&frame)) {
      plan.config.schedule = "measured (" + header->backend + ")";
      devices = std::max(devices, header->world);
    }
  }
  if (ranges.empty()) {
    std::string why = decoded.error ? *decoded.error : "no completed op ranges of iteration 0";
    return Error{path + ": not a readable trace stream: " + why};
  }
  std::stable_sort(ranges.begin(), ranges.end(), [](const trace::OpRange* a, const trace::OpRange* b) {
    return a->device != b->device ? a->device < b->device : a->startNs < b->startNs;
  });
  for (const trace::OpRange* r : ranges) {
    Op op;
    op.device = r->device;
    op.virtualStage = r->virtualStage;
    op.kind = r->kind;
    op.microbatch = r->microbatch;
    op.startMs = static_cast<double>(r->startNs - originNs) / 1e6;
    op.endMs = static_cast<double>(std::max(r->endNs, r->startNs) - originNs) / 1e6;
    plan.ops.push_back(op);
    plan.config.microbatches = std::max(plan.config.microbatches, r->microbatch + 1);
  }
  plan.config.devices = devices;
  plan.metrics = computeMetrics(plan);
  return plan;
}

Expected<OpenedDocument> openDocument(const std::string& path, const SolverNames& names) {
  PS_RETURN_IF_ERROR(checkRegularFile(path));  // a FIFO would block the open
  std::array<char, 4> magic{};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Error{path + ": cannot open file"};
    in.read(magic.data(), magic.size());  // istream::read turns a read error into badbit
    if (in.gcount() != 4) magic = {};
  }
  if (magic == trace::kStreamMagic) {
    // The whole stream through readRegularFile: iostreams' read errors surface as exceptions
    // where an iterator reads the buffer (istreambuf_iterator), a message here.
    PS_ASSIGN_OR_RETURN(auto bytes, readRegularFile(path, kMaxOpenedStreamBytes));
    OpenedDocument out;
    out.kind = DocumentKind::Trace;
    PS_ASSIGN_OR_RETURN(out.plan, planFromTraceStream(bytes, path));
    return out;
  }
  PS_ASSIGN_OR_RETURN(auto doc, loadJsonFile(path));
  PS_ASSIGN_OR_RETURN(const auto kind, documentKind(doc));
  OpenedDocument out;
  JsonReader reader(doc);
  if (kind == "workspace") {
    PS_ASSIGN_OR_RETURN(auto ws, readWorkspace(doc, names));
    out.kind = DocumentKind::Workspace;
    out.workspace = std::move(ws);
  } else if (kind == "model") {
    out.kind = DocumentKind::Model;
    out.model = readModel(reader, reader.root());
  } else if (kind == "cluster") {
    out.kind = DocumentKind::Cluster;
    out.cluster = readCluster(reader, reader.root());
  } else if (kind == "plan") {
    out.kind = DocumentKind::Plan;
    out.plan = readPlan(reader, reader.root());
    if (out.plan) {
      if (Status s = validatePlanStructure(*out.plan); !s) return Error{path + ": " + s.message()};
    }
  } else {
    return Error{path + ": a " + kind +
                 " document cannot be opened in the workstation (expected a workspace, "
                 "model, cluster, plan or trace)"};
  }
  if (!reader.ok()) return reader.toError();
  return out;
}

}  // namespace pipestudio
