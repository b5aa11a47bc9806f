// Chrome trace export: the "JSON Object Format" of the Trace Event Format (Google, "Trace Event
// Format" document): complete events (ph X) with µs timestamps, metadata events (ph M) naming
// processes and threads, counter events (ph C) for the memory curve. Perfetto and
// chrome://tracing both read it.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Export.hpp"

namespace pipestudio {
namespace {

// Thread ids inside a device's process: compute ops, one per outgoing link, one per stream.
constexpr int kComputeTid = 0;
constexpr int kLinkTidBase = 1000;
constexpr int kStreamTidBase = 100000;

double toUs(double ms) { return ms * 1000.0; }

Json metadata(const char* name, int pid, int tid, Json args) {
  return Json{{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// Flow arrows (ph s/f, bound to the enclosing slices) from each op to the ops on other devices
// that read its output: the stage data flow of plan/Dependencies.hpp (F after the previous
// stage's F, N after its N, B/BW after the next stage's B or BW) and the derived dependencies
// (frozen outputs, vocabulary passes). Ops of one device already follow each other in order.
template <typename Emit>
void emitFlows(const Plan& plan, Emit& emit) {
  if (plan.virtualStages.empty()) return;
  std::map<std::tuple<int, int, int>, int> opOf;  // (virtual stage, kind, microbatch) → first op
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    opOf.try_emplace({op.virtualStage, static_cast<int>(op.kind), op.microbatch}, static_cast<int>(i));
  }
  const StageNeighbours neighbours = stageNeighbours(plan);
  std::vector<std::pair<int, int>> flows;  // (from op, to op)
  auto add = [&](int stage, OpKind kind, int microbatch, int to) {
    const auto it = opOf.find({stage, static_cast<int>(kind), microbatch});
    if (it != opOf.end() &&
        plan.ops[static_cast<std::size_t>(it->second)].device != plan.ops[static_cast<std::size_t>(to)].device)
      flows.emplace_back(it->second, to);
  };
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (!inRange(neighbours.previous, op.virtualStage)) continue;
    const int previous = neighbours.previous[static_cast<std::size_t>(op.virtualStage)];
    const int next = neighbours.next[static_cast<std::size_t>(op.virtualStage)];
    const int to = static_cast<int>(i);
    if (op.kind == OpKind::F && previous >= 0) add(previous, OpKind::F, op.microbatch, to);
    if (op.kind == OpKind::N && previous >= 0) add(previous, OpKind::N, op.microbatch, to);
    if ((op.kind == OpKind::B || op.kind == OpKind::BW) && next >= 0) {
      add(next, OpKind::B, op.microbatch, to);
      add(next, OpKind::BW, op.microbatch, to);
    }
  }
  std::vector<std::vector<std::int32_t>> laneIndex;
  const auto lanes = planLanes(plan, &laneIndex);
  auto opAt = [&](const OpRef& r) -> int {
    if (!inRange(laneIndex, r.device)) return -1;
    const auto& lane = laneIndex[static_cast<std::size_t>(r.device)];
    return inRange(lane, r.index) ? lane[static_cast<std::size_t>(r.index)] : -1;
  };
  for (const OpDependency& dep : derivedDependencies(plan, lanes)) {
    const int from = opAt(dep.from), to = opAt(dep.to);
    if (from >= 0 && to >= 0 && dep.from.device != dep.to.device) flows.emplace_back(from, to);
  }
  std::int64_t id = 0;
  for (const auto& [from, to] : flows) {
    const Op& a = plan.ops[static_cast<std::size_t>(from)];
    const Op& b = plan.ops[static_cast<std::size_t>(to)];
    ++id;
    emit(Json{{"name", "data"},
              {"cat", "dependency"},
              {"ph", "s"},
              {"id", id},
              {"pid", a.device},
              {"tid", kComputeTid},
              {"ts", toUs(a.startMs)}});
    emit(Json{{"name", "data"},
              {"cat", "dependency"},
              {"ph", "f"},
              {"bp", "e"},
              {"id", id},
              {"pid", b.device},
              {"tid", kComputeTid},
              {"ts", toUs(b.startMs)}});
  }
}

// Every event of the trace in file order, one at a time: the export streams them (a 10⁶-op
// plan would otherwise be a 3 GB document in memory).
template <typename Emit>
void emitChromeEvents(const Plan& plan, const ChromeTraceOptions& options, Emit&& emit) {
  const int devices = std::max(0, plan.config.devices);

  // Lane labels: one process per device (sorted by device), compute first, links, streams.
  std::set<std::pair<int, int>> links;
  for (const Comm& c : plan.comms) links.emplace(c.fromDevice, c.toDevice);
  std::set<std::pair<int, int>> streams;
  for (const TraceActivity& a : options.activities) streams.emplace(a.device, a.stream);
  int maxDevice = devices - 1;
  for (const auto& [from, to] : links) maxDevice = std::max({maxDevice, from, to});
  for (const auto& [device, stream] : streams) maxDevice = std::max(maxDevice, device);
  for (int d = 0; d <= maxDevice; ++d) {
    std::string label = "device " + std::to_string(d);
    if (d < devices && !plan.cluster.nodes.empty()) {
      const int node = plan.cluster.nodeOfDevice(deviceFirstGpu(plan.config, d));
      if (node >= 0 && node < static_cast<int>(plan.cluster.nodes.size())) {
        label += " (" + plan.cluster.node(node).host + ")";
      }
    }
    emit(metadata("process_name", d, 0, {{"name", label}}));
    emit(metadata("process_sort_index", d, 0, {{"sort_index", d}}));
    emit(metadata("thread_name", d, kComputeTid, {{"name", "compute"}}));
    emit(metadata("thread_sort_index", d, kComputeTid, {{"sort_index", 0}}));
  }
  for (const auto& [from, to] : links) {
    const int tid = kLinkTidBase + to;
    emit(metadata("thread_name", from, tid, {{"name", "send → device " + std::to_string(to)}}));
    emit(metadata("thread_sort_index", from, tid, {{"sort_index", tid}}));
  }
  for (const auto& [device, stream] : streams) {
    const int tid = kStreamTidBase + stream;
    emit(metadata("thread_name", device, tid, {{"name", "stream " + std::to_string(stream)}}));
    emit(metadata("thread_sort_index", device, tid, {{"sort_index", tid}}));
  }

  for (const Op& op : plan.ops) {
    const std::string kind(opKindName(op.kind));
    Json args{{"kind", kind}, {"microbatch", op.microbatch}, {"virtual_stage", op.virtualStage}, {"device", op.device}};
    if (op.samples > 0) args["samples"] = op.samples;
    emit(Json{{"name", kind + std::to_string(op.microbatch) + " (vs " + std::to_string(op.virtualStage) + ")"},
              {"cat", kind},
              {"ph", "X"},
              {"pid", op.device},
              {"tid", kComputeTid},
              {"ts", toUs(op.startMs)},
              {"dur", toUs(op.durationMs())},
              {"args", std::move(args)}});
  }
  for (const Comm& c : plan.comms) {
    // Short track labels: act, grad, frozen output, vocabulary (commPayloadName).
    const std::string_view payload = c.kind == OpKind::F                     ? std::string_view("act")
                                     : commPayloadName(c.kind) == "gradient" ? std::string_view("grad")
                                                                             : commPayloadName(c.kind);
    emit(Json{{"name", std::string(payload) + " " + std::to_string(c.microbatch) + " (vs " +
                           std::to_string(c.virtualStage) + ")"},
              {"cat", "comm"},
              {"ph", "X"},
              {"pid", c.fromDevice},
              {"tid", kLinkTidBase + c.toDevice},
              {"ts", toUs(c.startMs)},
              {"dur", toUs(c.endMs - c.startMs)},
              {"args",
               {{"kind", std::string(opKindName(c.kind))},
                {"microbatch", c.microbatch},
                {"virtual_stage", c.virtualStage},
                {"device", c.fromDevice},
                {"to_device", c.toDevice},
                {"bytes", c.bytes}}}});
  }
  for (const TraceActivity& a : options.activities) {
    emit(Json{{"name", a.name},
              {"cat", a.category},
              {"ph", "X"},
              {"pid", a.device},
              {"tid", kStreamTidBase + a.stream},
              {"ts", toUs(a.startMs)},
              {"dur", toUs(a.endMs - a.startMs)},
              {"args", {{"device", a.device}, {"stream", a.stream}}}});
  }

  emitFlows(plan, emit);

  // Memory curve per device as a counter track (MiB, so Perfetto's axis stays readable).
  if (!plan.ops.empty() && !plan.virtualStages.empty()) {
    const MemoryTimeline memory = memoryTimeline(plan);
    for (std::size_t d = 0; d < memory.devices.size(); ++d) {
      for (const MemoryPoint& point : memory.devices[d]) {
        emit(Json{{"name", "memory"},
                  {"ph", "C"},
                  {"pid", static_cast<int>(d)},
                  {"ts", toUs(point.timeMs)},
                  {"args", {{"MiB", static_cast<double>(point.bytes) / (1024.0 * 1024.0)}}}});
      }
    }
  }
}

Json chromeOtherData(const Plan& plan, const ChromeTraceOptions& options) {
  Json other{{"schedule", plan.config.schedule},
             {"devices", plan.config.devices},
             {"microbatches", plan.config.microbatches},
             {"makespan_ms", plan.metrics.makespanMs},
             {"bubble_ratio", plan.metrics.bubbleRatio}};
  if (!options.title.empty()) other["title"] = options.title;
  return other;
}

}  // namespace

Json chromeTraceJson(const Plan& plan, const ChromeTraceOptions& options) {
  Json events = Json::array();
  emitChromeEvents(plan, options, [&events](Json event) { events.push_back(std::move(event)); });
  return Json{
      {"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", chromeOtherData(plan, options)}};
}

Status writeChromeTrace(const std::string& path, const Plan& plan, const ChromeTraceOptions& options) {
  return writeOutputFile(path, [&](std::ostream& out, std::string&) {
    out << "{\"displayTimeUnit\":\"ms\",\"otherData\":"
        << chromeOtherData(plan, options).dump(-1, ' ', false, Json::error_handler_t::replace) << ",\"traceEvents\":[";
    bool first = true;
    emitChromeEvents(plan, options, [&](const Json& event) {
      out << (first ? "\n" : ",\n") << event.dump(-1, ' ', false, Json::error_handler_t::replace);
      first = false;
    });
    out << "\n]}\n";
    return static_cast<bool>(out);
  });
}

}  // namespace pipestudio
