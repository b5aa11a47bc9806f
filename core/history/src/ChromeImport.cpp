// Chrome trace JSON import (Trace Event Format, as written by PipeStudio's export, the PyTorch
// profiler / Kineto and Perfetto's JSON export). Parsed by our streaming SAX parser
// (JsonSax.hpp; it replaced nlohmann::json::sax_parse, whose lexer was half the import time)
// and the handler below: only the event being read is held in memory (plus open B ranges),
// never the document, so a 1 GB trace imports in bounded memory.

#include <zlib.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "Impl.hpp"
#include "JsonSax.hpp"
#include "TraceImportImpl.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::history {

namespace {

// Appends JSON text for the `args` of the current event (compact, keys in input order).
class ArgsWriter {
 public:
  static constexpr std::size_t kMaxArgsBytes = std::size_t{64} * 1024;  // larger args are dropped, the event kept
  void clear() {
    m_out.clear();
    m_stack.clear();
    m_needComma = false;
    m_tooBig = false;
  }
  void key(const std::string& k) {
    if (m_needComma) m_out += ',';
    quote(k);
    m_out += ':';
    m_needComma = false;
  }
  void scalar(std::string_view text) {
    prefix();
    m_out.append(text);
    m_needComma = true;
    check();
  }
  void string(const std::string& s) {
    prefix();
    quote(s);
    m_needComma = true;
    check();
  }
  void open(char c) {
    prefix();
    m_out += c;
    m_stack.push_back(c);
    m_needComma = false;
  }
  void close(char c) {
    m_out += c;
    if (!m_stack.empty()) m_stack.pop_back();
    m_needComma = true;
  }
  std::string_view result() const { return m_tooBig ? std::string_view() : std::string_view(m_out); }

 private:
  void prefix() {
    if (!m_stack.empty() && m_stack.back() == '[' && m_needComma) m_out += ',';
  }
  void check() {
    if (m_out.size() > kMaxArgsBytes) m_tooBig = true;
  }
  void quote(const std::string& s) {
    // JSON string escaping (RFC 8259 §7): quote, backslash and control characters. The text
    // came out of a JSON parser, so it is already valid UTF-8.
    m_out += '"';
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        m_out += '\\';
        m_out += c;
      } else if (u < 0x20) {
        static constexpr std::string_view kHex = "0123456789abcdef";
        m_out += "\\u00";
        m_out += kHex[u >> 4];
        m_out += kHex[u & 15];
      } else {
        m_out += c;
      }
    }
    m_out += '"';
  }
  std::string m_out;
  std::vector<char> m_stack;
  bool m_needComma = false;
  bool m_tooBig = false;
};

struct PendingEvent {
  std::string ph;
  std::string name;
  std::string cat;
  std::optional<double> tsUs;
  std::optional<double> durUs;
  std::optional<std::int64_t> pid;
  std::optional<std::int64_t> tid;
  std::string pidText;
  std::string tidText;
  std::optional<std::int64_t> argDevice;
  std::optional<std::int64_t> argMicrobatch;
  std::optional<std::int64_t> argVirtualStage;
  std::optional<std::int64_t> argIteration;
  std::optional<std::int64_t> argStream;
  std::optional<std::int64_t> argCorrelation;
  std::optional<std::int64_t> argBytes;
  std::string argKind;
  std::string args;
  std::uint64_t offset = 0;

  /// Back to a default event but keeping the strings' capacity (no allocations per event).
  void reset() {
    for (std::string* str : {&ph, &name, &cat, &pidText, &tidText, &argKind, &args}) str->clear();
    tsUs.reset();
    durUs.reset();
    pid.reset();
    tid.reset();
    argDevice.reset();
    argMicrobatch.reset();
    argVirtualStage.reset();
    argIteration.reset();
    argStream.reset();
    argCorrelation.reset();
    argBytes.reset();
    offset = 0;
  }
};

// Keys the importer reads, classified once per key callback so the value callbacks switch on
// an enum instead of comparing strings (those comparisons were ~7% of the import profile).
enum class EventKey { Other, Ph, Name, Cat, Pid, Tid, Ts, Dur, Args };
enum class ArgKey { Other, Device, Microbatch, VirtualStage, Iteration, Stream, Correlation, Bytes, Kind };

EventKey classifyEventKey(std::string_view k) {
  if (k == "ph") return EventKey::Ph;
  if (k == "name") return EventKey::Name;
  if (k == "cat") return EventKey::Cat;
  if (k == "pid") return EventKey::Pid;
  if (k == "tid") return EventKey::Tid;
  if (k == "ts") return EventKey::Ts;
  if (k == "dur") return EventKey::Dur;
  if (k == "args") return EventKey::Args;
  return EventKey::Other;
}

