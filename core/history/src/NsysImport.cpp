// Nsight Systems SQLite exports (`nsys export --type sqlite`): CUPTI_ACTIVITY_KIND_KERNEL,
// _MEMCPY and _MEMSET (GPU activity), NVTX_EVENTS (push/pop and start/end ranges; text inline
// or as a StringIds id), TARGET_INFO_GPU (the GPU's name), TARGET_INFO_SESSION_START_TIME (the
// session's UTC start: times in the tables are ns from it). Columns differ between nsys
// versions, so every query is built from what PRAGMA table_info reports; a missing optional
// column gets a default, a missing required one (start, end) skips the table with a note.
//
// Ops from NVTX ranges: a range whose text the op pattern matches is an op. Its time is the GPU
// time of the kernels launched inside it when the export has the CUDA API table
// (CUPTI_ACTIVITY_KIND_RUNTIME: thread, start, correlation id), else the range's host time.

#include <sqlite3.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "Sqlite.hpp"
#include "TraceImportImpl.hpp"

namespace pipestudio::history::detail {
namespace {

// NVTX event types (nsys ENUM_NSYS_EVENT_TYPE): ranges only.
constexpr int kNvtxPushPopRange = 59;
constexpr int kNvtxStartEndRange = 60;

struct Db {
  sqlite3* db = nullptr;
  std::string path;
  ~Db() {
    if (db) sqlite3_close(db);
  }
};

Expected<std::unique_ptr<Db>> openDb(const std::string& path) {
  auto d = std::make_unique<Db>();
  d->path = path;
  if (sqlite3_open_v2(path.c_str(), &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    return Error{path + ": cannot open as SQLite: " + (d->db ? sqlite3_errmsg(d->db) : "out of memory")};
  }
  sqlite3_busy_timeout(d->db, 2000);
  // A file that is not a database fails on its first read.
  char* err = nullptr;
  if (sqlite3_exec(d->db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unreadable";
    sqlite3_free(err);
    return Error{path + ": not a readable SQLite database: " + m};
  }
  return d;
}

std::set<std::string> tablesOf(sqlite3* db) {
  std::set<std::string> out;
  Statement st(db, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')", nullptr);
  while (st && st.step() == SQLITE_ROW) out.insert(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)));
  return out;
}

std::set<std::string> columnsOf(sqlite3* db, const std::string& table) {
  std::set<std::string> out;
  Statement st(db, "PRAGMA table_info(\"" + table + "\")", nullptr);
  while (st && st.step() == SQLITE_ROW) {
    if (const unsigned char* name = sqlite3_column_text(st.get(), 1)) out.insert(reinterpret_cast<const char*>(name));
  }
  return out;
}

std::string col(const std::set<std::string>& cols, const char* name, const char* fallback) {
  return cols.count(name) ? std::string("t.\"") + name + "\"" : std::string(fallback);
}

// Text of a column that holds either a string or a StringIds id.
std::string textExpr(const std::set<std::string>& cols, std::initializer_list<const char*> names, bool stringIds,
                     std::string& join) {
  for (const char* n : names) {
    if (!cols.count(n)) continue;
    if (stringIds) {
      join = std::string(" LEFT JOIN StringIds s ON s.id = t.\"") + n + "\"";
      return std::string("COALESCE(s.value, CAST(t.\"") + n + "\" AS TEXT))";
    }
    return std::string("CAST(t.\"") + n + "\" AS TEXT)";
  }
  return "NULL";
}

std::optional<std::int64_t> sessionStartNs(sqlite3* db, const std::set<std::string>& tables) {
  if (!tables.count("TARGET_INFO_SESSION_START_TIME")) return std::nullopt;
  const auto cols = columnsOf(db, "TARGET_INFO_SESSION_START_TIME");
  if (!cols.count("utcEpochNs")) return std::nullopt;
  Statement st(db, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1", nullptr);
  if (st && st.step() == SQLITE_ROW && sqlite3_column_type(st.get(), 0) == SQLITE_INTEGER) {
    return sqlite3_column_int64(st.get(), 0);
  }
  return std::nullopt;
}

constexpr const char* kGpuTables[] = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                      "CUPTI_ACTIVITY_KIND_MEMSET"};

struct NvtxQuery {
  std::string sql;
  bool ok = false;
};

NvtxQuery nvtxQuery(sqlite3* db, const std::set<std::string>& tables) {
  NvtxQuery q;
  if (!tables.count("NVTX_EVENTS")) return q;
  const auto cols = columnsOf(db, "NVTX_EVENTS");
  if (!cols.count("start")) return q;
  std::string join;
  const std::string text = textExpr(cols, {"text"}, false, join);
  std::string idJoin;
  std::string byId = "NULL";
  if (cols.count("textId") && tables.count("StringIds")) {
    idJoin = " LEFT JOIN StringIds s ON s.id = t.textId";
    byId = "s.value";
  }
  q.sql = "SELECT t.rowid, t.start, " + col(cols, "end", "NULL") + ", COALESCE(" + text + ", " + byId + "), " +
          col(cols, "globalTid", "0") + " FROM NVTX_EVENTS t" + idJoin;
  if (cols.count("eventType")) {
    q.sql +=
        " WHERE t.eventType IN (" + std::to_string(kNvtxPushPopRange) + ", " + std::to_string(kNvtxStartEndRange) + ")";
  } else if (cols.count("end")) {
    q.sql += " WHERE t.\"end\" IS NOT NULL";
  }
  q.ok = true;
  return q;
}

}  // namespace

Expected<ScanResult> scanNsysFile(const std::string& path, const OpMatcher& matcher) {
  auto d = openDb(path);
  if (!d) return d.error();
  sqlite3* db = (*d)->db;
  const auto tables = tablesOf(db);
  bool any = tables.count("NVTX_EVENTS") > 0;
  for (const char* t : kGpuTables) any = any || tables.count(t);
  if (!any) {
    return Error{path +
                 ": not an Nsight Systems export: none of the tables CUPTI_ACTIVITY_KIND_KERNEL, "
                 "CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, NVTX_EVENTS (expected the output of "
                 "nsys export --type sqlite)"};
  }
  ScanResult r;
  r.format = TraceFormat::NsysSqlite;
  r.baseNs = sessionStartNs(db, tables).value_or(0);
  std::optional<std::int64_t> first;
  const auto consider = [&](const std::string& sql) {
    Statement st(db, sql, nullptr);
    if (st && st.step() == SQLITE_ROW && sqlite3_column_type(st.get(), 0) == SQLITE_INTEGER) {
      const std::int64_t v = sqlite3_column_int64(st.get(), 0);
      if (!first || v < *first) first = v;
      r.events += sqlite3_column_int64(st.get(), 1);
    }
  };
  for (const char* t : kGpuTables) {
    if (tables.count(t) && columnsOf(db, t).count("start")) {
      consider(std::string("SELECT MIN(start), COUNT(*) FROM ") + t + " WHERE start IS NOT NULL");
    }
  }
  if (const NvtxQuery q = nvtxQuery(db, tables); q.ok) {
    Statement st(db, q.sql, nullptr);
    if (!st) return Error{path + ": NVTX_EVENTS: " + lastError(db)};
    int rc = 0;
    while ((rc = st.step()) == SQLITE_ROW) {
      ++r.events;
      if (sqlite3_column_type(st.get(), 1) == SQLITE_INTEGER) {
        const std::int64_t v = sqlite3_column_int64(st.get(), 1);
        if (!first || v < *first) first = v;
      }
      const unsigned char* text = sqlite3_column_text(st.get(), 3);
      if (!text) continue;
      if (auto op = matcher.match(reinterpret_cast<const char*>(text))) {
        r.stages.insert(op->stage);
        r.kindTexts.insert(op->kindText);
      }
    }
    if (rc != SQLITE_DONE) return Error{path + ": NVTX_EVENTS: " + lastError(db)};
  }
  if (tables.count("TARGET_INFO_GPU") && columnsOf(db, "TARGET_INFO_GPU").count("name")) {
    Statement st(db, "SELECT name FROM TARGET_INFO_GPU LIMIT 1", nullptr);
    if (st && st.step() == SQLITE_ROW && sqlite3_column_text(st.get(), 0)) {
      r.gpuName = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
    }
  }
  if (first) r.firstAbsNs = *first + r.baseNs;
  return r;
}

namespace {

// Min start / max end over index ranges of the CUDA API calls of one export, so an NVTX op's
// GPU time is found in O(log n) however many calls it spans.
class SpanTree {
 public:
  struct Span {
    std::int64_t start = std::numeric_limits<std::int64_t>::max();
    std::int64_t end = std::numeric_limits<std::int64_t>::min();
    int device = -1;
  };
  explicit SpanTree(std::vector<Span> leaves)
      : m_n(leaves.size()), m_tree(2 * std::max<std::size_t>(1, leaves.size())) {
    for (std::size_t i = 0; i < m_n; ++i) m_tree[m_n + i] = leaves[i];
    for (std::size_t i = m_n; i-- > 1;) m_tree[i] = merge(m_tree[2 * i], m_tree[2 * i + 1]);
  }
  Span query(std::size_t lo, std::size_t hi) const {  // [lo, hi)
    Span out;
    for (lo += m_n, hi += m_n; lo < hi; lo /= 2, hi /= 2) {
      if (lo & 1) out = merge(out, m_tree[lo++]);
      if (hi & 1) out = merge(out, m_tree[--hi]);
    }
    return out;
  }

