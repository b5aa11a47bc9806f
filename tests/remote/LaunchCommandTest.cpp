// Pure functions: quoting, SHA-256, rank placement, executor and launcher command lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "SshdFixture.hpp"
#include "pipestudio/remote/LaunchCommand.hpp"
#include "pipestudio/remote/Sha256.hpp"
#include "pipestudio/remote/ShellQuote.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio::remote {
namespace {

TEST(ShellQuote, WrapsInSingleQuotesAndEscapesQuotes) {
  EXPECT_EQ(shellQuote("abc"), "'abc'");
  EXPECT_EQ(shellQuote(""), "''");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(shellQuote("$x `y` \"z\""), "'$x `y` \"z\"'");
  EXPECT_EQ(shellQuote(std::string_view("a\0b", 3)), "'ab'");
  EXPECT_EQ(joinShellWords({"a b", "c"}), "'a b' 'c'");
}

TEST(ShellQuote, RoundTripsThroughTheLocalShell) {
  const std::vector<std::string> words = {"with space", "it's", "$HOME", "`id`", "$(id)", "a;b|c&d", "line\nbreak",
                                          "\\",         "*",    "",      "''",   "\"",    "-n",      "~root"};
  std::string out;
  ASSERT_EQ(test::runLocal("printf '<%s>' " + joinShellWords(words), &out), 0);
  std::string expected;
  for (const auto& w : words) expected += "<" + w + ">";
  EXPECT_EQ(out, expected);
}

TEST(Sha256, MatchesFips180Vectors) {
  // FIPS 180-4 examples (NIST CSRC "SHA256.pdf").
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  auto missing = sha256File("/nonexistent/file");
  EXPECT_THAT(missing, HasError("/nonexistent/file"));
}

HostsSpec twoHosts() {
  HostsSpec h;
  h.hosts.push_back(HostEntry{"node a", 22, "", "", "", 2, "/opt/ps"});
  h.hosts.push_back(HostEntry{"node-b", 2222, "", "", "", 3, "/opt/ps"});
  return h;
}

TEST(PlaceRanks, FillsHostsInOrder) {
  auto p = placeRanks(twoHosts(), 4);
  ASSERT_THAT(p, HasValue());
  ASSERT_EQ(p->size(), 4U);
  EXPECT_EQ((*p)[0].hostIndex, 0U);
  EXPECT_EQ((*p)[1].hostIndex, 0U);
  EXPECT_EQ((*p)[1].localDevice, 1);
  EXPECT_EQ((*p)[2].hostIndex, 1U);
  EXPECT_EQ((*p)[2].localDevice, 0);
  EXPECT_EQ((*p)[3].rank, 3);
  EXPECT_EQ((*p)[3].localDevice, 1);
  auto tooMany = placeRanks(twoHosts(), 6);
  EXPECT_THAT(tooMany, HasError("5 GPU(s)"));
  EXPECT_FALSE(placeRanks(twoHosts(), 0));
  EXPECT_EQ(ranksFor(Backend::Cuda, 4), 4);
  EXPECT_EQ(ranksFor(Backend::CudaSingle, 4), 1);
  EXPECT_EQ(ranksFor(Backend::Cpu, 4), 1);
}

TEST(ExecutorArgv, CarriesEveryArgument) {
  ExecutorArgs a;
  a.executor = "/opt/ps/pipestudio-exec";
  a.plan = "/opt/ps/my plan.json";
  a.rank = 2;
  a.world = 4;
  a.backend = Backend::Cuda;
  a.iterations = 5;
  a.ncclIdHex = "ab01";
  a.localDevice = 1;
  EXPECT_EQ(executorArgv(a), (std::vector<std::string>{"env", "CUDA_VISIBLE_DEVICES=1", "/opt/ps/pipestudio-exec",
                                                       "--plan", "/opt/ps/my plan.json", "--rank", "2", "--world", "4",
                                                       "--backend", "cuda", "--iterations", "5", "--nccl-id", "ab01"}));
  a.localDevice = -1;
  a.iterations = 0;
  a.ncclIdHex.clear();
  EXPECT_EQ(executorArgv(a), (std::vector<std::string>{"/opt/ps/pipestudio-exec", "--plan", "/opt/ps/my plan.json",
                                                       "--rank", "2", "--world", "4", "--backend", "cuda"}));
}

// Runs `cmd` with a stdin that stays open (a FIFO held by a background writer) until the
// command ends, as an SSH channel's stdin does.
int runWithOpenStdin(const std::string& cmd, std::string* out = nullptr) {
  return test::runLocal(R"(d=$(mktemp -d) && mkfifo "$d/f" && { sleep 30 3>"$d/f" >/dev/null 2>&1 & w=$!; } && )" +
                            cmd + R"( <"$d/f"; s=$?; kill $w; rm -rf "$d"; exit $s)",
                        out);
}

TEST(WatchdogCommand, RunsTheRankInItsDirectoryAndKeepsItsStatus) {
  std::string out;
  const std::string cmd = watchdogCommand("/tmp", {"sh", "-c", "pwd; printf '<%s>' \"$0\"; exit 5", "it's $x"});
  const int status = runWithOpenStdin(cmd, &out);
  EXPECT_EQ(status, 5);
  EXPECT_EQ(out, "/tmp\n<it's $x>");
  // stdin at EOF at once: the watchdog stops the rank (SIGTERM → 128 + 15).
  EXPECT_EQ(test::runLocal(watchdogCommand("/", {"sleep", "30"}, 1) + " </dev/null"), 128 + 15);
  // A missing work dir fails with 126 instead of running elsewhere.
  EXPECT_EQ(runWithOpenStdin(watchdogCommand("/nonexistent dir", {"true"}) + " 2>/dev/null"), 126);
}

LauncherJob sampleJob() {
  LauncherJob j;
  j.workDir = "/home/me/.pipestudio/runs/r1";
  j.jobName = "pipestudio-r1";
  j.ranks = 4;
  j.gpus = true;
  j.executor = "/home/me/.pipestudio/pipestudio-exec";
  j.executorArgs = {"--plan", "/home/me/.pipestudio/plans/p.json", "--backend", "cuda"};
  j.environment = {"NCCL_DEBUG=INFO"};
  j.ncclRendezvous = "/home/me/.pipestudio/runs/r1/nccl-id";
  j.ncclTimeoutS = 60;
  return j;
}

const std::vector<std::string> kTask = {"env",
                                        "NCCL_DEBUG=INFO",
                                        "/home/me/.pipestudio/pipestudio-exec",
                                        "--task",
                                        "slurm",
                                        "--nccl-rendezvous",
                                        "/home/me/.pipestudio/runs/r1/nccl-id",
                                        "--nccl-timeout-s",
                                        "60",
                                        "--",
                                        "--plan",
                                        "/home/me/.pipestudio/plans/p.json",
                                        "--backend",
                                        "cuda"};

TEST(LauncherCommands, EveryRankRunsTheTaskRelay) {
  EXPECT_EQ(taskArgv(Launcher::Slurm, sampleJob()), kTask);
  LauncherJob j = sampleJob();
  j.environment.clear();
  j.ncclRendezvous.clear();
  EXPECT_EQ(taskArgv(Launcher::Mpirun, j),
            (std::vector<std::string>{"/home/me/.pipestudio/pipestudio-exec", "--task", "mpirun", "--", "--plan",
                                      "/home/me/.pipestudio/plans/p.json", "--backend", "cuda"}));
}

TEST(LauncherCommands, SrunLineCarriesTheHostsFilesSlurmOptions) {
  SlurmOptions s;
  s.partition = "gpu";
  s.account = "proj42";
  s.time = "01:30:00";
  s.qos = "high";
  s.nodes = 2;
  s.gpusPerTask = 1;
  s.extraArgs = {"--exclusive", "--constraint=a100&ib"};
  std::vector<std::string> expected{"srun",
                                    "--kill-on-bad-exit=1",
                                    "--job-name=pipestudio-r1",
                                    "--nodes=2",
                                    "--partition=gpu",
                                    "--account=proj42",
                                    "--time=01:30:00",
                                    "--qos=high",
                                    "--ntasks=4",
                                    "--gpus-per-task=1",
                                    "--exclusive",
                                    "--constraint=a100&ib"};
  expected.insert(expected.end(), kTask.begin(), kTask.end());
  EXPECT_EQ(slurmArgv(s, sampleJob()), expected);
  // gres instead of --gpus-per-task; the CPU backend asks for a CPU per device thread.
  s = SlurmOptions{};
  s.gpusPerTask = 0;
  s.gres = "gpu:8";
  LauncherJob cpu = sampleJob();
  cpu.ranks = 1;
  cpu.cpusPerRank = 4;
  cpu.gpus = false;
  const auto line = slurmArgv(s, cpu);
  EXPECT_NE(std::find(line.begin(), line.end(), "--cpus-per-task=4"), line.end());
  EXPECT_EQ(std::find(line.begin(), line.end(), "--gres=gpu:8"), line.end()) << "no GPUs for the cpu backend";
  LauncherJob gpu = sampleJob();
  const auto gpuLine = slurmArgv(s, gpu);
  EXPECT_NE(std::find(gpuLine.begin(), gpuLine.end(), "--gres=gpu:8"), gpuLine.end());
  EXPECT_EQ(std::find(gpuLine.begin(), gpuLine.end(), "--gpus-per-task=1"), gpuLine.end());
}

TEST(LauncherCommands, SbatchWaitsAndRunsSrunInsideTheAllocation) {
  SlurmOptions s;
  s.submit = "sbatch";
  s.partition = "gpu";
  s.extraArgs = {"--mem=0"};
  const auto line = slurmArgv(s, sampleJob());
  ASSERT_GE(line.size(), 8U);
  EXPECT_EQ(std::vector<std::string>(line.begin(), line.begin() + 6),
            (std::vector<std::string>{"sbatch", "--parsable", "--wait", "--open-mode=append",
                                      "--output=/home/me/.pipestudio/runs/r1/job.out",
                                      "--error=/home/me/.pipestudio/runs/r1/job.err"}));
  EXPECT_NE(std::find(line.begin(), line.end(), "--job-name=pipestudio-r1"), line.end());
  EXPECT_NE(std::find(line.begin(), line.end(), "--partition=gpu"), line.end());
  EXPECT_NE(std::find(line.begin(), line.end(), "--mem=0"), line.end());
  const std::string& wrap = line.back();
  ASSERT_EQ(wrap.rfind("--wrap='srun' '--kill-on-bad-exit=1' '--ntasks=4' '--gpus-per-task=1' 'env'", 0), 0U) << wrap;
  // The wrapped line is shell-quoted: run through sh it gives back the task's argv.
  std::string out;
  ASSERT_EQ(test::runLocal("set -- " + wrap.substr(7) + "; shift 4; printf '%s\\n' \"$@\"", &out), 0);
  std::string expected;
  for (const auto& w : kTask) expected += w + "\n";
  EXPECT_EQ(out, expected);
}

TEST(LauncherCommands, MpirunTagsTheOutputAndPassesTheHostList) {
  HostsSpec h = twoHosts();
  h.launcher = Launcher::Mpirun;
  h.mpirun.extraArgs = {"--mca", "btl", "^openib"};
  LauncherJob j = sampleJob();
  std::vector<std::string> expected{"mpirun",       "-np",   "4",   "--host", "node a:2,node-b:3",
                                    "--tag-output", "--mca", "btl", "^openib"};
  auto task = kTask;
  task[4] = "mpirun";
  expected.insert(expected.end(), task.begin(), task.end());
  EXPECT_EQ(mpirunArgv(h, j), expected);
}

// A stand-in launcher on PATH for the wrapper's own behaviour (the real srun and mpirun run in
// SlurmDeployTest and MpirunDeployTest).
class LauncherWrapper : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/ps-launcher-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    m_dir = tmpl;
    std::ofstream(m_dir + "/mpirun") << "#!/bin/sh\necho \"ran $# words in $(pwd)\"\nexec sleep \"${FAKE_SLEEP:-0}\"\n";
    std::filesystem::permissions(m_dir + "/mpirun", std::filesystem::perms::owner_all);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  HostsSpec hosts() const {
    HostsSpec h = twoHosts();
    h.launcher = Launcher::Mpirun;
    return h;
  }
  LauncherJob job() const {
    LauncherJob j = sampleJob();
    j.workDir = m_dir;
    return j;
  }
  std::string command(int sleepS) const {
    return "PATH='" + m_dir + "':$PATH FAKE_SLEEP=" + std::to_string(sleepS) + " " + launcherCommand(hosts(), job(), 1);
  }
  std::string m_dir;
};

