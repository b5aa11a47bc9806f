// Issue 14, processes: ranks of `pipestudio-cli run` die with it (kill -9, SIGINT, SIGTERM) and
// the run is recorded incomplete; pipestudio-exec fails (non-zero, reason on stderr) when
// nobody receives its trace stream. Issue 27: the run's timeout ends ranks stuck in an op or
// stopped (the run fails with the reason); pipestudio-exec refuses a transfer larger than its
// device instead of aborting.
#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "Spawn.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/ProcFs.hpp"

using pipestudio::test::HasValue;

using namespace hostile;
namespace fs = std::filesystem;

namespace {

const std::string kPlan = kGood + "tiny-plan.json";

// Direct children of `pid` that have not exited.
std::vector<pid_t> childrenOf(pid_t pid) {
  std::vector<pid_t> out;
  for (const pipestudio::test::ProcessEntry& p : pipestudio::test::processTable()) {
    if (p.ppid == pid && p.state != 'Z') out.push_back(p.pid);
  }
  return out;
}

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && line[close + 2] != 'Z';
}

// Starts a long `run` (every op stretched to 500 ms, 100 iterations) and waits for its rank.
struct LongRun {
  pid_t cli = -1;
  pid_t rank = -1;
  std::string db;
  std::string err;
};

