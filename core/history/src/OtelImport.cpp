// Megatron-LM's OpenTelemetry spans (issue 46): an OTLP/JSON export (resourceSpans → scopeSpans →
// spans, times in Unix nanoseconds, as an OpenTelemetry collector's file exporter writes it) or a
// Jaeger JSON export (data[] → spans with processID, processes; times in microseconds, as Jaeger's
// UI and /api/traces give it). Megatron names its pipeline's spans (NVIDIA/Megatron-LM d98e8a64dd,
// docs/user-guide/observability/span-groups.md): `megatron.microbatch.forward` and
// `megatron.microbatch.backward` (forward_step and backward_step of
// megatron/core/pipeline_parallel/schedules.py), `megatron.p2p.{send,recv}_{forward,backward}`
// (p2p_communication.py), `megatron.train.iteration` (training.py's span around each train_step,
// group `step`, attribute `megatron.iteration`; Megatron's observability guide calls it
// `megatron.train_step`, a name no Megatron code emits, so only the emitted name is taken). A
// microbatch span names neither its microbatch nor its model chunk, so the k-th forward (backward)
// of a rank's iteration is the k-th forward (backward) op of that device in the plan's order,
// which is the order Megatron's schedule runs them; without a plan, stage = the rank's device and
// microbatch = k (one model chunk per rank). p2p spans are stored as communication events of the
// device. A process's pipeline rank is its `dl.pipeline_parallel.rank`, else its `dl.rank` or
// `rank` resource attribute (Kineto's rank rule), else its place (file on the command line, or
// process in a Jaeger export).
#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "Sqlite.hpp"
#include "TraceImportImpl.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::history::detail {
namespace {

// Megatron's per-iteration span (NVIDIA/Megatron-LM d98e8a64dd, megatron/training/training.py:
// `_otel_managed_span('step', 'megatron.train.iteration', ...)`); its children
// `megatron.train.iteration.forward_backward` and `.optimizer` are host ranges.
constexpr std::string_view kIterationSpan = "megatron.train.iteration";

struct Span {
  std::string name;
  std::int64_t startNs = 0;
  std::int64_t endNs = 0;
  std::string where;  ///< its JSON pointer, for messages
};

struct Process {
  std::optional<std::int64_t> rank;
  std::vector<Span> spans;
};

// An attribute value of OTLP ({"intValue": "3"} or {"stringValue": …}) or Jaeger ({"value": 3}).
std::optional<std::int64_t> integerValue(const Json& v) {
  const Json* x = &v;
  if (v.is_object()) {
    if (v.contains("intValue"))
      x = &v["intValue"];
    else if (v.contains("value"))
      x = &v["value"];
    else if (v.contains("stringValue"))
      x = &v["stringValue"];
    else
      return std::nullopt;
  }
  if (x->is_number_unsigned()) {
    const auto u = x->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(kMaxTraceClockBaseNs)) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (x->is_number_integer()) return x->get<std::int64_t>();
  if (x->is_string()) {
    // OTLP/JSON writes 64-bit integers as strings (Unix nanoseconds: 19 digits today).
    const auto& s = x->get_ref<const std::string&>();
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || n < 0 || n > kMaxTraceClockBaseNs) {
      return std::nullopt;
    }
    return n;
  }
  return std::nullopt;
}

// The pipeline rank a process's attributes name (the first of these keys that is an integer).
std::optional<std::int64_t> rankOf(const Json& attributes) {
  if (!attributes.is_array()) return std::nullopt;
  for (const char* key : {"dl.pipeline_parallel.rank", "dl.rank", "rank"}) {
    for (const Json& a : attributes) {
      if (!a.is_object() || !a.contains("key") || a["key"] != key) continue;
      if (auto v = integerValue(a.contains("value") ? a["value"] : a)) return v;
    }
  }
  return std::nullopt;
}

std::optional<std::int64_t> unixNanos(const Json& v) {
  if (v.is_number_unsigned() || v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_string()) return integerValue(v);
  return std::nullopt;
}

Error badSpan(const std::string& path, const std::string& where, const std::string& what) {
  return Error{path + ": " + where + ": " + what};
}

