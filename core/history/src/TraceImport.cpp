// importTraces (TraceImport.hpp): reads every file once to learn its format, clock base, rank
// and op names (scan), decides each file's device lane and the run's time origin, then stores
// the files into one run (ingest) and numbers each op's iterations by time.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pipestudio/history/TraceImport.hpp"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>

#include "Sqlite.hpp"
#include "TraceImportImpl.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::history {

namespace detail {

// PCRE2 with a match limit: a user pattern is untrusted input; a catastrophic backtrack ends
// as "no match" for that name rather than hanging the import.
constexpr std::uint32_t kMatchLimit = 100000;

Expected<std::unique_ptr<OpMatcher>> OpMatcher::compile(const std::string& pattern) {
  const std::string& text = pattern.empty() ? std::string(kPipeliningOpPattern) : pattern;
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), PCRE2_UTF, &code, &offset, nullptr);
  if (!re) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(code, message.data(), message.size());
    // The pattern is user text of any length: quoted as an excerpt, with the text around the
    // offset when that lies past the excerpt.
    std::string where = " at offset " + std::to_string(offset) + " of '" + excerpt(text) + "'";
    if (text.size() > kExcerptBytes && offset > kExcerptBytes / 2) {
      const std::size_t from = std::min(offset, text.size()) - kExcerptBytes / 2;
      where += ", near '" + excerpt(std::string_view(text).substr(from, kExcerptBytes)) + "'";
    }
    return Error{"--op-pattern: " + std::string(reinterpret_cast<const char*>(message.data())) + where};
  }
  std::unique_ptr<OpMatcher> m(new OpMatcher());
  m->m_code = re;
  for (auto [name, slot] :
       {std::pair{"stage", &m->m_stage}, std::pair{"kind", &m->m_kind}, std::pair{"microbatch", &m->m_microbatch}}) {
    const int n = pcre2_substring_number_from_name(re, reinterpret_cast<PCRE2_SPTR>(name));
    if (n < 0) {
      return Error{"--op-pattern '" + excerpt(text) + "' has no named group (?<" + name +
                   ">…) (expected groups stage, kind and microbatch)"};
    }
    *slot = static_cast<std::uint32_t>(n);
  }
  m->m_data = pcre2_match_data_create_from_pattern(re, nullptr);
  m->m_ppPrefix = pattern.empty();
  return m;
}

OpMatcher::~OpMatcher() {
  if (m_data) pcre2_match_data_free(static_cast<pcre2_match_data*>(m_data));
  if (m_code) pcre2_code_free(static_cast<pcre2_code*>(m_code));
}

std::optional<OpName> OpMatcher::match(std::string_view name) const {
  if (m_ppPrefix && name.substr(0, 3) != "PP:") return std::nullopt;
  static thread_local pcre2_match_context* context = [] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(c, kMatchLimit);
    return c;
  }();
  auto* data = static_cast<pcre2_match_data*>(m_data);
  const int rc = pcre2_match(static_cast<pcre2_code*>(m_code), reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(),
                             0, 0, data, context);
  if (rc <= 0) return std::nullopt;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
  const auto group = [&](std::size_t n) -> std::string_view {
    if (n >= static_cast<std::size_t>(rc) || ov[2 * n] == PCRE2_UNSET) return {};
    return name.substr(ov[2 * n], ov[2 * n + 1] - ov[2 * n]);
  };
  const auto number = [](std::string_view s) -> std::optional<int> {
    if (s.empty() || s.size() > 9) return std::nullopt;
    int v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    return v;
  };
  OpName out;
  const auto stage = number(group(m_stage));
  if (!stage) return std::nullopt;
  out.stage = *stage;
  out.kindText = std::string(group(m_kind));
  if (out.kindText.empty()) return std::nullopt;
  out.microbatch = number(group(m_microbatch)).value_or(-1);
  if (computeKind(out.kindText, false) && out.microbatch < 0) return std::nullopt;
  return out;
}

