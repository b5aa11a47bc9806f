// Real sshd on 127.0.0.1 (SshdFixture): host keys, authentication, commands, SFTP, quoting.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <thread>

#include "SshdFixture.hpp"
#include "pipestudio/remote/LaunchCommand.hpp"
#include "pipestudio/remote/Sha256.hpp"
#include "pipestudio/remote/ShellQuote.hpp"
#include "pipestudio/remote/SshSession.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio::remote {
namespace {

using test::Sshd;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class SessionTest : public test::SshdSuite {
 protected:
  void SetUp() override {
    if (!s_sshd->running()) GTEST_SKIP() << "sshd cannot start here: " << s_sshd->error();
  }
};

TEST_F(SessionTest, ConnectsWithTrustedHostKeyAndRunsCommand) {
  auto s = SshSession::connect(s_sshd->hostEntry(), {});
  ASSERT_THAT(s, HasValue());
  EXPECT_EQ((*s)->hostPort(), "127.0.0.1:" + std::to_string(s_sshd->port()));
  EXPECT_EQ((*s)->fingerprint().rfind("SHA256:", 0), 0U);
  auto r = (*s)->run("echo out; echo err >&2; exit 3");
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exitStatus, 3);
}

TEST_F(SessionTest, ChangedHostKeyIsRefusedShowingBothFingerprints) {
  const std::string dir = s_sshd->dir() + "/changed";
  ASSERT_EQ(
      test::runLocal("mkdir -p '" + dir + "' && ssh-keygen -q -t ed25519 -N '' -f '" + dir + "/other' </dev/null"), 0);
  std::istringstream pub(slurp(dir + "/other.pub"));
  std::string type;
  std::string key;
  pub >> type >> key;
  std::ofstream(dir + "/known_hosts") << "[127.0.0.1]:" << s_sshd->port() << ' ' << type << ' ' << key << '\n';
  std::string otherFp;
  ASSERT_EQ(test::runLocal("ssh-keygen -l -E sha256 -f '" + dir + "/other.pub' | cut -d' ' -f2", &otherFp), 0);
  std::string serverFp;
  ASSERT_EQ(test::runLocal("ssh-keygen -l -E sha256 -f '" + s_sshd->hostKeyPub() + "' | cut -d' ' -f2", &serverFp), 0);
  otherFp.pop_back();
  serverFp.pop_back();

  HostEntry h = s_sshd->hostEntry();
  h.knownHostsFile = dir + "/known_hosts";
  bool asked = false;
  SessionCallbacks cb;
  cb.unknownHostKey = [&](const HostKeyPrompt&) {
    asked = true;
    return HostKeyDecision::AcceptAndSave;
  };
  auto s = SshSession::connect(h, cb);
  ASSERT_FALSE(s);
  EXPECT_FALSE(asked) << "a changed key must never be offered for acceptance";
  EXPECT_THAT(s, HasError("CHANGED"));
  EXPECT_THAT(s, HasError("127.0.0.1:" + std::to_string(s_sshd->port())));
  EXPECT_THAT(s, HasError(otherFp)) << "\nexpected " << otherFp;
  EXPECT_THAT(s, HasError(serverFp)) << "\nexpected " << serverFp;
}

TEST_F(SessionTest, UnknownHostAsksAndRefusesOrSaves) {
  const std::string dir = s_sshd->dir() + "/unknown";
  ASSERT_EQ(test::runLocal("mkdir -p '" + dir + "'"), 0);
  HostEntry h = s_sshd->hostEntry();
  h.knownHostsFile = dir + "/known_hosts";  // does not exist yet

  auto refused = SshSession::connect(h, {});  // no callback: refuse
  EXPECT_THAT(refused, HasError("unknown host key"));

  HostKeyPrompt seen;
  SessionCallbacks cb;
  cb.unknownHostKey = [&](const HostKeyPrompt& p) {
    seen = p;
    return HostKeyDecision::Reject;
  };
  ASSERT_FALSE(SshSession::connect(h, cb));
  std::string serverFp;
  ASSERT_EQ(test::runLocal("ssh-keygen -l -E sha256 -f '" + s_sshd->hostKeyPub() + "' | cut -d' ' -f2", &serverFp), 0);
  serverFp.pop_back();
  EXPECT_EQ(seen.fingerprintSha256, serverFp);
  EXPECT_EQ(seen.keyType, "ssh-ed25519");
  EXPECT_EQ(seen.hostPort, "127.0.0.1:" + std::to_string(s_sshd->port()));
  EXPECT_EQ(seen.knownHostsFile, h.knownHostsFile);

  cb.unknownHostKey = [](const HostKeyPrompt&) { return HostKeyDecision::AcceptOnce; };
  ASSERT_TRUE(SshSession::connect(h, cb));
  EXPECT_TRUE(slurp(h.knownHostsFile).empty()) << "AcceptOnce must not write known_hosts";

  cb.unknownHostKey = [](const HostKeyPrompt&) { return HostKeyDecision::AcceptAndSave; };
  ASSERT_TRUE(SshSession::connect(h, cb));
  // Saved: the next connection needs no decision.
  auto again = SshSession::connect(h, {});
  EXPECT_THAT(again, HasValue());
}

