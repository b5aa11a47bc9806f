// launcher slurm and mpirun end to end (issue 17): the real pipestudio-exec (CPU backend) is
// uploaded through a real sshd and started by a real single-node Slurm (slurmctld, slurmd,
// munge) or by Open MPI's mpirun on 127.0.0.1; its stream arrives while the job runs and lands
// in a real history file. Several ranks handing over rank 0's NCCL id run the real relay
// (`--task`) around pipestudio-test-rank (FakeRank.cpp), as there is no GPU here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "HistoryTestSink.hpp"
#include "SlurmFixture.hpp"
#include "SshdFixture.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio::remote {
namespace {

namespace fs = std::filesystem;
using test::HistoryTestSink;
using test::Slurm;
using test::Sshd;
using SysClock = std::chrono::system_clock;

const std::string kExecutor = std::string(PIPESTUDIO_BINARY_DIR) + "/executor/pipestudio-exec";
const std::string kTestRank = PIPESTUDIO_TEST_RANK;
const std::string kCli = std::string(PIPESTUDIO_BINARY_DIR) + "/app/pipestudio-cli";
const std::string kPlan = std::string(PIPESTUDIO_TEST_DATA) + "/good/tiny-plan.json";

// Every planned op of every measured iteration arrived as an op range.
void expectEveryPlannedOp(history::HistoryStore& store, history::RunId run, int iterations) {
  auto plan = loadPlan(kPlan);
  ASSERT_TRUE(plan);
  auto ops = store.loadEvents(run, history::EventCategory::Op);
  ASSERT_THAT(ops, HasValue());
  const auto planned = std::count_if(ops->begin(), ops->end(), [](const history::MeasuredEvent& e) {
    return e.kind != static_cast<int>(OpKind::OPT);
  });
  EXPECT_EQ(static_cast<std::size_t>(planned), plan->ops.size() * static_cast<std::size_t>(iterations));
}

// Waits (bounded) until no process runs the executor uploaded to `remoteDir`.
bool executorsGone(const std::string& remoteDir, int timeoutMs) {
  for (int waited = 0; waited <= timeoutMs; waited += 100) {
    if (test::processesMatching(remoteDir + "/pipestudio-exec").empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Progress and job reports, kept for the checks.
struct Reports {
  std::mutex mutex;
  std::vector<RankProgress> ranks;
  std::vector<JobProgress> jobs;
  std::atomic<int> iteration{0};
  DeployCallbacks callbacks() {
    DeployCallbacks cb;
    cb.progress = [this](const RankProgress& p) {
      std::lock_guard lock(mutex);
      ranks.push_back(p);
      iteration = std::max(iteration.load(), p.iteration);
    };
    cb.job = [this](const JobProgress& j) {
      std::lock_guard lock(mutex);
      jobs.push_back(j);
    };
    return cb;
  }
  bool sawJob(const std::string& state, const std::string& reason = {}) {
    std::lock_guard lock(mutex);
    return std::any_of(jobs.begin(), jobs.end(), [&](const JobProgress& j) {
      return j.state == state && (reason.empty() || j.reason == reason);
    });
  }
  bool sawRank(RankState s, const std::string& message = {}) {
    std::lock_guard lock(mutex);
    return std::any_of(ranks.begin(), ranks.end(), [&](const RankProgress& p) {
      return p.state == s && (message.empty() || p.message == message);
    });
  }
};

// Runs the deployment on a thread, so a test can act while it runs.
struct Running {
  Deployment deployment;
  Expected<DeployResult> result = Error{"not run"};
  std::thread thread;
  Running(DeployRequest req, DeployCallbacks cb, TraceSink& sink) : deployment(std::move(req), std::move(cb), sink) {
    thread = std::thread([this] { result = deployment.run(); });
  }
  ~Running() {
    if (thread.joinable()) {
      deployment.cancel();
      thread.join();
    }
  }
  Expected<DeployResult>& join() {
    thread.join();
    return result;
  }
};

void waitForIteration(Reports& reports, int n) {
  for (int i = 0; i < 1200 && reports.iteration < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// Slurm's EndTime ("2026-11-23T20:03:12", local time) of a job, from scontrol.
std::optional<SysClock::time_point> jobEndTime(const Slurm& slurm, const std::string& jobId) {
  std::string out;
  if (slurm.client("scontrol show job -o " + jobId, &out) != 0) return std::nullopt;
  const auto at = out.find("EndTime=");
  if (at == std::string::npos) return std::nullopt;
  std::tm tm{};
  if (::strptime(out.c_str() + at + 8, "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return std::nullopt;
  tm.tm_isdst = -1;
  return SysClock::from_time_t(std::mktime(&tm));
}

// A directory of the running test's own under sshd's, and a history in it.
void openTestDir(const Sshd& sshd, std::string& dir, std::unique_ptr<history::HistoryStore>& store) {
  ASSERT_EQ(::access(kExecutor.c_str(), X_OK), 0) << kExecutor << " not built";
  dir = sshd.dir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::create_directories(dir);
  auto opened = history::HistoryStore::open(dir + "/history.sqlite");
  ASSERT_THAT(opened, HasValue());
  store = std::make_unique<history::HistoryStore>(std::move(*opened));
}

// The tiny plan on the CPU backend, two short iterations, through `launcher` on `host`.
DeployRequest cpuRequest(Launcher launcher, HostEntry host, const std::string& dir, const std::string& runId) {
  DeployRequest r;
  r.planPath = kPlan;
  r.devices = 2;
  r.hosts.launcher = launcher;
  r.hosts.hosts.push_back(std::move(host));
  r.hosts.hosts[0].remoteDir = dir + "/remote";
  r.backend = Backend::Cpu;
  r.iterations = 2;
  r.executorPath = kExecutor;
  r.runId = runId;
  r.executorArgs = {"--max-op-ms", "1", "--timeout-s", "60"};
  return r;
}

// --- Slurm ----------------------------------------------------------------------------------

class SlurmDeployTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_slurm = new Slurm(4);
    s_sshd = new Sshd({"SLURM_CONF=" + s_slurm->conf()});
  }
  static void TearDownTestSuite() {
    delete s_sshd;
    delete s_slurm;
    s_sshd = nullptr;
    s_slurm = nullptr;
  }
  void SetUp() override {
    if (!s_slurm->running()) GTEST_SKIP() << "Slurm cannot start here: " << s_slurm->error();
    if (!s_sshd->running()) GTEST_SKIP() << "sshd cannot start here: " << s_sshd->error();
    openTestDir(*s_sshd, m_dir, m_store);
  }

  DeployRequest request(const std::string& runId) const {
    DeployRequest r = cpuRequest(Launcher::Slurm, s_sshd->hostEntry(1), m_dir, runId);
    r.jobPollMs = 300;
    return r;
  }
  // Several ranks of the stand-in for the cuda backend, no GPUs asked of Slurm.
  DeployRequest ranksRequest(const std::string& runId, int ranks) const {
    DeployRequest r = request(runId);
    r.executorPath = kTestRank;
    r.backend = Backend::Cuda;
    r.devices = ranks;
    r.hosts.slurm.gpusPerTask = 0;
    r.executorArgs.clear();
    return r;
  }

  static Slurm* s_slurm;
  static Sshd* s_sshd;
  std::string m_dir;
  std::unique_ptr<history::HistoryStore> m_store;
};
Slurm* SlurmDeployTest::s_slurm = nullptr;
Sshd* SlurmDeployTest::s_sshd = nullptr;

TEST_F(SlurmDeployTest, CpuPlanCompletesAndItsEventsArriveWhileTheJobRuns) {
  DeployRequest req = request("s1");
  // About 5 s of run (90 ms iterations), so "arrived while it ran" keeps a margin of seconds
  // over a slow start on a loaded machine and over EndTime's one-second resolution.
  req.iterations = 60;
  req.executorArgs = {"--max-op-ms", "30", "--timeout-s", "60"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Reports reports;
  Deployment d(req, reports.callbacks(), sink);
  auto result = d.run();
  const auto returnedAt = SysClock::now();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Complete) << result->message << "\nlog:\n" << sink.log << sink.launcherLog;
  ASSERT_EQ(result->ranks.size(), 1U);
  EXPECT_EQ(result->ranks[0].exitStatus, 0);
  EXPECT_TRUE(result->ranks[0].summaryOk);
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  EXPECT_EQ(result->ranks[0].hostPort, host.data()) << "the node the rank ran on, from its stream";
  ASSERT_TRUE(sink.finish(*result));
  auto summary = m_store->runSummary(sink.runId);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->status, history::RunStatus::Complete) << summary->error;
  expectEveryPlannedOp(*m_store, sink.runId, 60);

  // The scheduler's view: submitted, running, then completed.
  EXPECT_FALSE(result->job.jobId.empty());
  EXPECT_TRUE(reports.sawJob("RUNNING"));
  EXPECT_EQ(result->job.state, "COMPLETED") << result->job.text();
  EXPECT_NE(result->message.find("slurm job " + result->job.jobId + ": COMPLETED"), std::string::npos)
      << result->message;
  // Live: the first events were stored well before Slurm saw the job end (EndTime has
  // one-second resolution, hence the margin).
  ASSERT_TRUE(sink.firstBytes);
  const auto end = jobEndTime(*s_slurm, result->job.jobId);
  ASSERT_TRUE(end) << "scontrol shows no EndTime";
  EXPECT_LT(*sink.firstBytes + std::chrono::seconds(1), *end)
      << "first bytes " << SysClock::to_time_t(*sink.firstBytes) << ", job end " << SysClock::to_time_t(*end);
  EXPECT_LE(*end, returnedAt + std::chrono::seconds(1));
  EXPECT_TRUE(s_slurm->waitUntilGone("pipestudio-s1", 10000)) << s_slurm->queued("pipestudio-s1");
}

TEST_F(SlurmDeployTest, CrashingRankFailsWithItsStderrAndLeavesNoJob) {
  DeployRequest req = request("s2");
  req.environment = {"PIPESTUDIO_EXEC_FAULT=crash:rank=1:after_ops=1"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Deployment d(req, {}, sink);
  auto result = d.run();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Failed) << result->message;
  ASSERT_EQ(result->ranks.size(), 1U);
  EXPECT_EQ(result->ranks[0].exitStatus, 128 + 9);
  EXPECT_EQ(result->ranks[0].state, RankState::Failed);
  EXPECT_NE(result->message.find("rank 0 on"), std::string::npos) << result->message;
  EXPECT_NE(result->message.find("exit status 137"), std::string::npos) << result->message;
  // Its stderr: the executor's own log and the relay's word on the signal.
  EXPECT_NE(result->message.find("stderr:"), std::string::npos) << result->message;
  EXPECT_NE(result->message.find("cpu backend"), std::string::npos) << result->message;
  EXPECT_NE(result->message.find("killed by signal 9"), std::string::npos) << result->message;
  EXPECT_EQ(result->job.state, "FAILED") << result->job.text();
  ASSERT_TRUE(sink.finish(*result));
  auto summary = m_store->runSummary(sink.runId);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->status, history::RunStatus::Failed);
  EXPECT_TRUE(s_slurm->waitUntilGone("pipestudio-s2", 10000)) << s_slurm->queued("pipestudio-s2");
  EXPECT_TRUE(executorsGone(m_dir + "/remote", 5000));
}

TEST_F(SlurmDeployTest, CancelScancelsTheJob) {
  DeployRequest req = request("s3");
  req.iterations = 100000;
  req.executorArgs = {"--max-op-ms", "2", "--timeout-s", "60"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Reports reports;
  Running running(req, reports.callbacks(), sink);
  waitForIteration(reports, 2);
  ASSERT_GE(reports.iteration.load(), 2) << "the job never ran";
  EXPECT_FALSE(s_slurm->queued("pipestudio-s3").empty());
  running.deployment.cancel();
  auto& result = running.join();
  ASSERT_THAT(result, HasValue());
  EXPECT_TRUE(result->cancelled);
  EXPECT_EQ(result->outcome, DeployOutcome::Incomplete) << result->message;
  EXPECT_EQ(result->ranks[0].state, RankState::Cancelled);
  EXPECT_GT(result->ranks[0].events, 0U);
  EXPECT_TRUE(s_slurm->waitUntilGone("pipestudio-s3", 10000)) << s_slurm->queued("pipestudio-s3");
  EXPECT_EQ(result->job.state.rfind("CANCELLED", 0), 0U) << result->job.text();
  EXPECT_TRUE(executorsGone(m_dir + "/remote", 10000)) << "a rank survived scancel";
}

TEST_F(SlurmDeployTest, UnschedulableJobFailsWithSlurmsReasonAndDoesNotWait) {
  // Eight tasks on a node with four CPUs: Slurm keeps it PENDING (PartitionConfig) forever.
  DeployRequest req = ranksRequest("s4", 8);
  HistoryTestSink sink(nullptr, kPlan);
  Reports reports;
  const auto started = std::chrono::steady_clock::now();
  Deployment d(req, reports.callbacks(), sink);
  auto result = d.run();
  const double tookS = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Failed) << result->message;
  EXPECT_NE(result->message.find("cannot be scheduled: PENDING (PartitionConfig)"), std::string::npos)
      << result->message;
  EXPECT_NE(result->message.find("8 task(s)"), std::string::npos) << result->message;
  EXPECT_TRUE(reports.sawJob("PENDING", "PartitionConfig"));
  ASSERT_EQ(result->ranks.size(), 8U);
  for (const auto& r : result->ranks) EXPECT_EQ(r.state, RankState::Failed);
  EXPECT_LT(tookS, 30.0) << "gave up on the job instead of waiting for it";
  EXPECT_TRUE(s_slurm->waitUntilGone("pipestudio-s4", 10000)) << s_slurm->queued("pipestudio-s4");
}

TEST_F(SlurmDeployTest, PendingJobShowsSlurmsReasonUntilTheNodeIsFree) {
  // Another job holds every CPU until our job has been seen waiting for it: the blocker is
  // cancelled by the watcher below, never by a clock (a loaded machine may take seconds to
  // submit, and a fixed sleep would end before our job is queued).
  std::string out;
  ASSERT_EQ(s_slurm->client("sbatch --parsable --job-name=blocker -n 4 --wrap 'sleep 300' 2>&1", &out), 0) << out;
  for (int i = 0; i < 100 && s_slurm->queued("blocker").find("RUNNING") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(s_slurm->queued("blocker").find("RUNNING"), std::string::npos) << s_slurm->queued("blocker");
  DeployRequest req = request("s5");
  // About 3.6 s of ops (four 10 ms ops in a chain per iteration), several of squeue's polling
  // intervals (1 s until RUNNING is seen): RUNNING is seen even when a loaded machine makes each
  // squeue over SSH take a second or two (at 30 iterations it once was not).
  req.iterations = 90;
  req.executorArgs = {"--max-op-ms", "10", "--timeout-s", "60"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Reports reports;
  Deployment d(req, reports.callbacks(), sink);
  std::atomic<bool> done{false};
  std::thread watcher([&]() {
    for (int i = 0; i < 1200 && !done && !reports.sawJob("PENDING", "Resources"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::string ignored;
    s_slurm->client("scancel --name=blocker 2>&1", &ignored);
  });
  auto result = d.run();
  done = true;
  watcher.join();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Complete) << result->message;
  EXPECT_TRUE(reports.sawJob("PENDING", "Resources"));
  EXPECT_TRUE(reports.sawRank(RankState::Queued, "PENDING (Resources)"));
  {
    std::lock_guard lock(reports.mutex);
    const auto pending = std::find_if(reports.jobs.begin(), reports.jobs.end(),
                                      [](const JobProgress& j) { return j.state == "PENDING"; });
    ASSERT_NE(pending, reports.jobs.end());
    EXPECT_EQ(pending->text(), "slurm job " + pending->jobId + ": PENDING (Resources)");
  }
  EXPECT_TRUE(reports.sawJob("RUNNING"));
}

TEST_F(SlurmDeployTest, FourRanksGetRank0sNcclIdThroughTheJobDirectory) {
  DeployRequest req = ranksRequest("s6", 4);
  req.iterations = 3;
  HistoryTestSink sink(nullptr, kPlan);
  Deployment d(req, {}, sink);
  auto result = d.run();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Complete) << result->message << "\n" << sink.log << sink.launcherLog;
  ASSERT_EQ(result->ranks.size(), 4U);
  std::map<int, std::string> ids;
  for (int r = 0; r < 4; ++r) {
    for (const auto& f : sink.framesOf[r]) {
      if (const auto* h = std::get_if<trace::Header>(&f)) {
        EXPECT_EQ(h->rank, r);
        EXPECT_EQ(h->world, 4);
      }
      if (const auto* id = std::get_if<trace::NcclId>(&f)) ids[r] = id->bytes;
    }
    EXPECT_EQ(result->ranks[static_cast<std::size_t>(r)].state, RankState::Finished);
  }
  ASSERT_EQ(ids.size(), 4U);
  EXPECT_EQ(ids[0].size(), 128U);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(ids[r], ids[0]) << "rank " << r << " got another id than rank 0's";
}

TEST_F(SlurmDeployTest, LostSessionEndsTheJob) {
  DeployRequest req = request("s7");
  req.iterations = 100000;
  req.executorArgs = {"--max-op-ms", "2", "--timeout-s", "60"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Reports reports;
  Running running(req, reports.callbacks(), sink);
  waitForIteration(reports, 2);
  ASSERT_GE(reports.iteration.load(), 2) << "the job never ran";
  s_sshd->killAll();
  auto& result = running.join();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Incomplete) << result->message;
  EXPECT_TRUE(result->connectionLost);
  EXPECT_EQ(result->ranks[0].state, RankState::Lost);
  EXPECT_TRUE(s_slurm->waitUntilGone("pipestudio-s7", 15000))
      << "the allocation outlived the session: " << s_slurm->queued("pipestudio-s7");
  EXPECT_TRUE(executorsGone(m_dir + "/remote", 10000));
  delete s_sshd;  // later tests in this process get a fresh one
  s_sshd = new Sshd({"SLURM_CONF=" + s_slurm->conf()});
}

TEST_F(SlurmDeployTest, CliDeploysABatchJobAndShowsItsState) {
  if (::access(kCli.c_str(), X_OK) != 0) GTEST_SKIP() << kCli << " not built";
  const HostEntry h = s_sshd->hostEntry(1);
  const std::string hosts = m_dir + "/hosts.json";
  std::ofstream(hosts) << R"({"schema": "pipestudio.hosts/1", "launcher": "slurm",
    "slurm": {"submit": "sbatch", "time": "5", "partition": "debug"},
    "hosts": [{"host": "127.0.0.1", "port": )"
                       << h.port << R"(, "identity_file": ")" << h.identityFile << R"(", "known_hosts_file": ")"
                       << h.knownHostsFile << R"(", "gpus": 1, "remote_dir": ")" << m_dir << R"(/cli remote"}]})";
  const std::string db = m_dir + "/cli.sqlite";
  std::string out;
  const int status =
      test::runLocal("'" + kCli + "' deploy '" + kPlan + "' --hosts '" + hosts + "' --backend cpu --history '" + db +
                         "' --iterations 150 --executor '" + kExecutor + "' --exec-arg=--max-op-ms --exec-arg=10 2>&1",
                     &out);
  ASSERT_EQ(status, 0) << out;
  // About 6 s of ops (four 10 ms ops in a chain per iteration), several of squeue's polling
  // intervals (1 s until RUNNING is seen): RUNNING is seen even under load (at 60 iterations, 2.4 s,
  // it once was not).
  EXPECT_NE(out.find(": RUNNING on "), std::string::npos) << out;
  EXPECT_NE(out.find(": COMPLETED"), std::string::npos) << out;
  EXPECT_NE(out.find("complete"), std::string::npos) << out;
  auto store = history::HistoryStore::open(db);
  ASSERT_TRUE(store);
  auto runs = store->listRuns();
  ASSERT_TRUE(runs);
  ASSERT_EQ(runs->size(), 1U);
  EXPECT_EQ(runs->front().status, history::RunStatus::Complete) << runs->front().error;
  EXPECT_TRUE(fs::exists(m_dir + "/cli remote/runs"));
}

// --- mpirun ---------------------------------------------------------------------------------

class MpirunDeployTest : public test::SshdSuite {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/mpirun", X_OK) != 0) {
      GTEST_SKIP() << "mpirun is not installed (packaging/install-deps.sh installs openmpi-bin)";
    }
    if (!s_sshd->running()) GTEST_SKIP() << "sshd cannot start here: " << s_sshd->error();
    openTestDir(*s_sshd, m_dir, m_store);
  }
  DeployRequest request(const std::string& runId) const {
    DeployRequest r = cpuRequest(Launcher::Mpirun, s_sshd->hostEntry(4), m_dir, runId);
    // Open MPI refuses to run as root unless told (the tests run as root in CI containers).
    if (::geteuid() == 0) r.hosts.mpirun.extraArgs = {"--allow-run-as-root"};
    return r;
  }
  std::string m_dir;
  std::unique_ptr<history::HistoryStore> m_store;
};