ArgKey classifyArgKey(std::string_view k) {
  if (k == "device") return ArgKey::Device;
  if (k == "microbatch") return ArgKey::Microbatch;
  if (k == "virtual_stage") return ArgKey::VirtualStage;
  if (k == "iteration") return ArgKey::Iteration;
  if (k == "stream") return ArgKey::Stream;
  if (k == "correlation") return ArgKey::Correlation;
  if (k == "bytes") return ArgKey::Bytes;
  if (k == "kind") return ArgKey::Kind;
  return ArgKey::Other;
}

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool containsNoCase(std::string_view s, std::string_view needle) {
  if (needle.size() > s.size()) return false;
  for (std::size_t i = 0; i + needle.size() <= s.size(); ++i) {
    std::size_t k = 0;
    // ASCII folding inline: std::tolower is a locale-aware call per byte on the hot path.
    while (k < needle.size()) {
      const char c = s[i + k];
      if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != needle[k]) break;
      ++k;
    }
    if (k == needle.size()) return true;
  }
  return false;
}

class ChromeHandler {
 public:
  ChromeHandler(HistoryStore::Impl& im, RunId run, RunState& state, detail::JsonFileReader& file, std::string path,
                const detail::FileContext* ctx = nullptr)
      : m_im(im), m_run(run), m_state(state), m_file(file), m_path(std::move(path)), m_ctx(ctx) {}