std::optional<OpKind> computeKind(std::string_view kind, bool legacy) {
  if (kind == "F") return OpKind::F;
  if (kind == "I") return OpKind::B;
  if (kind == "W") return OpKind::W;
  if (kind == "B") return legacy ? OpKind::B : OpKind::BW;
  if (kind == "BW") return OpKind::BW;
  return std::nullopt;
}

bool isCommAction(std::string_view kind) {
  return kind == "SEND_F" || kind == "RECV_F" || kind == "SEND_B" || kind == "RECV_B";
}

}  // namespace detail

Status checkOpPattern(const std::string& pattern) {
  PS_RETURN_IF_ERROR(detail::OpMatcher::compile(pattern));
  return {};
}

namespace {

constexpr const char* kExpectedTrace =
    "expected a PipeStudio trace stream, a Chrome/Kineto JSON trace (.json or .json.gz) or an Nsight Systems "
    "SQLite export";

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What a file that is none of the trace formats is, from its first bytes and its name.
std::string describeNonTrace(const std::string& file, std::string_view head) {
  std::string what;
  // A UTF-8 sequence may be cut at the end of the bytes read: the last 3 are not judged.
  const std::string_view judged = head.substr(0, head.size() > 3 ? head.size() - 3 : head.size());
  if (head.empty()) {
    what = "is empty";
  } else if (head.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    what = "holds only whitespace";
  } else if (head.find('\0') == std::string_view::npos && isValidUtf8(judged)) {
    std::string_view start = head.substr(0, std::min<std::size_t>(head.size(), 40));
    if (const auto nl = start.find('\n'); nl != std::string_view::npos && nl > 0) start = start.substr(0, nl);
    what = "is text, not a trace: it begins '" + excerpt(start, 40) + "'";
  } else {
    static constexpr std::string_view kHex = "0123456789abcdef";
    std::string bytes;
    for (std::size_t i = 0; i < std::min<std::size_t>(head.size(), 8); ++i) {
      const auto u = static_cast<unsigned char>(head[i]);
      if (i > 0) bytes += ' ';
      bytes += kHex[u >> 4];
      bytes += kHex[u & 15];
    }
    what = "is binary data, not a trace (it begins with bytes " + bytes + ")";
  }
  std::string hint;
  if (endsWith(file, ".sqlite") || endsWith(file, ".sqlite3") || endsWith(file, ".db")) {
    hint = "; its name says SQLite, but it has no SQLite header";
  } else if (endsWith(file, ".nsys-rep") || endsWith(file, ".qdrep")) {
    hint = "; an Nsight Systems report is read once exported: nsys export --type sqlite";
  } else if (endsWith(file, ".gz")) {
    hint = "; its name says gzip, but it has no gzip header";
  }
  return file + ": " + what + " (" + kExpectedTrace + hint + ")";
}

}  // namespace

