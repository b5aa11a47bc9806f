#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "Impl.hpp"
#include "Schema.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::history {

using detail::exec;
using detail::Statement;

namespace {

constexpr std::array<std::string_view, 4> kStatusNames = {"running", "complete", "incomplete", "failed"};
constexpr std::array<std::string_view, kEventCategoryCount> kCategoryNames = {"op",   "kernel",  "memcpy", "memset",
                                                                              "nccl", "runtime", "cpu"};

// Field 22 of /proc/PID/stat (start time in clock ticks since boot): with the pid it
// identifies a process even after its pid is reused. Empty where /proc is unavailable.
std::string processStartToken(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  // After "pid (comm) " the next field is field 3 (state); start time is field 22.
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
  }
  return field;
}

// Field 3 of /proc/PID/stat: 'Z' for a zombie (killed but not yet reaped: it writes no more).
char processState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '?';
}

bool writerAlive(const std::string& host, std::int64_t pid, const std::string& token) {
  if (host != hostName()) return true;  // another machine's process: cannot tell, leave it
  if (pid <= 0 || pid > INT_MAX) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  if (processState(static_cast<pid_t>(pid)) == 'Z') return false;
  if (!token.empty()) {
    const std::string now = processStartToken(static_cast<pid_t>(pid));
    if (!now.empty() && now != token) return false;  // pid reused by another process
  }
  return true;
}

std::string withPath(const std::string& path, const std::string& message) { return path + ": " + message; }

RunSummary readSummaryRow(const Statement& st) {
  RunSummary s;
  s.id = st.i64(0);
  s.name = st.text(1);
  s.status = runStatusFromName(st.text(2)).value_or(RunStatus::Incomplete);
  s.createdUnixMs = st.i64(3);
  s.events = st.i64(4);
  if (!st.isNull(5)) s.planId = st.i64(5);
  s.source = st.text(6);
  s.sourcePath = st.text(7);
  s.user = st.text(8);
  s.host = st.text(9);
  s.backend = st.text(10);
  s.gpu = st.text(11);
  s.executorVersion = st.text(12);
  s.notes = st.text(13);
  s.error = st.text(14);
  s.iterations = st.i32(15);
  s.devices = st.i32(16);
  if (!st.isNull(17) && !st.isNull(18)) s.durationMs = (st.f64(18) - st.f64(17)) / 1e6;
  return s;
}

constexpr const char* kSummarySelect = R"sql(
SELECT r.id, r.name, r.status, r.created_ms, r.events, r.plan_id, r.source, r.source_path, r.user, r.host,
       r.backend, r.gpu, r.executor_version, r.notes, r.error, r.iterations,
       (SELECT COUNT(*) FROM run_metrics m WHERE m.run_id = r.id AND m.device >= 0 AND m.key = 'events'),
       (SELECT value FROM run_metrics m WHERE m.run_id = r.id AND m.device = -1 AND m.key = 'first_ns'),
       (SELECT value FROM run_metrics m WHERE m.run_id = r.id AND m.device = -1 AND m.key = 'last_ns')
FROM runs r)sql";

}  // namespace

std::string_view runStatusName(RunStatus status) { return kStatusNames[static_cast<std::size_t>(status)]; }

std::optional<RunStatus> runStatusFromName(std::string_view name) {
  for (std::size_t i = 0; i < kStatusNames.size(); ++i) {
    if (kStatusNames[i] == name) return static_cast<RunStatus>(i);
  }
  return std::nullopt;
}

std::string_view eventCategoryName(EventCategory category) {
  return kCategoryNames[static_cast<std::size_t>(category)];
}

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::int64_t nowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string defaultHistoryPath() {
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_DATA_HOME");
  fs::path base;
  if (xdg && *xdg && fs::path(xdg).is_absolute()) {
    base = xdg;  // the XDG spec says relative values are to be ignored
  } else {
    const char* home = std::getenv("HOME");
    base = fs::path(home && *home ? home : ".") / ".local" / "share";
  }
  return (base / "pipestudio" / "history.sqlite").string();
}

// ---- Impl -------------------------------------------------------------------------------

HistoryStore::Impl::~Impl() {
  if (db) {
    if (inTransaction) (void)commit();
    // Finalize statements before closing (sqlite3_close refuses with live statements).
    insertEvent = {};
    insertEventBlock = {};
    appendEventBlock = {};
    maxEventId = {};
    insertName = {};
    insertMemory = {};
    insertStep = {};
    upsertMetric = {};
    updateRunEvents = {};
    sqlite3_close(db);
  }
}

