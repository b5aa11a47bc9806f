// The batched event writer: one write transaction spans many inserts (committed by size or
// age), events go in as multi-row INSERTs, names are interned, run progress is kept in step.
#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdlib>

#include "Impl.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/history/TraceImport.hpp"

namespace pipestudio::history {

using detail::exec;
using detail::Statement;

// ---- Impl -------------------------------------------------------------------------------

HistoryStore::Impl::~Impl() {
  // The statements are finalised before the connection closes (member order, Impl.hpp).
  if (batch) (void)commit();
}

Status HistoryStore::Impl::prepareWriteStatements() {
  std::string error;
  // Anonymous parameters: row r binds 1 + r * kEventColumns .. (r + 1) * kEventColumns.
  const auto eventInsert = [](int rows, bool withId) {
    std::string sql = withId ? "INSERT INTO events(id, " : "INSERT INTO events(";
    sql +=
        "category, device, stream, name_id, start_ns, dur_ns, virtual_stage, microbatch, iteration, kind, bytes, "
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
  insertName = Statement(
      db, "INSERT INTO names(name) VALUES(?1) ON CONFLICT(name) DO UPDATE SET name = name RETURNING id", &error);
  if (!insertName) return Error{error};
  insertMemory = Statement(db,
                           "INSERT INTO memory_samples(run_id, seq, device, time_ns, bytes_in_use, bytes_reserved) "
                           "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                           &error);
  if (!insertMemory) return Error{error};
  insertStep = Statement(db, "INSERT OR REPLACE INTO steps(run_id, iteration, duration_ms) VALUES(?1, ?2, ?3)", &error);
  if (!insertStep) return Error{error};
  upsertMetric =
      Statement(db, "INSERT OR REPLACE INTO run_metrics(run_id, device, key, value) VALUES(?1, ?2, ?3, ?4)", &error);
  if (!upsertMetric) return Error{error};
  updateRunEvents = Statement(db, "UPDATE runs SET events = ?2, origin_ns = ?3 WHERE id = ?1", &error);
  if (!updateRunEvents) return Error{error};
  return {};
}

Status HistoryStore::Impl::begin() {
  if (batch) return {};
  auto tx = detail::Transaction::begin(db);
  if (!tx) return Error{withPath(path, "cannot start a write: " + tx.message())};
  batch.emplace(std::move(*tx));
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
    const std::array<std::pair<const char*, double>, 4> values = {{{"first_ns", static_cast<double>(agg.firstNs)},
                                                                   {"last_ns", static_cast<double>(agg.lastNs)},
                                                                   {"op_busy_ns", static_cast<double>(agg.opBusyNs)},
                                                                   {"events", static_cast<double>(agg.events)}}};
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
  if (!batch) return {};
  // A batch that cannot be written (disk full, I/O error) is dropped whole: what was committed
  // before stays, the space the failed batch took in the WAL is free again, and the caller can
  // still mark its run incomplete (finishRun) instead of leaving it "running".
  auto abandon = [this](Status failed) {
    batch.reset();  // rolls back
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
  if (auto st = batch->commit(); !st) return abandon(Error{withPath(path, "commit failed: " + st.message())});
  batch.reset();
  pendingRows = 0;
  for (auto& [run, state] : runs) {
    state.committedEvents += state.pendingEvents;
    state.pendingEvents = 0;
  }
  return {};
}

Status HistoryStore::Impl::maybeCommit() {
  if (!batch) return {};
  if (pendingRows >= batchRows) return commit();
  // Checking the clock every 1024 rows keeps the cost invisible at 1M rows/s.
  if ((pendingRows & 1023) == 0 &&
      std::chrono::steady_clock::now() - transactionStart > std::chrono::milliseconds(250)) {
    return commit();
  }
  return {};
}

Status HistoryStore::Impl::commitIfStale() {
  if (batch && std::chrono::steady_clock::now() - transactionStart > std::chrono::milliseconds(250)) {
    return commit();
  }
  return {};
}

Expected<RunState*> HistoryStore::Impl::runState(RunId run) {
  auto it = runs.find(run);
  if (it != runs.end()) return &it->second;
  // First write to this run on this connection: continue after what is stored.
  Statement st(db,
               "SELECT status, events, origin_ns, (SELECT IFNULL((MAX(id) & 4294967295) + 1, 0) FROM events "
               "WHERE " RUN_EVENT_RANGE
               "), "
               "(SELECT IFNULL(MAX(seq) + 1, 0) FROM memory_samples WHERE run_id = ?1) FROM runs WHERE id = ?1",
               nullptr);
  if (!st) return Error{detail::lastError(db)};
  st.bind(1, run);
  if (const int rc = st.step(); rc != SQLITE_ROW) {
    if (rc != SQLITE_DONE) return Error{withPath(path, detail::lastError(db))};
    return Error{withPath(path, "no run with id " + std::to_string(run))};
  }
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
    int rc;
    while ((rc = m.step()) == SQLITE_ROW) {
      auto& agg = state.devices[m.i32(0)];
      const std::string key = m.text(1);
      const auto v = static_cast<std::int64_t>(m.f64(2));
      if (key == "first_ns") agg.firstNs = v;
      if (key == "last_ns") agg.lastNs = v;
      if (key == "op_busy_ns") agg.opBusyNs = v;
      if (key == "events") agg.events = v;
    }
    if (rc != SQLITE_DONE) return Error{withPath(path, detail::lastError(db))};
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
  if (nameIdsBytes + name.size() > kNameCacheBytes) {
    nameIds.clear();
    nameIdsBytes = 0;
  }
  nameIds.emplace(std::string(name), id);
  nameIdsBytes += name.size();
  return id;
}

std::optional<std::int64_t> checkedAdd(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<std::int64_t> checkedSub(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<std::string> eventRowProblem(const EventRow& row) {
  struct Bound {
    const char* what;
    std::int64_t value, min, max;
  };
  const std::array<Bound, 7> bounds = {{
      {"device", row.device, -1, kMaxPlanDevices - 1},
      {"virtual stage", row.virtualStage, -1, kMaxPlanVirtualStages - 1},
      {"microbatch", row.microbatch, -1, kMaxPlanMicrobatches - 1},
      {"iteration", row.iteration, -1, INT32_MAX},
      {"op kind", row.kind, -1, kOpKindCount - 1},
      {"start", row.startNs, -kMaxTraceTimeNs, kMaxTraceTimeNs},
      {"duration", row.durationNs, 0, kMaxTraceTimeNs},
  }};
  for (const Bound& b : bounds) {
    if (b.value < b.min || b.value > b.max) {
      const bool ns = b.min == -kMaxTraceTimeNs || b.max == kMaxTraceTimeNs;
      return std::string(b.what) + " " + std::to_string(b.value) + (ns ? " ns" : "") + " is out of range (expected " +
             std::to_string(b.min) + ".." + std::to_string(b.max) + (ns ? " ns)" : ")");
    }
  }
  return std::nullopt;
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
  if (auto problem = eventRowProblem(row)) return Error{withPath(path, "event not stored: " + *problem)};
  PS_RETURN_IF_ERROR(begin());
  PS_ASSIGN_OR_RETURN(auto name, nameId(row.name));
  if (state.nextSeq > 0xffffffffLL || run < 0 || run > 0x7fffffffLL) {
    return Error{withPath(path, "run " + std::to_string(run) + " cannot hold more events (limit 2^32 per run)")};
  }
  BufferedEvent& e = bufferedEvents.emplace_back();
  e.id = eventId(run, state.nextSeq);
  e.nameId = name;
  e.stream = row.stream;
  e.startNs = row.startNs;
  e.durationNs = row.durationNs;
  e.bytes = row.bytes;
  e.correlationId = row.correlationId;
  e.category = static_cast<int>(row.category);
  // In range (eventRowProblem above): these narrowings keep the value.
  e.device = static_cast<std::int32_t>(row.device);
  // Op ranges, and host ranges that name a stage (imported pipelining SEND/RECV annotations),
  // keep their stage, microbatch and iteration columns.
  e.isOp = row.category == EventCategory::Op || row.virtualStage >= 0;
  e.virtualStage = static_cast<std::int32_t>(row.virtualStage);
  e.microbatch = static_cast<std::int32_t>(row.microbatch);
  e.iteration = static_cast<std::int32_t>(row.iteration);
  e.kind = static_cast<std::int32_t>(row.kind);
  if (!row.argsJson.empty()) {
    e.hasArgs = true;
    e.argsOffset = static_cast<std::uint32_t>(bufferedArgs.size());
    e.argsBytes = static_cast<std::uint32_t>(row.argsJson.size());
    bufferedArgs.append(row.argsJson);
  }
  if (bufferedEvents.size() >= static_cast<std::size_t>(eventBlockRows)) {
    PS_RETURN_IF_ERROR(flushEvents());
  }
  ++state.nextSeq;
  ++state.pendingEvents;
  state.dirty = true;
  const std::int64_t endNs = row.startNs + row.durationNs;
  for (const int key : {static_cast<int>(row.device), -1}) {
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

Expected<bool> storeProfilerStep(HistoryStore::Impl& im, RunId run, const std::string& rangeName,
                                 std::int64_t durationNs) {
  const std::string digits = rangeName.substr(13);  // after "ProfilerStep#"
  char* end = nullptr;
  const long long step = std::strtoll(digits.c_str(), &end, 10);
  if (end == digits.c_str()) return false;
  Statement& s = im.insertStep;
  s.bind(1, run);
  s.bind(2, static_cast<std::int64_t>(step));
  s.bind(3, static_cast<double>(durationNs) / 1e6);
  const int rc = s.step();
  s.reset();
  if (rc != SQLITE_DONE) return Error{im.path + ": " + detail::lastError(im.db)};
  return true;
}

}  // namespace pipestudio::history
