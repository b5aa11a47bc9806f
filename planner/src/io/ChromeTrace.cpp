// Chrome trace export: the "JSON Object Format" of the Trace Event Format (Google, "Trace Event
// Format" document): complete events (ph X) with µs timestamps, metadata events (ph M) naming
// processes and threads, counter events (ph C) for the memory curve. Perfetto and
// chrome://tracing both read it.
#include <algorithm>
#include "pipestudio/plan/Costs.hpp"
#include <set>
#include <string>
#include <utility>

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

}  // namespace

Json chromeTraceJson(const Plan& plan, const ChromeTraceOptions& options) {
  Json events = Json::array();
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
        label += " (" + plan.cluster.nodes[static_cast<std::size_t>(node)].host + ")";
      }
    }
    events.push_back(metadata("process_name", d, 0, {{"name", label}}));
    events.push_back(metadata("process_sort_index", d, 0, {{"sort_index", d}}));
    events.push_back(metadata("thread_name", d, kComputeTid, {{"name", "compute"}}));
    events.push_back(metadata("thread_sort_index", d, kComputeTid, {{"sort_index", 0}}));
  }
  for (const auto& [from, to] : links) {
    const int tid = kLinkTidBase + to;
    events.push_back(metadata("thread_name", from, tid, {{"name", "send → device " + std::to_string(to)}}));
    events.push_back(metadata("thread_sort_index", from, tid, {{"sort_index", tid}}));
  }
  for (const auto& [device, stream] : streams) {
    const int tid = kStreamTidBase + stream;
    events.push_back(metadata("thread_name", device, tid, {{"name", "stream " + std::to_string(stream)}}));
    events.push_back(metadata("thread_sort_index", device, tid, {{"sort_index", tid}}));
  }

  for (const Op& op : plan.ops) {
    const std::string kind(opKindName(op.kind));
    Json args{{"kind", kind}, {"microbatch", op.microbatch}, {"virtual_stage", op.virtualStage},
              {"device", op.device}};
    if (op.samples > 0) args["samples"] = op.samples;
    events.push_back(Json{{"name", kind + std::to_string(op.microbatch) + " (vs " + std::to_string(op.virtualStage) + ")"},
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
    const std::string_view payload = c.kind == OpKind::F   ? std::string_view("act")
                                     : commPayloadName(c.kind) == "gradient" ? std::string_view("grad")
                                                                             : commPayloadName(c.kind);
    events.push_back(
        Json{{"name", std::string(payload) + " " + std::to_string(c.microbatch) + " (vs " +
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
    events.push_back(Json{{"name", a.name},
                          {"cat", a.category},
                          {"ph", "X"},
                          {"pid", a.device},
                          {"tid", kStreamTidBase + a.stream},
                          {"ts", toUs(a.startMs)},
                          {"dur", toUs(a.endMs - a.startMs)},
                          {"args", {{"device", a.device}, {"stream", a.stream}}}});
  }

  // Memory curve per device as a counter track (MiB, so Perfetto's axis stays readable).
  if (!plan.ops.empty() && !plan.virtualStages.empty()) {
    const MemoryTimeline memory = memoryTimeline(plan);
    for (std::size_t d = 0; d < memory.devices.size(); ++d) {
      for (const MemoryPoint& point : memory.devices[d]) {
        events.push_back(Json{{"name", "memory"},
                              {"ph", "C"},
                              {"pid", static_cast<int>(d)},
                              {"ts", toUs(point.timeMs)},
                              {"args", {{"MiB", static_cast<double>(point.bytes) / (1024.0 * 1024.0)}}}});
      }
    }
  }

  Json other{{"schedule", plan.config.schedule},
             {"devices", plan.config.devices},
             {"microbatches", plan.config.microbatches},
             {"makespan_ms", plan.metrics.makespanMs},
             {"bubble_ratio", plan.metrics.bubbleRatio}};
  if (!options.title.empty()) other["title"] = options.title;
  return Json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
}

Status writeChromeTrace(const std::string& path, const Plan& plan, const ChromeTraceOptions& options) {
  return saveJsonFile(path, chromeTraceJson(plan, options), -1);
}

}  // namespace pipestudio
