// One test per schema migration: a database at version N-1 with data in it is opened by this
// build, migrated to N (and on to the current version), and the data is still there.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "TestSupport.hpp"
#include "pipestudio/common/Try.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

void execSql(HistoryStore& s, const std::string& sql) {
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(s.connection(), sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
}

bool hasColumn(HistoryStore& s, const std::string& table, const std::string& column) {
  return queryInt(s, "SELECT COUNT(*) FROM pragma_table_info('" + table + "') WHERE name = '" + column + "'") == 1;
}

Expected<HistoryStore> openAt(const std::string& path, int version) {
  return HistoryStore::open(path, {.targetSchemaVersion = version});
}

// A version-1 style run with two events on two devices (raw SQL: the API writes the newest schema).
void insertV1Run(HistoryStore& s) {
  execSql(s,
          "INSERT INTO runs(id, created_ms, status, source, events) VALUES(7, 1700000000000, 'complete', 'chrome', 3);"
          "INSERT INTO names(id, name) VALUES(1, 'F'), (2, 'sgemm');"
          "INSERT INTO events(id, category, device, stream, name_id, start_ns, dur_ns, kind) VALUES"
          "((7 << 32) | 0, 0, 0, 0, 1, 1000000, 2000000, 0),"
          "((7 << 32) | 1, 1, 0, 7, 2, 1500000, 500000, NULL),"
          "((7 << 32) | 2, 0, 1, 0, 1, 4000000, 3000000, 0);");
}

// A database at `path` created at schema `version`, holding insertV1Run's run.
Status createWithV1Run(const std::string& path, int version) {
  PS_ASSIGN_OR_RETURN(auto s, openAt(path, version));
  insertV1Run(s);
  return {};
}

}  // namespace

TEST(Migration, To1CreatesTheSchemaInAnEmptyFile) {
  TempDir dir;
  const std::string path = dir.file("h.sqlite");
  auto s = openAt(path, 1);
  ASSERT_THAT(s, HasValue());
  EXPECT_EQ(queryInt(*s, "PRAGMA user_version"), 1);
  EXPECT_EQ(queryInt(*s, "PRAGMA application_id"), 0x50535448);
  for (const char* table :
       {"plans", "planned_ops", "runs", "ranks", "names", "events", "memory_samples", "steps", "run_errors"}) {
    EXPECT_EQ(
        queryInt(*s, std::string("SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = '") + table + "'"),
        1)
        << table;
  }
  EXPECT_FALSE(hasColumn(*s, "runs", "notes"));
  // An empty SQLite file (zero bytes, e.g. touched by a script) is adopted too.
  writeFile(dir.file("empty.sqlite"), "");
  auto e = HistoryStore::open(dir.file("empty.sqlite"));
  ASSERT_THAT(e, HasValue());
  EXPECT_EQ(e->schemaVersion(), kSchemaVersion);
}

TEST(Migration, To2AddsRunNamesAndNotes) {
  TempDir dir;
  const std::string path = dir.file("h.sqlite");
  ASSERT_THAT(createWithV1Run(path, 1), HasValue());
  auto s = openAt(path, 2);
  ASSERT_THAT(s, HasValue());
  EXPECT_EQ(queryInt(*s, "PRAGMA user_version"), 2);
  EXPECT_TRUE(hasColumn(*s, "runs", "name"));
  EXPECT_TRUE(hasColumn(*s, "runs", "notes"));
  EXPECT_EQ(queryInt(*s, "SELECT COUNT(*) FROM runs WHERE id = 7 AND name = 'run 7' AND notes = ''"), 1);
  EXPECT_EQ(queryInt(*s, "SELECT COUNT(*) FROM run_events WHERE run_id = 7"), 3);
}

TEST(Migration, To3BackfillsRunMetricsAndAddsIndices) {
  TempDir dir;
  const std::string path = dir.file("h.sqlite");
  ASSERT_THAT(createWithV1Run(path, 1), HasValue());
  {
    auto s = openAt(path, 2);
    ASSERT_TRUE(s);
    execSql(*s, "UPDATE runs SET notes = 'kept' WHERE id = 7");
  }
  auto s = HistoryStore::open(path);  // the current build: 2 → 3
  ASSERT_THAT(s, HasValue());
  EXPECT_EQ(s->schemaVersion(), 3);
  EXPECT_EQ(queryInt(*s, "PRAGMA user_version"), 3);
  for (const char* index : {"runs_by_created", "runs_by_plan", "runs_running"}) {
    EXPECT_EQ(
        queryInt(*s, std::string("SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name = '") + index + "'"),
        1)
        << index;
  }
  EXPECT_EQ(queryInt(*s, "SELECT value FROM run_metrics WHERE run_id = 7 AND device = -1 AND key = 'events'"), 3);
  EXPECT_EQ(queryInt(*s, "SELECT value FROM run_metrics WHERE run_id = 7 AND device = 1 AND key = 'last_ns'"), 7000000);
  EXPECT_EQ(queryInt(*s, "SELECT value FROM run_metrics WHERE run_id = 7 AND device = 0 AND key = 'op_busy_ns'"),
            2000000);
  auto summary = s->runSummary(7);
  ASSERT_THAT(summary, HasValue());
  EXPECT_EQ(summary->notes, "kept");
  EXPECT_EQ(summary->devices, 2);
  EXPECT_DOUBLE_EQ(summary->durationMs, 6.0);  // 1 ms … 7 ms
  EXPECT_EQ(*s->integrityCheck(), "ok");
  // New ingests continue after the migrated rows.
  auto run = s->ingestStream(trace::encodeStream(executorFrames(smallPlan())));
  ASSERT_THAT(run, HasValue());
  EXPECT_EQ(s->listRuns()->size(), 2u);
}

TEST(Migration, FromEveryOlderVersionStraightToCurrent) {
  for (int from = 1; from < kSchemaVersion; ++from) {
    TempDir dir;
    const std::string path = dir.file("h.sqlite");
    ASSERT_THAT(createWithV1Run(path, from), HasValue());
    auto s = HistoryStore::open(path);
    ASSERT_THAT(s, HasValue()) << "from " << from;
    EXPECT_EQ(s->schemaVersion(), kSchemaVersion);
    EXPECT_EQ(s->runSummary(7)->events, 3);
    EXPECT_EQ(*s->integrityCheck(), "ok");
  }
}

TEST(Migration, OpeningAnOlderFileReadOnlyAsksForAMigration) {
  TempDir dir;
  const std::string path = dir.file("h.sqlite");
  { ASSERT_TRUE(openAt(path, 1)); }
  auto ro = HistoryStore::open(path, {.readOnly = true});
  EXPECT_THAT(ro, HasError("needs a migration"));
}
