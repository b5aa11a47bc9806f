#include "SshdFixture.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "support/ProcFs.hpp"
#include "support/RunCommand.hpp"

namespace pipestudio::remote::test {

int freeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

namespace {

bool canConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string readFile(const std::string& path) { return pipestudio::test::wholeFile(path); }

}  // namespace

std::string readWholeFile(const std::string& path) { return readFile(path); }

std::string makeDaemonDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return {};
  ::chmod(tmpl.c_str(), 0755);
  return tmpl;
}

// The processes below `root`, from their parents in /proc.
std::vector<pid_t> descendants(pid_t root) {
  const std::vector<pipestudio::test::ProcessEntry> all = pipestudio::test::processTable();
  std::vector<pid_t> out{root};
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (const auto& p : all) {
      if (p.ppid == out[i]) out.push_back(p.pid);
    }
  }
  out.erase(out.begin());
  return out;
}

int runLocal(const std::string& command, std::string* out) {
  const pipestudio::test::CommandResult r = pipestudio::test::runCommand(command);
  if (out != nullptr) *out = r.out;
  return r.status;
}

std::vector<pid_t> processesWhose(const std::string& file, char separator,
                                  const std::function<bool(const std::string&)>& match) {
  std::vector<pid_t> out;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      const auto pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0 || pid == ::getpid()) continue;
      std::string text = readFile("/proc/" + std::string(e->d_name) + "/" + file);
      for (char& c : text) {
        if (c == '\0') c = separator;
      }
      if (match(text)) out.push_back(pid);
    }
    ::closedir(d);
  }
  return out;
}

std::vector<pid_t> processesMatching(const std::string& needle) {
  // A zombie has an empty cmdline: it is gone for our purposes.
  return processesWhose("cmdline", ' ', [&](const std::string& cmd) { return cmd.find(needle) != std::string::npos; });
}

Sshd::Sshd(const std::vector<std::string>& environment) {
  const char* sshd = "/usr/sbin/sshd";
  if (::access(sshd, X_OK) != 0) {
    m_error = "sshd not installed at /usr/sbin/sshd (packaging/install-deps.sh installs openssh-server)";
    return;
  }
  m_dir = makeDaemonDir("ps-remote-test");
  if (m_dir.empty()) {
    m_error = "cannot create a temp dir";
    return;
  }
  if (runLocal("ssh-keygen -q -t ed25519 -N '' -C pipestudio-test-host -f '" + m_dir + "/host_key' </dev/null") != 0 ||
      runLocal("ssh-keygen -q -t ed25519 -N '' -C pipestudio-test-user -f '" + m_dir + "/user_key' </dev/null") != 0) {
    m_error = "ssh-keygen failed";
    return;
  }
  { std::ofstream(m_dir + "/authorized_keys") << readFile(m_dir + "/user_key.pub"); }
  ::mkdir((m_dir + "/bin").c_str(), 0755);
  ::mkdir("/run/sshd", 0755);  // privilege separation dir sshd insists on (Debian creates it at boot)

  for (int attempt = 0; attempt < 3 && m_pid <= 0; ++attempt) {
    m_port = freeTcpPort();
    {
      std::ofstream cfg(m_dir + "/sshd_config");
      cfg << "Port " << m_port << "\nListenAddress 127.0.0.1\nHostKey " << m_dir << "/host_key\n"
          << "PidFile " << m_dir << "/sshd.pid\nAuthorizedKeysFile " << m_dir << "/authorized_keys\n"
          << "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
          << "KbdInteractiveAuthentication no\nAllowUsers *\nMaxSessions 64\nMaxStartups 64\n"
          << "Subsystem sftp internal-sftp\nLogLevel VERBOSE\n"
          // Tests put stand-ins for cluster tools (srun) in binDir().
          << "SetEnv PATH=" << m_dir << "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
      for (const auto& e : environment) cfg << ' ' << e;
      cfg << '\n';
    }
    const std::string cfgPath = m_dir + "/sshd_config";
    const std::string logPath = m_dir + "/sshd.log";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl(sshd, sshd, "-D", "-f", cfgPath.c_str(), "-E", logPath.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid < 0) break;
    for (int i = 0; i < 100; ++i) {
      if (canConnect(m_port)) {
        m_pid = pid;
        break;
      }
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) break;  // sshd gave up (port taken, config)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (m_pid <= 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      m_error = "sshd did not start: " + readFile(logPath);
    }
  }
  if (m_pid > 0) {
    m_error.clear();
    // known_hosts names a non-22 port as [host]:port (sshd(8) SSH_KNOWN_HOSTS FILE FORMAT).
    std::istringstream pub(readFile(m_dir + "/host_key.pub"));
    std::string type;
    std::string key;
    pub >> type >> key;
    std::ofstream(knownHosts()) << "[127.0.0.1]:" << m_port << ' ' << type << ' ' << key << '\n';
  }
}

Sshd::~Sshd() {
  if (m_pid > 0) {
    for (const pid_t p : descendants(m_pid)) ::kill(p, SIGKILL);
    ::kill(m_pid, SIGTERM);
    ::waitpid(m_pid, nullptr, 0);
  }
  if (!m_dir.empty() && std::getenv("PIPESTUDIO_KEEP_TEST_DIRS") == nullptr) {
    runLocal("rm -rf '" + m_dir + "'");
  }
}

HostEntry Sshd::hostEntry(int gpus) const {
  HostEntry h;
  h.host = "127.0.0.1";
  h.port = m_port;
  h.user = "";  // the local user
  h.identityFile = userKey();
  h.knownHostsFile = knownHosts();
  h.gpus = gpus;
  h.remoteDir = m_dir + "/remote";
  return h;
}

std::vector<pid_t> Sshd::connectionProcesses() const {
  std::vector<pid_t> out;
  if (m_pid <= 0) return out;
  for (const pid_t p : descendants(m_pid)) {
    if (readFile("/proc/" + std::to_string(p) + "/comm").rfind("sshd", 0) == 0) out.push_back(p);
  }
  return out;
}

void Sshd::killAll() {
  if (m_pid <= 0) return;
  const auto children = descendants(m_pid);
  ::kill(m_pid, SIGKILL);
  for (const pid_t p : children) {
    // Only the sshd processes: the ranks they run must die through the watchdog.
    const std::string comm = readFile("/proc/" + std::to_string(p) + "/comm");
    if (comm.rfind("sshd", 0) == 0) ::kill(p, SIGKILL);
  }
  ::waitpid(m_pid, nullptr, 0);
  m_pid = -1;
}

}  // namespace pipestudio::remote::test
