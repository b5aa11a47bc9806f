#include "SlurmFixture.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "SshdFixture.hpp"

extern char** environ;

namespace pipestudio::remote::test {
namespace {

using Clock = std::chrono::steady_clock;

bool waitFor(int timeoutMs, const std::function<bool()>& ready) {
  const auto until = Clock::now() + std::chrono::milliseconds(timeoutMs);
  while (Clock::now() < until) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ready();
}

std::string userName() {
  const passwd* pw = ::getpwuid(::geteuid());
  return pw != nullptr && pw->pw_name != nullptr ? pw->pw_name : "root";
}

std::string tail(const std::string& text, std::size_t bytes) {
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

}  // namespace

Slurm::Slurm(int cpus) {
  for (const char* tool : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/srun",
                           "/usr/bin/squeue", "/usr/bin/scancel", "/usr/bin/sbatch"}) {
    if (::access(tool, X_OK) != 0) {
      m_error = std::string(tool) +
                " is not installed (packaging/install-deps.sh installs slurmctld, slurmd, "
                "slurm-client and munge)";
      return;
    }
  }
  m_dir = makeDaemonDir("ps-slurm-test");
  if (m_dir.empty()) {
    m_error = "cannot create a temp dir";
    return;
  }
  for (const char* sub : {"/munge", "/state", "/spool", "/log"}) ::mkdir((m_dir + sub).c_str(), 0755);
  ::mkdir((m_dir + "/munge-key").c_str(), 0700);

  // munge: a fresh key (munged refuses keys others can read), a private socket.
  const std::string key = m_dir + "/munge-key/munge.key";
  {
    std::random_device seed;
    std::mt19937_64 rng(seed());
    std::ofstream out(key, std::ios::binary);
    for (int i = 0; i < 128; ++i) {
      const std::uint64_t v = rng();
      out.write(reinterpret_cast<const char*>(&v), sizeof(v));
    }
  }
  ::chmod(key.c_str(), 0600);
  const std::string socket = m_dir + "/munge/munge.socket";
  if (spawn({"/usr/sbin/munged", "--foreground", "--force", "--key-file=" + key, "--socket=" + socket,
             "--pid-file=" + m_dir + "/munge/munged.pid", "--log-file=" + m_dir + "/log/munged.log",
             "--seed-file=" + m_dir + "/munge/munged.seed"},
            m_dir + "/log/munged.out") <= 0 ||
      !waitFor(10000, [&] { return ::access(socket.c_str(), F_OK) == 0; })) {
    m_error = "munged did not start:\n" + logs();
    stop();
    return;
  }

