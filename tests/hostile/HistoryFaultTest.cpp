// Issue 14, the history: a full disk mid-run stops the ranks and keeps what was committed
// (run incomplete, "disk full", exit 1); a read-only database is listed and says "read-only"
// when a write is refused; absurd Chrome durations are refused, never stored negative; run
// names with newlines stay on one line in listings.
#include <gtest/gtest.h>

#include "Spawn.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

using namespace hostile;
namespace fs = std::filesystem;

namespace {

const std::string kPlan = kGood + "tiny-plan.json";

std::size_t countLines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST(HistoryFaults, ChromeDurationsPastInt64NanosecondsAreRefusedNotStoredNegative) {
  const std::string db = (tempDir() / "chrome.sqlite").string();
  const auto r = cli({"history", "--db", db, "import", kData + "chrome-huge-duration.json", "--json"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("\"events\":1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"skipped\":3"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("\"dur\" 1e+308 µs is out of range"), std::string::npos) << r.err;
  auto store = pipestudio::history::HistoryStore::open(db);
  ASSERT_THAT(store, HasValue());
  auto runs = store->listRuns();
  ASSERT_TRUE(runs && runs->size() == 1);
  auto events = store->loadEvents(runs->front().id);
  ASSERT_THAT(events, HasValue());
  for (const auto& e : *events) {
    EXPECT_GE(e.durationNs, 0) << e.name;
    EXPECT_GE(e.startNs, 0) << e.name;
  }
}

TEST(HistoryFaults, NamesWithNewlinesStayOnOneLineInListings) {
  const std::string db = (tempDir() / "names.sqlite").string();
  ASSERT_EQ(cli({"history", "--db", db, "import", kData + "chrome-huge-duration.json", "--name",
                 std::string("line1\nline2\x1b[31m\nline3")})
                .exitCode,
            0);
  const auto list = cli({"history", "--db", db, "list"});
  ASSERT_EQ(list.exitCode, 0) << list.err;
  EXPECT_EQ(countLines(list.out), 1U) << list.out;
  EXPECT_NE(list.out.find("line1\\nline2\\e[31m\\nline3"), std::string::npos) << list.out;
  const auto show = cli({"history", "--db", db, "show", "1"});
  EXPECT_EQ(show.out.find('\x1b'), std::string::npos) << show.out;
}

TEST(HistoryFaults, DiskFullMidRunStopsTheRanksAndKeepsWhatWasCommitted) {
  if (!haveMountNamespace()) GTEST_SKIP() << "unshare -rm (a private tmpfs) is not available here";
  // A 3 MiB tmpfs: the run's events (every op stretched, 2000 iterations) fill it mid-run.
  const std::string script =
      "set -u; mount -t tmpfs -o size=3m tmpfs /mnt || exit 90; " + kCli + " run " + kPlan +
      " --history /mnt/h.sqlite --iterations 20000 --max-op-ms 0.05 --json > /mnt/out 2> /mnt/err; code=$?; "
      "cat /mnt/err >&2; echo \"exit=$code\"; " +
      kCli + " history --db /mnt/h.sqlite show 1 --json";
  const auto r = runUnshared(script, 200);
  ASSERT_NE(r.exitCode, 90) << r.err;
  EXPECT_NE(r.out.find("exit=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("disk is full"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\"status\": \"incomplete\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("disk is full"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"events\": 0,"), std::string::npos) << "committed events were lost: " << r.out;
}

TEST(HistoryFaults, AReadOnlyHistoryIsListedAndRefusesWritesByName) {
  if (!haveMountNamespace()) GTEST_SKIP() << "unshare -rm (a read-only bind mount) is not available here";
  const fs::path dir = tempDir() / "ro";
  fs::create_directories(dir);
  const std::string db = (dir / "h.sqlite").string();
  ASSERT_EQ(cli({"history", "--db", db, "import", kData + "chrome-huge-duration.json", "--name", "kept"}).exitCode, 0);
  const std::string script = "mount --bind " + dir.string() + " " + dir.string() + " && mount -o remount,ro,bind " +
                             dir.string() + " || exit 90; " + kCli + " history --db " + db +
                             " list; echo \"list=$?\"; " + kCli + " history --db " + db +
                             " show 1 --json >/dev/null; echo \"show=$?\"; " + kCli + " history --db " + db +
                             " rename 1 other; echo \"rename=$?\"";
  const auto r = runUnshared(script, 60);
  ASSERT_NE(r.exitCode, 90) << r.err;
  EXPECT_NE(r.out.find("kept"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("list=0"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("show=0"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("rename=1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("read-only"), std::string::npos) << r.err;
}