  // --- JsonSaxParser handler interface (JsonSax.hpp): its names, nlohmann's SAX names ---
  // NOLINTBEGIN(readability-identifier-naming)
  bool null() { return scalarValue("null", {}); }
  bool boolean(bool v) { return scalarValue(v ? "true" : "false", {}); }
  // `text` is the number as written: kept verbatim inside "args".
  bool number_integer(std::int64_t v, std::string_view text) { return numberValue(static_cast<double>(v), v, text); }
  bool number_unsigned(std::uint64_t v, std::string_view text) {
    const auto clamped = static_cast<std::int64_t>(std::min<std::uint64_t>(v, INT64_MAX));
    return numberValue(static_cast<double>(v), clamped, text);
  }
  bool number_float(double v, std::string_view text) {
    std::optional<std::int64_t> asInt;
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) asInt = static_cast<std::int64_t>(v);
    return numberValue(v, asInt, text);
  }
  bool string(std::string& v) {
    if (m_argsDepth > 0 && m_depth >= m_argsDepth) {
      m_args.string(v);
      if (m_depth == m_argsDepth && m_argKey == ArgKey::Kind) m_event.argKind.assign(v);
      return true;
    }
    if (inEventLevel()) {
      // assign, not move: moving would take the lexer's token buffer and the event's own
      // buffer, costing two allocations per string field on the next event.
      switch (m_eventKeyId) {
        case EventKey::Ph:
          m_event.ph.assign(v);
          break;
        case EventKey::Name:
          m_event.name.assign(v);
          break;
        case EventKey::Cat:
          m_event.cat.assign(v);
          break;
        case EventKey::Pid:
          m_event.pidText.assign(v);
          break;
        case EventKey::Tid:
          m_event.tidText.assign(v);
          break;
        case EventKey::Ts:
        case EventKey::Dur:
          m_eventBad = "\"" + m_eventKey + "\" is a string (expected a number)";
          break;
        default:
          break;
      }
    } else if (m_eventsDepth > 0 && m_depth == m_eventsDepth) {
      noteSkip("a string in traceEvents (expected an event object)");
    }
    return true;
  }
  bool start_object() {
    ++m_depth;
    if (m_depth == 1) {
      m_rootIsObject = true;
      return true;
    }
    if (m_argsDepth > 0 && m_depth > m_argsDepth) {
      m_args.open('{');
      return true;
    }
    if (m_eventsDepth > 0 && m_depth == m_eventsDepth + 1) {
      m_inEvent = true;
      m_event.reset();
      m_eventBad.clear();
      m_event.offset = m_file.offset() > 0 ? m_file.offset() - 1 : 0;
      m_args.clear();
      return true;
    }
    if (m_inEvent && m_depth == m_eventsDepth + 2 && m_eventKeyId == EventKey::Args) {
      m_argsDepth = m_depth;
      m_args.open('{');
    }
    return true;
  }
  bool key(std::string& k) {
    if (m_argsDepth > 0 && m_depth >= m_argsDepth) {
      m_args.key(k);
      if (m_depth == m_argsDepth) m_argKey = classifyArgKey(k);
      return true;
    }
    if (m_inEvent && m_depth == m_eventsDepth + 1) {
      m_eventKey.assign(k);
      m_eventKeyId = classifyEventKey(m_eventKey);
    } else if (m_depth == 1) {
      m_rootKey = std::move(k);
    }
    return true;
  }
  bool end_object() {
    if (m_argsDepth > 0 && m_depth >= m_argsDepth) {
      m_args.close('}');
      if (m_depth == m_argsDepth) {
        m_argsDepth = 0;
        m_event.args.assign(m_args.result());
      }
    } else if (m_inEvent && m_depth == m_eventsDepth + 1) {
      m_inEvent = false;
      if (!finishEvent()) return false;
    }
    --m_depth;
    return true;
  }
  bool start_array() {
    ++m_depth;
    if (m_argsDepth > 0 && m_depth > m_argsDepth) {
      m_args.open('[');
      return true;
    }
    if (m_eventsDepth == 0 && ((m_depth == 1) || (m_depth == 2 && m_rootIsObject && m_rootKey == "traceEvents"))) {
      m_eventsDepth = m_depth;
      m_sawEvents = true;
    } else if (m_eventsDepth > 0 && m_depth == m_eventsDepth + 1) {
      noteSkip("an array in traceEvents (expected an event object)");
    }
    return true;
  }
  bool end_array() {
    if (m_argsDepth > 0 && m_depth > m_argsDepth) {
      m_args.close(']');
    } else if (m_eventsDepth > 0 && m_depth == m_eventsDepth) {
      m_eventsDepth = 0;  // a later traceEvents-like array is not read
    }
    --m_depth;
    return true;
  }
  bool parse_error(std::uint64_t position, const std::string& what) {
    m_parseError = m_path + ": byte " + std::to_string(position) + ": " + what;
    if (m_inEvent) ++m_skipped;  // the event cut by the error
    return false;
  }
  // NOLINTEND(readability-identifier-naming)

  // --- results ---
  std::int64_t stored() const { return m_stored; }
  std::int64_t skipped() const { return m_skipped; }
  const std::optional<std::string>& firstError() const { return m_firstError; }
  const std::optional<std::string>& parseError() const { return m_parseError; }
  bool sawEvents() const { return m_sawEvents; }
  const Status& dbStatus() const { return m_db; }

  /// B ranges never closed count as skipped.
  void finishOpenRanges() {
    for (auto& [key, stack] : m_open) {
      for (const auto& ev : stack) noteSkip(R"(a "B" event without its "E")", ev.offset);
    }
    m_open.clear();
    m_openBytes = 0;
  }

 private:
  bool inArgs() const { return m_argsDepth > 0 && m_depth >= m_argsDepth; }
  bool inEventLevel() const { return m_inEvent && m_depth == m_eventsDepth + 1 && m_argsDepth == 0; }

  bool scalarValue(std::string_view text, std::optional<double>) {
    if (m_argsDepth > 0 && m_depth >= m_argsDepth) {
      m_args.scalar(text);
    } else if (m_eventsDepth > 0 && m_depth == m_eventsDepth && !m_inEvent) {
      noteSkip("a scalar in traceEvents (expected an event object)");
    } else if (inEventLevel() && (m_eventKeyId == EventKey::Ts || m_eventKeyId == EventKey::Dur)) {
      m_eventBad = "\"" + m_eventKey + "\" is " + std::string(text) + " (expected a number)";
    }
    return true;
  }

  bool numberValue(double v, std::optional<std::int64_t> asInt, std::string_view text) {
    if (m_argsDepth > 0 && m_depth >= m_argsDepth) {
      m_args.scalar(text);
      if (m_depth == m_argsDepth && asInt) {
        switch (m_argKey) {
          case ArgKey::Device:
            m_event.argDevice = asInt;
            break;
          case ArgKey::Microbatch:
            m_event.argMicrobatch = asInt;
            break;
          case ArgKey::VirtualStage:
            m_event.argVirtualStage = asInt;
            break;
          case ArgKey::Iteration:
            m_event.argIteration = asInt;
            break;
          case ArgKey::Stream:
            m_event.argStream = asInt;
            break;
          case ArgKey::Correlation:
            m_event.argCorrelation = asInt;
            break;
          case ArgKey::Bytes:
            m_event.argBytes = asInt;
            break;
          default:
            break;
        }
      }
      return true;
    }
    if (inEventLevel()) {
      switch (m_eventKeyId) {
        case EventKey::Ts:
          m_event.tsUs = v;
          break;
        case EventKey::Dur:
          m_event.durUs = v;
          break;
        case EventKey::Pid:
          m_event.pid = asInt;
          break;
        case EventKey::Tid:
          m_event.tid = asInt;
          break;
        default:
          break;
      }
    } else if (m_eventsDepth > 0 && m_depth == m_eventsDepth && !m_inEvent) {
      noteSkip("a number in traceEvents (expected an event object)");
    }
    return true;
  }

  void noteSkip(const std::string& what, std::optional<std::uint64_t> at = std::nullopt) {
    ++m_skipped;
    if (!m_firstError) {
      m_firstError = m_path + ": byte " + std::to_string(at.value_or(m_file.offset())) + ": " + what;
    }
  }

  static std::int64_t toNs(double us) { return std::llround(us * 1000.0); }
  // What an open "B" range keeps in memory until its "E".
  static std::size_t heldBytes(const PendingEvent& e) {
    return sizeof(PendingEvent) + e.ph.size() + e.name.size() + e.cat.size() + e.pidText.size() + e.tidText.size() +
           e.argKind.size() + e.args.size();
  }
  static constexpr std::size_t kMaxOpenRangeBytes = std::size_t{256} << 20;
  std::int64_t baseNs() const { return m_ctx ? m_ctx->baseNs : 0; }

  // A pipelining annotation (PP:<action> or the user's pattern) on the lane ops are taken
  // from: stored as an op range (compute) or a host range naming its stage and microbatch
  // (communication and the other runtime actions). Returns false when `e` is none of these.
  bool storeAnnotation(const PendingEvent& e, std::int64_t absStartNs, std::int64_t durNs, bool& ok) {
    const bool gpuLane = e.cat == "gpu_user_annotation";
    if (gpuLane != m_ctx->useGpuAnnotations) return false;
    if (!gpuLane && (containsNoCase(e.cat, "kernel") || e.cat == "gpu_memcpy" || e.cat == "gpu_memset")) return false;
    const auto name = m_ctx->matcher->match(e.name);
    if (!name) return false;
    EventRow row;
    row.durationNs = durNs;
    row.stream = e.tid.value_or(0);
    row.argsJson = e.args;
    row.virtualStage = name->stage;
    row.microbatch = name->microbatch;
    const auto kind = detail::computeKind(name->kindText, m_ctx->legacy);
    if (kind) {
      row.category = EventCategory::Op;
      row.name = opKindName(*kind);
      row.kind = static_cast<int>(*kind);
      row.device = m_ctx->opDevice(name->stage);
    } else {
      row.category = EventCategory::Cpu;
      row.name = name->kindText;
      row.device = m_ctx->device.value_or(m_ctx->opDevice(name->stage));
    }
    ok = insertRow(e, row, absStartNs);
    return true;
  }

  // The one way an event is stored: its start moved onto the run's clock (checked), its ids
  // and times within what eventRowProblem accepts; an event outside is skipped and named.
  // Returns false only for a database failure (kept in m_db), which stops the parse.
  bool insertRow(const PendingEvent& e, EventRow& row, std::int64_t absStartNs) {
    std::optional<std::string> problem;
    if (const auto start = checkedSub(absStartNs, m_state.originNs)) {
      row.startNs = *start;
      problem = eventRowProblem(row);
    } else {
      problem = "start " + std::to_string(absStartNs) + " ns does not fit 64 bits on the run's clock";
    }
    if (problem) {
      noteSkip("\"" + e.ph + R"(" event ")" + excerpt(e.name) + "\": " + *problem, e.offset);
      return true;
    }
    if (auto st = m_im.insert(m_run, m_state, row); !st) {
      m_db = st;
      return false;  // stops the parse: the database is the problem, not the file
    }
    ++m_stored;
    return true;
  }

  // Times and durations are stored as int64 nanoseconds: a value past ±2^61 ns (73 years) is
  // refused (the event is skipped and named) rather than wrapped to a negative duration;
  // start + duration then still fits.
  static constexpr double kMaxAbsUs = 2305843009213693.0;  // 2^61 ns in µs
  static bool representable(double us) { return std::isfinite(us) && std::fabs(us) <= kMaxAbsUs; }
  static std::string usText(double us) {
    std::array<char, 40> buf{};
    std::snprintf(buf.data(), buf.size(), "%g", us);
    return buf.data();
  }

  bool finishEvent() {
    PendingEvent& e = m_event;
    if (!m_eventBad.empty()) {
      noteSkip("event skipped: " + m_eventBad, e.offset);
      return true;
    }
    const std::string& ph = e.ph;
    if (ph == "X" || ph == "B" || ph == "E") {
      if (!e.tsUs || !std::isfinite(*e.tsUs)) {
        noteSkip("\"" + ph + R"(" event without a numeric "ts")", e.offset);
        return true;
      }
      if (!representable(*e.tsUs)) {
        noteSkip("\"" + ph + R"(" event ")" + excerpt(e.name) + R"(": "ts" )" + usText(*e.tsUs) +
                     " µs is out of range (expected at most " + usText(kMaxAbsUs) + " µs in magnitude)",
                 e.offset);
        return true;
      }
    }
    if ((ph == "X" || ph == "B") && !m_state.originKnown) {
      // Stored times count from the first range's start (Kineto's are epoch microseconds).
      m_state.originKnown = true;
      m_state.originNs = toNs(*e.tsUs) + baseNs();
      m_state.dirty = true;
    }
    if (ph == "X") {
      if (!e.durUs || !std::isfinite(*e.durUs) || *e.durUs < 0) {
        noteSkip(R"("X" event ")" + excerpt(e.name) + R"(" without a non-negative "dur")", e.offset);
        return true;
      }
      if (!representable(*e.durUs)) {
        noteSkip(R"("X" event ")" + excerpt(e.name) + R"(": "dur" )" + usText(*e.durUs) +
                     " µs is out of range (expected at most " + usText(kMaxAbsUs) + " µs, 73 years)",
                 e.offset);
        return true;
      }
      return store(e, toNs(*e.tsUs) + baseNs(), toNs(*e.durUs));
    }
    const std::string key =
        (e.pid ? std::to_string(*e.pid) : e.pidText) + '/' + (e.tid ? std::to_string(*e.tid) : e.tidText);
    if (ph == "B") {
      auto& stack = m_open[key];
      if (stack.size() >= 4096) {
        noteSkip(R"("B" events nested deeper than 4096)", e.offset);
        return true;
      }
      const std::size_t bytes = heldBytes(e);
      if (m_openBytes + bytes > kMaxOpenRangeBytes) {
        noteSkip(R"("B" event ")" + excerpt(e.name) + "\": the ranges left open hold more than " +
                     std::to_string(kMaxOpenRangeBytes) + R"( bytes (expected their "E" events))",
                 e.offset);
        return true;
      }
      m_openBytes += bytes;
      stack.push_back(std::move(e));
      return true;
    }
    if (ph == "E") {
      auto it = m_open.find(key);
      if (it == m_open.end() || it->second.empty()) {
        noteSkip(R"("E" event without a matching "B")", e.offset);
        return true;
      }
      PendingEvent b = std::move(it->second.back());
      it->second.pop_back();
      m_openBytes -= heldBytes(b);
      const std::int64_t startNs = toNs(*b.tsUs) + baseNs();
      const std::int64_t endNs = toNs(*e.tsUs) + baseNs();
      if (endNs < startNs) {
        noteSkip(R"("E" event before its "B")", e.offset);
        return true;
      }
      if (b.args.empty()) b.args = std::move(e.args);
      return store(b, startNs, endNs - startNs);
    }
    // Metadata (M), instant (i/I), counter (C), flow (s/t/f), async (b/e/n) and object events
    // carry no duration on a device lane: not measured events, not errors either.
    if (ph.empty()) noteSkip(R"(event without "ph")", e.offset);
    return true;
  }

  bool store(const PendingEvent& e, std::int64_t absStartNs, std::int64_t durNs) {
    if (m_ctx && m_ctx->matcher) {
      bool ok = true;
      if (storeAnnotation(e, absStartNs, durNs, ok)) return ok;
    }
    EventRow row;
    row.name = e.name;
    row.durationNs = durNs;
    row.stream = e.argStream.value_or(e.tid.value_or(0));
    row.correlationId = e.argCorrelation.value_or(0);
    row.bytes = e.argBytes.value_or(0);
    row.argsJson = e.args;
    const auto opKind = opKindFromName(e.argKind);
    // Our export and Kineto give the device in args; Kineto GPU lanes also use it as pid.
    std::int64_t device = -1;
    if (e.argDevice) {
      device = *e.argDevice;
    } else if (opKind && e.pid) {
      device = *e.pid;
    }
    const std::string& cat = e.cat;
    if (opKind && device >= 0) {
      row.category = EventCategory::Op;
      row.name = opKindName(*opKind);
      row.kind = static_cast<int>(*opKind);
      row.microbatch = e.argMicrobatch.value_or(-1);
      row.virtualStage = e.argVirtualStage.value_or(-1);
      row.iteration = e.argIteration.value_or(-1);
    } else if (containsNoCase(e.name, "nccl")) {
      row.category = EventCategory::Nccl;
    } else if (cat == "gpu_memcpy" || startsWith(e.name, "Memcpy") || startsWith(e.name, "memcpy")) {
      row.category = EventCategory::Memcpy;
    } else if (cat == "gpu_memset" || startsWith(e.name, "Memset") || startsWith(e.name, "memset")) {
      row.category = EventCategory::Memset;
    } else if (containsNoCase(cat, "kernel")) {
      row.category = EventCategory::Kernel;
    } else if (cat == "cuda_runtime" || cat == "cuda_driver" || containsNoCase(cat, "runtime")) {
      row.category = EventCategory::Runtime;
    } else {
      row.category = EventCategory::Cpu;
    }
    const bool gpuSide = row.category != EventCategory::Runtime && row.category != EventCategory::Cpu;
    if (device < 0 && gpuSide && e.pid && *e.pid >= 0 && *e.pid < 4096) device = *e.pid;  // Kineto GPU pid
    if (m_ctx && m_ctx->device && gpuSide && row.category != EventCategory::Op) device = *m_ctx->device;
    // GPU annotation lanes (ProfilerStep#N, unmatched ranges) belong to the file's device.
    const bool gpuAnnotation = m_ctx && m_ctx->device && e.cat == "gpu_user_annotation";
    row.device = gpuSide || row.category == EventCategory::Op ? device : -1;
    if (gpuAnnotation) row.device = *m_ctx->device;
    const std::int64_t storedBefore = m_stored;
    if (!insertRow(e, row, absStartNs)) return false;
    if (m_stored == storedBefore) return true;  // skipped: no step either
    // Kineto marks each training step with a "ProfilerStep#N" range (host lane; one rank's).
    if (startsWith(e.name, "ProfilerStep#") && (!m_ctx || (m_ctx->recordSteps && e.cat != "gpu_user_annotation"))) {
      auto stored = storeProfilerStep(m_im, m_run, e.name, durNs);
      if (!stored) {
        m_db = stored.error();
        return false;
      }
      if (*stored) ++m_steps;
    }
    return true;
  }

  using Statement = detail::Statement;
  HistoryStore::Impl& m_im;
  RunId m_run;
  RunState& m_state;
  detail::JsonFileReader& m_file;
  std::string m_path;
  const detail::FileContext* m_ctx = nullptr;

  int m_depth = 0;
  bool m_rootIsObject = false;
  std::string m_rootKey;
  int m_eventsDepth = 0;
  bool m_sawEvents = false;
  bool m_inEvent = false;
  std::string m_eventKey;
  EventKey m_eventKeyId = EventKey::Other;
  std::string m_eventBad;
  int m_argsDepth = 0;
  ArgKey m_argKey = ArgKey::Other;
  ArgsWriter m_args;
  PendingEvent m_event;
  std::map<std::string, std::vector<PendingEvent>> m_open;
  std::size_t m_openBytes = 0;

  std::int64_t m_stored = 0;
  std::int64_t m_skipped = 0;
  std::int64_t m_steps = 0;
  std::optional<std::string> m_firstError;
  std::optional<std::string> m_parseError;
  Status m_db;
};

}  // namespace