TEST_F(MpirunDeployTest, CpuPlanCompletesAndItsEventsArriveWhileItRuns) {
  DeployRequest req = request("m1");
  req.iterations = 60;  // about 5 s of run, as in the Slurm test
  req.executorArgs = {"--max-op-ms", "30", "--timeout-s", "60"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Deployment d(req, {}, sink);
  auto result = d.run();
  const auto endedAt = SysClock::now();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Complete) << result->message << "\n" << sink.log << sink.launcherLog;
  ASSERT_TRUE(sink.finish(*result));
  auto summary = m_store->runSummary(sink.runId);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->status, history::RunStatus::Complete) << summary->error;
  expectEveryPlannedOp(*m_store, sink.runId, 60);
  ASSERT_TRUE(sink.firstBytes);
  EXPECT_LT(*sink.firstBytes + std::chrono::seconds(1), endedAt) << "the stream arrived only at the end";
  EXPECT_TRUE(result->job.launcher.empty()) << "mpirun has no scheduler state";
}

TEST_F(MpirunDeployTest, CrashingRankFailsWithItsStderr) {
  DeployRequest req = request("m2");
  req.environment = {"PIPESTUDIO_EXEC_FAULT=crash:rank=1:after_ops=1"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Deployment d(req, {}, sink);
  auto result = d.run();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Failed) << result->message;
  EXPECT_EQ(result->ranks[0].exitStatus, 128 + 9);
  EXPECT_NE(result->message.find("exit status 137"), std::string::npos) << result->message;
  EXPECT_NE(result->message.find("killed by signal 9"), std::string::npos) << result->message;
  EXPECT_TRUE(executorsGone(m_dir + "/remote", 5000));
}