Expected<TraceFormat> detectTraceFormat(const std::string& file) {
  PS_RETURN_IF_ERROR(checkRegularFile(file));  // a FIFO would block the open
  std::ifstream in(file, std::ios::binary);
  if (!in) return Error{file + ": cannot open"};
  std::array<char, 4096> buffer{};
  in.read(buffer.data(), buffer.size());
  const std::string_view head(buffer.data(), static_cast<std::size_t>(in.gcount()));
  if (head.starts_with(std::string_view(trace::kStreamMagic.data(), trace::kStreamMagic.size())))
    return TraceFormat::Stream;
  if (head.starts_with(std::string_view("SQLite format 3\0", 16))) return TraceFormat::NsysSqlite;
  if (head.starts_with("\x1f\x8b")) return TraceFormat::ChromeJson;  // gzip: the reader checks what is inside
  if (auto encoding = wideTextEncoding(head)) {
    return Error{file + ": is " + *encoding + " (expected UTF-8: " + kExpectedTrace + ")"};
  }
  // JSON text: after an optional UTF-8 byte order mark and whitespace, an object or an array.
  std::size_t i = head.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  while (i < head.size() && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')) ++i;
  if (i < head.size() && head[i] == '{' && detail::looksLikeOtel(head)) return TraceFormat::OtelJson;
  if (i < head.size() && (head[i] == '{' || head[i] == '[')) return TraceFormat::ChromeJson;
  if (i == head.size() && i > 0 && static_cast<std::size_t>(in.gcount()) == buffer.size()) {
    return TraceFormat::ChromeJson;  // 4 KiB of whitespace: let the reader say what follows
  }
  return Error{describeNonTrace(file, head)};
}

namespace {

const char* formatName(TraceFormat f) {
  switch (f) {
    case TraceFormat::Stream:
      return "PipeStudio stream";
    case TraceFormat::ChromeJson:
      return "Chrome/Kineto JSON";
    case TraceFormat::NsysSqlite:
      return "Nsight Systems SQLite";
    case TraceFormat::OtelJson:
      return "OpenTelemetry JSON (Megatron-LM spans)";
  }
  return "?";
}

// Op ranges numbered 0, 1, … per (device, stage, kind, microbatch) in time order: the k-th
// execution of an op is iteration k, however the files interleave their events.
Status numberIterations(HistoryStore& store, RunId run) {
  sqlite3* db = store.connection();
  const std::string sql =
      "UPDATE events SET iteration = t.rn FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY device, virtual_stage, "
      "kind, microbatch, name_id, category ORDER BY start_ns, id) - 1 AS rn FROM events WHERE " RUN_EVENT_RANGE
      " AND virtual_stage IS NOT NULL AND virtual_stage >= 0) AS t WHERE events.id = t.id";
  detail::Statement st(db, sql, nullptr);
  if (!st) return Error{store.path() + ": " + detail::lastError(db)};
  st.bind(1, run);
  if (st.step() != SQLITE_DONE) return Error{store.path() + ": numbering iterations: " + detail::lastError(db)};
  return {};
}

// Counts the run's measured ops, and those of them the plan has (device, stage, kind, microbatch).
void countOps(const std::vector<MeasuredEvent>& ops, const Plan* plan, TraceImportResult& out) {
  std::set<std::tuple<int, int, int, int>> planned;
  if (plan) {
    for (const Op& op : plan->ops)
      planned.insert({op.device, op.virtualStage, static_cast<int>(op.kind), op.microbatch});
  }
  for (const auto& e : ops) {
    ++out.measuredOps;
    if (planned.count({e.device, e.virtualStage, e.kind, e.microbatch})) ++out.matchedOps;
  }
}

// A PipeStudio trace stream holds every rank of its run: it is stored as it is.
Expected<TraceImportResult> importStream(HistoryStore& store, const std::string& file,
                                         const TraceImportOptions& options) {
  PS_ASSIGN_OR_RETURN(auto r, store.importStreamFile(file, options.info));
  TraceImportResult out;
  out.runId = r.runId;
  out.events = r.events;
  out.skipped = r.skipped;
  out.firstError = r.firstError;
  auto ops = store.loadEvents(r.runId, EventCategory::Op);
  if (ops) countOps(*ops, options.plan, out);
  return out;
}

// What the scan decided: how each file is stored into the run.
struct Decision {
  bool legacy = false;                      // B = input gradient, BW = full backward
  std::vector<int> stageDevice;             // the plan's placement; empty without a plan
  std::vector<std::optional<int>> devices;  // per file: its device lane, or as recorded
  std::vector<std::string> notes;           // per file: its format and device
  std::optional<std::int64_t> originNs;     // the run's time origin: the earliest range start
};

bool legacyDialect(const std::vector<detail::ScanResult>& scans) {
  bool legacy = false;
  bool anyI = false, anyW = false;
  for (const auto& s : scans) {
    if (s.kindTexts.count("BW")) legacy = true;
    anyI = anyI || s.kindTexts.count("I");
    anyW = anyW || s.kindTexts.count("W");
  }
  if (anyW && !anyI) legacy = true;  // W without I: B was the input gradient (PyTorch ≈2.5)
  return legacy;
}

// The device of file i: from its annotated stages under the plan, else its rank, else (several
// files) its position on the command line; `why` says which.
Expected<std::optional<int>> fileDevice(const std::vector<std::string>& files, std::size_t i,
                                        const detail::ScanResult& s, const TraceImportOptions& options,
                                        const std::vector<int>& stageDevice, std::string& why) {
  const bool multi = files.size() > 1;
  std::optional<int> device;
  if (options.plan && !s.stages.empty()) {
    std::set<int> lanes;
    for (int stage : s.stages) {
      if (stage >= static_cast<int>(stageDevice.size())) {
        return Error{files[i] + ": annotations name stage " + std::to_string(stage) + " but the plan has " +
                     std::to_string(stageDevice.size()) + " virtual stages (is this the plan the run executed?)"};
      }
      lanes.insert(stageDevice[static_cast<std::size_t>(stage)]);
    }
    if (lanes.size() > 1 && multi) {
      return Error{files[i] + ": its annotations name stages of " + std::to_string(lanes.size()) +
                   " different devices of the plan (expected one file per pipeline rank)"};
    }
    device = *lanes.begin();
    why = "from its annotated stages";
  } else if (s.rank) {
    std::int64_t lane = *s.rank;
    if (options.plan) {
      const std::int64_t perRank = options.plan->config.parallel.gpusPerPipelineRank();
      if (perRank > 1 && lane < options.plan->config.totalGpus()) lane /= perRank;
    }
    if (lane < 0 || lane > 1 << 20)
      return Error{files[i] + ": distributedInfo.rank " + std::to_string(*s.rank) + " out of range"};
    device = static_cast<int>(lane);
    why = "rank " + std::to_string(*s.rank);
  } else if (multi) {
    device = static_cast<int>(i);
    why = "its position on the command line (no rank in the file)";
  }
  return device;
}

// --- decide: dialect, devices, time origin ---
Expected<Decision> decide(const std::vector<std::string>& files, const std::vector<detail::ScanResult>& scans,
                          const TraceImportOptions& options) {
  Decision out;
  out.legacy = legacyDialect(scans);
  if (options.plan) {
    out.stageDevice.assign(options.plan->virtualStages.size(), -1);
    for (const VirtualStage& vs : options.plan->virtualStages) {
      if (vs.id >= 0 && vs.id < static_cast<int>(out.stageDevice.size()))
        out.stageDevice[static_cast<std::size_t>(vs.id)] = vs.device;
    }
  }
  const bool multi = files.size() > 1;
  out.devices.resize(files.size());
  std::map<int, std::size_t> deviceFile;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::string why;
    PS_ASSIGN_OR_RETURN(const auto device, fileDevice(files, i, scans[i], options, out.stageDevice, why));
    if (device && multi) {
      auto [it, inserted] = deviceFile.try_emplace(*device, i);
      if (!inserted) {
        return Error{files[i] + " and " + files[it->second] + " are both device " + std::to_string(*device) +
                     " (expected one file per pipeline rank)"};
      }
    }
    out.devices[i] = device;
    out.notes.push_back(
        files[i] + ": " + formatName(scans[i].format) +
        (device ? ", device " + std::to_string(*device) + " (" + why + ")" : std::string(", devices as recorded")));
  }
  for (const auto& s : scans) {
    if (s.firstAbsNs && (!out.originNs || *s.firstAbsNs < *out.originNs)) out.originNs = *s.firstAbsNs;
  }
  return out;
}

// --- ingest: every file into the begun run, then its iterations, op counts and status ---
Expected<TraceImportResult> ingestRun(HistoryStore& store, RunId run, const std::vector<std::string>& files,
                                      const std::vector<detail::ScanResult>& scans, const Decision& decision,
                                      const detail::OpMatcher& matcher, const TraceImportOptions& options) {
  PS_ASSIGN_OR_RETURN(auto state, store.impl().runState(run));
  if (decision.originNs) {
    state->originKnown = true;
    state->originNs = *decision.originNs;
    state->dirty = true;
  }
  TraceImportResult result;
  std::optional<std::string> incomplete;
  result.runId = run;
  result.notes = decision.notes;
  for (std::size_t i = 0; i < files.size(); ++i) {
    detail::FileContext ctx;
    ctx.path = files[i];
    ctx.fileIndex = static_cast<int>(i);
    ctx.baseNs = scans[i].baseNs;
    ctx.device = decision.devices[i];
    ctx.useGpuAnnotations = scans[i].gpuAnnotations;
    ctx.legacy = decision.legacy;
    ctx.recordSteps = i == 0;
    ctx.allowTruncated = scans[i].truncated.has_value();
    ctx.matcher = &matcher;
    ctx.stageDevice = options.plan ? &decision.stageDevice : nullptr;
    ctx.plan = options.plan;
    PS_ASSIGN_OR_RETURN(auto counts, scans[i].format == TraceFormat::NsysSqlite
                                         ? detail::ingestNsysFile(store.impl(), run, *state, ctx)
                                     : scans[i].format == TraceFormat::OtelJson
                                         ? detail::ingestOtelFile(store.impl(), run, *state, ctx)
                                         : detail::ingestChromeFile(store.impl(), run, *state, ctx));
    // A file whose every event was refused is a failed import, not an empty "complete" run.
    // (A trace with no events at all is a valid, empty one.)
    if (counts.stored == 0 && counts.skipped > 0) {
      return Error{files[i] + ": no event could be stored: " + std::to_string(counts.skipped) +
                   " event(s) skipped, first: " + counts.firstError.value_or("") + "; nothing imported"};
    }
    result.events += counts.stored;
    result.skipped += counts.skipped;
    if (!result.firstError && counts.firstError) result.firstError = counts.firstError;
    if (counts.incomplete) incomplete = counts.incomplete;
  }
  PS_RETURN_IF_ERROR(store.flush());
  PS_RETURN_IF_ERROR(numberIterations(store, run));

  PS_ASSIGN_OR_RETURN(auto ops, store.loadEvents(run, EventCategory::Op));
  countOps(ops, options.plan, result);
  std::string note = incomplete.value_or("");
  if (result.skipped > 0) {
    note += (note.empty() ? "" : "; ") + std::to_string(result.skipped) +
            " event(s) skipped, first: " + result.firstError.value_or("");
  }
  const RunStatus status = incomplete ? RunStatus::Incomplete : RunStatus::Complete;
  PS_RETURN_IF_ERROR(store.finishRun(run, status, note));
  return result;
}

}  // namespace

