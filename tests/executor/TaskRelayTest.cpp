// `pipestudio-exec --task` (issue 17): one rank under srun or mpirun. Run here with the
// launcher's environment set by hand; the real srun and mpirun run it in tests/remote.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "RunHelpers.hpp"
#include "pipestudio/executor/Launcher.hpp"
#include "pipestudio/trace/TaskLines.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/ListScheduledPlan.hpp"

using pipestudio::test::HasError;

extern char** environ;

namespace pipestudio {
namespace {

struct TaskRun {
  int status = -1;  ///< the relay's exit status
  std::string stream;
  std::string log;
  int reportedExit = -1;  ///< from the `x` line
  std::string otherOutput;
};

// Runs the real binary with `env` added to the environment; `whileRunning` gets its pid and a
// flag that turns true once stream lines come out.
TaskRun runTask(const std::vector<std::string>& env, const std::vector<std::string>& args,
                const std::function<void(pid_t, const std::atomic<bool>&)>& whileRunning = {}) {
  std::vector<std::string> argv{PIPESTUDIO_EXEC_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> envStrings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.rfind("SLURM_", 0) != 0 && v.rfind("OMPI_", 0) != 0 && v.rfind("PMI_", 0) != 0) envStrings.emplace_back(v);
  }
  envStrings.insert(envStrings.end(), env.begin(), env.end());
  std::vector<char*> cenv;
  for (auto& e : envStrings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  pid_t pid = -1;
  EXPECT_EQ(::posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::atomic<bool> streaming{false};
  std::thread side;
  if (whileRunning) side = std::thread([&] { whileRunning(pid, streaming); });
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;) {
    text.append(buf, static_cast<std::size_t>(n));
    if (text.find(" s ") != std::string::npos) streaming = true;
  }
  streaming = true;
  ::close(out[0]);
  if (side.joinable()) side.join();
  int status = 0;
  ::waitpid(pid, &status, 0);
  TaskRun r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    trace::TaskLine parsed;
    switch (trace::parseTaskLine(line, parsed)) {
      case trace::TaskLineParse::Ok:
        if (parsed.kind == trace::TaskLineKind::Stream) r.stream += parsed.bytes;
        if (parsed.kind == trace::TaskLineKind::Log) r.log += parsed.bytes;
        if (parsed.kind == trace::TaskLineKind::Exit) r.reportedExit = parsed.status;
        break;
      default:
        r.otherOutput += line + "\n";
    }
  }
  return r;
}

class TaskRelay : public ::testing::Test {
 protected:
  void SetUp() override { m_plan = test::writePlan(test::makeTestPlan("1f1b", 2, 2), "task-relay-plan.json"); }
  std::string m_plan;
};

TEST_F(TaskRelay, RankFromTheLaunchersEnvironmentAndTheWholeStreamAsLines) {
  const TaskRun r = runTask({"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0"},
                            {"--task", "slurm", "--", "--plan", m_plan, "--backend", "cpu", "--iterations", "2"});
  EXPECT_EQ(r.status, 0) << r.log;
  EXPECT_EQ(r.reportedExit, 0);
  EXPECT_TRUE(r.otherOutput.empty()) << "only launcher lines on stdout: " << r.otherOutput;
  const auto decoded = trace::decodeAll(r.stream);
  EXPECT_FALSE(decoded.error);
  EXPECT_EQ(decoded.truncatedBytes, 0U);
  ASSERT_FALSE(decoded.frames.empty());
  EXPECT_TRUE(std::holds_alternative<trace::Header>(decoded.frames.front()));
  ASSERT_TRUE(std::holds_alternative<trace::Summary>(decoded.frames.back()));
  EXPECT_TRUE(std::get<trace::Summary>(decoded.frames.back()).ok);
  EXPECT_NE(r.log.find("cpu backend"), std::string::npos) << "the executor's stderr comes as log lines: " << r.log;
}

TEST_F(TaskRelay, OpenMpiAndPmiVariables) {
  for (const auto& env : {std::vector<std::string>{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1"},
                          std::vector<std::string>{"PMI_RANK=0", "PMI_SIZE=1"}}) {
    const TaskRun r =
        runTask(env, {"--task", "mpirun", "--", "--plan", m_plan, "--backend", "cpu", "--iterations", "1"});
    EXPECT_EQ(r.status, 0) << env[0] << ": " << r.log;
    EXPECT_EQ(r.reportedExit, 0) << env[0];
  }
}

TEST_F(TaskRelay, MissingOrWrongLauncherVariablesAreNamed) {
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "2", 1);
  auto place = exec::taskPlaceFromEnvironment(Launcher::Slurm);
  EXPECT_THAT(place, HasError("rank 3 is not below the world size 2"));
  setenv("SLURM_PROCID", "x", 1);
  place = exec::taskPlaceFromEnvironment(Launcher::Slurm);
  EXPECT_THAT(place, HasError("SLURM_PROCID='x'"));
  unsetenv("SLURM_PROCID");
  place = exec::taskPlaceFromEnvironment(Launcher::Slurm);
  EXPECT_THAT(place, HasError("SLURM_PROCID is not set (expected to be started by srun)"));
  unsetenv("SLURM_NTASKS");
  place = exec::taskPlaceFromEnvironment(Launcher::Mpirun);
  EXPECT_THAT(place, HasError("OMPI_COMM_WORLD_RANK nor PMI_RANK"));
  // Without the variables the relay says so on stderr and exits 2 (usage).
  const TaskRun r = runTask({}, {"--task", "slurm", "--", "--plan", m_plan});
  EXPECT_EQ(r.status, 2);
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--task", "pbs", "--", "--plan", "p"},
                                                               {"--task", "slurm"},
                                                               {"--task", "slurm", "--nccl-timeout-s", "-1", "--", "x"},
                                                               {"--task", "slurm", "--bogus", "1", "--", "x"}}) {
    EXPECT_FALSE(exec::parseTaskArgs(bad)) << bad[1];
  }
}