TEST_F(SessionTest, WrongUserKeyFailsNamingTheHost) {
  const std::string dir = s_sshd->dir() + "/wrongkey";
  ASSERT_EQ(test::runLocal("mkdir -p '" + dir + "' && ssh-keygen -q -t ed25519 -N '' -f '" + dir + "/key' </dev/null"),
            0);
  HostEntry h = s_sshd->hostEntry();
  h.identityFile = dir + "/key";
  auto s = SshSession::connect(h, {});
  EXPECT_THAT(s, HasError("authentication failed"));
  EXPECT_THAT(s, HasError("127.0.0.1:" + std::to_string(s_sshd->port())));

  // Without the .pub next to it the private key itself is offered and refused.
  ASSERT_EQ(::unlink((dir + "/key.pub").c_str()), 0);
  auto s2 = SshSession::connect(h, {});
  EXPECT_THAT(s2, HasError("authentication failed"));

  h.identityFile = dir + "/missing";
  auto s3 = SshSession::connect(h, {});
  EXPECT_THAT(s3, HasError(dir + "/missing"));
}

TEST_F(SessionTest, EncryptedKeyAsksForThePassphraseOncePerSession) {
  const std::string dir = s_sshd->dir() + "/passphrase";
  ASSERT_EQ(test::runLocal("mkdir -p '" + dir + "' && ssh-keygen -q -t ed25519 -N 'open sesame' -f '" + dir +
                           "/key' </dev/null && cat '" + dir + "/key.pub' >> '" + s_sshd->dir() + "/authorized_keys'"),
            0);
  HostEntry h = s_sshd->hostEntry();
  h.identityFile = dir + "/key";
  int asked = 0;
  SessionCallbacks cb;
  cb.passphrase = [&](const std::string& prompt) -> std::optional<std::string> {
    ++asked;
    EXPECT_NE(prompt.find("127.0.0.1:"), std::string::npos);
    return std::string("open sesame");
  };
  auto s = SshSession::connect(h, cb);
  ASSERT_THAT(s, HasValue());
  EXPECT_EQ(asked, 1);

  cb.passphrase = [&](const std::string&) -> std::optional<std::string> {
    ++asked;
    return std::string("wrong");
  };
  auto wrong = SshSession::connect(h, cb);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(asked, 2) << "asked once for the new session, not again after a wrong answer";
  EXPECT_THAT(wrong, HasError("passphrase"));

  auto declined = SshSession::connect(h, {});
  ASSERT_FALSE(declined);
}

