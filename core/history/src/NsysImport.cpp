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
#include <array>
#include <limits>
#include <unordered_map>

#include "Sqlite.hpp"
#include "TraceImportImpl.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::history::detail {
namespace {

// NVTX event types (nsys ENUM_NSYS_EVENT_TYPE): ranges only.
constexpr int kNvtxPushPopRange = 59;
constexpr int kNvtxStartEndRange = 60;

}  // namespace

// ---- ForeignDb ------------------------------------------------------------------------------

Expected<std::unique_ptr<ForeignDb>> ForeignDb::open(const std::string& path, std::chrono::milliseconds budget) {
  std::unique_ptr<ForeignDb> d(new ForeignDb());
  d->m_path = path;
  d->m_budget = budget;
  if (sqlite3_open_v2(path.c_str(), &d->m_db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    return Error{path + ": cannot open as SQLite: " + (d->m_db ? sqlite3_errmsg(d->m_db) : "out of memory")};
  }
  sqlite3* db = d->m_db;
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 2000);
  // Nothing the file defines runs: no views (a recursive one never ends), no triggers, no
  // functions named by its schema (SQLite docs, "Defense Against The Dark Arts").
  int off = 0;
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, &off);
#ifdef SQLITE_DBCONFIG_ENABLE_VIEW
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, &off);
#endif
  // One value (a kernel name, an NVTX text, a whole row) at most kMaxTraceStringBytes plus
  // the row's other columns; past it SQLite stops with SQLITE_TOOBIG before allocating.
  sqlite3_limit(db, SQLITE_LIMIT_LENGTH, static_cast<int>(kMaxTraceStringBytes + 4096));
  sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, 100000);
  sqlite3_progress_handler(db, 10000, &ForeignDb::onProgress, d.get());
  char* err = nullptr;
  (void)sqlite3_exec(db, "PRAGMA cell_size_check = ON", nullptr, nullptr, nullptr);
  // A file that is not a database fails on its first read.
  d->m_deadline = std::chrono::steady_clock::now() + d->m_budget;
  if (sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);
    return Error{path + ": not a readable SQLite database: " + d->error()};
  }
  return d;
}

ForeignDb::~ForeignDb() {
  if (m_db) sqlite3_close(m_db);
}

int ForeignDb::onProgress(void* self) {
  auto* d = static_cast<ForeignDb*>(self);
  if (std::chrono::steady_clock::now() <= d->m_deadline) return 0;
  d->m_timedOut = true;
  return 1;  // SQLITE_INTERRUPT
}

int ForeignDb::step(sqlite3_stmt* st) {
  m_timedOut = false;
  m_deadline = std::chrono::steady_clock::now() + m_budget;
  return sqlite3_step(st);
}

std::string ForeignDb::error() const {
  if (m_timedOut) {
    return "a query ran past its budget of " + std::to_string(m_budget.count()) +
           " ms (a damaged or hostile export; nsys exports read in seconds)";
  }
  const int code = sqlite3_errcode(m_db) & 0xff;
  if (code == SQLITE_TOOBIG) {
    return "a value longer than " + std::to_string(kMaxTraceStringBytes) +
           " bytes (the limit for one text value of a trace)";
  }
  if (isDamage(code)) return "the file is damaged (" + std::string(sqlite3_errmsg(m_db)) + ")";
  return sqlite3_errmsg(m_db);
}