LongRun startLongRun(const std::string& name) {
  LongRun r;
  r.db = (tempDir() / (name + ".sqlite")).string();
  r.err = (tempDir() / (name + ".err")).string();
  r.cli = start({kCli, "run", kPlan, "--history", r.db, "--max-op-ms", "500", "--iterations", "100", "--json"},
                (tempDir() / (name + ".out")).string(), r.err);
  for (int i = 0; i < 500 && r.rank < 0; ++i) {
    const auto kids = childrenOf(r.cli);
    if (!kids.empty()) r.rank = kids.front();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Let it stream a little, so the run has committed events.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  return r;
}

bool goneWithin(pid_t pid, double seconds) {
  for (int i = 0; i < seconds * 50; ++i) {
    if (!alive(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

pipestudio::history::RunStatus onlyRunStatus(const std::string& db, std::string* error = nullptr) {
  auto store = pipestudio::history::HistoryStore::open(db);  // read-write: recovers dead writers' runs
  EXPECT_THAT(store, HasValue());
  auto runs = store->listRuns();
  EXPECT_TRUE(runs && runs->size() == 1);
  if (error) *error = runs->front().error;
  return runs->front().status;
}

}  // namespace

TEST(Processes, SigintAndSigtermStopTheRanksAndLeaveTheRunIncomplete) {
  for (int sig : {SIGINT, SIGTERM}) {
    LongRun r = startLongRun("signal" + std::to_string(sig));
    ASSERT_GT(r.rank, 0) << slurp(r.err);
    ASSERT_EQ(::kill(r.cli, sig), 0);
    const int code = waitFor(r.cli, 30);
    EXPECT_EQ(code, 1) << slurp(r.err);
    EXPECT_TRUE(goneWithin(r.rank, 5)) << "rank " << r.rank << " outlived the CLI";
    EXPECT_NE(slurp(r.err).find(std::string("incomplete: interrupted by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM")),
              std::string::npos)
        << slurp(r.err);
    std::string error;
    EXPECT_EQ(onlyRunStatus(r.db, &error), pipestudio::history::RunStatus::Incomplete);
    EXPECT_NE(error.find("interrupted"), std::string::npos) << error;
  }
}

TEST(Processes, Kill9OfTheCliKillsItsRanks) {
  LongRun r = startLongRun("kill9");
  ASSERT_GT(r.rank, 0) << slurp(r.err);
  ASSERT_EQ(::kill(r.cli, SIGKILL), 0);
  EXPECT_EQ(waitFor(r.cli, 10), 128 + SIGKILL);
  EXPECT_TRUE(goneWithin(r.rank, 5)) << "rank " << r.rank << " outlived a kill -9 of the CLI";
  // The next read-write open finds the writer gone and marks the run incomplete.
  EXPECT_EQ(onlyRunStatus(r.db), pipestudio::history::RunStatus::Incomplete);
}

TEST(Processes, ExecutorFailsWhenItsReaderIsGone) {
  // stdout is a pipe whose reader closes at once (`| head -c 100`); bash gives the status.
  const auto b = run({"/bin/bash", "-c",
                      kExec + " --plan " + kPlan +
                          " --max-op-ms 50 --iterations 20 | head -c 100 >/dev/null; "
                          "exit ${PIPESTATUS[0]}"},
                     {.stdinPath = "/dev/null", .stdoutPath = "", .deadlineS = 60});
  EXPECT_EQ(b.exitCode, 1) << b.err;
  EXPECT_NE(b.err.find("trace stream closed by the reader"), std::string::npos) << b.err;
}

TEST(Processes, ExecutorFailsWhenItsStreamCannotBeWritten) {
  const auto r = run({kExec, "--plan", kPlan}, {.stdinPath = "/dev/null", .stdoutPath = "/dev/full", .deadlineS = 60});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("cannot write the trace stream: No space left on device"), std::string::npos) << r.err;
}

// --- Issue 27: an executor refuses what it cannot hold -----------------------------------

TEST(Processes, AnExecutorRefusesAnOutputLargerThanItsDevice) {
  // Layer outputs of 2^50 bytes: refused by name before the first op, not std::bad_alloc.
  std::string text = slurp(kPlan);
  const std::string kind = R"("kind": "generic",)";
  for (auto at = text.find(kind); at != std::string::npos; at = text.find(kind, at + 1)) {
    text.insert(at + kind.size(), R"( "output_bytes": 1125899906842624,)");
  }
  const std::string plan = (tempDir() / "output-2-50.json").string();
  spit(plan, text);
  ASSERT_EQ(cli({"validate", plan}).exitCode, 0) << "the plan itself is valid";
  const auto r = run({kExec, "--plan", plan}, {.stdinPath = "/dev/null", .stdoutPath = "/dev/null", .deadlineS = 60});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("out of memory: the output of /ops/"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is 1125899906842624 bytes"), std::string::npos) << r.err;
}

// --- Issue 27: runs that do not end --------------------------------------------------------

namespace {

// `plan` with every op lasting `opMs` (the tiny plan's ops are 1-2 ms long).
std::string planWithOpsOf(const std::string& name, double opMs) {
  // start 0, end opMs for every op: the executor runs an op as long as its planned duration.
  std::string out;
  std::istringstream in(slurp(kPlan));
  for (std::string line; std::getline(in, line);) {
    for (const char* key : {"\"start_ms\": ", "\"end_ms\": "}) {
      const auto at = line.find(key);
      if (at == std::string::npos) continue;
      const auto end = line.find_first_of(",}", at);
      const bool isEnd = std::string(key).find("end") != std::string::npos;
      line.replace(at, end - at, std::string(key) + (isEnd ? std::to_string(opMs) : "0"));
    }
    out += line + '\n';
  }
  std::string path = (tempDir() / name).string();
  spit(path, out);
  return path;
}

struct FinishedRun {
  int exitCode = -1;
  std::string err;
  pipestudio::history::RunStatus status = pipestudio::history::RunStatus::Running;
  std::string error;
  std::vector<pid_t> ranksLeft;
};

// Runs `run PLAN ARGS` with a hang guard of `deadlineS`; the ranks it started must be gone.
FinishedRun runToTheEnd(const std::string& name, const std::string& plan, std::vector<std::string> args,
                        double deadlineS, const std::function<void(pid_t cli, pid_t rank)>& meanwhile = {}) {
  FinishedRun f;
  const std::string db = (tempDir() / (name + ".sqlite")).string();
  const std::string errPath = (tempDir() / (name + ".err")).string();
  args.insert(args.begin(), {kCli, "run", plan, "--history", db});
  const pid_t cli = start(args, (tempDir() / (name + ".out")).string(), errPath);
  pid_t rank = -1;
  for (int i = 0; i < 500 && rank < 0; ++i) {
    const auto kids = childrenOf(cli);
    if (!kids.empty()) rank = kids.front();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (meanwhile) meanwhile(cli, rank);
  f.exitCode = waitFor(cli, deadlineS);
  f.err = slurp(errPath);
  if (rank > 0 && !goneWithin(rank, 5)) f.ranksLeft.push_back(rank);
  f.status = onlyRunStatus(db, &f.error);
  return f;
}

}  // namespace

TEST(Processes, TheTimeoutEndsARunWhoseOpOutlastsIt) {
  // A 60 s op and a 10¹² ms op under --timeout-s 3: the watchdog fires at 3 s and the run ends
  // then (the hang guard is below the 60 s op), failed, with the reason; no rank is left.
  for (const double opMs : {60'000.0, 1e12}) {
    const std::string name = "long-op-" + std::to_string(static_cast<long long>(opMs));
    const FinishedRun f = runToTheEnd(name, planWithOpsOf(name + ".json", opMs), {"--timeout-s", "3"}, 45);
    EXPECT_EQ(f.exitCode, 1) << opMs << " ms (-2: the run did not end): " << f.err;
    EXPECT_TRUE(f.ranksLeft.empty()) << "a rank outlived the run";
    EXPECT_EQ(f.status, pipestudio::history::RunStatus::Failed) << f.error;
    EXPECT_NE(f.error.find("made no progress for 3 s"), std::string::npos) << f.error;
    EXPECT_NE(f.err.find("failed: rank 0 failed: device"), std::string::npos) << f.err;
  }
}

TEST(Processes, AStoppedRankFailsTheRunInsteadOfHangingIt) {
  // SIGSTOP: the rank can neither progress nor report; the launcher hears nothing for the
  // timeout plus its margin, ends the rank (SIGTERM with SIGCONT, then SIGKILL) and fails the run.
  const FinishedRun f = runToTheEnd(
      "stopped", kPlan, {"--timeout-s", "1", "--max-op-ms", "200", "--iterations", "1000"}, 90, [](pid_t, pid_t rank) {
        ASSERT_GT(rank, 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ::kill(rank, SIGSTOP);
      });
  EXPECT_EQ(f.exitCode, 1) << "(-2: the CLI waited forever) " << f.err;
  EXPECT_TRUE(f.ranksLeft.empty()) << "the stopped rank was left behind";
  EXPECT_EQ(f.status, pipestudio::history::RunStatus::Failed) << f.error;
  EXPECT_NE(f.error.find("rank 0 sent nothing for 11 s"), std::string::npos) << f.error;
}