Expected<ImportResult> HistoryStore::importChromeTrace(const std::string& file, RunInfo info) {
  PS_RETURN_IF_ERROR(checkRegularFile(file));  // a FIFO would block the open
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return Error{file + ": cannot open"};
  struct Closer {
    std::FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  if (info.source.empty()) info.source = "chrome";
  if (info.sourcePath.empty()) info.sourcePath = file;
  PS_ASSIGN_OR_RETURN(auto run, beginRun(info));
  PS_ASSIGN_OR_RETURN(auto state, m_impl->runState(run));
  detail::JsonFileReader input(f);
  ChromeHandler handler(*m_impl, run, *state, input, file);
  detail::JsonSaxParser<ChromeHandler> parser(input, handler);
  // After the document only whitespace may follow: anything else marks the file as cut or
  // damaged (what was read before it is kept, the run incomplete).
  const bool ok = parser.parse() && parser.expectEnd();
  if (!handler.dbStatus()) {
    (void)finishRun(run, RunStatus::Incomplete, handler.dbStatus().message());
    return handler.dbStatus().error();
  }
  if (parser.refused()) {
    (void)deleteRun(run);
    return Error{handler.parseError().value_or(file + ": refused")};
  }
  handler.finishOpenRanges();
  ImportResult result;
  result.runId = run;
  result.events = handler.stored();
  result.skipped = handler.skipped();
  // Skips are noted while parsing, so any of them lies before the parse error (which ends it).
  result.firstError = handler.firstError() ? handler.firstError() : handler.parseError();
  if (handler.stored() == 0 && (!ok || !handler.sawEvents() || handler.skipped() > 0)) {
    // Nothing stored from a file that is not a trace, is cut before its first event, or whose
    // every event was refused: a failed import, no empty run left behind. (A complete trace
    // with an empty event list is a valid, empty run.)
    (void)deleteRun(run);
    if (handler.skipped() > 0) {
      return Error{file + ": no event could be stored: " + std::to_string(handler.skipped()) +
                   " event(s) skipped, first: " + handler.firstError().value_or("")};
    }
    if (handler.parseError()) return Error{*handler.parseError() + " (no trace events could be read)"};
    return Error{file +
                 ": no trace events (expected a Chrome trace: a JSON array of events or an object with a "
                 R"("traceEvents" array))"};
  }
  std::string note;
  if (handler.parseError()) note = *handler.parseError();
  if (result.skipped > 0) {
    if (!note.empty()) note += "; ";
    note += std::to_string(result.skipped) + " event(s) skipped, first: " + handler.firstError().value_or("");
  }
  PS_RETURN_IF_ERROR(finishRun(run, ok ? RunStatus::Complete : RunStatus::Incomplete, note));
  return result;
}

}  // namespace pipestudio::history