Expected<TraceImportResult> importTraces(HistoryStore& store, const std::vector<std::string>& files,
                                         const TraceImportOptions& options) {
  if (files.empty()) return Error{"no trace files given"};
  PS_ASSIGN_OR_RETURN(auto matcher, detail::OpMatcher::compile(options.opPattern));

  // --- scan: every file read once before anything is written ---
  std::vector<detail::ScanResult> scans;
  for (const std::string& file : files) {
    PS_ASSIGN_OR_RETURN(auto format, detectTraceFormat(file));
    if (format == TraceFormat::Stream) {
      if (files.size() > 1) {
        return Error{file + ": a PipeStudio trace stream holds every rank of its run; import it on its own"};
      }
      return importStream(store, file, options);
    }
    PS_ASSIGN_OR_RETURN(auto scan, format == TraceFormat::NsysSqlite ? detail::scanNsysFile(file, *matcher)
                                   : format == TraceFormat::OtelJson ? detail::scanOtelFile(file)
                                                                     : detail::scanChromeFile(file, *matcher));
    scans.push_back(std::move(scan));
  }
  PS_ASSIGN_OR_RETURN(auto decision, decide(files, scans, options));

  RunInfo info = options.info;
  if (info.source.empty()) {
    const TraceFormat f = scans.front().format;
    info.source = f == TraceFormat::NsysSqlite ? "nsys" : f == TraceFormat::OtelJson ? "otel" : "chrome";
  }
  if (info.sourcePath.empty())
    info.sourcePath = files.front() + (files.size() > 1 ? " (+" + std::to_string(files.size() - 1) + ")" : "");
  if (info.gpu.empty()) info.gpu = scans.front().gpuName;
  PS_ASSIGN_OR_RETURN(auto run, store.beginRun(info));
  auto result = ingestRun(store, run, files, scans, decision, *matcher, options);
  if (!result) (void)store.deleteRun(run);  // nothing of a failed import stays
  return result;
}

}  // namespace pipestudio::history