TEST_F(LauncherWrapper, RunsTheLauncherInTheJobDirectoryAndKeepsItsStatus) {
  std::string out;
  EXPECT_EQ(runWithOpenStdin(command(0), &out), 0);
  EXPECT_EQ(out, "ran " + std::to_string(mpirunArgv(hosts(), job()).size() - 1) + " words in " + m_dir + "\n");
}

TEST_F(LauncherWrapper, StdinAtEofStopsTheLauncher) {
  // The session died or the workstation cancelled: SIGTERM to the launcher (128 + 15).
  EXPECT_EQ(test::runLocal(command(30) + " </dev/null >/dev/null"), 128 + 15);
}

TEST(SlurmJobState, ParsesSqueueAndKnowsWhichReasonsNeverClear) {
  auto pending = parseSqueue("12|PENDING|Resources|\n");
  ASSERT_TRUE(pending);
  EXPECT_EQ(pending->jobId, "12");
  EXPECT_EQ(slurmStateText(*pending), "PENDING (Resources)");
  auto running = parseSqueue("12|RUNNING|None|node[01-02]\n");
  ASSERT_TRUE(running);
  EXPECT_EQ(running->nodes, "node[01-02]");
  EXPECT_EQ(slurmStateText(*running), "RUNNING");
  // A requeued job lists twice; the last line is the current one.
  EXPECT_EQ(parseSqueue("7|FAILED|NonZeroExitCode|n1\n8|PENDING|Priority|\n")->jobId, "8");
  EXPECT_FALSE(parseSqueue(""));
  EXPECT_FALSE(parseSqueue("slurm_load_jobs error: Unable to contact slurm controller\n"));
  EXPECT_FALSE(parseSqueue("||||\n"));
  for (const char* r : {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
                        "QOSMaxCpuPerJobLimit", "AssocMaxNodesPerJobLimit", "QOSMaxGRESPerJob", "InvalidAccount"}) {
    EXPECT_TRUE(slurmReasonIsPermanent(r)) << r;
  }
  for (const char* r : {"Resources", "Priority", "None", "Dependency", "QOSMaxJobsPerUserLimit", "AssocGrpCpuLimit",
                        "ReqNodeNotAvail, UnavailableNodes:n3", "JobHeldUser", "BeginTime"}) {
    EXPECT_FALSE(slurmReasonIsPermanent(r)) << r;
  }
  for (const char* s : {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED by 1000", "NODE_FAIL", "OUT_OF_MEMORY"}) {
    EXPECT_TRUE(slurmStateIsFinal(s)) << s;
  }
  for (const char* s : {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"}) {
    EXPECT_FALSE(slurmStateIsFinal(s)) << s;
  }
}

}  // namespace
}  // namespace pipestudio::remote