TEST_F(MpirunDeployTest, CancelStopsEveryRank) {
  DeployRequest req = request("m3");
  req.iterations = 100000;
  req.executorArgs = {"--max-op-ms", "2", "--timeout-s", "60"};
  HistoryTestSink sink(m_store.get(), kPlan);
  Reports reports;
  Running running(req, reports.callbacks(), sink);
  waitForIteration(reports, 2);
  ASSERT_GE(reports.iteration.load(), 2) << "the job never ran";
  running.deployment.cancel();
  auto& result = running.join();
  ASSERT_THAT(result, HasValue());
  EXPECT_TRUE(result->cancelled);
  EXPECT_EQ(result->outcome, DeployOutcome::Incomplete) << result->message;
  EXPECT_GT(result->ranks[0].events, 0U);
  EXPECT_TRUE(executorsGone(m_dir + "/remote", 10000)) << "a rank survived cancel";
}

TEST_F(MpirunDeployTest, FourRanksGetRank0sNcclId) {
  DeployRequest req = request("m4");
  req.executorPath = kTestRank;
  req.backend = Backend::Cuda;
  req.devices = 4;
  req.iterations = 3;
  req.executorArgs.clear();
  HistoryTestSink sink(nullptr, kPlan);
  Deployment d(req, {}, sink);
  auto result = d.run();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Complete) << result->message << "\n" << sink.log << sink.launcherLog;
  std::map<int, std::string> ids;
  for (int r = 0; r < 4; ++r) {
    for (const auto& f : sink.framesOf[r]) {
      if (const auto* id = std::get_if<trace::NcclId>(&f)) ids[r] = id->bytes;
    }
  }
  ASSERT_EQ(ids.size(), 4U);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(ids[r], ids[0]) << "rank " << r;
}

}  // namespace
}  // namespace pipestudio::remote