// ---- Kineto / Chrome files for importTraces (TraceImport.hpp) --------------------------------

namespace pipestudio::history::detail {

namespace {

// The first read of a Chrome/Kineto file: the header facts (baseTimeNanoseconds, the rank in
// distributedInfo, which may come after traceEvents) and what the op names look like.
class ScanHandler {
 public:
  ScanHandler(const OpMatcher& matcher, std::string path) : m_matcher(matcher), m_path(std::move(path)) {}

  // JsonSaxParser's handler interface (nlohmann's SAX names).
  // NOLINTBEGIN(readability-identifier-naming)
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(std::int64_t v, std::string_view text) { return number(static_cast<double>(v), v, text); }
  bool number_unsigned(std::uint64_t v, std::string_view text) {
    if (v > static_cast<std::uint64_t>(INT64_MAX)) return number(static_cast<double>(v), std::nullopt, text);
    return number(static_cast<double>(v), static_cast<std::int64_t>(v), text);
  }
  bool number_float(double v, std::string_view text) {
    std::optional<std::int64_t> asInt;
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e18) asInt = static_cast<std::int64_t>(v);
    return number(v, asInt, text);
  }
  bool string(std::string& v) {
    if (m_depth == 1 && m_key == "baseTimeNanoseconds") {
      clockProblem = "baseTimeNanoseconds is a string (expected a number of nanoseconds)";
    }
    if (inEvent()) {
      if (m_key == "ph") m_ph = v;
      if (m_key == "name") m_name = v;
      if (m_key == "cat") m_cat = v;
    }
    return true;
  }
  bool start_object() {
    ++m_depth;
    if (m_depth == 1) m_rootObject = true;
    if (m_eventsDepth > 0 && m_depth == m_eventsDepth + 1) {
      m_ph.clear();
      m_name.clear();
      m_cat.clear();
      m_ts.reset();
    }
    if (m_rootObject && m_depth == 2 && m_rootKey == "distributedInfo") m_inDistributed = true;
    return true;
  }
  bool key(std::string& k) {
    if (m_depth == 1) m_rootKey = k;
    m_key = k;
    return true;
  }
  bool end_object() {
    if (m_eventsDepth > 0 && m_depth == m_eventsDepth + 1) finishEvent();
    if (m_depth == 2) m_inDistributed = false;
    --m_depth;
    return true;
  }
  bool start_array() {
    ++m_depth;
    if (m_eventsDepth == 0 && !m_sawEvents &&
        (m_depth == 1 || (m_depth == 2 && m_rootObject && m_rootKey == "traceEvents"))) {
      m_eventsDepth = m_depth;
      m_sawEvents = true;
    }
    return true;
  }
  bool end_array() {
    if (m_eventsDepth > 0 && m_depth == m_eventsDepth) m_eventsDepth = 0;
    --m_depth;
    return true;
  }
  bool parse_error(std::uint64_t position, const std::string& what) {
    m_error = m_path + ": byte " + std::to_string(position) + ": " + what;
    return false;
  }
  // NOLINTEND(readability-identifier-naming)

