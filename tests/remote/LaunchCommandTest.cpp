// Pure functions: quoting, SHA-256, rank placement, executor and launcher command lines.
#include <gtest/gtest.h>

#include "SshdFixture.hpp"
#include "pipestudio/remote/LaunchCommand.hpp"
#include "pipestudio/remote/Sha256.hpp"
#include "pipestudio/remote/ShellQuote.hpp"

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
  const std::vector<std::string> words = {"with space", "it's", "$HOME", "`id`", "$(id)", "a;b|c&d",
                                          "line\nbreak", "\\", "*", "", "''", "\"", "-n", "~root"};
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
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("/nonexistent/file"), std::string::npos);
}

HostsSpec twoHosts() {
  HostsSpec h;
  h.hosts.push_back(HostEntry{"node a", 22, "", "", "", 2, "/opt/ps"});
  h.hosts.push_back(HostEntry{"node-b", 2222, "", "", "", 3, "/opt/ps"});
  return h;
}

TEST(PlaceRanks, FillsHostsInOrder) {
  auto p = placeRanks(twoHosts(), 4);
  ASSERT_TRUE(p) << p.message();
  ASSERT_EQ(p->size(), 4U);
  EXPECT_EQ((*p)[0].hostIndex, 0U);
  EXPECT_EQ((*p)[1].hostIndex, 0U);
  EXPECT_EQ((*p)[1].localDevice, 1);
  EXPECT_EQ((*p)[2].hostIndex, 1U);
  EXPECT_EQ((*p)[2].localDevice, 0);
  EXPECT_EQ((*p)[3].rank, 3);
  EXPECT_EQ((*p)[3].localDevice, 1);
  auto tooMany = placeRanks(twoHosts(), 6);
  ASSERT_FALSE(tooMany);
  EXPECT_NE(tooMany.message().find("5 GPU(s)"), std::string::npos) << tooMany.message();
  EXPECT_FALSE(placeRanks(twoHosts(), 0));
  EXPECT_EQ(ranksForBackend("cuda", 4), 4);
  EXPECT_EQ(ranksForBackend("cuda-single", 4), 1);
  EXPECT_EQ(ranksForBackend("cpu", 4), 1);
}

TEST(ExecutorArgv, CarriesEveryArgument) {
  ExecutorArgs a;
  a.executor = "/opt/ps/pipestudio-exec";
  a.plan = "/opt/ps/my plan.json";
  a.rank = 2;
  a.world = 4;
  a.backend = "cuda";
  a.iterations = 5;
  a.ncclIdHex = "ab01";
  a.localDevice = 1;
  EXPECT_EQ(executorArgv(a),
            (std::vector<std::string>{"env", "CUDA_VISIBLE_DEVICES=1", "/opt/ps/pipestudio-exec", "--plan",
                                      "/opt/ps/my plan.json", "--rank", "2", "--world", "4", "--backend", "cuda",
                                      "--iterations", "5", "--nccl-id", "ab01"}));
  a.localDevice = -1;
  a.iterations = 0;
  a.ncclIdHex.clear();
  EXPECT_EQ(executorArgv(a), (std::vector<std::string>{"/opt/ps/pipestudio-exec", "--plan", "/opt/ps/my plan.json",
                                                       "--rank", "2", "--world", "4", "--backend", "cuda"}));
}

// Runs `cmd` with a stdin that stays open (a FIFO held by a background writer) until the
// command ends, as an SSH channel's stdin does.
int runWithOpenStdin(const std::string& cmd, std::string* out = nullptr) {
  return test::runLocal("d=$(mktemp -d) && mkfifo \"$d/f\" && { sleep 30 3>\"$d/f\" >/dev/null 2>&1 & w=$!; } && " + cmd +
                            " <\"$d/f\"; s=$?; kill $w; rm -rf \"$d\"; exit $s",
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

TEST(LauncherCommands, SrunAndMpirunLines) {
  ExecutorArgs a;
  a.executor = "/opt/ps/pipestudio-exec";
  a.plan = "/opt/ps/p.json";
  a.world = 4;
  a.backend = "cuda";
  a.iterations = 3;
  const std::string task =
      "'pipestudio-rank' '/opt/ps/run 1' '/opt/ps/pipestudio-exec' '--plan' '/opt/ps/p.json' '--world' '4' "
      "'--backend' 'cuda' '--iterations' '3'";
  EXPECT_EQ(slurmCommand(twoHosts(), "/opt/ps/run 1", a),
            "'srun' '--nodes=2' '--ntasks=4' '--kill-on-bad-exit=1' '--gpus-per-task=1' 'sh' '-c' "
            "'cd -- \"$1\" || exit 126; shift; r=\"${SLURM_PROCID:?not started by srun}\"; exec \"$@\" --rank "
            "\"$r\" >\"rank-$r.trace\" 2>\"rank-$r.log\"' " +
                task);
  EXPECT_EQ(mpirunCommand(twoHosts(), "/opt/ps/run 1", a),
            "'mpirun' '-np' '4' '--host' 'node a:2,node-b:3' 'sh' '-c' "
            "'cd -- \"$1\" || exit 126; shift; r=\"${OMPI_COMM_WORLD_RANK:-${PMI_RANK:?not started by mpirun}}\"; "
            "exec \"$@\" --rank \"$r\" >\"rank-$r.trace\" 2>\"rank-$r.log\"' " +
                task);
  // The per-task script really picks the launcher's rank: run it as srun would.
  std::string out;
  const std::string line = slurmCommand(twoHosts(), "/tmp", a);
  const std::string script = line.substr(line.find("'sh'"));
  ASSERT_EQ(test::runLocal("cd /tmp && rm -f rank-3.trace && SLURM_PROCID=3 " +
                           script.substr(0, script.find("'/opt/ps/pipestudio-exec'")) +
                           "'echo' ARGS && cat /tmp/rank-3.trace && rm -f /tmp/rank-3.trace /tmp/rank-3.log",
                           &out),
            0);
  EXPECT_EQ(out, "ARGS --rank 3\n");
}

}  // namespace
}  // namespace pipestudio::remote
