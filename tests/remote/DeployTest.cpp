// End to end against a real sshd on 127.0.0.1: the real pipestudio-exec (CPU backend) is
// uploaded, run under the watchdog and streams into a real history file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "HistoryTestSink.hpp"
#include "SshdFixture.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/remote/Deploy.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;
using ::testing::AnyOf;

namespace pipestudio::remote {
namespace {

namespace fs = std::filesystem;
using test::Sshd;

const std::string kExecutor = std::string(PIPESTUDIO_BINARY_DIR) + "/executor/pipestudio-exec";
const std::string kCli = std::string(PIPESTUDIO_BINARY_DIR) + "/app/pipestudio-cli";
const std::string kPlan = std::string(PIPESTUDIO_TEST_DATA) + "/good/tiny-plan.json";

class HistoryTestSink : public test::HistoryTestSink {
 public:
  explicit HistoryTestSink(history::HistoryStore& store) : test::HistoryTestSink(&store, kPlan) {}
};

class DeployTest : public test::SshdSuite {
 protected:
  void SetUp() override {
    if (!s_sshd->running()) GTEST_SKIP() << "sshd cannot start here: " << s_sshd->error();
    ASSERT_EQ(::access(kExecutor.c_str(), X_OK), 0) << kExecutor << " not built";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    m_dir = s_sshd->dir() + "/" + info->name();
    fs::create_directories(m_dir);
    auto store = history::HistoryStore::open(m_dir + "/history.sqlite");
    ASSERT_THAT(store, HasValue());
    m_store = std::make_unique<history::HistoryStore>(std::move(*store));
  }

  DeployRequest request(const std::string& remoteDirName) const {
    DeployRequest r;
    r.planPath = kPlan;
    r.devices = 2;
    r.hosts.hosts.push_back(s_sshd->hostEntry(2));
    r.hosts.hosts[0].remoteDir = m_dir + "/" + remoteDirName;
    r.backend = Backend::Cpu;
    r.iterations = 2;
    r.executorPath = kExecutor;
    r.runId = "t1";
    r.executorArgs = {"--max-op-ms", "1", "--timeout-s", "30"};
    return r;
  }

  std::string m_dir;
  std::unique_ptr<history::HistoryStore> m_store;
};

TEST_F(DeployTest, CpuPlanLandsInTheHistoryComplete) {
  // A hostile remote directory: quoting must carry it through sh, the watchdog and exec.
  DeployRequest req = request("remote dir/it's $(touch pwned) `id`;x");
  HistoryTestSink sink(*m_store);
  std::vector<RankProgress> progress;
  std::mutex mutex;
  DeployCallbacks cb;
  cb.progress = [&](const RankProgress& p) {
    std::lock_guard lock(mutex);
    progress.push_back(p);
  };
  Deployment d(req, cb, sink);
  auto result = d.run();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Complete) << result->message << "\nlog:\n" << sink.log;
  ASSERT_EQ(result->ranks.size(), 1U);  // the CPU backend runs every device in one process
  EXPECT_EQ(result->ranks[0].exitStatus, 0);
  EXPECT_TRUE(result->ranks[0].summaryOk);
  ASSERT_TRUE(sink.finish(*result));
  EXPECT_FALSE(fs::exists(m_dir + "/remote dir/pwned"));
  EXPECT_TRUE(fs::exists(m_dir + "/remote dir/it's $(touch pwned) `id`;x/pipestudio-exec"));

  auto summary = m_store->runSummary(sink.runId);
  ASSERT_THAT(summary, HasValue());
  EXPECT_EQ(summary->status, history::RunStatus::Complete) << summary->error;
  // Every planned op of every measured iteration arrived as an op range.
  auto plan = loadPlan(kPlan);
  ASSERT_TRUE(plan);
  auto ops = m_store->loadEvents(sink.runId, history::EventCategory::Op);
  ASSERT_THAT(ops, HasValue());
  // (The executor adds an optimizer step per device and iteration where the plan lists none.)
  const auto planned = std::count_if(ops->begin(), ops->end(), [](const history::MeasuredEvent& e) {
    return e.kind != static_cast<int>(OpKind::OPT);
  });
  EXPECT_EQ(static_cast<std::size_t>(planned), plan->ops.size() * 2)
      << "2 iterations of " << plan->ops.size() << " ops";
  for (const auto& op : plan->ops) {
    for (int it = 0; it < 2; ++it) {
      const bool found = std::any_of(ops->begin(), ops->end(), [&](const history::MeasuredEvent& e) {
        return e.device == op.device && e.virtualStage == op.virtualStage && e.microbatch == op.microbatch &&
               e.kind == static_cast<int>(op.kind) && e.iteration == it;
      });
      EXPECT_TRUE(found) << "missing op device " << op.device << " stage " << op.virtualStage << " iteration " << it;
    }
  }
  // Progress went through the stages the GUI shows.
  std::lock_guard lock(mutex);
  auto saw = [&](RankState s) {
    return std::any_of(progress.begin(), progress.end(), [&](const RankProgress& p) { return p.state == s; });
  };
  EXPECT_TRUE(saw(RankState::Connected));
  EXPECT_TRUE(saw(RankState::Uploading));
  EXPECT_TRUE(saw(RankState::Running));
  EXPECT_TRUE(saw(RankState::Finished));
  EXPECT_EQ(progress.back().iteration, 2);
  EXPECT_GT(progress.back().events, 0U);