  ScanResult result;
  /// Why the file's clock base cannot be used (the file is then refused).
  std::optional<std::string> clockProblem;
  const std::optional<std::string>& error() const { return m_error; }
  bool sawEvents() const { return m_sawEvents; }

 private:
  bool inEvent() const { return m_eventsDepth > 0 && m_depth == m_eventsDepth + 1; }
  bool number(double v, std::optional<std::int64_t> asInt, std::string_view text) {
    if (inEvent()) {
      if (m_key == "ts" && std::isfinite(v)) m_ts = v;
    } else if (m_depth == 1 && m_key == "baseTimeNanoseconds") {
      // Added to every time of the file: bounded, so that sum cannot overflow (two ranks at
      // INT64_MAX and INT64_MIN once wrapped into a negative start).
      if (asInt && *asInt >= 0 && *asInt <= kMaxTraceClockBaseNs) {
        result.baseNs = *asInt;
      } else {
        clockProblem = "baseTimeNanoseconds " + excerpt(text) +
                       " is out of range (expected nanoseconds since the Unix epoch, 0.." +
                       std::to_string(kMaxTraceClockBaseNs) + ")";
      }
    } else if (m_inDistributed && m_depth == 2 && m_key == "rank" && asInt) {
      result.rank = *asInt;
    }
    return true;
  }
  void finishEvent() {
    if (m_ph != "X" && m_ph != "B") return;
    ++result.events;
    // Within the times ingest accepts (kMaxTraceTimeNs): later sums with the base cannot overflow.
    if (m_ts && std::fabs(*m_ts) * 1000.0 <= static_cast<double>(kMaxTraceTimeNs)) {
      const std::int64_t ns = std::llround(*m_ts * 1000.0);
      if (!result.firstAbsNs || ns < *result.firstAbsNs) result.firstAbsNs = ns;
    }
    if (m_cat == "kernel" || m_cat == "gpu_memcpy" || m_cat == "gpu_memset") return;
    if (auto op = m_matcher.match(m_name)) {
      if (m_cat == "gpu_user_annotation") result.gpuAnnotations = true;
      if (op->stage >= 0) result.stages.insert(op->stage);
      result.kindTexts.insert(op->kindText);
    }
  }