Status HistoryStore::Impl::prepareWriteStatements() {
  std::string error;
  // Anonymous parameters: row r binds 1 + r * kEventColumns .. (r + 1) * kEventColumns.
  const auto eventInsert = [](int rows, bool withId) {
    std::string sql = withId ? "INSERT INTO events(id, " : "INSERT INTO events(";
    sql += "category, device, stream, name_id, start_ns, dur_ns, virtual_stage, microbatch, iteration, kind, bytes, "
           "correlation, args) VALUES";
    const char* row = withId ? "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?,?,?,?,?,?,?)";
    for (int r = 0; r < rows; ++r) (sql += r ? "," : "") += row;
    return sql;
  };
  insertEvent = Statement(db, eventInsert(1, true), &error);
  if (!insertEvent) return Error{error};
  eventBlockRows = std::clamp(sqlite3_limit(db, SQLITE_LIMIT_VARIABLE_NUMBER, -1) / kEventColumns, 1, kEventInsertRows);
  insertEventBlock = Statement(db, eventInsert(eventBlockRows, true), &error);
  if (!insertEventBlock) return Error{error};
  appendEventBlock = Statement(db, eventInsert(eventBlockRows, false), &error);
  if (!appendEventBlock) return Error{error};
  maxEventId = Statement(db, "SELECT IFNULL(MAX(id), -1) FROM events", &error);
  if (!maxEventId) return Error{error};
  bufferedEvents.reserve(static_cast<std::size_t>(eventBlockRows));
  insertName = Statement(db, "INSERT INTO names(name) VALUES(?1) ON CONFLICT(name) DO UPDATE SET name = name RETURNING id",
                         &error);
  if (!insertName) return Error{error};
  insertMemory = Statement(db,
                           "INSERT INTO memory_samples(run_id, seq, device, time_ns, bytes_in_use, bytes_reserved) "
                           "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                           &error);
  if (!insertMemory) return Error{error};
  insertStep = Statement(db, "INSERT OR REPLACE INTO steps(run_id, iteration, duration_ms) VALUES(?1, ?2, ?3)", &error);
  if (!insertStep) return Error{error};
  upsertMetric = Statement(db, "INSERT OR REPLACE INTO run_metrics(run_id, device, key, value) VALUES(?1, ?2, ?3, ?4)",
                           &error);
  if (!upsertMetric) return Error{error};
  updateRunEvents = Statement(db, "UPDATE runs SET events = ?2, origin_ns = ?3 WHERE id = ?1", &error);
  if (!updateRunEvents) return Error{error};
  return {};
}

Status HistoryStore::Impl::begin() {
  if (inTransaction) return {};
  // IMMEDIATE: take the write lock now (waiting up to busy_timeout) rather than failing on
  // the first insert when another writer holds it.
  if (auto st = exec(db, "BEGIN IMMEDIATE"); !st) return Error{withPath(path, "cannot start a write: " + st.message())};
  inTransaction = true;
  pendingRows = 0;
  lastEventId.reset();
  transactionStart = std::chrono::steady_clock::now();
  return {};
}

Status HistoryStore::Impl::writeRunProgress(RunId run, RunState& state) {
  if (!state.dirty) return {};
  updateRunEvents.bind(1, run);
  updateRunEvents.bind(2, state.committedEvents + state.pendingEvents);
  if (state.originKnown) {
    updateRunEvents.bind(3, state.originNs);
  } else {
    updateRunEvents.bindNull(3);
  }
  const int rc = updateRunEvents.step();
  updateRunEvents.reset();
  if (rc != SQLITE_DONE) return Error{detail::lastError(db)};
  for (const auto& [device, agg] : state.devices) {
    const std::pair<const char*, double> values[] = {{"first_ns", static_cast<double>(agg.firstNs)},
                                                     {"last_ns", static_cast<double>(agg.lastNs)},
                                                     {"op_busy_ns", static_cast<double>(agg.opBusyNs)},
                                                     {"events", static_cast<double>(agg.events)}};
    for (const auto& [key, value] : values) {
      upsertMetric.bind(1, run);
      upsertMetric.bind(2, device);
      upsertMetric.bindStatic(3, key);
      upsertMetric.bind(4, value);
      const int r = upsertMetric.step();
      upsertMetric.reset();
      if (r != SQLITE_DONE) return Error{detail::lastError(db)};
    }
  }
  state.dirty = false;
  return {};
}

Status HistoryStore::Impl::commit() {
  if (!inTransaction) return {};
  // A batch that cannot be written (disk full, I/O error) is dropped whole: what was committed
  // before stays, the space the failed batch took in the WAL is free again, and the caller can
  // still mark its run incomplete (finishRun) instead of leaving it "running".
  auto abandon = [this](Status failed) {
    (void)exec(db, "ROLLBACK");
    inTransaction = false;
    pendingRows = 0;
    bufferedEvents.clear();
    bufferedArgs.clear();
    for (auto& [run, state] : runs) state.pendingEvents = 0;
    nameIds.clear();  // names inserted by the dropped batch are gone with it
    return failed;
  };
  if (auto st = flushEvents(); !st) return abandon(st);
  for (auto& [run, state] : runs) {
    if (auto st = writeRunProgress(run, state); !st) return abandon(st);
  }
  if (auto st = exec(db, "COMMIT"); !st) return abandon(Error{withPath(path, "commit failed: " + st.message())});
  inTransaction = false;
  pendingRows = 0;
  for (auto& [run, state] : runs) {
    state.committedEvents += state.pendingEvents;
    state.pendingEvents = 0;
  }
  return {};
}

Status HistoryStore::Impl::maybeCommit() {
  if (!inTransaction) return {};
  if (pendingRows >= batchRows) return commit();
  // Checking the clock every 1024 rows keeps the cost invisible at 1M rows/s.
  if ((pendingRows & 1023) == 0 &&
      std::chrono::steady_clock::now() - transactionStart > std::chrono::milliseconds(250)) {
    return commit();
  }
  return {};
}

Status HistoryStore::Impl::commitIfStale() {
  if (inTransaction && std::chrono::steady_clock::now() - transactionStart > std::chrono::milliseconds(250)) {
    return commit();
  }
  return {};
}

Expected<RunState*> HistoryStore::Impl::runState(RunId run) {
  auto it = runs.find(run);
  if (it != runs.end()) return &it->second;
  // First write to this run on this connection: continue after what is stored.
  Statement st(db, "SELECT status, events, origin_ns, (SELECT IFNULL((MAX(id) & 4294967295) + 1, 0) FROM events WHERE id BETWEEN (?1 << 32) AND (?1 << 32) + 4294967295), "
                   "(SELECT IFNULL(MAX(seq) + 1, 0) FROM memory_samples WHERE run_id = ?1) FROM runs WHERE id = ?1",
               nullptr);
  if (!st) return Error{detail::lastError(db)};
  st.bind(1, run);
  if (st.step() != SQLITE_ROW) return Error{withPath(path, "no run with id " + std::to_string(run))};
  RunState state;
  state.committedEvents = st.i64(1);
  if (!st.isNull(2)) {
    state.originKnown = true;
    state.originNs = st.i64(2);
  }
  state.nextSeq = st.i64(3);
  state.nextMemorySeq = st.i64(4);
  Statement m(db, "SELECT device, key, value FROM run_metrics WHERE run_id = ?1", nullptr);
  if (m) {
    m.bind(1, run);
    while (m.step() == SQLITE_ROW) {
      auto& agg = state.devices[m.i32(0)];
      const std::string key = m.text(1);
      const auto v = static_cast<std::int64_t>(m.f64(2));
      if (key == "first_ns") agg.firstNs = v;
      if (key == "last_ns") agg.lastNs = v;
      if (key == "op_busy_ns") agg.opBusyNs = v;
      if (key == "events") agg.events = v;
    }
  }
  return &runs.emplace(run, std::move(state)).first->second;
}

Expected<std::int64_t> HistoryStore::Impl::nameId(std::string_view name) {
  auto it = nameIds.find(name);
  if (it != nameIds.end()) return it->second;
  insertName.bind(1, name);
  const int rc = insertName.step();
  if (rc != SQLITE_ROW) {
    insertName.reset();
    return Error{detail::lastError(db)};
  }
  const std::int64_t id = insertName.i64(0);
  while (insertName.step() == SQLITE_ROW) {
  }
  insertName.reset();
  nameIds.emplace(std::string(name), id);
  return id;
}

namespace {

// Binds one buffered event as row `row` of a multi-row INSERT. Every parameter is bound each
// time (bindings persist across executions, so a NULL must be bound explicitly).
void bindEvent(sqlite3_stmt* s, int row, const BufferedEvent& e, const std::string& args, bool withId) {
  // Parameter p + 1 is the category column; without ids every row is one parameter shorter.
  const int p = withId ? 1 + row * kEventColumns : row * (kEventColumns - 1);
  if (withId) sqlite3_bind_int64(s, p, e.id);
  sqlite3_bind_int(s, p + 1, e.category);
  sqlite3_bind_int(s, p + 2, e.device);
  sqlite3_bind_int64(s, p + 3, e.stream);
  sqlite3_bind_int64(s, p + 4, e.nameId);
  sqlite3_bind_int64(s, p + 5, e.startNs);
  sqlite3_bind_int64(s, p + 6, e.durationNs);
  if (e.isOp) {
    sqlite3_bind_int(s, p + 7, e.virtualStage);
    sqlite3_bind_int(s, p + 8, e.microbatch);
    sqlite3_bind_int(s, p + 9, e.iteration);
    sqlite3_bind_int(s, p + 10, e.kind);
  } else {
    for (int i = 7; i <= 10; ++i) sqlite3_bind_null(s, p + i);
  }
  if (e.bytes != 0) {
    sqlite3_bind_int64(s, p + 11, e.bytes);
  } else {
    sqlite3_bind_null(s, p + 11);
  }
  if (e.correlationId != 0) {
    sqlite3_bind_int64(s, p + 12, e.correlationId);
  } else {
    sqlite3_bind_null(s, p + 12);
  }
  if (e.hasArgs) {
    // SQLITE_STATIC: bufferedArgs is not touched until the statement has run.
    sqlite3_bind_text(s, p + 13, args.data() + e.argsOffset, static_cast<int>(e.argsBytes), SQLITE_STATIC);
  } else {
    sqlite3_bind_null(s, p + 13);
  }
}
}  // namespace

Status HistoryStore::Impl::flushEvents() {
  const std::size_t n = bufferedEvents.size();
  std::size_t done = 0;
  Status result;
  while (done < n) {
    const bool block = n - done >= static_cast<std::size_t>(eventBlockRows);
    const int rows = block ? eventBlockRows : 1;
    const std::int64_t firstId = bufferedEvents[done].id;
    const std::int64_t lastId = bufferedEvents[done + static_cast<std::size_t>(rows) - 1].id;
    bool append = false;
    if (block && (firstId >> 32) == (lastId >> 32) && lastId - firstId == eventBlockRows - 1) {
      // One run's consecutive seqs (a run's seqs only grow, so equal run and a span of
      // exactly rows - 1 means no other id lies between): the implicit rowids are these ids
      // exactly when the table ends right before the first.
      if (!lastEventId) {
        const int rc = maxEventId.step();
        if (rc == SQLITE_ROW) lastEventId = maxEventId.i64(0);
        maxEventId.reset();
        if (rc != SQLITE_ROW) {
          result = Error{withPath(path, "reading the events table failed: " + detail::lastError(db))};
          break;
        }
      }
      append = firstId == *lastEventId + 1;
    }
    Statement& s = append ? appendEventBlock : block ? insertEventBlock : insertEvent;
    // The largest id written, not the last: a block may mix runs (several ingests on one
    // connection), and a later block may only append after the table's true end. While that
    // end is unknown it stays unknown: rows of a lower run tell nothing about it.
    std::int64_t maxId = lastId;
    for (int r = 0; r < rows; ++r) {
      const BufferedEvent& e = bufferedEvents[done + static_cast<std::size_t>(r)];
      maxId = std::max(maxId, e.id);
      bindEvent(s.get(), r, e, bufferedArgs, !append);
    }
    const int rc = s.step();
    s.reset();
    if (rc != SQLITE_DONE) {
      result = Error{withPath(path, "storing an event failed: " + detail::lastError(db))};
      break;
    }
    if (append && sqlite3_last_insert_rowid(db) != lastId) {
      // Cannot happen with SQLite's documented rowid choice (largest + 1, below 2^63 - 1);
      // refuse rather than keep events under ids other than the run's.
      result = Error{withPath(path, "storing events failed: rowids not assigned in sequence")};
      break;
    }
    if (lastEventId) lastEventId = std::max(*lastEventId, maxId);
    done += static_cast<std::size_t>(rows);
  }
  bufferedEvents.clear();
  bufferedArgs.clear();
  return result;
}

Status HistoryStore::Impl::insert(RunId run, RunState& state, const EventRow& row) {
  if (auto st = begin(); !st) return st;
  auto name = nameId(row.name);
  if (!name) return name.error();
  if (state.nextSeq > 0xffffffffLL || run < 0 || run > 0x7fffffffLL) {
    return Error{withPath(path, "run " + std::to_string(run) + " cannot hold more events (limit 2^32 per run)")};
  }
  BufferedEvent& e = bufferedEvents.emplace_back();
  e.id = (run << 32) | state.nextSeq;
  e.nameId = *name;
  e.stream = row.stream;
  e.startNs = row.startNs;
  e.durationNs = row.durationNs;
  e.bytes = row.bytes;
  e.correlationId = row.correlationId;
  e.category = static_cast<int>(row.category);
  e.device = row.device;
  e.isOp = row.category == EventCategory::Op;
  e.virtualStage = row.virtualStage;
  e.microbatch = row.microbatch;
  e.iteration = row.iteration;
  e.kind = row.kind;
  if (!row.argsJson.empty()) {
    e.hasArgs = true;
    e.argsOffset = static_cast<std::uint32_t>(bufferedArgs.size());
    e.argsBytes = static_cast<std::uint32_t>(row.argsJson.size());
    bufferedArgs.append(row.argsJson);
  }
  if (bufferedEvents.size() >= static_cast<std::size_t>(eventBlockRows)) {
    if (auto st = flushEvents(); !st) return st;
  }
  ++state.nextSeq;
  ++state.pendingEvents;
  state.dirty = true;
  const std::int64_t endNs = row.startNs + row.durationNs;
  for (int key : {row.device, -1}) {
    auto& agg = state.devices[key];
    agg.firstNs = std::min(agg.firstNs, row.startNs);
    agg.lastNs = std::max(agg.lastNs, endNs);
    if (row.category == EventCategory::Op) agg.opBusyNs += row.durationNs;
    ++agg.events;
    if (row.device < 0) break;  // host events only count run-wide
  }
  ++pendingRows;
  return maybeCommit();
}

// ---- HistoryStore -----------------------------------------------------------------------

HistoryStore::HistoryStore(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
HistoryStore::HistoryStore(HistoryStore&&) noexcept = default;
HistoryStore& HistoryStore::operator=(HistoryStore&&) noexcept = default;
HistoryStore::~HistoryStore() = default;

const std::string& HistoryStore::path() const { return m_impl->path; }
int HistoryStore::schemaVersion() const { return m_impl->version; }
sqlite3* HistoryStore::connection() const { return m_impl->db; }
void HistoryStore::setBatchRows(int rows) { m_impl->batchRows = std::max(1, rows); }
Status HistoryStore::flush() { return m_impl->commit(); }

namespace {
// A read-only open of a WAL database needs its -shm file; on a read-only mount without one,
// SQLite cannot open it at all. Nobody can write there either, so it is opened immutable.
int openReadOnly(const std::string& path, sqlite3** db, int extraFlags = 0) {
  int rc = sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READONLY | extraFlags, nullptr);
  if (rc == SQLITE_OK) {
    rc = sqlite3_exec(*db, "SELECT COUNT(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return rc;
  }
  if (::access(path.c_str(), W_OK) == 0 && ::access(std::filesystem::path(path).parent_path().c_str(), W_OK) == 0) {
    return rc;  // writable: the failure is not a read-only mount
  }
  sqlite3_close(*db);
  *db = nullptr;
  std::string uri = "file:";
  for (const char c : std::filesystem::absolute(path).string()) {
    if (c == '?' || c == '#' || c == '%') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      uri += buf;
    } else {
      uri += c;
    }
  }
  return sqlite3_open_v2((uri + "?immutable=1").c_str(), db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | extraFlags,
                         nullptr);
}
}  // namespace

Expected<HistoryStore> HistoryStore::open(const std::string& path, const OpenOptions& options) {
  namespace fs = std::filesystem;
  if (options.targetSchemaVersion < 1 || options.targetSchemaVersion > kSchemaVersion) {
    return Error{"schema version " + std::to_string(options.targetSchemaVersion) + " is not one this build can create"};
  }
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  // Inspect an existing file read-only first: a newer schema must be refused before anything
  // (WAL switch, migration, recovery) could write to it.
  if (exists) {
    sqlite3* probe = nullptr;
    const int rc = openReadOnly(path, &probe);
    if (rc != SQLITE_OK) {
      std::string m = probe ? sqlite3_errmsg(probe) : "out of memory";
      sqlite3_close(probe);
      if (rc == SQLITE_NOTADB) return Error{withPath(path, "not a PipeStudio history database (" + m + ")")};
      return Error{withPath(path, "cannot open history database: " + m)};
    }
    sqlite3_busy_timeout(probe, options.busyTimeoutMs);
    auto version = detail::queryInt(probe, "PRAGMA user_version");
    auto appId = detail::queryInt(probe, "PRAGMA application_id");
    sqlite3_close(probe);
    if (!version) {
      return Error{withPath(path, "not a PipeStudio history database (" + version.message() + ")")};
    }
    if (appId && *appId != 0 && *appId != detail::kApplicationId) {
      return Error{withPath(path, "not a PipeStudio history database (SQLite application_id " + std::to_string(*appId) +
                                      "); choose another file with --db")};
    }
    if (*version > kSchemaVersion) {
      return Error{withPath(path, "history database has schema version " + std::to_string(*version) +
                                      ", newer than this build supports (" + std::to_string(kSchemaVersion) +
                                      "); it was written by a newer PipeStudio. Upgrade PipeStudio or choose another "
                                      "file with --db. The file was not modified.")};
    }
    if (*version == 0 && appId && *appId == 0) {
      // A SQLite file we did not create: only an empty one is adopted.
      sqlite3* check = nullptr;
      if (sqlite3_open_v2(path.c_str(), &check, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        auto tables = detail::queryInt(check, "SELECT COUNT(*) FROM sqlite_schema");
        sqlite3_close(check);
        if (tables && *tables > 0) {
          return Error{withPath(path, "not a PipeStudio history database (a SQLite file with other tables); choose "
                                      "another file with --db")};
        }
      } else {
        sqlite3_close(check);
      }
    }
  } else if (options.readOnly) {
    return Error{withPath(path, "no history database here")};
  } else {
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec) return Error{withPath(path, "cannot create directory " + parent.string() + ": " + ec.message())};
  }

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->readOnly = options.readOnly;
  const int flags = options.readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int opened = options.readOnly ? openReadOnly(path, &impl->db, SQLITE_OPEN_NOMUTEX)
                                      : sqlite3_open_v2(path.c_str(), &impl->db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (opened != SQLITE_OK) {
    return Error{withPath(path, std::string("cannot open history database: ") +
                                    (impl->db ? sqlite3_errmsg(impl->db) : "out of memory"))};
  }
  sqlite3* db = impl->db;
  sqlite3_busy_timeout(db, options.busyTimeoutMs);
  sqlite3_extended_result_codes(db, 1);
  // SQLite opens a write-protected file (permissions, a read-only mount) read-only without a
  // word; every write would then fail. Say so once, here.
  if (!options.readOnly && sqlite3_db_readonly(db, "main") == 1) {
    return Error{withPath(path, "the history database is read-only (the file or its file system cannot be written); "
                                "read commands (history list, show, compare, export --run) still open it")};
  }
  if (!options.readOnly) {
    // New files: 8 KiB pages fit more event rows per leaf; must precede the WAL switch.
    if (!exists) (void)exec(db, "PRAGMA page_size = 8192");
    auto mode = detail::queryInt(db, "PRAGMA journal_mode = WAL");
    if (!mode) return Error{withPath(path, "cannot switch to WAL: " + mode.message())};
    // NORMAL in WAL mode: a crash of the process never loses a committed transaction, and
    // the database stays consistent across power loss (SQLite docs, "Write-Ahead Logging").
    (void)exec(db, "PRAGMA synchronous = NORMAL");
  }
  (void)exec(db, "PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY");

  auto version = detail::queryInt(db, "PRAGMA user_version");
  if (!version) return Error{withPath(path, "not a PipeStudio history database (" + version.message() + ")")};
  impl->version = static_cast<int>(*version);
  if (options.readOnly) {
    if (impl->version < kSchemaVersion) {
      return Error{withPath(path, "history database has schema version " + std::to_string(impl->version) +
                                      " and needs a migration to " + std::to_string(kSchemaVersion) +
                                      "; open it read-write once")};
    }
  } else if (impl->version < options.targetSchemaVersion) {
    if (auto st = exec(db, "BEGIN IMMEDIATE"); !st) return Error{withPath(path, "cannot lock for migration: " + st.message())};
    // Re-read under the write lock: another process may have migrated meanwhile.
    auto locked = detail::queryInt(db, "PRAGMA user_version");
    if (!locked || *locked > kSchemaVersion) {
      (void)exec(db, "ROLLBACK");
      return Error{withPath(path, "history database changed schema while opening; try again")};
    }
    if (*locked < options.targetSchemaVersion) {
      if (auto st = detail::migrate(db, static_cast<int>(*locked), options.targetSchemaVersion); !st) {
        (void)exec(db, "ROLLBACK");
        return Error{withPath(path, st.message())};
      }
    }
    if (auto st = exec(db, "COMMIT"); !st) return Error{withPath(path, "migration commit failed: " + st.message())};
    impl->version = options.targetSchemaVersion;
  }
  HistoryStore store(std::move(impl));
  if (!options.readOnly && store.m_impl->version == kSchemaVersion) {
    if (auto st = store.m_impl->prepareWriteStatements(); !st) return Error{withPath(path, st.message())};
    if (options.recoverInterruptedRuns) {
      if (auto r = store.recoverInterruptedRuns(); !r) return r.error();
    }
  }
  return store;
}

Expected<std::string> HistoryStore::integrityCheck() {
  Statement st(m_impl->db, "PRAGMA integrity_check", nullptr);
  if (!st) return Error{detail::lastError(m_impl->db)};
  std::string out;
  while (st.step() == SQLITE_ROW) {
    if (!out.empty()) out += '\n';
    out += st.text(0);
  }
  return out;
}

Expected<int> HistoryStore::recoverInterruptedRuns() {
  sqlite3* db = m_impl->db;
  struct Candidate {
    RunId id;
    std::string host;
    std::int64_t pid;
    std::string token;
  };
  std::vector<Candidate> dead;
  {
    Statement st(db, "SELECT id, IFNULL(writer_host, ''), IFNULL(writer_pid, 0), IFNULL(writer_start, '') FROM runs "
                     "WHERE status = 'running'",
                 nullptr);
    if (!st) return Error{withPath(m_impl->path, detail::lastError(db))};
    while (st.step() == SQLITE_ROW) {
      Candidate c{st.i64(0), st.text(1), st.i64(2), st.text(3)};
      if (c.pid == getpid() && c.host == hostName()) continue;  // ours, still being written
      if (!writerAlive(c.host, c.pid, c.token)) dead.push_back(std::move(c));
    }
  }
  if (dead.empty()) return 0;
  if (auto st = m_impl->commit(); !st) return st.error();
  if (auto st = exec(db, "BEGIN IMMEDIATE"); !st) return Error{withPath(m_impl->path, st.message())};
  Statement upd(db,
                "UPDATE runs SET status = 'incomplete', finished_ms = ?2, "
                "events = (SELECT COUNT(*) FROM events WHERE id BETWEEN (?1 << 32) AND (?1 << 32) + 4294967295), "
                "error = CASE WHEN error = '' THEN ?3 ELSE error END WHERE id = ?1 AND status = 'running'",
                nullptr);
  for (const auto& c : dead) {
    upd.bind(1, c.id);
    upd.bind(2, nowUnixMs());
    upd.bind(3, "ingest interrupted: writer process " + std::to_string(c.pid) + " on " + c.host +
                    " ended before finishing the run");
    if (upd.step() != SQLITE_DONE) {
      (void)exec(db, "ROLLBACK");
      return Error{withPath(m_impl->path, detail::lastError(db))};
    }
    upd.reset();
  }
  upd = {};
  if (auto st = exec(db, "COMMIT"); !st) return Error{withPath(m_impl->path, st.message())};
  return static_cast<int>(dead.size());
}

// ---- plans ------------------------------------------------------------------------------

Expected<PlanId> HistoryStore::addPlan(const Plan& plan, std::string_view name) {
  Impl& im = *m_impl;
  if (auto st = im.begin(); !st) return st.error();
  const std::string document = planToJson(plan).dump();
  Statement ins(im.db,
                "INSERT INTO plans(created_ms, name, schedule, devices, microbatches, makespan_ms, bubble_ratio, "
                "document) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                nullptr);
  ins.bind(1, nowUnixMs());
  ins.bind(2, name.empty() ? std::string_view(plan.config.schedule) : name);
  ins.bind(3, plan.config.schedule);
  ins.bind(4, plan.config.devices);
  ins.bind(5, plan.config.microbatches);
  ins.bind(6, plan.metrics.makespanMs);
  ins.bind(7, plan.metrics.bubbleRatio);
  ins.bindStatic(8, document);
  if (ins.step() != SQLITE_DONE) return Error{withPath(im.path, "storing the plan failed: " + detail::lastError(im.db))};
  const PlanId id = sqlite3_last_insert_rowid(im.db);
  Statement op(im.db,
               "INSERT INTO planned_ops(plan_id, seq, device, virtual_stage, kind, microbatch, start_ms, end_ms, "
               "samples) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
               nullptr);
  std::int64_t seq = 0;
  for (const Op& o : plan.ops) {
    op.bind(1, id);
    op.bind(2, seq++);
    op.bind(3, o.device);
    op.bind(4, o.virtualStage);
    op.bind(5, static_cast<int>(o.kind));
    op.bind(6, o.microbatch);
    op.bind(7, o.startMs);
    op.bind(8, o.endMs);
    op.bind(9, o.samples);
    if (op.step() != SQLITE_DONE) return Error{withPath(im.path, detail::lastError(im.db))};
    op.reset();
  }
  if (auto st = im.commit(); !st) return st.error();
  return id;
}

Expected<Plan> HistoryStore::loadPlan(PlanId id) {
  Statement st(m_impl->db, "SELECT document FROM plans WHERE id = ?1", nullptr);
  if (!st) return Error{detail::lastError(m_impl->db)};
  st.bind(1, id);
  if (st.step() != SQLITE_ROW) return Error{withPath(m_impl->path, "no plan with id " + std::to_string(id))};
  const std::string where = m_impl->path + ":plan " + std::to_string(id);
  auto doc = parseJson(st.text(0), where);
  if (!doc) return doc.error();
  JsonReader reader(*doc);
  auto plan = readPlan(reader, reader.root());
  if (!reader.ok() || !plan) return reader.ok() ? Error{where + ": invalid plan"} : reader.toError();
  return std::move(*plan);
}

Status HistoryStore::linkRunToPlan(RunId run, PlanId plan) {
  if (auto st = flush(); !st) return st;
  Statement st(m_impl->db, "UPDATE runs SET plan_id = ?2 WHERE id = ?1 AND EXISTS(SELECT 1 FROM plans WHERE id = ?2)",
               nullptr);
  st.bind(1, run);
  st.bind(2, plan);
  if (st.step() != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  if (sqlite3_changes(m_impl->db) != 1) {
    return Error{withPath(m_impl->path, "cannot link run " + std::to_string(run) + " to plan " + std::to_string(plan) +
                                            ": no such run or plan")};
  }
  return {};
}

// ---- runs -------------------------------------------------------------------------------

Expected<std::vector<RunSummary>> HistoryStore::listRuns() {
  Statement st(m_impl->db, std::string(kSummarySelect) + " ORDER BY r.created_ms DESC, r.id DESC", nullptr);
  if (!st) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  std::vector<RunSummary> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(readSummaryRow(st));
  if (rc != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  return out;
}

Expected<RunSummary> HistoryStore::runSummary(RunId id) {
  Statement st(m_impl->db, std::string(kSummarySelect) + " WHERE r.id = ?1", nullptr);
  if (!st) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  st.bind(1, id);
  if (st.step() != SQLITE_ROW) return Error{withPath(m_impl->path, "no run with id " + std::to_string(id))};
  return readSummaryRow(st);
}

namespace {
Status updateRunText(HistoryStore::Impl& im, RunId id, const char* column, std::string_view value) {
  if (auto st = im.commit(); !st) return st;
  Statement st(im.db, std::string("UPDATE runs SET ") + column + " = ?2 WHERE id = ?1", nullptr);
  st.bind(1, id);
  st.bind(2, value);
  if (st.step() != SQLITE_DONE) return Error{withPath(im.path, detail::lastError(im.db))};
  if (sqlite3_changes(im.db) != 1) return Error{withPath(im.path, "no run with id " + std::to_string(id))};
  return {};
}
}  // namespace

Status HistoryStore::renameRun(RunId id, std::string_view name) { return updateRunText(*m_impl, id, "name", name); }
Status HistoryStore::annotateRun(RunId id, std::string_view notes) { return updateRunText(*m_impl, id, "notes", notes); }

Status HistoryStore::deleteRun(RunId id) {
  Impl& im = *m_impl;
  if (auto st = im.commit(); !st) return st;
  if (auto st = im.begin(); !st) return st;
  bool found = false;
  for (const char* table : {"events", "memory_samples", "steps", "ranks", "run_errors", "run_metrics", "runs"}) {
    const std::string_view t(table);
    const char* where = t == "runs" ? " WHERE id = ?1" : t == "events" ? " WHERE id BETWEEN (?1 << 32) AND (?1 << 32) + 4294967295" : " WHERE run_id = ?1";
    Statement st(im.db, std::string("DELETE FROM ") + table + where, nullptr);
    st.bind(1, id);
    if (st.step() != SQLITE_DONE) {
      (void)exec(im.db, "ROLLBACK");
      im.inTransaction = false;
      return Error{withPath(im.path, detail::lastError(im.db))};
    }
    if (std::string_view(table) == "runs") found = sqlite3_changes(im.db) == 1;
  }
  im.runs.erase(id);
  if (!found) {
    (void)exec(im.db, "ROLLBACK");
    im.inTransaction = false;
    return Error{withPath(im.path, "no run with id " + std::to_string(id))};
  }
  return im.commit();
}

Expected<std::vector<MeasuredEvent>> HistoryStore::loadEvents(RunId id, std::optional<EventCategory> category) {
  if (auto st = flush(); !st) return st.error();
  std::string sql =
      "SELECT e.category, e.device, e.stream, n.name, e.start_ns, e.dur_ns, e.virtual_stage, e.microbatch, "
      "e.iteration, e.kind, e.bytes, e.correlation, e.args FROM events e JOIN names n ON n.id = e.name_id "
      "WHERE e.id BETWEEN (?1 << 32) AND (?1 << 32) + 4294967295";
  if (category) sql += " AND e.category = ?2";
  Statement st(m_impl->db, sql, nullptr);
  if (!st) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  st.bind(1, id);
  if (category) st.bind(2, static_cast<int>(*category));
  std::vector<MeasuredEvent> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    MeasuredEvent e;
    e.category = static_cast<EventCategory>(std::clamp(st.i32(0), 0, kEventCategoryCount - 1));
    e.device = st.i32(1);
    e.stream = st.i64(2);
    e.name = st.text(3);
    e.startNs = st.i64(4);
    e.durationNs = st.i64(5);
    if (!st.isNull(6)) e.virtualStage = st.i32(6);
    if (!st.isNull(7)) e.microbatch = st.i32(7);
    if (!st.isNull(8)) e.iteration = st.i32(8);
    if (!st.isNull(9)) e.kind = st.i32(9);
    e.bytes = st.i64(10);
    e.correlationId = st.i64(11);
    if (!st.isNull(12)) e.argsJson = st.text(12);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  std::stable_sort(out.begin(), out.end(), [](const MeasuredEvent& a, const MeasuredEvent& b) {
    return a.device != b.device ? a.device < b.device : a.startNs < b.startNs;
  });
  return out;
}

Expected<std::vector<double>> HistoryStore::stepTimesMs(RunId id) {
  if (auto st = flush(); !st) return st.error();
  Statement st(m_impl->db, "SELECT duration_ms FROM steps WHERE run_id = ?1 ORDER BY iteration", nullptr);
  if (!st) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  st.bind(1, id);
  std::vector<double> out;
  while (st.step() == SQLITE_ROW) out.push_back(st.f64(0));
  return out;
}

Expected<Plan> HistoryStore::runAsPlan(RunId id, int iteration) {
  auto summary = runSummary(id);
  if (!summary) return summary.error();
  auto events = loadEvents(id, EventCategory::Op);
  if (!events) return events.error();
  Plan plan;
  if (summary->planId) {
    if (auto linked = loadPlan(*summary->planId)) {
      plan = std::move(*linked);
      plan.ops.clear();
      plan.comms.clear();
    }
  }
  if (plan.config.schedule.empty()) plan.config.schedule = "measured";
  std::int64_t originNs = INT64_MAX;
  int maxDevice = -1;
  int maxStage = -1;
  int maxMicrobatch = -1;
  for (const auto& e : *events) {
    if (iteration >= 0 && e.iteration != iteration) continue;
    originNs = std::min(originNs, e.startNs);
    maxDevice = std::max(maxDevice, e.device);
    maxStage = std::max(maxStage, e.virtualStage);
    maxMicrobatch = std::max(maxMicrobatch, e.microbatch);
  }
  for (const auto& e : *events) {
    if (iteration >= 0 && e.iteration != iteration) continue;
    if (e.device < 0 || e.kind < 0 || e.kind >= kOpKindCount) continue;
    Op op;
    op.device = e.device;
    op.virtualStage = std::max(0, e.virtualStage);
    op.kind = static_cast<OpKind>(e.kind);
    op.microbatch = std::max(0, e.microbatch);
    op.startMs = static_cast<double>(e.startNs - originNs) / 1e6;
    op.endMs = static_cast<double>(e.startNs + e.durationNs - originNs) / 1e6;
    plan.ops.push_back(op);
  }
  // loadEvents orders by (device, start): per device in execution order, as Plan requires.
  plan.config.devices = std::max(plan.config.devices, maxDevice + 1);
  if (!summary->planId) {
    plan.config.microbatches = std::max(1, maxMicrobatch + 1);
    // Without a linked plan, one virtual stage per measured stage index, placed where it ran.
    plan.virtualStages.clear();
    for (int s = 0; s <= maxStage; ++s) {
      VirtualStage vs;
      vs.id = s;
      vs.device = 0;
      for (const Op& op : plan.ops) {
        if (op.virtualStage == s) {
          vs.device = op.device;
          break;
        }
      }
      plan.virtualStages.push_back(vs);
    }
  }
  plan.metrics = computeMetrics(plan);
  return plan;
}

// ---- run lifecycle ----------------------------------------------------------------------

Expected<RunId> HistoryStore::beginRun(const RunInfo& info) {
  Impl& im = *m_impl;
  if (auto st = im.commit(); !st) return st.error();
  Statement st(im.db,
               "INSERT INTO runs(created_ms, status, plan_id, source, source_path, user, host, backend, gpu, "
               "executor_version, name, writer_host, writer_pid, writer_start) "
               "VALUES(?1, 'running', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
               nullptr);
  if (!st) return Error{withPath(im.path, detail::lastError(im.db))};
  st.bind(1, nowUnixMs());
  if (info.planId) {
    st.bind(2, *info.planId);
  } else {
    st.bindNull(2);
  }
  st.bind(3, info.source);
  st.bind(4, info.sourcePath);
  const char* user = std::getenv("USER");
  st.bind(5, info.user.empty() && user ? std::string_view(user) : std::string_view(info.user));
  st.bind(6, info.host);
  st.bind(7, info.backend);
  st.bind(8, info.gpu);
  st.bind(9, info.executorVersion);
  st.bind(10, info.name);
  st.bind(11, hostName());
  st.bind(12, static_cast<std::int64_t>(getpid()));
  st.bind(13, processStartToken(getpid()));
  if (st.step() != SQLITE_DONE) return Error{withPath(im.path, "creating a run failed: " + detail::lastError(im.db))};
  const RunId id = sqlite3_last_insert_rowid(im.db);
  if (info.name.empty()) {
    (void)updateRunText(im, id, "name", "run " + std::to_string(id));
  }
  im.runs[id] = RunState{};
  return id;
}

Status HistoryStore::finishRun(RunId id, RunStatus status, std::string_view error) {
  Impl& im = *m_impl;
  if (auto st = im.commit(); !st) return st;
  Statement st(im.db,
               "UPDATE runs SET status = ?2, finished_ms = ?3, error = CASE WHEN ?4 = '' THEN error ELSE ?4 END, "
               "events = (SELECT COUNT(*) FROM events WHERE id BETWEEN (?1 << 32) AND (?1 << 32) + 4294967295) WHERE id = ?1",
               nullptr);
  st.bind(1, id);
  st.bind(2, runStatusName(status));
  st.bind(3, nowUnixMs());
  st.bind(4, error);
  if (st.step() != SQLITE_DONE) return Error{withPath(im.path, detail::lastError(im.db))};
  if (sqlite3_changes(im.db) != 1) return Error{withPath(im.path, "no run with id " + std::to_string(id))};
  im.runs.erase(id);
  return {};
}

}  // namespace pipestudio::history