  // A second deploy skips the upload (checksums match) and still completes.
  HistoryTestSink sink2(*m_store);
  std::vector<std::string> messages;
  cb.progress = [&](const RankProgress& p) { messages.push_back(p.message); };
  Deployment again(req, cb, sink2);
  auto result2 = again.run();
  ASSERT_THAT(result2, HasValue());
  EXPECT_EQ(result2->outcome, DeployOutcome::Complete) << result2->message;
  EXPECT_TRUE(std::find(messages.begin(), messages.end(), "executor up to date, plan up to date") != messages.end());
}

TEST_F(DeployTest, ChangedHostKeyRefusesBeforeAnythingIsUploadedOrRun) {
  DeployRequest req = request("remote");
  const std::string kh = m_dir + "/known_hosts";
  ASSERT_EQ(test::runLocal("ssh-keygen -q -t ed25519 -N '' -f '" + m_dir + "/other' </dev/null"), 0);
  std::string pub;
  ASSERT_EQ(test::runLocal("cut -d' ' -f1,2 '" + m_dir + "/other.pub'", &pub), 0);
  std::ofstream(kh) << "[127.0.0.1]:" << s_sshd->port() << ' ' << pub;
  req.hosts.hosts[0].knownHostsFile = kh;
  HistoryTestSink sink(*m_store);
  Deployment d(req, {}, sink);
  auto result = d.run();
  EXPECT_THAT(result, HasError("CHANGED"));
  EXPECT_EQ(sink.runId, 0) << "no run recorded";
  EXPECT_FALSE(fs::exists(m_dir + "/remote")) << "nothing uploaded";
  auto runs = m_store->listRuns();
  ASSERT_TRUE(runs);
  EXPECT_TRUE(runs->empty());
}

TEST_F(DeployTest, CrashingExecutorFailsTheRunWithItsStderr) {
  DeployRequest req = request("remote");
  req.environment = {"PIPESTUDIO_EXEC_FAULT=crash:rank=1:after_ops=1"};
  HistoryTestSink sink(*m_store);
  Deployment d(req, {}, sink);
  auto result = d.run();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Failed) << result->message;
  ASSERT_EQ(result->ranks.size(), 1U);
  EXPECT_EQ(result->ranks[0].exitStatus, 128 + 9) << "SIGKILL through the watchdog shell";
  EXPECT_NE(result->message.find("rank 0 on 127.0.0.1:" + std::to_string(s_sshd->port())), std::string::npos)
      << result->message;
  EXPECT_NE(result->message.find("exit status 137"), std::string::npos) << result->message;
  ASSERT_TRUE(sink.finish(*result));
  auto summary = m_store->runSummary(sink.runId);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->status, history::RunStatus::Failed);

  // A rank that reports an error and exits non-zero: its stderr is in the message.
  req.environment = {"PIPESTUDIO_EXEC_FAULT=error:rank=0:after_ops=1"};
  HistoryTestSink sink2(*m_store);
  Deployment d2(req, {}, sink2);
  auto result2 = d2.run();
  ASSERT_THAT(result2, HasValue());
  EXPECT_EQ(result2->outcome, DeployOutcome::Failed) << result2->message;
  EXPECT_FALSE(result2->ranks[0].stderrTail.empty());
  EXPECT_NE(result2->message.find("stderr:"), std::string::npos) << result2->message;
  EXPECT_EQ(sink2.log, result2->ranks[0].stderrTail);
}