 private:
  static Span merge(const Span& a, const Span& b) {
    Span s;
    s.start = std::min(a.start, b.start);
    s.end = std::max(a.end, b.end);
    s.device = a.start <= b.start ? (a.device >= 0 ? a.device : b.device) : (b.device >= 0 ? b.device : a.device);
    return s;
  }
  std::size_t m_n;
  std::vector<Span> m_tree;
};

struct Noter {
  IngestCounts& counts;
  const std::string& path;
  void skip(const std::string& what) {
    ++counts.skipped;
    if (!counts.firstError) counts.firstError = path + ": " + what;
  }
};

}  // namespace

Expected<IngestCounts> ingestNsysFile(HistoryStore::Impl& im, RunId run, RunState& state, const FileContext& ctx) {
  auto d = openDb(ctx.path);
  if (!d) return d.error();
  sqlite3* db = (*d)->db;
  const auto tables = tablesOf(db);
  const bool stringIds = tables.count("StringIds") > 0;
  IngestCounts counts;
  Noter note{counts, ctx.path};
  const std::int64_t toRun = ctx.baseNs - state.originNs;  // file time → run time

  // Kernel spans by (process, correlation id), for projecting NVTX ops onto the GPU.
  struct Launch {
    std::int64_t pid, correlation, start, end;
    int device;
  };
  std::vector<Launch> launches;
  const bool project = tables.count("CUPTI_ACTIVITY_KIND_RUNTIME") > 0 && tables.count("NVTX_EVENTS") > 0;

  // --- GPU activity ---
  for (const char* table : kGpuTables) {
    if (!tables.count(table)) continue;
    const auto cols = columnsOf(db, table);
    if (!cols.count("start") || !cols.count("end")) {
      note.skip(std::string(table) + ": no start/end columns (table skipped)");
      continue;
    }
    const std::string_view t(table);
    const EventCategory category = t.find("MEMCPY") != std::string_view::npos   ? EventCategory::Memcpy
                                   : t.find("MEMSET") != std::string_view::npos ? EventCategory::Memset
                                                                                : EventCategory::Kernel;
    std::string join;
    const std::string name =
        category == EventCategory::Kernel
            ? textExpr(cols, {"demangledName", "shortName", "name", "mangledName"}, stringIds, join)
            : "NULL";
    const std::string sql = "SELECT t.rowid, t.start, t.\"end\", " + col(cols, "deviceId", "0") + ", " +
                            col(cols, "streamId", "0") + ", " + col(cols, "correlationId", "0") + ", " +
                            col(cols, "bytes", "0") + ", " + name + ", " + col(cols, "globalPid", "0") + " FROM " +
                            table + " t" + join;
    Statement st(db, sql, nullptr);
    if (!st) return Error{ctx.path + ": " + table + ": " + lastError(db)};
    int rc = 0;
    std::string text;
    while ((rc = st.step()) == SQLITE_ROW) {
      sqlite3_stmt* s = st.get();
      const std::int64_t rowid = sqlite3_column_int64(s, 0);
      if (sqlite3_column_type(s, 1) != SQLITE_INTEGER || sqlite3_column_type(s, 2) != SQLITE_INTEGER) {
        note.skip(std::string(table) + " row " + std::to_string(rowid) + ": start or end is NULL (expected ns)");
        continue;
      }
      const std::int64_t start = sqlite3_column_int64(s, 1);
      const std::int64_t end = sqlite3_column_int64(s, 2);
      if (end < start || start < -(std::int64_t{1} << 61) || end > (std::int64_t{1} << 61)) {
        note.skip(std::string(table) + " row " + std::to_string(rowid) + ": end " + std::to_string(end) +
                  " before start " + std::to_string(start) + " or out of range");
        continue;
      }
      if (const unsigned char* n = sqlite3_column_text(s, 7)) {
        text.assign(reinterpret_cast<const char*>(n));
      } else {
        text = category == EventCategory::Memcpy ? "Memcpy" : category == EventCategory::Memset ? "Memset" : "kernel";
      }
      EventRow row;
      row.category = category;
      if (category == EventCategory::Kernel &&
          (text.find("nccl") != std::string::npos || text.find("NCCL") != std::string::npos)) {
        row.category = EventCategory::Nccl;
      }
      const int device = static_cast<int>(sqlite3_column_int64(s, 3));
      row.device = ctx.device.value_or(device);
      row.stream = sqlite3_column_int64(s, 4);
      row.correlationId = sqlite3_column_int64(s, 5);
      row.bytes = sqlite3_column_int64(s, 6);
      row.name = text;
      row.startNs = start + toRun;
      row.durationNs = end - start;
      if (auto stt = im.insert(run, state, row); !stt) return stt.error();
      ++counts.stored;
      if (project) launches.push_back({sqlite3_column_int64(s, 8), row.correlationId, start, end, row.device});
    }
    if (rc != SQLITE_DONE) return Error{ctx.path + ": " + table + ": " + lastError(db)};
  }

  // --- CUDA API calls: per thread, in time order, each with its GPU span ---
  struct Call {
    std::int64_t tid, start;
    std::size_t launch;  ///< index into launches, or npos
  };
  std::vector<Call> calls;
  std::optional<SpanTree> tree;
  if (project) {
    const auto cols = columnsOf(db, "CUPTI_ACTIVITY_KIND_RUNTIME");
    if (cols.count("globalTid") && cols.count("start") && cols.count("correlationId")) {
      const bool launchesHavePid =
          std::any_of(launches.begin(), launches.end(), [](const Launch& l) { return l.pid != 0; });
      std::sort(launches.begin(), launches.end(), [](const Launch& a, const Launch& b) {
        return std::tie(a.pid, a.correlation) < std::tie(b.pid, b.correlation);
      });
      Statement st(db,
                   "SELECT globalTid, start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start IS NOT NULL",
                   nullptr);
      while (st && st.step() == SQLITE_ROW) {
        const std::int64_t tid = sqlite3_column_int64(st.get(), 0);
        // nsys serialises a thread as (process << 24 | thread): its process is the upper bits.
        // Exports without globalPid on GPU rows match the correlation id alone.
        const std::int64_t pid = launchesHavePid ? (tid & ~std::int64_t{0xFFFFFF}) : 0;
        const std::int64_t corr = sqlite3_column_int64(st.get(), 2);
        auto it = std::lower_bound(launches.begin(), launches.end(), std::pair{pid, corr},
                                   [](const Launch& l, const std::pair<std::int64_t, std::int64_t>& k) {
                                     return std::tie(l.pid, l.correlation) < std::tie(k.first, k.second);
                                   });
        const bool found = it != launches.end() && it->pid == pid && it->correlation == corr;
        calls.push_back({tid, sqlite3_column_int64(st.get(), 1),
                         found ? static_cast<std::size_t>(it - launches.begin()) : std::string::npos});
      }
      std::sort(calls.begin(), calls.end(),
                [](const Call& a, const Call& b) { return std::tie(a.tid, a.start) < std::tie(b.tid, b.start); });
      std::vector<SpanTree::Span> leaves(calls.size());
      for (std::size_t i = 0; i < calls.size(); ++i) {
        if (calls[i].launch != std::string::npos) {
          const Launch& l = launches[calls[i].launch];
          leaves[i] = {l.start, l.end, l.device};
        }
      }
      tree.emplace(std::move(leaves));
    }
  }

  // --- NVTX ranges ---
  if (const NvtxQuery q = nvtxQuery(db, tables); q.ok) {
    Statement st(db, q.sql, nullptr);
    if (!st) return Error{ctx.path + ": NVTX_EVENTS: " + lastError(db)};
    int rc = 0;
    std::string text;
    while ((rc = st.step()) == SQLITE_ROW) {
      sqlite3_stmt* s = st.get();
      const std::int64_t rowid = sqlite3_column_int64(s, 0);
      if (sqlite3_column_type(s, 1) != SQLITE_INTEGER || sqlite3_column_type(s, 2) != SQLITE_INTEGER) {
        note.skip("NVTX_EVENTS row " + std::to_string(rowid) + ": start or end is NULL (an unclosed range)");
        continue;
      }
      std::int64_t start = sqlite3_column_int64(s, 1);
      std::int64_t end = sqlite3_column_int64(s, 2);
      if (end < start || start < -(std::int64_t{1} << 61) || end > (std::int64_t{1} << 61)) {
        note.skip("NVTX_EVENTS row " + std::to_string(rowid) + ": end before start or out of range");
        continue;
      }
      const unsigned char* t = sqlite3_column_text(s, 3);
      text.assign(t ? reinterpret_cast<const char*>(t) : "");
      const std::int64_t tid = sqlite3_column_int64(s, 4);
      EventRow row;
      row.stream = tid;
      const auto op = ctx.matcher ? ctx.matcher->match(text) : std::nullopt;
      int projectedDevice = -1;
      if (op && tree) {
        const auto lo = std::lower_bound(calls.begin(), calls.end(), std::pair{tid, start},
                                         [](const Call& c, const std::pair<std::int64_t, std::int64_t>& k) {
                                           return std::tie(c.tid, c.start) < std::tie(k.first, k.second);
                                         });
        const auto hi = std::upper_bound(calls.begin(), calls.end(), std::pair{tid, end},
                                         [](const std::pair<std::int64_t, std::int64_t>& k, const Call& c) {
                                           return std::tie(k.first, k.second) < std::tie(c.tid, c.start);
                                         });
        const SpanTree::Span span =
            tree->query(static_cast<std::size_t>(lo - calls.begin()), static_cast<std::size_t>(hi - calls.begin()));
        if (span.start <= span.end) {
          start = span.start;
          end = span.end;
          projectedDevice = span.device;
        }
      }
      row.startNs = start + toRun;
      row.durationNs = end - start;
      std::string kindName;
      if (op) {
        row.virtualStage = op->stage;
        row.microbatch = op->microbatch;
        if (const auto kind = computeKind(op->kindText, ctx.legacy)) {
          row.category = EventCategory::Op;
          row.kind = static_cast<int>(*kind);
          kindName = std::string(opKindName(*kind));
          row.device = ctx.stageDevice || ctx.device ? ctx.opDevice(op->stage) : projectedDevice;
        } else {
          row.category = EventCategory::Cpu;
          kindName = op->kindText;
          row.device = ctx.device.value_or(ctx.stageDevice ? ctx.opDevice(op->stage) : projectedDevice);
        }
        row.name = kindName;
      } else {
        row.category = EventCategory::Cpu;
        row.device = -1;
        row.name = text;
      }
      if (auto stt = im.insert(run, state, row); !stt) return stt.error();
      ++counts.stored;
      if (!op && ctx.recordSteps && text.rfind("ProfilerStep#", 0) == 0) {
        const std::string digits = text.substr(13);
        char* stop = nullptr;
        const long long step = std::strtoll(digits.c_str(), &stop, 10);
        if (stop != digits.c_str()) {
          Statement& ins = im.insertStep;
          ins.bind(1, run);
          ins.bind(2, static_cast<std::int64_t>(step));
          ins.bind(3, static_cast<double>(end - start) / 1e6);
          const int r = ins.step();
          ins.reset();
          if (r != SQLITE_DONE) return Error{im.path + ": " + lastError(im.db)};
        }
      }
    }
    if (rc != SQLITE_DONE) return Error{ctx.path + ": NVTX_EVENTS: " + lastError(db)};
  }
  return counts;
}

}  // namespace pipestudio::history::detail
