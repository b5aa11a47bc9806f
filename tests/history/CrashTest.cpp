// Crash safety (issue 6): a process SIGKILLed in the middle of an ingest leaves a database
// that passes integrity_check, with the interrupted run marked incomplete at the next open,
// every committed event kept and earlier runs untouched.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <filesystem>

#include "TestSupport.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

// The name a writer's reserve for its run's final status has beside the database file:
// "<db>-reserve-PID-RUN".
std::string reserveSuffix(std::int64_t pid, RunId run) {
  return "-reserve-" + std::to_string(pid) + "-" + std::to_string(run);
}

// The child: ingest an endless stream in 1000-row batches; report the run id once a few
// batches are committed, then keep writing until killed.
[[noreturn]] void ingestForever(const std::string& path, int reportFd) {
  auto store = HistoryStore::open(path);
  if (!store) _exit(3);
  store->setBatchRows(1000);
  auto run = store->beginRun({.name = "killed", .source = "stream"});
  if (!run) _exit(4);
  StreamIngest ingest(*store, *run);
  std::string bytes;
  trace::encodeStreamStart(bytes);
  trace::Header h;
  h.wallClockNs = 1;
  trace::encodeFrame(h, bytes);
  bool reported = false;
  for (std::int64_t i = 0;; ++i) {
    trace::encodeFrame(
        trace::Activity{trace::Activity::Kind::Kernel, static_cast<int>(i % 4), 0, i * 1000, i * 1000 + 900, 0,
                        static_cast<std::uint64_t>(i), "kernel_" + std::to_string(i % 13)},
        bytes);
    if (bytes.size() > 4096) {
      if (!ingest.feed(bytes)) _exit(5);
      bytes.clear();
    }
    if (!reported && i > 5500) {
      const RunId id = *run;
      if (write(reportFd, &id, sizeof id) != sizeof id) _exit(6);
      reported = true;
    }
  }
}

}  // namespace

TEST(Crash, KilledIngestLeavesAConsistentDatabase) {
  TempDir dir;
  const std::string path = dir.file("history.sqlite");
  RunId earlier = 0;
  std::int64_t earlierEvents = 0;
  {
    auto store = HistoryStore::open(path);
    ASSERT_TRUE(store);
    auto r = store->ingestStream(trace::encodeStream(executorFrames(smallPlan(), {.iterations = 2})));
    ASSERT_TRUE(r);
    earlier = *r;
    earlierEvents = store->runSummary(earlier)->events;
  }  // no connection is open across fork()

  std::array<int, 2> fds{};
  ASSERT_EQ(pipe(fds.data()), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    ingestForever(path, fds[1]);
  }
  close(fds[1]);
  RunId killed = 0;
  ASSERT_EQ(read(fds[0], &killed, sizeof killed), static_cast<ssize_t>(sizeof killed));
  close(fds[0]);
  usleep(30 * 1000);  // let it get into the middle of a later batch
  // The writer set aside room for its run's final status beside the database.
  const std::string reserve = std::filesystem::canonical(path).string() + reserveSuffix(child, killed);
  EXPECT_TRUE(std::filesystem::exists(reserve)) << reserve;
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));

  auto store = HistoryStore::open(path);
  ASSERT_THAT(store, HasValue());
  EXPECT_EQ(*store->integrityCheck(), "ok");
  auto s = store->runSummary(killed);
  ASSERT_THAT(s, HasValue());
  EXPECT_EQ(s->status, RunStatus::Incomplete);
  EXPECT_NE(s->error.find("ingest interrupted"), std::string::npos) << s->error;
  EXPECT_FALSE(std::filesystem::exists(reserve)) << "recovery leaves the gone writer's reserve behind";
  const std::int64_t stored =
      queryInt(*store, "SELECT COUNT(*) FROM run_events WHERE run_id = " + std::to_string(killed));
  EXPECT_GE(stored, 5000);  // the batches committed before the report survive
  EXPECT_EQ(s->events, stored);
  // Sequence numbers are dense: no committed row was lost in the middle.
  EXPECT_EQ(queryInt(*store, "SELECT MAX(seq) + 1 FROM run_events WHERE run_id = " + std::to_string(killed)), stored);
  auto e = store->runSummary(earlier);
  EXPECT_EQ(e->status, RunStatus::Complete);
  EXPECT_EQ(e->events, earlierEvents);
  // The store is usable for new runs afterwards.
  auto again = store->ingestStream(trace::encodeStream(executorFrames(smallPlan())));
  EXPECT_THAT(again, HasValue());
}

TEST(Crash, LiveWriterIsNotMarkedIncomplete) {
  // A second connection (the GUI) opening while this process is still ingesting must not
  // take the run away from it.
  TempDir dir;
  HistoryStore writer = openStore(dir);
  auto run = writer.beginRun({});
  ASSERT_TRUE(run);
  auto other = HistoryStore::open(dir.file("history.sqlite"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->runSummary(*run)->status, RunStatus::Running);
  EXPECT_EQ(*other->recoverInterruptedRuns(), 0);
}

// A run's reserve (room for its final status on a full disk, issue 14) is a file of
// kRunReserveBytes beside the database while the run is written, and gone once it is marked.
TEST(Crash, ARunKeepsRoomForItsFinalStatusUntilItIsMarked) {
  TempDir dir;
  const std::string path = dir.file("history.sqlite");
  auto store = HistoryStore::open(path);
  ASSERT_TRUE(store);
  auto run = store->beginRun({});
  ASSERT_TRUE(run);
  const std::string real = std::filesystem::canonical(path).string();  // TMPDIR may be a symlink
  const std::string reserve = real + reserveSuffix(getpid(), *run);
  ASSERT_TRUE(std::filesystem::exists(reserve)) << reserve;
  EXPECT_EQ(std::filesystem::file_size(reserve), 256U << 10);
  ASSERT_TRUE(store->finishRun(*run, RunStatus::Complete, ""));
  EXPECT_FALSE(std::filesystem::exists(reserve));
  EXPECT_EQ(store->runSummary(*run)->status, RunStatus::Complete);

  // Through a symlink the reserve goes beside the file SQLite writes, not beside the link.
  std::filesystem::create_directory(dir.path() / "links");
  const std::string link = (dir.path() / "links" / "h.sqlite").string();
  std::filesystem::create_symlink(path, link);
  auto linked = HistoryStore::open(link);
  ASSERT_THAT(linked, HasValue());
  auto second = linked->beginRun({});
  ASSERT_TRUE(second);
  const std::string suffix = reserveSuffix(getpid(), *second);
  EXPECT_TRUE(std::filesystem::exists(real + suffix));
  EXPECT_FALSE(std::filesystem::exists(link + suffix));
  ASSERT_TRUE(linked->finishRun(*second, RunStatus::Complete, ""));
  EXPECT_FALSE(std::filesystem::exists(real + suffix));
}