TEST_F(SessionTest, SftpUploadSkipsWhenChecksumMatches) {
  auto s = SshSession::connect(s_sshd->hostEntry(), {});
  ASSERT_THAT(s, HasValue());
  const std::string local = s_sshd->dir() + "/payload.bin";
  std::string payload;
  for (int i = 0; i < 200000; ++i) payload.push_back(static_cast<char>((i * 7919) & 0xff));
  std::ofstream(local, std::ios::binary) << payload;

  auto remoteDir = (*s)->resolvePath(s_sshd->dir() + "/up load/nested dir");
  ASSERT_THAT(remoteDir, HasValue());
  ASSERT_TRUE((*s)->makeDirectories(*remoteDir));
  ASSERT_TRUE((*s)->makeDirectories(*remoteDir)) << "mkdir -p is idempotent";
  const std::string remote = *remoteDir + "/payload.bin";

  auto first = (*s)->upload(local, remote, 0755);
  ASSERT_THAT(first, HasValue());
  EXPECT_EQ(*first, UploadAction::Uploaded);
  EXPECT_EQ(slurp(remote), payload);
  EXPECT_EQ((*s)->remoteSha256(remote), sha256Hex(payload));
  EXPECT_EQ(::access(remote.c_str(), X_OK), 0);

  auto second = (*s)->upload(local, remote, 0755);
  ASSERT_THAT(second, HasValue());
  EXPECT_EQ(*second, UploadAction::Skipped);

  payload[100] ^= 1;
  std::ofstream(local, std::ios::binary) << payload;
  auto third = (*s)->upload(local, remote, 0644);
  ASSERT_THAT(third, HasValue());
  EXPECT_EQ(*third, UploadAction::Uploaded);
  EXPECT_EQ(slurp(remote), payload);

  // A file in the way of a directory is an error that names it.
  auto st = (*s)->makeDirectories(remote + "/sub");
  EXPECT_THAT(st, HasError("not a directory"));
  // Home-relative paths resolve against the remote home.
  auto home = (*s)->resolvePath("~/x");
  ASSERT_TRUE(home);
  EXPECT_EQ(*home, std::string(std::getenv("HOME") ? std::getenv("HOME") : "/root") + "/x");
}

TEST_F(SessionTest, QuotingSurvivesARealRemoteShell) {
  auto s = SshSession::connect(s_sshd->hostEntry(), {});
  ASSERT_THAT(s, HasValue());
  const std::vector<std::string> words = {
      "plain",    "with space",  "it's",        "\"double\"", "$HOME", "`id`", "$(touch /tmp/pwned)",
      "a;b&&c|d", "line\nbreak", "back\\slash", "*",          "",      "'",    "--opt=x y",
      "~"};
  // printf prints each word between markers; any expansion or word splitting shows.
  auto r = (*s)->run("printf '<%s>' " + joinShellWords(words));
  ASSERT_THAT(r, HasValue());
  std::string expected;
  for (const auto& w : words) expected += "<" + w + ">";
  EXPECT_EQ(r->out, expected);
  EXPECT_EQ(r->exitStatus, 0);
}

