#include "Schema.hpp"

#include <array>
#include <string>

#include "Sqlite.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/history/HistoryStore.hpp"

namespace pipestudio::history::detail {
namespace {

// Migration N takes a version N-1 database to version N. Never edit a released migration;
// add a new one (tests/history/MigrationTest.cpp has one test per migration).
//
// Layout notes:
// - events: the rowid is run_id << 32 | seq (view run_events splits it back). A run's events
//   form one contiguous rowid range, so every per-run query (compare, show, timeline, delete)
//   is a range scan of the table's own B-tree, and ingest appends at the end of that range on
//   SQLite's fast rowid-append path with no second B-tree to maintain. Aggregation happens in
//   C++ in one pass over the range, which is why events carry no secondary index: it would
//   roughly halve ingest speed and serve no query. 2^32 events per run is the limit.
// - memory_samples, planned_ops, steps, ranks: WITHOUT ROWID tables keyed by
//   (run_id|plan_id, seq), contiguous per run/plan for the same reason (SQLite docs,
//   "The WITHOUT ROWID Optimization").
// - Names (kernel and op names) are interned in `names`: a 1M-event run repeats a few hundred.
// - No foreign-key enforcement on the bulk tables (a parent lookup per inserted row);
//   deleteRun removes children explicitly in one transaction.
constexpr const char* kMigration1 = R"sql(
CREATE TABLE plans(
  id INTEGER PRIMARY KEY,
  created_ms INTEGER NOT NULL,
  name TEXT NOT NULL DEFAULT '',
  schedule TEXT NOT NULL DEFAULT '',
  devices INTEGER NOT NULL DEFAULT 0,
  microbatches INTEGER NOT NULL DEFAULT 0,
  makespan_ms REAL NOT NULL DEFAULT 0,
  bubble_ratio REAL NOT NULL DEFAULT 0,
  document TEXT NOT NULL);
CREATE TABLE planned_ops(
  plan_id INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  device INTEGER NOT NULL,
  virtual_stage INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  microbatch INTEGER NOT NULL,
  start_ms REAL NOT NULL,
  end_ms REAL NOT NULL,
  samples INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(plan_id, seq)) WITHOUT ROWID;
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  created_ms INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('running', 'complete', 'incomplete', 'failed')),
  plan_id INTEGER,
  source TEXT NOT NULL DEFAULT '',
  source_path TEXT NOT NULL DEFAULT '',
  user TEXT NOT NULL DEFAULT '',
  host TEXT NOT NULL DEFAULT '',
  backend TEXT NOT NULL DEFAULT '',
  gpu TEXT NOT NULL DEFAULT '',
  executor_version TEXT NOT NULL DEFAULT '',
  origin_ns INTEGER,
  events INTEGER NOT NULL DEFAULT 0,
  iterations INTEGER NOT NULL DEFAULT 0,
  dropped_records INTEGER NOT NULL DEFAULT 0,
  error TEXT NOT NULL DEFAULT '',
  finished_ms INTEGER,
  writer_host TEXT,
  writer_pid INTEGER,
  writer_start TEXT);
CREATE TABLE ranks(
  run_id INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  world INTEGER NOT NULL,
  host TEXT NOT NULL,
  backend TEXT NOT NULL,
  device_name TEXT NOT NULL,
  clock_origin_ns INTEGER NOT NULL,
  wall_clock_ns INTEGER NOT NULL,
  PRIMARY KEY(run_id, rank)) WITHOUT ROWID;
CREATE TABLE names(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE);
CREATE TABLE events(
  id INTEGER PRIMARY KEY,
  category INTEGER NOT NULL,
  device INTEGER NOT NULL,
  stream INTEGER NOT NULL,
  name_id INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  dur_ns INTEGER NOT NULL,
  virtual_stage INTEGER,
  microbatch INTEGER,
  iteration INTEGER,
  kind INTEGER,
  bytes INTEGER,
  correlation INTEGER,
  args TEXT);
