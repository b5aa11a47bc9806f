#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <thread>

#include "TestSupport.hpp"
#include "pipestudio/history/Compare.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {
std::string pragmaText(HistoryStore& s, const char* sql) {
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(s.connection(), sql, -1, &st, nullptr);
  std::string v;
  if (sqlite3_step(st) == SQLITE_ROW) v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return v;
}
}  // namespace

TEST(Store, CreatesDirectoriesWalAndCurrentSchema) {
  TempDir dir;
  const std::string path = dir.file("a/b/history.sqlite");
  auto store = HistoryStore::open(path);
  ASSERT_THAT(store, HasValue());
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(store->schemaVersion(), kSchemaVersion);
  EXPECT_EQ(queryInt(*store, "PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(pragmaText(*store, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(*store->integrityCheck(), "ok");
  auto runs = store->listRuns();
  ASSERT_TRUE(runs);
  EXPECT_TRUE(runs->empty());
}

TEST(Store, DefaultPathFollowsXdg) {
  const char* oldXdg = std::getenv("XDG_DATA_HOME");
  const std::string saved = oldXdg ? oldXdg : "";
  setenv("XDG_DATA_HOME", "/tmp/xdg-test-data", 1);
  EXPECT_EQ(defaultHistoryPath(), "/tmp/xdg-test-data/pipestudio/history.sqlite");
  setenv("XDG_DATA_HOME", "relative/ignored", 1);  // XDG: relative paths are invalid
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : ".";
  EXPECT_EQ(defaultHistoryPath(), home + "/.local/share/pipestudio/history.sqlite");
  unsetenv("XDG_DATA_HOME");
  EXPECT_EQ(defaultHistoryPath(), home + "/.local/share/pipestudio/history.sqlite");
  if (oldXdg) setenv("XDG_DATA_HOME", saved.c_str(), 1);
}

TEST(Store, PlansRoundTripWithOps) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_THAT(store, HasValue());
  const Plan plan = smallPlan();
  auto id = store->addPlan(plan, "my plan");
  ASSERT_THAT(id, HasValue());
  auto loaded = store->loadPlan(*id);
  ASSERT_THAT(loaded, HasValue());
  EXPECT_EQ(loaded->ops.size(), plan.ops.size());
  EXPECT_EQ(loaded->config.schedule, "1f1b");
  EXPECT_EQ(queryInt(*store, "SELECT COUNT(*) FROM planned_ops"), static_cast<std::int64_t>(plan.ops.size()));
  EXPECT_FALSE(store->loadPlan(*id + 100));
}

TEST(Store, RunLifecycleRenameAnnotateDelete) {
  TempDir dir;
  HistoryStore store = openStore(dir);
  const Plan plan = smallPlan();
  auto planId = store.addPlan(plan);
  ASSERT_TRUE(planId);
  RunInfo info;
  info.planId = *planId;
  info.source = "run";
  auto run = store.ingestStream(trace::encodeStream(executorFrames(plan)), info);
  ASSERT_THAT(run, HasValue());
  auto s = store.runSummary(*run);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, RunStatus::Complete);
  EXPECT_EQ(s->planId, *planId);
  EXPECT_EQ(s->name, "run " + std::to_string(*run));
  EXPECT_EQ(s->devices, 2);
  EXPECT_EQ(s->iterations, 2);
  EXPECT_GT(s->events, 0);
  EXPECT_EQ(s->host, "testhost");
  EXPECT_GT(s->durationMs, 0);

  ASSERT_TRUE(store.renameRun(*run, "baseline"));
  ASSERT_TRUE(store.annotateRun(*run, "first try"));
  s = store.runSummary(*run);
  EXPECT_EQ(s->name, "baseline");
  EXPECT_EQ(s->notes, "first try");
  const Json j = runSummaryToJson(*s);
  for (const char* key : {"id", "status", "events", "created", "plan"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["status"], "complete");
  EXPECT_EQ(j["plan"], *planId);

  auto steps = store.stepTimesMs(*run);
  ASSERT_TRUE(steps);
  EXPECT_EQ(steps->size(), 2u);

  auto other = store.ingestStream(trace::encodeStream(executorFrames(plan)));
  ASSERT_TRUE(other);
  ASSERT_TRUE(store.deleteRun(*run));
  EXPECT_FALSE(store.runSummary(*run));
  EXPECT_EQ(queryInt(store, "SELECT COUNT(*) FROM run_events WHERE run_id = " + std::to_string(*run)), 0);
  EXPECT_EQ(queryInt(store, "SELECT COUNT(*) FROM run_metrics WHERE run_id = " + std::to_string(*run)), 0);
  EXPECT_TRUE(store.runSummary(*other));
  EXPECT_FALSE(store.deleteRun(*run));
  EXPECT_FALSE(store.renameRun(*run, "x"));
  EXPECT_EQ(store.listRuns()->size(), 1u);
}

TEST(Store, RunAsPlanGivesADrawableTimeline) {
  TempDir dir;
  HistoryStore store = openStore(dir);
  const Plan plan = smallPlan();
  auto planId = store.addPlan(plan);
  RunInfo info;
  info.planId = *planId;
  auto run = store.ingestStream(trace::encodeStream(executorFrames(plan, {.iterations = 3})), info);
  ASSERT_TRUE(run);
  auto all = store.runAsPlan(*run);
  ASSERT_THAT(all, HasValue());
  EXPECT_EQ(all->ops.size(), plan.ops.size() * 3);
  auto one = store.runAsPlan(*run, 1);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->ops.size(), plan.ops.size());
  EXPECT_EQ(one->virtualStages.size(), 2u);  // from the linked plan
  EXPECT_DOUBLE_EQ(one->ops.front().startMs, 0.0);
  // Per device in start order, times as planned (no slowdown in the stream).
  EXPECT_NEAR(one->metrics.makespanMs, plan.metrics.makespanMs, 1e-6);
  for (std::size_t i = 1; i < one->ops.size(); ++i) {
    if (one->ops[i].device == one->ops[i - 1].device) {
      EXPECT_LE(one->ops[i - 1].startMs, one->ops[i].startMs);
    }
  }
  // Without a plan: stages inferred from the events.
  auto bare = store.ingestStream(trace::encodeStream(executorFrames(plan)));
  auto p = store.runAsPlan(*bare, 0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->config.devices, 2);
  EXPECT_EQ(p->virtualStages.size(), 2u);
}