TEST_F(SessionTest, StartedProcessStreamsAndReportsItsExitStatus) {
  auto s = SshSession::connect(s_sshd->hostEntry(), {});
  ASSERT_THAT(s, HasValue());
  auto p = (*s)->start(watchdogCommand(s_sshd->dir(), {"sh", "-c", "pwd; echo oops >&2; exit 7"}));
  ASSERT_THAT(p, HasValue());
  std::string out;
  std::string err;
  for (int i = 0; i < 500 && !(*p)->ended(); ++i) {
    ASSERT_TRUE((*p)->poll(out, err));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE((*p)->poll(out, err));
  EXPECT_EQ(out, s_sshd->dir() + "\n");
  EXPECT_EQ(err, "oops\n");
  EXPECT_EQ((*p)->exitStatus(), 7);
}

TEST_F(SessionTest, ClosingStdinStopsAWatchdoggedRank) {
  auto s = SshSession::connect(s_sshd->hostEntry(), {});
  ASSERT_THAT(s, HasValue());
  const std::string marker = "301." + std::to_string(::getpid());
  auto p = (*s)->start(watchdogCommand("/", {"sleep", marker}, 1));
  ASSERT_THAT(p, HasValue());
  std::string out;
  std::string err;
  bool started = false;
  for (int i = 0; i < 200 && !started; ++i) {
    started = !test::processesMatching("sleep " + marker).empty();
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(started);
  (*p)->closeStdin();
  for (int i = 0; i < 500 && !(*p)->ended(); ++i) {
    ASSERT_TRUE((*p)->poll(out, err));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE((*p)->ended());
  EXPECT_EQ((*p)->exitStatus(), 128 + SIGTERM);
  EXPECT_TRUE(test::processesMatching("sleep " + marker).empty());
}

TEST_F(SessionTest, WatchdogEndsTheRankWhenTheWorkstationDies) {
  // A unique duration marks the remote process: sleep 300.<pid>.
  const std::string marker = "300." + std::to_string(::getpid());
  const HostEntry h = s_sshd->hostEntry();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The "workstation": starts the rank, then polls it until it is killed.
    auto s = SshSession::connect(h, {});
    if (!s) ::_exit(3);
    auto p = (*s)->start(watchdogCommand("/", {"sleep", marker}));
    if (!p) ::_exit(4);
    std::string out;
    std::string err;
    for (;;) {
      if (!(*p)->poll(out, err)) ::_exit(5);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  bool started = false;
  for (int i = 0; i < 200 && !started; ++i) {
    started = !test::processesMatching("sleep " + marker).empty();
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(started) << "the remote rank never started";
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {  // 10 s at most
    gone = test::processesMatching("sleep " + marker).empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "the remote rank outlived its SSH session";
}

// Issue 44: a host that freezes (its sshd stopped: the kernel still acknowledges every segment)
// is noticed in every phase that waits for it — SFTP, the checksum command, a new channel — not
// only while ranks stream. Each call comes back with the keepalive's verdict and what it was
// doing; the 30 s wait below is a guard against a hang, not a timing.
TEST_F(SessionTest, AFrozenHostIsNoticedInEveryPhaseThatWaitsForIt) {
  Sshd sshd;  // its own: its connections are frozen
  ASSERT_TRUE(sshd.running()) << sshd.error();
  const std::string local = sshd.dir() + "/payload.bin";
  std::ofstream(local, std::ios::binary) << std::string(100000, 'x');
  struct Phase {
    const char* doing;
    std::function<std::string(SshSession&)> call;
  };
  const std::string& dir = sshd.dir();
  const std::vector<Phase> phases = {
      {"finding the remote home directory",
       [](SshSession& s) {
         auto r = s.resolvePath("~/x");
         return r ? std::string("returned ") + *r : r.message();
       }},
      {"creating", [&](SshSession& s) { return s.makeDirectories(dir + "/frozen/a/b").message(); }},
      {"uploading",
       [&](SshSession& s) {
         auto r = s.upload(local, dir + "/payload.remote", 0644);
         return r ? std::string("uploaded") : r.message();
       }},
      {"running sha256sum",
       [&](SshSession& s) {
         auto r = s.run("sha256sum -- " + shellQuote(local));
         return r ? "ran: " + r->out : r.message();
       }},
      {"starting a remote command",
       [](SshSession& s) {
         auto r = s.start("sleep 1");
         return r ? std::string("started") : r.message();
       }},
  };
  for (const Phase& phase : phases) {
    auto s = SshSession::connect(sshd.hostEntry(), {});
    ASSERT_THAT(s, HasValue());
    (*s)->setKeepalive(KeepaliveSettings{500, 2});
    const auto frozen = sshd.connectionProcesses();
    ASSERT_FALSE(frozen.empty());
    for (const pid_t p : frozen) ::kill(p, SIGSTOP);
    auto pending = std::async(std::launch::async, [&] { return phase.call(**s); });
    const bool returned = pending.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    for (const pid_t p : frozen) ::kill(p, SIGCONT);
    ASSERT_TRUE(returned) << phase.doing << ": still waiting for a frozen host";
    const std::string message = pending.get();
    EXPECT_NE(message.find("connection lost: no answer for"), std::string::npos) << phase.doing << ": " << message;
    EXPECT_NE(message.find(std::string("while ") + phase.doing), std::string::npos) << message;
    EXPECT_NE(message.find("server_alive_interval_s 0.5 x server_alive_count_max 2"), std::string::npos) << message;
    // The session is given up: later calls fail at once with the same reason.
    auto again = (*s)->run("true");
    ASSERT_FALSE(again);
    EXPECT_EQ(again.message(), message);
  }
}

TEST(SessionConnect, AListenerThatNeverAnswersFailsWithinTheConnectTimeout) {
  // Accepts (the kernel completes the handshake) and never sends a banner.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  HostEntry h;
  h.host = "127.0.0.1";
  h.port = ntohs(addr.sin_port);
  // The thread hands back the outcome as text (a session that connected is closed there).
  auto pending = std::async(std::launch::async, [&] {
    auto s = SshSession::connect(h, {}, 2000);
    return s ? std::string("connected") : s.message();
  });
  const bool returned = pending.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  ::close(fd);
  ASSERT_TRUE(returned) << "connect waited for a silent listener";
  const std::string message = pending.get();
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(h.port) + ": cannot connect"), std::string::npos) << message;
}

}  // namespace
}  // namespace pipestudio::remote