TEST_F(DeployTest, CancelStopsAllRanks) {
  DeployRequest req = request("remote");
  req.iterations = 100000;
  req.executorArgs = {"--max-op-ms", "2", "--timeout-s", "30"};
  HistoryTestSink sink(*m_store);
  std::atomic<int> iteration{0};
  DeployCallbacks cb;
  cb.progress = [&](const RankProgress& p) { iteration = p.iteration; };
  Deployment d(req, cb, sink);
  Expected<DeployResult> result = Error{"not run"};
  std::thread t([&] { result = d.run(); });
  for (int i = 0; i < 600 && iteration < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string marker = m_dir + "/remote/pipestudio-exec";
  EXPECT_FALSE(test::processesMatching(marker).empty());
  d.cancel();
  t.join();
  ASSERT_THAT(result, HasValue());
  EXPECT_TRUE(result->cancelled);
  EXPECT_EQ(result->outcome, DeployOutcome::Incomplete) << result->message;
  EXPECT_EQ(result->ranks[0].state, RankState::Cancelled);
  EXPECT_GT(result->ranks[0].events, 0U);
  EXPECT_TRUE(test::processesMatching(marker).empty()) << "a rank survived cancel";
}

TEST_F(DeployTest, SshdKilledMidRunKeepsEventsAndTheRanksDie) {
  DeployRequest req = request("remote");
  req.iterations = 100000;
  req.executorArgs = {"--max-op-ms", "2", "--timeout-s", "30"};
  HistoryTestSink sink(*m_store);
  std::atomic<int> iteration{0};
  DeployCallbacks cb;
  cb.progress = [&](const RankProgress& p) { iteration = p.iteration; };
  Deployment d(req, cb, sink);
  Expected<DeployResult> result = Error{"not run"};
  std::thread t([&] { result = d.run(); });
  for (int i = 0; i < 600 && iteration < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string marker = m_dir + "/remote/pipestudio-exec";
  ASSERT_FALSE(test::processesMatching(marker).empty()) << "the rank never ran";
  s_sshd->killAll();
  t.join();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Incomplete) << result->message;
  EXPECT_EQ(result->ranks[0].state, RankState::Lost);
  EXPECT_NE(result->message.find("connection lost"), std::string::npos) << result->message;
  ASSERT_TRUE(sink.finish(*result));
  auto summary = m_store->runSummary(sink.runId);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->status, history::RunStatus::Incomplete);
  EXPECT_GT(summary->events, 0) << "partial events kept";
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {  // within 10 s
    gone = test::processesMatching(marker).empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "the remote rank outlived the SSH connection";
  // This sshd is gone; later tests in this suite get a fresh one.
  delete s_sshd;
  s_sshd = new Sshd();
}

TEST_F(DeployTest, KeepaliveNoticesASilentConnectionWithinTheInterval) {
  DeployRequest req = request("remote");
  req.iterations = 100000;
  req.executorArgs = {"--max-op-ms", "2", "--timeout-s", "60"};
  req.hosts.serverAliveIntervalS = 1;
  req.hosts.serverAliveCountMax = 2;
  HistoryTestSink sink(*m_store);
  std::atomic<int> iteration{0};
  DeployCallbacks cb;
  cb.progress = [&](const RankProgress& p) { iteration = p.iteration; };
  Deployment d(req, cb, sink);
  Expected<DeployResult> result = Error{"not run"};
  std::atomic<bool> returned{false};
  std::thread t([&] {
    result = d.run();
    returned = true;
  });
  for (int i = 0; i < 600 && iteration < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string marker = m_dir + "/remote/pipestudio-exec";
  ASSERT_FALSE(test::processesMatching(marker).empty()) << "the rank never ran";
  // A silent partition: the server's side of the connection stops answering, but nothing
  // closes the TCP connection (the kernel still acknowledges every segment).
  const auto frozen = s_sshd->connectionProcesses();
  ASSERT_FALSE(frozen.empty());
  for (const pid_t p : frozen) ::kill(p, SIGSTOP);
  const auto stoppedAt = std::chrono::steady_clock::now();
  for (int i = 0; i < 600 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double noticedAfterS = std::chrono::duration<double>(std::chrono::steady_clock::now() - stoppedAt).count();
  for (const pid_t p : frozen) ::kill(p, SIGCONT);
  t.join();
  ASSERT_THAT(result, HasValue());
  EXPECT_EQ(result->outcome, DeployOutcome::Incomplete) << result->message;
  EXPECT_TRUE(result->connectionLost);
  EXPECT_EQ(result->ranks[0].state, RankState::Lost);
  EXPECT_NE(result->message.find("no answer to keepalive"), std::string::npos) << result->message;
  EXPECT_NE(result->message.find("Deploy again to reconnect"), std::string::npos) << result->message;
  // interval 1 s x count 2 = 2 s, with generous slack for a loaded machine: seconds, not
  // the many minutes TCP would take.
  EXPECT_LT(noticedAfterS, 8.0);
  ASSERT_TRUE(sink.finish(*result));
  auto summary = m_store->runSummary(sink.runId);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->status, history::RunStatus::Incomplete);
  EXPECT_GT(summary->events, 0);
  // Once the server side runs again it finds the connection closed; the watchdog stops the rank.
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    gone = test::processesMatching(marker).empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "the remote rank outlived the connection";
}

// Issue 44: the host freezes as the executor's upload begins (its sshd stopped, the kernel still
// acknowledging every segment). The deploy gives up after the keepalive's interval × count,
// naming the upload, instead of waiting forever on SFTP. The 60 s wait is a hang guard.
TEST_F(DeployTest, AHostThatFreezesDuringTheUploadIsNoticed) {
  Sshd sshd;  // its own: its connections are frozen
  ASSERT_TRUE(sshd.running()) << sshd.error();
  DeployRequest req = request("frozen-upload");
  req.hosts.hosts[0] = sshd.hostEntry(2);
  req.hosts.hosts[0].remoteDir = m_dir + "/frozen-upload";
  req.hosts.serverAliveIntervalS = 1;
  req.hosts.serverAliveCountMax = 2;
  HistoryTestSink sink(*m_store);
  std::vector<pid_t> frozen;
  DeployCallbacks cb;
  cb.progress = [&](const RankProgress& p) {
    if (p.state == RankState::Uploading && frozen.empty()) {
      frozen = sshd.connectionProcesses();
      for (const pid_t pid : frozen) ::kill(pid, SIGSTOP);
    }
  };
  Deployment d(req, cb, sink);
  auto pending = std::async(std::launch::async, [&] { return d.run(); });
  const bool returned = pending.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  for (const pid_t pid : frozen) ::kill(pid, SIGCONT);
  ASSERT_FALSE(frozen.empty()) << "the upload never began";
  ASSERT_TRUE(returned) << "deploy still waits for a host that froze during the upload";
  auto result = pending.get();
  ASSERT_FALSE(result) << "a deploy whose upload never finished succeeded";
  EXPECT_THAT(result, HasError("connection lost: no answer for"));
  // The SFTP phases of the upload: the remote folders, then the files.
  EXPECT_THAT(result, AnyOf(HasError("while creating " + m_dir + "/frozen-upload"), HasError("while uploading")));
  EXPECT_THAT(result, HasError("server_alive_interval_s 1 x server_alive_count_max 2"));
}

TEST_F(DeployTest, CliDeployPrintsTheRunIdAndRecordsIt) {
  if (::access(kCli.c_str(), X_OK) != 0) GTEST_SKIP() << kCli << " not built";
  const HostEntry h = s_sshd->hostEntry(2);
  const std::string hosts = m_dir + "/hosts.json";
  std::ofstream(hosts) << R"({"schema": "pipestudio.hosts/1", "hosts": [{"host": "127.0.0.1", "port": )" << h.port
                       << R"(, "identity_file": ")" << h.identityFile << R"(", "known_hosts_file": ")" << m_dir
                       << R"(/kh", "gpus": 2, "remote_dir": ")" << m_dir << R"(/cli remote"}]})";
  const std::string db = m_dir + "/cli.sqlite";
  const std::string base = "'" + kCli + "' deploy '" + kPlan + "' --hosts '" + hosts + "' --backend cpu --history '" +
                           db + "' --iterations 2 --executor '" + kExecutor +
                           "' --exec-arg=--max-op-ms --exec-arg=1 --json";
  // Unknown host: refused without the flag, nothing recorded.
  std::string out;
  EXPECT_EQ(test::runLocal(base + " 2>/dev/null", &out), 1);
  EXPECT_TRUE(out.empty()) << out;
  // With --accept-new-host-keys the key is saved and the run recorded.
  ASSERT_EQ(test::runLocal(base + " --accept-new-host-keys 2>/dev/null", &out), 0) << out;
  EXPECT_EQ(out.rfind("{\"id\": ", 0), 0U) << out;
  const auto id = std::stoll(out.substr(7));
  auto store = history::HistoryStore::open(db);
  ASSERT_TRUE(store);
  auto summary = store->runSummary(id);
  ASSERT_THAT(summary, HasValue());
  EXPECT_EQ(summary->status, history::RunStatus::Complete) << summary->error;
  EXPECT_EQ(summary->source, "deploy");
  EXPECT_TRUE(summary->planId.has_value());
  std::string kh;
  ASSERT_EQ(test::runLocal("cat '" + m_dir + "/kh'", &kh), 0);
  EXPECT_NE(kh.find("[127.0.0.1]:" + std::to_string(h.port)), std::string::npos) << kh;
  // Usage errors exit 2.
  EXPECT_EQ(test::runLocal("'" + kCli + "' deploy '" + kPlan + "' 2>/dev/null"), 2);
  EXPECT_EQ(test::runLocal("'" + kCli + "' deploy '" + kPlan + "' --hosts '" + hosts + "' --backend tpu 2>/dev/null"),
            2);
}

}  // namespace
}  // namespace pipestudio::remote