// OTLP/JSON: every resource is one process.
Expected<std::vector<Process>> readOtlp(const std::string& path, const Json& root) {
  std::vector<Process> out;
  const Json& resources = root["resourceSpans"];
  if (!resources.is_array()) return Error{path + ": /resourceSpans is not an array (expected OTLP/JSON)"};
  for (std::size_t r = 0; r < resources.size(); ++r) {
    const Json& rs = resources[r];
    Process p;
    if (rs.contains("resource") && rs["resource"].contains("attributes")) p.rank = rankOf(rs["resource"]["attributes"]);
    const Json& scopes = rs.contains("scopeSpans") ? rs["scopeSpans"] : Json::array();
    for (std::size_t s = 0; s < scopes.size(); ++s) {
      const Json& spans = scopes[s].contains("spans") ? scopes[s]["spans"] : Json::array();
      for (std::size_t i = 0; i < spans.size(); ++i) {
        const Json& span = spans[i];
        const std::string where =
            "/resourceSpans/" + std::to_string(r) + "/scopeSpans/" + std::to_string(s) + "/spans/" + std::to_string(i);
        if (!span.is_object() || !span.contains("name") || !span["name"].is_string()) {
          return badSpan(path, where, "a span without a name (expected name, startTimeUnixNano, endTimeUnixNano)");
        }
        const std::optional<std::int64_t> start = unixNanos(span.value("startTimeUnixNano", Json()));
        const std::optional<std::int64_t> end = unixNanos(span.value("endTimeUnixNano", Json()));
        if (!start || !end || *end < *start) {
          return badSpan(path, where,
                         "span '" + excerpt(span["name"].get<std::string>()) +
                             "' has no valid startTimeUnixNano / endTimeUnixNano (expected integers, end >= start)");
        }
        p.spans.push_back({span["name"].get<std::string>(), *start, *end, where});
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Jaeger JSON: spans of every trace, grouped by their process (processes of the same id across
// traces are one process).
Expected<std::vector<Process>> readJaeger(const std::string& path, const Json& root) {
  const Json& traces = root["data"];
  if (!traces.is_array()) return Error{path + ": /data is not an array (expected a Jaeger JSON export)"};
  std::map<std::string, Process> byId;
  std::vector<std::string> order;
  for (std::size_t t = 0; t < traces.size(); ++t) {
    const Json& trace = traces[t];
    const Json& processes = trace.contains("processes") ? trace["processes"] : Json::object();
    const Json& spans = trace.contains("spans") ? trace["spans"] : Json::array();
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const Json& span = spans[i];
      const std::string where = "/data/" + std::to_string(t) + "/spans/" + std::to_string(i);
      if (!span.is_object() || !span.contains("operationName") || !span["operationName"].is_string()) {
        return badSpan(path, where, "a span without an operationName (expected operationName, startTime, duration)");
      }
      const std::optional<std::int64_t> start = integerValue(span.value("startTime", Json()));
      const std::optional<std::int64_t> duration = integerValue(span.value("duration", Json()));
      const std::int64_t limitUs = kMaxTraceClockBaseNs / 1000;
      if (!start || !duration || *start < 0 || *duration < 0 || *start > limitUs || *duration > limitUs) {
        return badSpan(path, where,
                       "span '" + excerpt(span["operationName"].get<std::string>()) +
                           "' has no valid startTime / duration (expected microseconds, non-negative)");
      }
      const std::string id = span.contains("processID") && span["processID"].is_string()
                                 ? span["processID"].get<std::string>()
                                 : std::string();
      auto [it, inserted] = byId.try_emplace(id);
      if (inserted) {
        order.push_back(id);
        if (processes.contains(id) && processes[id].contains("tags")) it->second.rank = rankOf(processes[id]["tags"]);
      }
      const std::int64_t startUs = start.value_or(0);
      const std::int64_t endUs = startUs + duration.value_or(0);
      it->second.spans.push_back({span["operationName"].get<std::string>(), startUs * 1000, endUs * 1000, where});
    }
  }
  std::vector<Process> out;
  out.reserve(order.size());
  for (const std::string& id : order) out.push_back(std::move(byId[id]));
  return out;
}

Expected<std::vector<Process>> readOtelFile(const std::string& path) {
  JsonLimits limits;
  limits.maxDepth = 32;
  PS_ASSIGN_OR_RETURN(auto doc, loadJsonFile(path, limits));
  const Json& root = doc.root;
  if (!root.is_object()) return Error{path + ": expected an OTLP/JSON or Jaeger JSON object"};
  PS_ASSIGN_OR_RETURN(auto processes, root.contains("resourceSpans") ? readOtlp(path, root) : readJaeger(path, root));
  for (Process& p : processes) {
    std::stable_sort(p.spans.begin(), p.spans.end(),
                     [](const Span& a, const Span& b) { return a.startNs < b.startNs; });
  }
  return processes;
}

bool isMicrobatchSpan(std::string_view name) {
  return name == "megatron.microbatch.forward" || name == "megatron.microbatch.backward";
}

// The plan's forward and backward ops of `device`, in its order.
struct DeviceOrder {
  std::vector<const Op*> forwards, backwards;
};

std::map<int, DeviceOrder> planOrders(const Plan* plan) {
  std::map<int, DeviceOrder> out;
  if (!plan) return out;
  for (const Op& op : plan->ops) {
    if (op.kind == OpKind::F) out[op.device].forwards.push_back(&op);
    if (op.kind == OpKind::B || op.kind == OpKind::BW) out[op.device].backwards.push_back(&op);
  }
  return out;
}

}  // namespace

bool looksLikeOtel(std::string_view head) {
  return head.find("\"resourceSpans\"") != std::string_view::npos ||
         (head.find("\"data\"") != std::string_view::npos && head.find("\"traceID\"") != std::string_view::npos);
}

Expected<ScanResult> scanOtelFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(auto processes, readOtelFile(path));
  ScanResult s;
  s.format = TraceFormat::OtelJson;
  if (processes.size() == 1) s.rank = processes.front().rank;
  for (const Process& p : processes) {
    s.events += static_cast<std::int64_t>(p.spans.size());
    for (const Span& span : p.spans) {
      if (!s.firstAbsNs || span.startNs < *s.firstAbsNs) s.firstAbsNs = span.startNs;
    }
  }
  return s;
}

Expected<IngestCounts> ingestOtelFile(HistoryStore::Impl& im, RunId run, RunState& state, const FileContext& ctx) {
  PS_ASSIGN_OR_RETURN(auto processes, readOtelFile(ctx.path));
  const auto orders = planOrders(ctx.plan);
  IngestCounts counts;
  std::int64_t steps = 0;
  const auto skip = [&](const Span& span, const std::string& why) {
    ++counts.skipped;
    if (!counts.firstError) counts.firstError = ctx.path + ": " + span.where + ": " + why;
  };
  for (std::size_t p = 0; p < processes.size(); ++p) {
    const Process& process = processes[p];
    // One process per file: the file's device; several (a Jaeger export): each its own rank.
    std::int64_t device = processes.size() == 1 && ctx.device ? *ctx.device
                          : process.rank                      ? *process.rank
                                                              : static_cast<std::int64_t>(p);
    const auto order = orders.find(static_cast<int>(device));
    std::int64_t forwards = 0, backwards = 0;
    for (const Span& span : process.spans) {
      EventRow row;
      row.name = span.name;
      row.durationNs = span.endNs - span.startNs;
      row.device = device;
      if (span.name == kIterationSpan) {
        forwards = backwards = 0;  // a new iteration: the plan's order starts again
        row.category = EventCategory::Cpu;
        row.device = -1;
      } else if (isMicrobatchSpan(span.name)) {
        const bool forward = span.name == "megatron.microbatch.forward";
        std::int64_t& k = forward ? forwards : backwards;
        row.category = EventCategory::Op;
        if (order != orders.end()) {
          const auto& ops = forward ? order->second.forwards : order->second.backwards;
          if (k >= static_cast<std::int64_t>(ops.size())) {
            // More microbatch spans than the plan has ops: the plan's count starts again (a
            // trace without iteration spans), the k-th op of the next iteration.
            k = 0;
          }
          if (ops.empty()) {
            skip(span, "device " + std::to_string(device) + " has no " + (forward ? "forward" : "backward") +
                           " op in the plan");
            continue;
          }
          const Op& op = *ops[static_cast<std::size_t>(k)];
          row.virtualStage = op.virtualStage;
          row.microbatch = op.microbatch;
          row.kind = static_cast<int>(op.kind);
        } else {
          row.virtualStage = device;
          row.microbatch = k;
          row.kind = static_cast<int>(forward ? OpKind::F : OpKind::BW);
        }
        row.name = opKindName(static_cast<OpKind>(row.kind));
        ++k;
      } else if (span.name.rfind("megatron.p2p.", 0) == 0) {
        row.category = EventCategory::Nccl;
      } else {
        row.category = EventCategory::Cpu;
        row.device = -1;
      }
      const auto start = checkedSub(span.startNs, state.originNs);
      if (!start) {
        skip(span, "start " + std::to_string(span.startNs) + " ns does not fit on the run's clock");
        continue;
      }
      row.startNs = *start;
      if (auto problem = eventRowProblem(row)) {
        skip(span, *problem);
        continue;
      }
      PS_RETURN_IF_ERROR(im.insert(run, state, row));
      ++counts.stored;
      // Each iteration span of the first process of the first file is a step of the run.
      if (span.name == kIterationSpan && ctx.recordSteps && p == 0) {
        Statement& s = im.insertStep;
        s.bind(1, run);
        s.bind(2, ++steps);
        s.bind(3, static_cast<double>(row.durationNs) / 1e6);
        const int rc = s.step();
        s.reset();
        if (rc != SQLITE_DONE) return Error{im.path + ": " + lastError(im.db)};
      }
    }
  }
  return counts;
}

}  // namespace pipestudio::history::detail
