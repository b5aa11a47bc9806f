// Issue 27, the history database through the real pipestudio-cli: --db naming something that is
// not a regular file is refused by what it is; text that is not UTF-8 never breaks a JSON
// listing; a run whose writer was killed is shown interrupted by read-only commands;
// concurrent writers (imports, runs) all succeed; a damaged file is said to be damaged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "Spawn.hpp"
#include "TraceFiles.hpp"

using namespace hostile;
namespace fs = std::filesystem;

namespace {

const std::string kPlan = kGood + "tiny-plan.json";

std::string freshDb(const std::string& name) {
  std::string db = (tempDir() / (name + ".sqlite")).string();
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(db + suffix);
  return db;
}

// A small Chrome trace with two ProfilerStep ranges (the steps table) and kernels.
std::string smallTrace() {
  static const std::string path = [] {
    std::string p = (tempDir() / "small-trace.json").string();
    spit(p, R"({"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#0", "pid": 0, "tid": 1, "ts": 0, "dur": 100},
      {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 0, "tid": 1, "ts": 100, "dur": 120},
      {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10, "dur": 50, "args": {"device": 0}},
      {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 110, "dur": 60, "args": {"device": 0}}
    ]})");
    return p;
  }();
  return path;
}

nlohmann::json parseJson(const Result& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

// Starts all of `commands` at once; their exit codes and stderr.
std::vector<Result> together(const std::vector<std::vector<std::string>>& commands) {
  std::vector<pid_t> pids;
  std::vector<std::string> errs;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    errs.push_back((tempDir() / ("together" + std::to_string(i) + ".err")).string());
    std::vector<std::string> args = commands[i];
    args.insert(args.begin(), kCli);
    pids.push_back(start(args, (tempDir() / ("together" + std::to_string(i) + ".out")).string(), errs.back()));
  }
  std::vector<Result> out;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    Result r;
    r.exitCode = waitFor(pids[i], 120);
    r.err = slurp(errs[i]);
    out.push_back(r);
  }
  return out;
}

}  // namespace

// --- Hangs -----------------------------------------------------------------------------------

TEST(HistoryDatabase, ADbThatIsNotARegularFileIsRefusedByWhatItIs) {
  const std::string fifo = (tempDir() / "db.fifo").string();
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string dir = (tempDir() / "db.dir").string();
  fs::create_directories(dir);
  const bool journalBefore = fs::exists("/dev/null-journal");
  const std::vector<std::pair<std::string, std::string>> cases{
      {fifo, "is a FIFO (expected a regular file)"},
      {dir, "is a directory (expected a regular file)"},
      {"/dev/null", "is a character device (expected a regular file)"},
  };
  for (const auto& [db, expected] : cases) {
    for (const std::vector<std::string>& command :
         {std::vector<std::string>{"history", "--db", db, "list"},
          std::vector<std::string>{"history", "--db", db, "import", smallTrace()},
          std::vector<std::string>{"history", "--db", db, "show", "1"}}) {
      const auto r = cli(command, {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 20});
      EXPECT_EQ(r.exitCode, 1) << db << " " << command[3] << ": " << r.err;  // -2: it hung
      EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    }
  }
  EXPECT_EQ(fs::exists("/dev/null-journal"), journalBefore) << "a journal was created beside /dev/null";
  EXPECT_FALSE(fs::exists(dir + "-journal"));
  // A FIFO where SQLite keeps its write-ahead log would hang every open too.
  const std::string db = freshDb("fifo-wal");
  ASSERT_EQ(cli({"history", "--db", db, "import", smallTrace()}).exitCode, 0);
  fs::remove(db + "-wal");
  ASSERT_EQ(::mkfifo((db + "-wal").c_str(), 0600), 0);
  const auto r = cli({"history", "--db", db, "list"}, {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 20});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("-wal: is a FIFO"), std::string::npos) << r.err;
  fs::remove(db + "-wal");
}

TEST(HistoryDatabase, AKilledWriterIsShownInterruptedByReadOnlyCommands) {
  const std::string db = freshDb("kill9-readonly");
  const std::string err = (tempDir() / "kill9-readonly.err").string();
  const pid_t run = start({kCli, "run", kPlan, "--history", db, "--max-op-ms", "500", "--iterations", "100", "--json"},
                          (tempDir() / "kill9-readonly.out").string(), err);
  ASSERT_GT(run, 0);
  bool running = false;
  for (int i = 0; i < 300 && !running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto list = cli({"history", "--db", db, "list", "--json"});
    running = list.exitCode == 0 && list.out.find(R"("status": "running")") != std::string::npos;
  }
  ASSERT_TRUE(running) << slurp(err);
  ASSERT_EQ(::kill(run, SIGKILL), 0);
  EXPECT_EQ(waitFor(run, 10), 128 + SIGKILL);
  const auto list = cli({"history", "--db", db, "list", "--json"});
  const auto runs = parseJson(list);
  ASSERT_EQ(runs.size(), 1u) << list.out;
  EXPECT_EQ(runs[0]["status"], "incomplete");
  EXPECT_NE(runs[0]["error"].get<std::string>().find("interrupted"), std::string::npos) << list.out;
  const auto show = parseJson(cli({"history", "--db", db, "show", "1", "--json"}));
  EXPECT_EQ(show["status"], "incomplete");
  EXPECT_EQ(cli({"history", "--db", db, "list"}).out.find("running"), std::string::npos);
}