TEST(Store, NewerSchemaIsRefusedAndNotModified) {
  TempDir dir;
  const std::string path = dir.file("new.sqlite");
  {
    auto store = HistoryStore::open(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->ingestStream(trace::encodeStream(executorFrames(smallPlan()))));
    sqlite3_exec(store->connection(), "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
    sqlite3_exec(store->connection(), "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  }
  // The store switched the file to WAL; to prove "never modified", snapshot every file.
  std::map<std::string, std::string> before;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    before[e.path().string()] = readFile(e.path().string());
  const auto mtime = std::filesystem::last_write_time(path);
  auto store = HistoryStore::open(path);
  EXPECT_THAT(store, HasError("schema version 99"));
  EXPECT_THAT(store, HasError("newer"));
  EXPECT_THAT(store, HasError(path));
  EXPECT_EQ(readFile(path), before[path]);
  EXPECT_EQ(std::filesystem::last_write_time(path), mtime);
  auto ro = HistoryStore::open(path, {.readOnly = true});
  EXPECT_FALSE(ro);
  EXPECT_EQ(readFile(path), before[path]);
}

TEST(Store, ForeignFilesAreRefused) {
  TempDir dir;
  const std::string text = dir.file("notes.txt");
  writeFile(text, "this is not a database, just text that is long enough to look like something\n");
  auto a = HistoryStore::open(text);
  ASSERT_FALSE(a);
  EXPECT_THAT(a, HasError("not a PipeStudio history database"));
  EXPECT_EQ(readFile(text), "this is not a database, just text that is long enough to look like something\n");

  const std::string other = dir.file("other.sqlite");
  sqlite3* db = nullptr;
  sqlite3_open(other.c_str(), &db);
  sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto b = HistoryStore::open(other);
  EXPECT_THAT(b, HasError("other tables"));

  auto c = HistoryStore::open(dir.file("missing.sqlite"), {.readOnly = true});
  EXPECT_FALSE(c);
}

TEST(Store, ReadersSeeCommittedBatchesWhileAnIngestWrites) {
  TempDir dir;
  const std::string path = dir.file("h.sqlite");
  auto writer = HistoryStore::open(path);
  ASSERT_TRUE(writer);
  writer->setBatchRows(100);
  auto reader = HistoryStore::open(path, {.readOnly = true});
  ASSERT_THAT(reader, HasValue());

  auto run = writer->beginRun({});
  ASSERT_TRUE(run);
  StreamIngest ingest(*writer, *run);
  const std::string bytes = largeStream(1000, 2);
  // Feed half: with 100-row batches, at least 400 events are committed and visible.
  ASSERT_TRUE(ingest.feed(std::string_view(bytes).substr(0, bytes.size() / 2)));
  auto live = reader->runSummary(*run);
  ASSERT_THAT(live, HasValue());
  EXPECT_EQ(live->status, RunStatus::Running);
  EXPECT_GE(live->events, 400);
  EXPECT_LT(live->events, 1000);
  // A reader thread runs queries while the writer keeps inserting.
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::atomic<bool> readError{false};
  std::thread t([&] {
    auto r = HistoryStore::open(path, {.readOnly = true});
    if (!r) {
      readError = true;
      return;
    }
    while (!done) {
      auto events = r->loadEvents(*run);
      if (!events) readError = true;
      ++reads;
    }
  });
  ASSERT_TRUE(ingest.feed(std::string_view(bytes).substr(bytes.size() / 2)));
  ASSERT_TRUE(writer->finishRun(*run, ingest.suggestedStatus(), ingest.problem()));
  while (reads < 3) std::this_thread::yield();
  done = true;
  t.join();
  EXPECT_FALSE(readError);
  auto final = reader->runSummary(*run);
  EXPECT_EQ(final->status, RunStatus::Complete);
  EXPECT_EQ(final->events, 1000);
}

TEST(Store, TricklingStreamIsCommittedWithinAQuarterSecond) {
  TempDir dir;
  const std::string path = dir.file("h.sqlite");
  auto writer = HistoryStore::open(path);
  ASSERT_TRUE(writer);
  auto reader = HistoryStore::open(path, {.readOnly = true});
  ASSERT_TRUE(reader);
  auto run = writer->beginRun({});
  ASSERT_TRUE(run);
  StreamIngest ingest(*writer, *run);
  const auto frames = executorFrames(smallPlan(), {.iterations = 1, .withKernels = false});
  std::string first;
  trace::encodeStreamStart(first);
  trace::encodeFrame(frames[0], first);  // header
  trace::encodeFrame(frames[2], first);  // one op end frame
  ASSERT_TRUE(ingest.feed(first));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string second;
  trace::encodeFrame(frames[4], second);
  ASSERT_TRUE(ingest.feed(second));  // the transaction is stale now: committed
  EXPECT_EQ(reader->runSummary(*run)->events, 2);
}