TEST_F(TaskRelay, RankWithoutRank0sNcclIdGivesUpWithAClearMessage) {
  const std::string rendezvous = test::tempPath("never-written-nccl-id");
  const auto started = std::chrono::steady_clock::now();
  const TaskRun r = runTask({"SLURM_PROCID=1", "SLURM_NTASKS=2"},
                            {"--task", "slurm", "--nccl-rendezvous", rendezvous, "--nccl-timeout-s", "0.5", "--",
                             "--plan", m_plan, "--backend", "cpu"});
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.reportedExit, 1);
  EXPECT_NE(r.log.find("rank 0's NCCL id did not appear in " + rendezvous), std::string::npos) << r.log;
  // A file that is not an id is refused, not passed on.
  std::ofstream(rendezvous) << "not hex\n";
  const TaskRun bad = runTask({"SLURM_PROCID=1", "SLURM_NTASKS=2"},
                              {"--task", "slurm", "--nccl-rendezvous", rendezvous, "--", "--plan", m_plan});
  EXPECT_EQ(bad.reportedExit, 1);
  EXPECT_NE(bad.log.find("not an NCCL id"), std::string::npos) << bad.log;
}

TEST_F(TaskRelay, RankGetsTheIdFromTheRendezvousFile) {
  const std::string rendezvous = test::tempPath("nccl-id");
  std::ofstream(rendezvous) << std::string(256, 'a') << '\n';
  // --nccl-id reaches the executor: the CPU backend ignores it, the run completes.
  const TaskRun r = runTask({"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2"},
                            {"--task", "mpirun", "--nccl-rendezvous", rendezvous, "--", "--plan", m_plan, "--backend",
                             "cpu", "--iterations", "1"});
  EXPECT_EQ(r.reportedExit, 0) << r.log;
  EXPECT_NE(r.log.find("waiting for rank 0's NCCL id"), std::string::npos) << r.log;
}

TEST_F(TaskRelay, SignalsArePassedOnAndTheStatusSaysSo) {
  // scancel and mpirun stop ranks with SIGTERM: the executor gets it, the relay reports it.
  const TaskRun r = runTask(
      {"SLURM_PROCID=0", "SLURM_NTASKS=1"},
      {"--task", "slurm", "--", "--plan", m_plan, "--backend", "cpu", "--iterations", "100000", "--max-op-ms", "2"},
      [](pid_t pid, const std::atomic<bool>& streaming) {
        for (int i = 0; i < 600 && !streaming; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ::kill(pid, SIGTERM);
      });
  EXPECT_EQ(r.status, 128 + SIGTERM);
  EXPECT_EQ(r.reportedExit, 128 + SIGTERM);
  EXPECT_NE(r.log.find("passing Terminated on to the executor"), std::string::npos) << r.log;
  EXPECT_FALSE(r.stream.empty());
}

}  // namespace
}  // namespace pipestudio