CREATE VIEW run_events AS SELECT id >> 32 AS run_id, id & 4294967295 AS seq, * FROM events;
CREATE TABLE memory_samples(
  run_id INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  device INTEGER NOT NULL,
  time_ns INTEGER NOT NULL,
  bytes_in_use INTEGER NOT NULL,
  bytes_reserved INTEGER NOT NULL,
  PRIMARY KEY(run_id, seq)) WITHOUT ROWID;
CREATE TABLE steps(
  run_id INTEGER NOT NULL,
  iteration INTEGER NOT NULL,
  duration_ms REAL NOT NULL,
  PRIMARY KEY(run_id, iteration)) WITHOUT ROWID;
CREATE TABLE run_errors(
  run_id INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  message TEXT NOT NULL,
  PRIMARY KEY(run_id, seq)) WITHOUT ROWID;
)sql";

// Version 2: the GUI's rename and annotate.
constexpr const char* kMigration2 = R"sql(
ALTER TABLE runs ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN notes TEXT NOT NULL DEFAULT '';
UPDATE runs SET name = 'run ' || id WHERE name = '';
)sql";

// Version 3: per-run metrics (kept up to date at every ingest commit so list/show/compare do
// not rescan events), backfilled from the events of existing runs; indices for the run list
// (newest first), runs of a plan, and the crash-recovery scan of running runs.
constexpr const char* kMigration3 = R"sql(
CREATE TABLE run_metrics(
  run_id INTEGER NOT NULL,
  device INTEGER NOT NULL,
  key TEXT NOT NULL,
  value REAL NOT NULL,
  PRIMARY KEY(run_id, device, key)) WITHOUT ROWID;
INSERT INTO run_metrics(run_id, device, key, value)
  SELECT run_id, device, 'first_ns', MIN(start_ns) FROM run_events GROUP BY run_id, device
  UNION ALL SELECT run_id, device, 'last_ns', MAX(start_ns + dur_ns) FROM run_events GROUP BY run_id, device
  UNION ALL SELECT run_id, device, 'events', COUNT(*) FROM run_events GROUP BY run_id, device
  UNION ALL SELECT run_id, device, 'op_busy_ns', TOTAL(CASE WHEN category = 0 THEN dur_ns ELSE 0 END)
            FROM run_events GROUP BY run_id, device
  UNION ALL SELECT run_id, -1, 'first_ns', MIN(start_ns) FROM run_events GROUP BY run_id
  UNION ALL SELECT run_id, -1, 'last_ns', MAX(start_ns + dur_ns) FROM run_events GROUP BY run_id
  UNION ALL SELECT run_id, -1, 'events', COUNT(*) FROM run_events GROUP BY run_id
  UNION ALL SELECT run_id, -1, 'op_busy_ns', TOTAL(CASE WHEN category = 0 THEN dur_ns ELSE 0 END)
            FROM run_events GROUP BY run_id;
CREATE INDEX runs_by_created ON runs(created_ms);
CREATE INDEX runs_by_plan ON runs(plan_id);
CREATE INDEX runs_running ON runs(status) WHERE status = 'running';
)sql";

constexpr std::array<const char*, 3> kMigrations = {kMigration1, kMigration2, kMigration3};
static_assert(kMigrations.size() == kSchemaVersion);

}  // namespace

Status migrate(sqlite3* db, int from, int to) {
  for (int v = from + 1; v <= to; ++v) {
    if (auto st = exec(db, kMigrations[static_cast<std::size_t>(v - 1)]); !st) {
      return Error{"migration to schema version " + std::to_string(v) + " failed: " + st.message()};
    }
  }
  if (from == 0 && to > 0) {
    PS_RETURN_IF_ERROR(exec(db, "PRAGMA application_id = " + std::to_string(kApplicationId)));
  }
  return exec(db, "PRAGMA user_version = " + std::to_string(to));
}

}  // namespace pipestudio::history::detail