namespace {

// The tables this reader reads. Each must be a table: a view of that name is refused by name
// (views are not run, and an export never holds one).
constexpr std::array<std::string_view, 8> kReadTables = {"CUPTI_ACTIVITY_KIND_KERNEL",
                                                         "CUPTI_ACTIVITY_KIND_MEMCPY",
                                                         "CUPTI_ACTIVITY_KIND_MEMSET",
                                                         "CUPTI_ACTIVITY_KIND_RUNTIME",
                                                         "NVTX_EVENTS",
                                                         "StringIds",
                                                         "TARGET_INFO_GPU",
                                                         "TARGET_INFO_SESSION_START_TIME"};

Expected<std::set<std::string>> tablesOf(ForeignDb& d) {
  std::set<std::string> out;
  Statement st(d.get(), "SELECT name, type FROM sqlite_schema WHERE type IN ('table', 'view')", nullptr);
  if (!st) return Error{d.path() + ": " + d.error()};
  int rc;
  while ((rc = d.step(st.get())) == SQLITE_ROW) {
    const std::string name = st.text(0);
    const bool read =
        std::any_of(kReadTables.begin(), kReadTables.end(), [&](std::string_view t) { return name == t; });
    if (st.text(1) == "view") {
      if (read) {
        return Error{d.path() + ": " + excerpt(name) +
                     " is a view, not a table (an nsys export holds tables; views in a foreign file are not run)"};
      }
      continue;
    }
    out.insert(name);
  }
  if (rc != SQLITE_DONE) return Error{d.path() + ": reading its schema: " + d.error()};
  return out;
}

Expected<std::set<std::string>> columnsOf(ForeignDb& d, const std::string& table) {
  std::set<std::string> out;
  Statement st(d.get(), "PRAGMA table_info(\"" + table + "\")", nullptr);
  if (!st) return Error{d.path() + ": " + table + ": " + d.error()};
  int rc;
  while ((rc = d.step(st.get())) == SQLITE_ROW) out.insert(st.text(1));
  if (rc != SQLITE_DONE) return Error{d.path() + ": " + table + ": " + d.error()};
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

// A text column as bytes (a name may hold NUL or anything else; the store repairs it to UTF-8).
std::string_view columnText(sqlite3_stmt* s, int col) {
  const auto* p = sqlite3_column_text(s, col);
  if (p == nullptr) return {};
  return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s, col))};
}

// The session's UTC start, bounded like a Kineto base time: every time of the file is added to it.
Expected<std::int64_t> sessionStartNs(ForeignDb& d, const std::set<std::string>& tables) {
  if (!tables.count("TARGET_INFO_SESSION_START_TIME")) return std::int64_t{0};
  PS_ASSIGN_OR_RETURN(auto cols, columnsOf(d, "TARGET_INFO_SESSION_START_TIME"));
  if (!cols.count("utcEpochNs")) return std::int64_t{0};
  Statement st(d.get(), "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1", nullptr);
  if (!st) return Error{d.path() + ": TARGET_INFO_SESSION_START_TIME: " + d.error()};
  const int rc = d.step(st.get());
  if (rc == SQLITE_DONE) return std::int64_t{0};
  if (rc != SQLITE_ROW) return Error{d.path() + ": TARGET_INFO_SESSION_START_TIME: " + d.error()};
  if (sqlite3_column_type(st.get(), 0) != SQLITE_INTEGER) return std::int64_t{0};
  const std::int64_t v = sqlite3_column_int64(st.get(), 0);
  if (v < 0 || v > kMaxTraceClockBaseNs) {
    return Error{d.path() + ": TARGET_INFO_SESSION_START_TIME.utcEpochNs " + std::to_string(v) +
                 " is out of range (expected nanoseconds since the Unix epoch, 0.." +
                 std::to_string(kMaxTraceClockBaseNs) + ")"};
  }
  return v;
}

constexpr std::array<const char*, 3> kGpuTables = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                                   "CUPTI_ACTIVITY_KIND_MEMSET"};

struct NvtxQuery {
  std::string sql;
  bool ok = false;
};

Expected<NvtxQuery> nvtxQuery(ForeignDb& d, const std::set<std::string>& tables) {
  NvtxQuery q;
  if (!tables.count("NVTX_EVENTS")) return q;
  PS_ASSIGN_OR_RETURN(const auto cols, columnsOf(d, "NVTX_EVENTS"));
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

// Whether a time read from the file is one ingest can place (the rest are skipped there).
bool timeInRange(std::int64_t ns) { return ns >= -kMaxTraceTimeNs && ns <= kMaxTraceTimeNs; }

}  // namespace