  // Ports are free when picked but may be taken by the time a daemon binds: a few tries.
  for (int attempt = 0; attempt < 3; ++attempt) {
    m_error.clear();
    const int ctldPort = freeTcpPort();
    int slurmdPort = freeTcpPort();
    while (slurmdPort == ctldPort) slurmdPort = freeTcpPort();
    writeConf(cpus, ctldPort, slurmdPort, socket);
    const std::size_t munge = m_daemons.size();
    if (spawn({"/usr/sbin/slurmctld", "-D", "-i", "-f", conf()}, m_dir + "/log/slurmctld.out") <= 0 ||
        !waitFor(20000, [&] { return client("scontrol ping 2>/dev/null | grep -q UP") == 0; })) {
      m_error = "slurmctld did not start:\n" + logs();
    } else if (spawn({"/usr/sbin/slurmd", "-D", "-N", m_node, "-f", conf()}, m_dir + "/log/slurmd.out") <= 0 ||
               !waitFor(20000, [&] {
                 std::string state;
                 return client("sinfo -h -n " + m_node + " -o %T", &state) == 0 && state.rfind("idle", 0) == 0;
               })) {
      m_error = "slurmd did not register as idle:\n" + logs();
    }
    if (m_error.empty()) return;
    // Stop this try's daemons, keep munged.
    for (std::size_t i = m_daemons.size(); i > munge; --i) {
      ::kill(m_daemons[i - 1], SIGKILL);
      ::waitpid(m_daemons[i - 1], nullptr, 0);
    }
    m_daemons.resize(munge);
  }
  const std::string why = m_error;
  stop();
  m_error = why;
}

void Slurm::writeConf(int cpus, int ctldPort, int slurmdPort, const std::string& mungeSocket) const {
  const std::string user = userName();
  std::ofstream c(conf(), std::ios::trunc);
  c << "ClusterName=pipestudiotest\n"
    << "SlurmctldHost=localhost(127.0.0.1)\n"
    << "SlurmctldPort=" << ctldPort << "\nSlurmdPort=" << slurmdPort << '\n'
    << "SlurmUser=" << user << "\nSlurmdUser=" << user << '\n'
    << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << mungeSocket << '\n'
    << "StateSaveLocation=" << m_dir << "/state\n"
    << "SlurmdSpoolDir=" << m_dir << "/spool\n"
    << "SlurmctldPidFile=" << m_dir << "/slurmctld.pid\nSlurmdPidFile=" << m_dir << "/slurmd.pid\n"
    << "SlurmctldLogFile=" << m_dir << "/log/slurmctld.log\nSlurmdLogFile=" << m_dir << "/log/slurmd.log\n"
    << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
    << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
    << "JobCompType=jobcomp/none\nMpiDefault=none\nMailProg=/bin/true\n"
    << "SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
    // The node declares `cpus` CPUs whatever this machine has.
    << "SlurmdParameters=config_overrides\nReturnToService=2\n"
    << "SlurmctldTimeout=30\nSlurmdTimeout=30\nInactiveLimit=0\nKillWait=2\nMinJobAge=300\n"
    << "NodeName=" << m_node << " NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=" << cpus
    << " RealMemory=1000 State=UNKNOWN\n"
    << "PartitionName=debug Nodes=" << m_node << " Default=YES MaxTime=INFINITE State=UP\n";
}

Slurm::~Slurm() {
  stop();
  if (!m_dir.empty() && std::getenv("PIPESTUDIO_KEEP_TEST_DIRS") == nullptr) runLocal("rm -rf '" + m_dir + "'");
}

pid_t Slurm::spawn(const std::vector<std::string>& argv, const std::string& log) {
  // Everything is prepared before fork(): the child only calls async-signal-safe functions.
  const std::string confEnv = "SLURM_CONF=" + conf();
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).rfind("SLURM_", 0) != 0) env.push_back(*e);
  }
  env.push_back(const_cast<char*>(confEnv.c_str()));
  env.push_back(nullptr);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // A test killed by a timeout (no destructor runs) must not leave daemons behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execve(args[0], args.data(), env.data());
    ::_exit(127);
  }
  if (pid > 0) m_daemons.push_back(pid);
  return pid;
}

void Slurm::stop() {
  if (m_daemons.size() >= 2) {
    // Jobs first, so that no step outlives its slurmd.
    client("scancel --user=" + userName() + " >/dev/null 2>&1");
    waitFor(10000, [&] {
      std::string out;
      return client("squeue -h 2>/dev/null", &out) != 0 || out.empty();
    });
  }
  for (std::size_t i = m_daemons.size(); i-- > 0;) ::kill(m_daemons[i], SIGTERM);  // newest first
  for (const pid_t pid : m_daemons) {
    bool gone = waitFor(5000, [&] { return ::waitpid(pid, nullptr, WNOHANG) == pid; });
    if (!gone) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  m_daemons.clear();
  if (m_dir.empty()) return;
  // Job steps (slurmstepd daemonizes away from slurmd) and their tasks carry this cluster's
  // SLURM_CONF in their environment: whatever is left of them goes too.
  const std::string marker = "SLURM_CONF=" + conf();
  const auto carriesMarker = [&](const std::string& env) {
    return ("\n" + env).find("\n" + marker + "\n") != std::string::npos;
  };
  for (const pid_t pid : processesWhose("environ", '\n', carriesMarker)) ::kill(pid, SIGKILL);
}

std::string Slurm::logs() const {
  std::string out;
  for (const char* f : {"munged.out", "munged.log", "slurmctld.out", "slurmctld.log", "slurmd.out", "slurmd.log"}) {
    const std::string text = readWholeFile(m_dir + "/log/" + f);
    if (!text.empty()) out += std::string("--- ") + f + "\n" + tail(text, 2000);
  }
  return out;
}

int Slurm::client(const std::string& command, std::string* out) const {
  return runLocal("SLURM_CONF='" + conf() + "' " + command, out);
}

std::string Slurm::queued(const std::string& jobName) const {
  std::string out;
  client("squeue -h --name='" + jobName + "' -o '%i %T %r' 2>&1", &out);
  return out;
}

bool Slurm::waitUntilGone(const std::string& jobName, int timeoutMs) const {
  return waitFor(timeoutMs, [&] { return queued(jobName).empty(); });
}

}  // namespace pipestudio::remote::test
