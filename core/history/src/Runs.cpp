// Run rows: creating and finishing runs, listing, renaming, deleting, and reading a run's
// events and step times back.
#include <unistd.h>

#include <cstdlib>

#include "Impl.hpp"
#include "ProcessProbe.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::history {

using detail::exec;
using detail::Statement;

namespace {

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
  // A run still `running` whose writer is gone (killed, crashed, the machine rebooted) is shown
  // as what it is, interrupted, even where no read-write open has recovered it yet (read-only
  // listings, a read-only file).
  if (s.status == RunStatus::Running) {
    const std::string host = st.text(19);
    const std::int64_t pid = st.i64(20);
    const bool ours = pid == getpid() && host == hostName();
    if (!ours && !writerAlive(host, pid, st.text(21))) {
      s.status = RunStatus::Incomplete;
      if (s.error.empty()) s.error = interruptedRunMessage(host, pid);
    }
  }
  return s;
}

constexpr const char* kSummarySelect = R"sql(
SELECT r.id, r.name, r.status, r.created_ms, r.events, r.plan_id, r.source, r.source_path, r.user, r.host,
       r.backend, r.gpu, r.executor_version, r.notes, r.error, r.iterations,
       (SELECT COUNT(*) FROM run_metrics m WHERE m.run_id = r.id AND m.device >= 0 AND m.key = 'events'),
       (SELECT value FROM run_metrics m WHERE m.run_id = r.id AND m.device = -1 AND m.key = 'first_ns'),
       (SELECT value FROM run_metrics m WHERE m.run_id = r.id AND m.device = -1 AND m.key = 'last_ns'),
       IFNULL(r.writer_host, ''), IFNULL(r.writer_pid, 0), IFNULL(r.writer_start, '')
FROM runs r)sql";

}  // namespace

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
  const int rc = st.step();
  if (rc == SQLITE_ROW) return readSummaryRow(st);
  if (rc != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  return Error{withPath(m_impl->path, "no run with id " + std::to_string(id))};
}

namespace {
Status updateRunText(HistoryStore::Impl& im, RunId id, const char* column, std::string_view value) {
  PS_RETURN_IF_ERROR(im.commit());
  Statement st(im.db, std::string("UPDATE runs SET ") + column + " = ?2 WHERE id = ?1", nullptr);
  st.bind(1, id);
  st.bind(2, value);
  if (st.step() != SQLITE_DONE) return Error{withPath(im.path, detail::lastError(im.db))};
  if (sqlite3_changes(im.db) != 1) return Error{withPath(im.path, "no run with id " + std::to_string(id))};
  return {};
}
}  // namespace

Status HistoryStore::renameRun(RunId id, std::string_view name) { return updateRunText(*m_impl, id, "name", name); }
Status HistoryStore::annotateRun(RunId id, std::string_view notes) {
  return updateRunText(*m_impl, id, "notes", notes);
}

Status HistoryStore::deleteRun(RunId id) {
  Impl& im = *m_impl;
  PS_RETURN_IF_ERROR(im.commit());
  auto tx = detail::Transaction::begin(im.db);
  if (!tx) return Error{withPath(im.path, "cannot start a write: " + tx.message())};
  bool found = false;
  for (const char* table : {"events", "memory_samples", "steps", "ranks", "run_errors", "run_metrics", "runs"}) {
    const std::string_view t(table);
    const char* where = t == "runs"     ? " WHERE id = ?1"
                        : t == "events" ? " WHERE " RUN_EVENT_RANGE
                                        : " WHERE run_id = ?1";
    Statement st(im.db, std::string("DELETE FROM ") + table + where, nullptr);
    st.bind(1, id);
    if (st.step() != SQLITE_DONE) return Error{withPath(im.path, detail::lastError(im.db))};
    if (std::string_view(table) == "runs") found = sqlite3_changes(im.db) == 1;
  }
  im.runs.erase(id);
  if (!found) return Error{withPath(im.path, "no run with id " + std::to_string(id))};
  if (auto st = tx->commit(); !st) return Error{withPath(im.path, "commit failed: " + st.message())};
  return {};
}

Expected<std::vector<MeasuredEvent>> HistoryStore::loadEvents(RunId id, std::optional<EventCategory> category) {
  PS_RETURN_IF_ERROR(flush());
  std::string sql =
      "SELECT e.category, e.device, e.stream, n.name, e.start_ns, e.dur_ns, e.virtual_stage, e.microbatch, "
      "e.iteration, e.kind, e.bytes, e.correlation, e.args FROM events e JOIN names n ON n.id = e.name_id "
      "WHERE e." RUN_EVENT_RANGE;
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
  PS_RETURN_IF_ERROR(flush());
  Statement st(m_impl->db, "SELECT duration_ms FROM steps WHERE run_id = ?1 ORDER BY iteration", nullptr);
  if (!st) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  st.bind(1, id);
  std::vector<double> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(st.f64(0));
  // A damaged steps table must fail the comparison, never leave it to fall back on other times.
  if (rc != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
  return out;
}

// ---- run lifecycle ----------------------------------------------------------------------

Expected<RunId> HistoryStore::beginRun(const RunInfo& info) {
  Impl& im = *m_impl;
  PS_RETURN_IF_ERROR(im.commit());
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
  reserveRunSpace(im.path, id);
  return id;
}

Status HistoryStore::finishRun(RunId id, RunStatus status, std::string_view error) {
  Impl& im = *m_impl;
  // A last batch that cannot be written (disk full) is dropped whole and its space is free
  // again: the run is still marked, incomplete with the reason, never left "running".
  Status committed = im.commit();
  releaseRunSpace(im.path, id);  // room for the UPDATE below when the disk is full
  std::string reason(error);
  if (!committed) {
    if (status == RunStatus::Complete) status = RunStatus::Incomplete;
    if (reason.empty()) reason = committed.message();
  }
  Statement st(im.db,
               "UPDATE runs SET status = ?2, finished_ms = ?3, error = CASE WHEN ?4 = '' THEN error ELSE ?4 END, "
               "events = (SELECT COUNT(*) FROM events WHERE " RUN_EVENT_RANGE ") WHERE id = ?1",
               nullptr);
  st.bind(1, id);
  st.bind(2, runStatusName(status));
  st.bind(3, nowUnixMs());
  st.bind(4, reason);
  if (st.step() != SQLITE_DONE) return Error{withPath(im.path, detail::lastError(im.db))};
  if (sqlite3_changes(im.db) != 1) return Error{withPath(im.path, "no run with id " + std::to_string(id))};
  im.runs.erase(id);
  return committed;
}

}  // namespace pipestudio::history