Expected<ScanResult> scanNsysFile(const std::string& path, const OpMatcher& matcher) {
  PS_ASSIGN_OR_RETURN(auto opened, ForeignDb::open(path));
  ForeignDb& d = *opened;
  PS_ASSIGN_OR_RETURN(const auto tables, tablesOf(d));
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
  PS_ASSIGN_OR_RETURN(auto base, sessionStartNs(d, tables));
  r.baseNs = base;
  std::optional<std::int64_t> first;
  const auto consider = [&](const char* table) -> Status {
    PS_ASSIGN_OR_RETURN(auto cols, columnsOf(d, table));
    if (!cols.count("start")) return {};
    Statement st(d.get(),
                 std::string("SELECT MIN(start), COUNT(*) FROM ") + table + " WHERE start BETWEEN " +
                     std::to_string(-kMaxTraceTimeNs) + " AND " + std::to_string(kMaxTraceTimeNs),
                 nullptr);
    if (!st) return Error{path + ": " + table + ": " + d.error()};
    const int rc = d.step(st.get());
    if (rc != SQLITE_ROW) return Error{path + ": " + table + ": " + d.error()};
    if (sqlite3_column_type(st.get(), 0) == SQLITE_INTEGER) {
      const std::int64_t v = sqlite3_column_int64(st.get(), 0);
      if (!first || v < *first) first = v;
      r.events += sqlite3_column_int64(st.get(), 1);
    }
    return {};
  };
  for (const char* t : kGpuTables) {
    if (!tables.count(t)) continue;
    PS_RETURN_IF_ERROR(consider(t));
  }
  PS_ASSIGN_OR_RETURN(auto nvtx, nvtxQuery(d, tables));
  if (nvtx.ok) {
    Statement st(d.get(), nvtx.sql, nullptr);
    if (!st) return Error{path + ": NVTX_EVENTS: " + d.error()};
    int rc = 0;
    while ((rc = d.step(st.get())) == SQLITE_ROW) {
      ++r.events;
      if (sqlite3_column_type(st.get(), 1) == SQLITE_INTEGER) {
        const std::int64_t v = sqlite3_column_int64(st.get(), 1);
        if (timeInRange(v) && (!first || v < *first)) first = v;
      }
      if (sqlite3_column_type(st.get(), 3) == SQLITE_NULL) continue;
      if (auto op = matcher.match(columnText(st.get(), 3))) {
        r.stages.insert(op->stage);
        r.kindTexts.insert(op->kindText);
      }
    }
    if (rc != SQLITE_DONE) return Error{path + ": NVTX_EVENTS: " + d.error()};
  }
  if (tables.count("TARGET_INFO_GPU")) {
    PS_ASSIGN_OR_RETURN(auto cols, columnsOf(d, "TARGET_INFO_GPU"));
    if (cols.count("name")) {
      Statement st(d.get(), "SELECT name FROM TARGET_INFO_GPU LIMIT 1", nullptr);
      if (!st) return Error{path + ": TARGET_INFO_GPU: " + d.error()};
      const int rc = d.step(st.get());
      if (rc == SQLITE_ROW) r.gpuName = st.text(0);
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error{path + ": TARGET_INFO_GPU: " + d.error()};
    }
  }
  if (first) r.firstAbsNs = *first + r.baseNs;  // |first| ≤ 2^61, base ≤ 2^62: no overflow
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
    std::int64_t device = -1;
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

// Kernel spans by (process, correlation id), for projecting NVTX ops onto the GPU.
struct Launch {
  std::int64_t pid, correlation, start, end, device;
};

// A CUDA API call: its thread, its start and the kernel it launched.
struct Call {
  std::int64_t tid, start;
  std::size_t launch;  // index into launches, or npos
};

// The query of one GPU activity table: rowid, start, end, deviceId, streamId, correlationId,
// bytes, name, globalPid (defaults for the columns this nsys version lacks).
std::string gpuActivitySql(const std::set<std::string>& cols, const char* table, EventCategory category,
                           bool stringIds) {
  std::string join;
  const std::string name = category == EventCategory::Kernel
                               ? textExpr(cols, {"demangledName", "shortName", "name", "mangledName"}, stringIds, join)
                               : "NULL";
  std::string sql = "SELECT t.rowid, t.start, t.\"end\"";
  for (const char* column : {"deviceId", "streamId", "correlationId", "bytes"}) {
    sql += ", ";
    sql += col(cols, column, "0");
  }
  sql += ", ";
  sql += name;
  sql += ", ";
  sql += col(cols, "globalPid", "0");
  sql += " FROM ";
  sql += table;
  sql += " t";
  sql += join;
  return sql;
}

// The second read of one export. Its phases (GPU activity, CUDA API calls, NVTX ranges) share
// the file, the run being written and the counts.
struct NsysIngest {
  NsysIngest(HistoryStore::Impl& store, RunId runId, RunState& runState, const FileContext& context, ForeignDb& db,
             const std::set<std::string>& tableNames)
      : im(store),
        run(runId),
        state(runState),
        ctx(context),
        d(db),
        tables(tableNames),
        stringIds(tableNames.count("StringIds") > 0),
        // File time → run time. Both clocks are bounded (kMaxTraceClockBaseNs, kMaxTraceTimeNs),
        // and every sum with a row's time is checked all the same.
        toRun(checkedSub(context.baseNs, runState.originNs).value_or(0)),
        project(tableNames.count("CUPTI_ACTIVITY_KIND_RUNTIME") > 0 && tableNames.count("NVTX_EVENTS") > 0) {}
  NsysIngest(const NsysIngest&) = delete;
  NsysIngest& operator=(const NsysIngest&) = delete;

  // Stores one row, or skips it (with `where` and the reason) when its time or ids are out of
  // range. Only a database failure is an error.
  Status store(EventRow& row, std::int64_t start, const std::string& where) {
    const auto runStart = checkedAdd(start, toRun);
    std::optional<std::string> problem;
    if (runStart) {
      row.startNs = *runStart;
      problem = eventRowProblem(row);
    } else {
      problem = "start " + std::to_string(start) + " ns does not fit 64 bits on the run's clock";
    }
    if (problem) {
      note.skip(where + ": " + *problem);
      return {};
    }
    PS_RETURN_IF_ERROR(im.insert(run, state, row));
    ++counts.stored;
    return {};
  }

  // --- GPU activity ---
  Status gpuActivity() {
    for (const char* table : kGpuTables) {
      if (!tables.count(table)) continue;
      PS_RETURN_IF_ERROR(gpuTable(table));
    }
    return {};
  }

  Status gpuTable(const char* table) {
    PS_ASSIGN_OR_RETURN(const auto cols, columnsOf(d, table));
    if (!cols.count("start") || !cols.count("end")) {
      note.skip(std::string(table) + ": no start/end columns (table skipped)");
      return {};
    }
    const std::string_view t(table);
    const EventCategory category = t.find("MEMCPY") != std::string_view::npos   ? EventCategory::Memcpy
                                   : t.find("MEMSET") != std::string_view::npos ? EventCategory::Memset
                                                                                : EventCategory::Kernel;
    Statement st(d.get(), gpuActivitySql(cols, table, category, stringIds), nullptr);
    if (!st) return Error{ctx.path + ": " + table + ": " + d.error()};
    int rc = 0;
    std::string text;
    while ((rc = d.step(st.get())) == SQLITE_ROW) {
      PS_RETURN_IF_ERROR(gpuRow(st.get(), table, category, text));
    }
    if (rc != SQLITE_DONE) return Error{ctx.path + ": " + table + ": " + d.error()};
    return {};
  }

  // One row of gpuActivitySql's query; `text` is a buffer for its name.
  Status gpuRow(sqlite3_stmt* s, const char* table, EventCategory category, std::string& text) {
    const std::int64_t rowid = sqlite3_column_int64(s, 0);
    if (sqlite3_column_type(s, 1) != SQLITE_INTEGER || sqlite3_column_type(s, 2) != SQLITE_INTEGER) {
      note.skip(std::string(table) + " row " + std::to_string(rowid) + ": start or end is NULL (expected ns)");
      return {};
    }
    const std::int64_t start = sqlite3_column_int64(s, 1);
    const std::int64_t end = sqlite3_column_int64(s, 2);
    if (end < start || start < -(std::int64_t{1} << 61) || end > (std::int64_t{1} << 61)) {
      note.skip(std::string(table) + " row " + std::to_string(rowid) + ": end " + std::to_string(end) +
                " before start " + std::to_string(start) + " or out of range");
      return {};
    }
    if (sqlite3_column_type(s, 7) != SQLITE_NULL) {
      text.assign(columnText(s, 7));
    } else {
      text = category == EventCategory::Memcpy ? "Memcpy" : category == EventCategory::Memset ? "Memset" : "kernel";
    }
    EventRow row;
    row.category = category;
    if (category == EventCategory::Kernel &&
        (text.find("nccl") != std::string::npos || text.find("NCCL") != std::string::npos)) {
      row.category = EventCategory::Nccl;
    }
    row.device = ctx.device ? *ctx.device : sqlite3_column_int64(s, 3);
    row.stream = sqlite3_column_int64(s, 4);
    row.correlationId = sqlite3_column_int64(s, 5);
    row.bytes = sqlite3_column_int64(s, 6);
    row.name = text;
    row.durationNs = end - start;
    const std::int64_t storedBefore = counts.stored;
    PS_RETURN_IF_ERROR(store(row, start, std::string(table) + " row " + std::to_string(rowid)));
    if (project && counts.stored > storedBefore) {
      launches.push_back({sqlite3_column_int64(s, 8), row.correlationId, start, end, row.device});
    }
    return {};
  }

  // --- CUDA API calls: per thread, in time order, each with its GPU span ---
  Status indexCalls() {
    if (!project) return {};
    PS_ASSIGN_OR_RETURN(const auto cols, columnsOf(d, "CUPTI_ACTIVITY_KIND_RUNTIME"));
    if (!cols.count("globalTid") || !cols.count("start") || !cols.count("correlationId")) return {};
    const bool launchesHavePid =
        std::any_of(launches.begin(), launches.end(), [](const Launch& l) { return l.pid != 0; });
    std::sort(launches.begin(), launches.end(), [](const Launch& a, const Launch& b) {
      return std::tie(a.pid, a.correlation) < std::tie(b.pid, b.correlation);
    });
    Statement st(d.get(),
                 "SELECT globalTid, start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start IS NOT NULL",
                 nullptr);
    if (!st) return Error{ctx.path + ": CUPTI_ACTIVITY_KIND_RUNTIME: " + d.error()};
    int rc;
    while ((rc = d.step(st.get())) == SQLITE_ROW) {
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
    if (rc != SQLITE_DONE) return Error{ctx.path + ": CUPTI_ACTIVITY_KIND_RUNTIME: " + d.error()};
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
    return {};
  }

  // --- NVTX ranges ---
  Status nvtxRanges() {
    PS_ASSIGN_OR_RETURN(auto nvtx, nvtxQuery(d, tables));
    if (!nvtx.ok) return {};
    Statement st(d.get(), nvtx.sql, nullptr);
    if (!st) return Error{ctx.path + ": NVTX_EVENTS: " + d.error()};
    int rc = 0;
    std::string text;
    while ((rc = d.step(st.get())) == SQLITE_ROW) {
      PS_RETURN_IF_ERROR(nvtxRow(st.get(), text));
    }
    if (rc != SQLITE_DONE) return Error{ctx.path + ": NVTX_EVENTS: " + d.error()};
    return {};
  }

  // One row of the NVTX query; `text` is a buffer for its text.
  Status nvtxRow(sqlite3_stmt* s, std::string& text) {
    const std::int64_t rowid = sqlite3_column_int64(s, 0);
    if (sqlite3_column_type(s, 1) != SQLITE_INTEGER || sqlite3_column_type(s, 2) != SQLITE_INTEGER) {
      note.skip("NVTX_EVENTS row " + std::to_string(rowid) + ": start or end is NULL (an unclosed range)");
      return {};
    }
    std::int64_t start = sqlite3_column_int64(s, 1);
    std::int64_t end = sqlite3_column_int64(s, 2);
    if (end < start || start < -(std::int64_t{1} << 61) || end > (std::int64_t{1} << 61)) {
      note.skip("NVTX_EVENTS row " + std::to_string(rowid) + ": end before start or out of range");
      return {};
    }
    text.assign(columnText(s, 3));
    const std::int64_t tid = sqlite3_column_int64(s, 4);
    EventRow row;
    row.stream = tid;
    const auto op = ctx.matcher ? ctx.matcher->match(text) : std::nullopt;
    std::int64_t projectedDevice = -1;
    if (op && tree) projectedDevice = projectOnGpu(tid, start, end);
    row.durationNs = end - start;
    nameRange(row, op, text, projectedDevice);
    const std::int64_t storedBefore = counts.stored;
    PS_RETURN_IF_ERROR(store(row, start, "NVTX_EVENTS row " + std::to_string(rowid)));
    if (counts.stored == storedBefore) return {};
    if (!op && ctx.recordSteps && text.rfind("ProfilerStep#", 0) == 0) return recordStep(text, end - start);
    return {};
  }

  // Moves [start, end] of a range on thread `tid` onto the GPU span of the kernels it launched
  // and returns their device; -1, and the range kept, when it launched none.
  std::int64_t projectOnGpu(std::int64_t tid, std::int64_t& start, std::int64_t& end) const {
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
    if (span.start > span.end) return -1;
    start = span.start;
    end = span.end;
    return span.device;
  }

  // Category, name, ids and device of an NVTX range: a compute op, a pipelining action (CPU
  // time under its kind text), or a plain CPU range.
  void nameRange(EventRow& row, const std::optional<OpName>& op, const std::string& text,
                 std::int64_t projectedDevice) const {
    if (!op) {
      row.category = EventCategory::Cpu;
      row.device = -1;
      row.name = text;
      return;
    }
    row.virtualStage = op->stage;
    row.microbatch = op->microbatch;
    if (const auto kind = computeKind(op->kindText, ctx.legacy)) {
      row.category = EventCategory::Op;
      row.kind = static_cast<int>(*kind);
      row.name = std::string(opKindName(*kind));
      row.device = ctx.stageDevice || ctx.device ? ctx.opDevice(op->stage) : projectedDevice;
    } else {
      row.category = EventCategory::Cpu;
      row.name = op->kindText;
      row.device = ctx.device.value_or(ctx.stageDevice ? ctx.opDevice(op->stage) : projectedDevice);
    }
  }

  // A "ProfilerStep#N" range into the steps table.
  Status recordStep(const std::string& text, std::int64_t durationNs) {
    PS_RETURN_IF_ERROR(storeProfilerStep(im, run, text, durationNs));
    return {};
  }

  HistoryStore::Impl& im;
  RunId run;
  RunState& state;
  const FileContext& ctx;
  ForeignDb& d;
  const std::set<std::string>& tables;
  const bool stringIds;
  const std::int64_t toRun;
  const bool project;
  IngestCounts counts;
  Noter note{counts, ctx.path};
  std::vector<Launch> launches;
  std::vector<Call> calls;
  std::optional<SpanTree> tree;
};

}  // namespace

Expected<IngestCounts> ingestNsysFile(HistoryStore::Impl& im, RunId run, RunState& state, const FileContext& ctx) {
  PS_ASSIGN_OR_RETURN(auto opened, ForeignDb::open(ctx.path));
  PS_ASSIGN_OR_RETURN(auto tables, tablesOf(*opened));
  NsysIngest in(im, run, state, ctx, *opened, tables);
  PS_RETURN_IF_ERROR(in.gpuActivity());
  PS_RETURN_IF_ERROR(in.indexCalls());
  PS_RETURN_IF_ERROR(in.nvtxRanges());
  return in.counts;
}

}  // namespace pipestudio::history::detail