// --- Lost imports -------------------------------------------------------------------------------

TEST(HistoryDatabase, ConcurrentWritersAllSucceed) {
  // Two imports at once into a new database, round after round.
  for (int round = 0; round < 6; ++round) {
    const std::string db = freshDb("two-imports");
    const auto results =
        together({{"history", "--db", db, "import", smallTrace()}, {"history", "--db", db, "import", smallTrace()}});
    for (const auto& r : results) EXPECT_EQ(r.exitCode, 0) << "round " << round << ": " << r.err;
    EXPECT_EQ(parseJson(cli({"history", "--db", db, "list", "--json"})).size(), 2u) << "round " << round;
  }
  // Sixteen at once.
  const std::string db = freshDb("sixteen-imports");
  std::vector<std::vector<std::string>> imports(16, {"history", "--db", db, "import", smallTrace()});
  for (const auto& r : together(imports)) EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(parseJson(cli({"history", "--db", db, "list", "--json"})).size(), 16u);
  // Two runs at once, with a reader listing beside them.
  for (int round = 0; round < 2; ++round) {
    const std::string runs = freshDb("two-runs");
    const auto results = together({{"run", kPlan, "--history", runs, "--iterations", "3", "--json"},
                                   {"run", kPlan, "--history", runs, "--iterations", "3", "--json"},
                                   {"history", "--db", runs, "list"}});
    EXPECT_EQ(results[0].exitCode, 0) << results[0].err;
    EXPECT_EQ(results[1].exitCode, 0) << results[1].err;
    const auto listed = parseJson(cli({"history", "--db", runs, "list", "--json"}));
    ASSERT_EQ(listed.size(), 2u);
    for (const auto& r : listed) EXPECT_EQ(r["status"], "complete") << r;
  }
}

// --- Data silently changed ------------------------------------------------------------------------

TEST(HistoryDatabase, ADamagedStepsTableIsReportedNotReplacedByOtherNumbers) {
  const std::string db = freshDb("damaged");
  ASSERT_EQ(cli({"history", "--db", db, "import", smallTrace()}).exitCode, 0);
  const auto before = parseJson(cli({"history", "--db", db, "compare", "1", "1", "--json"}));
  ASSERT_EQ(before["step"]["a"]["count"], 2);
  // Overwrite the header of the steps table's page on disk (the CLI checkpointed on close).
  ASSERT_FALSE(fs::exists(db + "-wal") && fs::file_size(db + "-wal") > 0);
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(handle,
                     "SELECT (SELECT rootpage FROM sqlite_schema WHERE name = 'steps'), (SELECT page_size FROM "
                     "pragma_page_size)",
                     -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  const std::int64_t page = sqlite3_column_int64(st, 0);
  const std::int64_t pageSize = sqlite3_column_int64(st, 1);
  sqlite3_finalize(st);
  sqlite3_close(handle);
  ASSERT_GT(page, 1);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((page - 1) * pageSize);
    const std::string garbage(16, '\xA5');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  const auto r = cli({"history", "--db", db, "compare", "1", "1", "--json"});
  EXPECT_EQ(r.exitCode, 1) << r.out;
  EXPECT_NE(r.err.find("the history database is damaged"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("mean_ms"), std::string::npos) << "numbers printed from a damaged table: " << r.out;
}

TEST(HistoryDatabase, TextThatIsNotUtf8NeverBreaksAJsonListing) {
  const std::string db = freshDb("not-utf8");
  ASSERT_EQ(cli({"history", "--db", db, "import", smallTrace(), "--name", std::string("caf\xe9")}).exitCode, 0);
  ASSERT_EQ(cli({"history", "--db", db, "import", smallTrace()}).exitCode, 0);
  ASSERT_EQ(cli({"history", "--db", db, "note", "2", std::string("\xff\xfe notes \xc3")}).exitCode, 0);
  // A row written before text was checked on entry (or by another tool) is repaired on read.
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(handle, "UPDATE runs SET host = CAST(X'6e6f6465ff' AS TEXT) WHERE id = 1", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(handle);
  const auto list = cli({"history", "--db", db, "list", "--json"});
  ASSERT_EQ(list.exitCode, 0) << list.err;
  const auto runs = parseJson(list);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1]["name"], "caf\xEF\xBF\xBD");
  EXPECT_EQ(runs[1]["host"], "node\xEF\xBF\xBD");
  EXPECT_EQ(runs[0]["notes"], "\xEF\xBF\xBD\xEF\xBF\xBD notes \xEF\xBF\xBD");
  const auto c = cli({"history", "--db", db, "compare", "1", "2", "--json"});
  ASSERT_EQ(c.exitCode, 0) << c.err;
  parseJson(c);
}