  const OpMatcher& m_matcher;
  std::string m_path;
  int m_depth = 0;
  bool m_rootObject = false;
  std::string m_rootKey;
  std::string m_key;
  int m_eventsDepth = 0;
  bool m_sawEvents = false;
  bool m_inDistributed = false;
  std::string m_ph, m_name, m_cat;
  std::optional<double> m_ts;
  std::optional<std::string> m_error;
};

}  // namespace

Expected<std::unique_ptr<GzipSource>> GzipSource::open(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Error{path + ": cannot open"};
  gzbuffer(f, 1 << 20);
  std::unique_ptr<GzipSource> s(new GzipSource());
  s->m_file = f;
  s->m_path = path;
  return s;
}

GzipSource::~GzipSource() {
  if (m_file) gzclose_r(static_cast<gzFile>(m_file));
}

long GzipSource::read(char* out, std::size_t size) {
  if (!m_error.empty()) return -1;
  const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(size, 1u << 30));
  const int n = gzread(static_cast<gzFile>(m_file), out, chunk);
  if (n < 0) {
    int code = 0;
    const char* what = gzerror(static_cast<gzFile>(m_file), &code);
    m_error = m_path + ": gzip: " + (what ? what : "read error") +
              (code == Z_BUF_ERROR ? " (the compressed file is truncated)" : "");
    return -1;
  }
  if (n == 0) {
    // zlib reports a gzip stream cut short only through gzerror once reading stops.
    int code = 0;
    const char* what = gzerror(static_cast<gzFile>(m_file), &code);
    if (code != Z_OK && code != Z_STREAM_END) {
      m_error = m_path + ": gzip: " + (what ? what : "read error") +
                (code == Z_BUF_ERROR ? " (the compressed file is truncated)" : "");
      return -1;
    }
  }
  return n;
}

