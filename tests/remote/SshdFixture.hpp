#pragma once
// A real OpenSSH sshd on 127.0.0.1 for the remote tests (issue 8): a free port, generated
// host and user keys, a private sshd_config in a temp dir. Tests skip (with the reason)
// only when sshd cannot start here.

#include <gtest/gtest.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "pipestudio/model/Hosts.hpp"

namespace pipestudio::remote::test {

class Sshd {
 public:
  /// Starts sshd; on failure `error()` says why and `running()` is false. `environment`
  /// (NAME=value) is set in every session, as a login node's profile would (SLURM_CONF).
  explicit Sshd(const std::vector<std::string>& environment = {});
  ~Sshd();
  Sshd(const Sshd&) = delete;
  Sshd& operator=(const Sshd&) = delete;

  bool running() const { return m_pid > 0; }
  const std::string& error() const { return m_error; }
  int port() const { return m_port; }
  const std::string& dir() const { return m_dir; }
  /// First on the PATH of remote sessions (SetEnv): stand-ins for cluster tools.
  std::string binDir() const { return m_dir + "/bin"; }
  std::string userKey() const { return m_dir + "/user_key"; }
  std::string hostKeyPub() const { return m_dir + "/host_key.pub"; }
  /// A known_hosts file that trusts this sshd's host key.
  std::string knownHosts() const { return m_dir + "/known_hosts"; }

  /// A hosts entry for this sshd (trusted known_hosts, the user key, remote_dir in dir()).
  HostEntry hostEntry(int gpus = 1) const;

  /// SIGKILL the listener and every per-connection sshd it forked: the connection drops
  /// as it would when a node dies.
  void killAll();
  /// The per-connection sshd processes (not the listener): SIGSTOP them to make the network
  /// go silent, SIGCONT to let it talk again.
  std::vector<pid_t> connectionProcesses() const;

 private:
  std::string m_dir;
  std::string m_error;
  int m_port = 0;
  pid_t m_pid = -1;
};

/// A suite whose tests share one sshd: starting one costs ~100 ms, but keys and the fixture dir
/// are shared state the tests only read (each test uses its own subdirectory).
class SshdSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { s_sshd = new Sshd(); }
  static void TearDownTestSuite() {
    delete s_sshd;
    s_sshd = nullptr;
  }
  static inline Sshd* s_sshd = nullptr;
};

/// A TCP port on 127.0.0.1 that nothing listens on right now.
int freeTcpPort();
/// Direct and indirect children of `root`.
std::vector<pid_t> descendants(pid_t root);
/// The whole file (empty when it cannot be read).
std::string readWholeFile(const std::string& path);
/// A new directory /tmp/<prefix>-XXXXXX readable by the daemons' users (0755); "" when it
/// cannot be made.
std::string makeDaemonDir(const std::string& prefix);
/// Runs a local command, returns its exit status and stdout.
int runLocal(const std::string& command, std::string* out = nullptr);
/// Process ids whose command line contains `needle` (scans /proc).
std::vector<pid_t> processesMatching(const std::string& needle);
/// Other processes whose /proc/<pid>/<file> (NULs read as `separator`) satisfies `match`.
std::vector<pid_t> processesWhose(const std::string& file, char separator,
                                  const std::function<bool(const std::string&)>& match);

}  // namespace pipestudio::remote::test