std::string GzipSource::error() const { return m_error; }

Expected<ScanResult> scanChromeFile(const std::string& path, const OpMatcher& matcher) {
  PS_ASSIGN_OR_RETURN(auto source, GzipSource::open(path));
  GzipSource* src = source.get();
  JsonFileReader input([src](char* out, std::size_t n) { return src->read(out, n); });
  ScanHandler handler(matcher, path);
  JsonSaxParser<ScanHandler> parser(input, handler);
  // Read to the end: a gzip source checks its trailer (CRC, length) only there.
  const bool ok = parser.parse() && parser.expectEnd();
  if (!src->error().empty()) return Error{src->error()};
  if (parser.refused()) return Error{handler.error().value_or(path + ": refused")};
  if (handler.clockProblem) return Error{path + ": " + *handler.clockProblem};
  if (!ok && !(handler.sawEvents() && handler.result.events > 0)) {
    return Error{handler.error().value_or(path + ": not JSON") +
                 R"( (expected a Chrome trace: a JSON array of events or an object with a "traceEvents" array))"};
  }
  if (!handler.sawEvents()) {
    return Error{path +
                 ": no trace events (expected a Chrome trace: a JSON array of events or an object with a "
                 R"("traceEvents" array))"};
  }
  ScanResult r = std::move(handler.result);
  r.format = TraceFormat::ChromeJson;
  if (!ok) r.truncated = handler.error().value_or(path + ": ends early");
  if (r.firstAbsNs) *r.firstAbsNs += r.baseNs;
  return r;
}

Expected<IngestCounts> ingestChromeFile(HistoryStore::Impl& im, RunId run, RunState& state, const FileContext& ctx) {
  PS_ASSIGN_OR_RETURN(auto source, GzipSource::open(ctx.path));
  GzipSource* src = source.get();
  JsonFileReader input([src](char* out, std::size_t n) { return src->read(out, n); });
  ChromeHandler handler(im, run, state, input, ctx.path, &ctx);
  JsonSaxParser<ChromeHandler> parser(input, handler);
  const bool ok = parser.parse() && parser.expectEnd();
  if (!handler.dbStatus()) return handler.dbStatus().error();
  if (!src->error().empty()) return Error{src->error()};
  if (parser.refused()) return Error{handler.parseError().value_or(ctx.path + ": refused")};
  if (!ok && !ctx.allowTruncated) return Error{handler.parseError().value_or(ctx.path + ": read error")};
  handler.finishOpenRanges();
  IngestCounts c;
  if (!ok) c.incomplete = handler.parseError().value_or(ctx.path + ": ends early");
  c.stored = handler.stored();
  c.skipped = handler.skipped();
  c.firstError = handler.firstError() ? handler.firstError() : handler.parseError();
  return c;
}

}  // namespace pipestudio::history::detail
