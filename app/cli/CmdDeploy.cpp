// pipestudio-cli deploy (docs/cli.md, issues 8 and 17): run a plan on the hosts of a hosts file
// over SSH (directly, or through Slurm or mpirun from the first host) and record the run in the
// history while the ranks stream their traces back; a Slurm job's state is printed as it changes.
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Inputs.hpp"
#include "Output.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/model/Launch.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/remote/Deploy.hpp"
#include "pipestudio/remote/HistorySink.hpp"

namespace pipestudio::cli {
namespace {

namespace fs = std::filesystem;

// The executor to upload: --executor, $PIPESTUDIO_EXEC, next to pipestudio-cli (installed),
// the build tree's executor/ (pipestudio-cli lives in <build>/app), then PATH.
std::string findExecutor(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("PIPESTUDIO_EXEC"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& p :
         {self.parent_path() / "pipestudio-exec", self.parent_path() / "../executor/pipestudio-exec"}) {
      if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    std::size_t start = 0;
    while (start <= dirs.size()) {
      const auto end = dirs.find(':', start);
      const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!dir.empty() && ::access((dir + "/pipestudio-exec").c_str(), X_OK) == 0) return dir + "/pipestudio-exec";
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return "pipestudio-exec";  // reported as not found by the deployment
}

// Reads a passphrase from the terminal without echo; nullopt when there is no terminal.
std::optional<std::string> askPassphrase(const std::string& prompt) {
  if (::isatty(STDIN_FILENO) == 0) return std::nullopt;
  std::cerr << prompt << ": " << std::flush;
  termios old{};
  const bool haveTermios = ::tcgetattr(STDIN_FILENO, &old) == 0;
  if (haveTermios) {
    termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
  }
  std::string line;
  const bool ok = static_cast<bool>(std::getline(std::cin, line));
  if (haveTermios) ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
  std::cerr << '\n';
  if (!ok) return std::nullopt;
  return line;
}

// Where the deployment's logs go: each rank's executor log to stderr, prefixed by the rank, one
// line at a time; the launcher's own messages ("srun: job 12 queued and waiting for resources")
// as they come.
class LogPrinter {
 public:
  explicit LogPrinter(std::string launcher) : m_launcher(std::move(launcher)) {}
  void operator()(int rank, std::string_view text) {
    if (rank == remote::HistorySink::kLauncherRank) {
      std::cerr << '[' << m_launcher << "] " << text << std::flush;
      return;
    }
    std::string& pending = m_lines[rank];
    pending.append(text);
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::cerr << "[rank " << rank << "] " << pending.substr(0, nl) << '\n';
      pending.erase(0, nl + 1);
    }
  }

 private:
  std::string m_launcher;
  std::map<int, std::string> m_lines;
};

std::atomic<remote::Deployment*> g_active{nullptr};

extern "C" void onInterrupt(int /*signal*/) {
  // Async-signal-safe: only an atomic store inside cancel().
  if (remote::Deployment* d = g_active.load()) d->cancel();
}

struct DeployArgs {
  std::string plan;
  std::string hosts;
  std::string backend{pipestudio::name(Backend::Cuda)};
  std::string history;
  std::string executor;
  int iterations = 0;
  bool acceptNewHostKeys = false;
  bool json = false;
  std::vector<std::string> execArgs;
};

remote::DeployRequest deployRequest(const DeployArgs& a, int devices, const HostsSpec& hosts) {
  remote::DeployRequest request;
  request.planPath = a.plan;
  request.devices = devices;
  request.hosts = hosts;
  request.backend = parseBackend(a.backend).value_or(Backend::Cuda);  // checked by the option
  request.iterations = a.iterations;
  request.executorPath = findExecutor(a.executor);
  request.runId = "deploy-" +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count()) +
                  "-" + std::to_string(::getpid());
  request.executorArgs = a.execArgs;
  return request;
}

// What the terminal shows while the ranks run: one line per rank state change, plus iteration
// progress (the GUI shows the same reports), and the scheduler's view of the job. A new host key
// is accepted only with --accept-new-host-keys. Lives as long as the deployment.
class TerminalProgress {
 public:
  explicit TerminalProgress(bool acceptNewHostKeys) : m_accept(acceptNewHostKeys) {}

  remote::DeployCallbacks callbacks() {
    remote::DeployCallbacks callbacks;
    callbacks.session.unknownHostKey = [accept = m_accept](const remote::HostKeyPrompt& p) {
      if (!accept) return remote::HostKeyDecision::Reject;
      std::cerr << p.hostPort << ": adding host key " << p.keyType << ' ' << p.fingerprintSha256 << " to "
                << p.knownHostsFile << '\n';
      return remote::HostKeyDecision::AcceptAndSave;
    };
    callbacks.session.passphrase = &askPassphrase;
    callbacks.progress = [this](const remote::RankProgress& p) { rank(p); };
    callbacks.job = [this](const remote::JobProgress& j) {
      // The scheduler's view of the job: "slurm job 12: PENDING (Resources)", then RUNNING.
      std::lock_guard lock(m_mutex);
      std::cerr << j.text() << '\n';
    };
    return callbacks;
  }

 private:
  void rank(const remote::RankProgress& p) {
    std::lock_guard lock(m_mutex);
    std::string line = std::string(remote::rankStateName(p.state));
    if (p.state == remote::RankState::Running && p.events > 0) {
      line += " iteration " + std::to_string(p.iteration) +
              (p.iterations > 0 ? "/" + std::to_string(p.iterations) : std::string()) + ", " +
              std::to_string(p.events) + " events";
    }
    if (p.state != remote::RankState::Running && !p.message.empty() && p.message != remote::rankStateName(p.state)) {
      line += " (" + p.message + ")";
    }
    if (m_lastState[p.rank] == line) return;
    m_lastState[p.rank] = line;
    // Under Slurm the node is known once the rank runs.
    std::cerr << "rank " << p.rank << (p.hostPort.empty() ? "" : " " + p.hostPort) << ": " << line << '\n';
  }

  std::mutex m_mutex;
  std::map<int, std::string> m_lastState;
  bool m_accept;
};

int deploy(const DeployArgs& a) {
  auto plan = loadValidPlan(a.plan);
  if (!plan) return kExitFailure;
  auto hosts = loadHosts(a.hosts);
  if (!hosts) {
    std::cerr << hosts.message() << '\n';
    return kExitFailure;
  }
  const std::string dbPath = a.history.empty() ? history::defaultHistoryPath() : a.history;
  history::OpenOptions open;
  open.createDirectories = a.history.empty();  // a --history path's folder must exist
  auto store = history::HistoryStore::open(dbPath, open);
  if (!store) {
    std::cerr << store.message() << '\n';
    return kExitFailure;
  }
  auto planId = store->addPlan(*plan, fs::path(a.plan).stem().string());
  if (!planId) {
    std::cerr << planId.message() << '\n';
    return kExitFailure;
  }

  const remote::DeployRequest request = deployRequest(a, plan->config.devices, *hosts);

  history::RunInfo info;
  info.name = fs::path(a.plan).stem().string() + " on " + hosts->hosts.front().host;
  info.source = "deploy";
  info.sourcePath = fs::absolute(a.plan).string();
  info.planId = *planId;
  info.host = hosts->hosts.front().host;
  info.backend = a.backend;
  // Records the ranks' streams into one history run, as the GUI's deploy dialog does.
  remote::HistorySink sink(*store, info, LogPrinter(std::string(name(hosts->launcher))));

  TerminalProgress progress(a.acceptNewHostKeys);
  const remote::DeployCallbacks callbacks = progress.callbacks();

  remote::Deployment deployment(request, callbacks, sink);
  g_active = &deployment;
  auto previousInt = std::signal(SIGINT, onInterrupt);
  auto previousTerm = std::signal(SIGTERM, onInterrupt);
  auto result = deployment.run();
  std::signal(SIGINT, previousInt);
  std::signal(SIGTERM, previousTerm);
  g_active = nullptr;

  if (!result) {
    std::cerr << "deploy: " << result.message() << '\n';
    if (sink.started()) (void)store->finishRun(sink.runId(), history::RunStatus::Failed, result.message());
    return kExitFailure;
  }
  if (auto st = sink.finish(*result); !st) {
    std::cerr << "deploy: " << st.message() << '\n';
    return kExitFailure;
  }
  auto summary = store->runSummary(sink.runId());
  const std::string status = summary ? std::string(history::runStatusName(summary->status)) : "?";
  noteOutputCarries("the run is recorded as run " + std::to_string(sink.runId()));
  if (a.json) {
    std::cout << "{\"id\": " << sink.runId() << "}\n";
  } else {
    std::cout << "run " << sink.runId() << ": " << status << " (" << result->message << ")\n";
  }
  if (status != "complete") {
    std::cerr << "deploy: run " << sink.runId() << " " << status << ": " << result->message << '\n';
    if (result->connectionLost) {
      std::cerr << "deploy: to reconnect, run the same command again once the host answers\n";
    }
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void addDeployCommand(CLI::App& root, int& exitCode) {
  auto* cmd =
      root.add_subcommand("deploy", "Run a plan on the hosts of a hosts file over SSH, record it in the history");
  static DeployArgs args;
  cmd->add_option("plan", args.plan, "Plan file (pipestudio.plan/1)")->required();
  cmd->add_option("--hosts", args.hosts, "Hosts file (pipestudio.hosts/1)")->required();
  cmd->add_option("--backend", args.backend, "Executor backend")->check(CLI::IsMember(backendNames()));
  cmd->add_option("--history", args.history, "History database (default: the GUI's)")->check(nonEmptyPath());
  cmd->add_option("--iterations", args.iterations, "Measured iterations (default: the executor's)")
      ->check(intIn(1, 1 << 20));
  cmd->add_flag(
      "--accept-new-host-keys", args.acceptNewHostKeys,
      "Trust hosts seen for the first time and add their keys to known_hosts (changed keys are always refused)");
  cmd->add_option("--executor", args.executor,
                  "Local pipestudio-exec to upload (default: the one built with this CLI)");
  cmd->add_option("--exec-arg", args.execArgs,
                  "Extra pipestudio-exec option, repeatable (e.g. --exec-arg=--max-op-ms --exec-arg=5)")
      ->allow_extra_args(false);
  cmd->add_flag("--json", args.json, "Print {\"id\": RUN} on stdout");
  cmd->callback([&exitCode] { exitCode = deploy(args); });
}

}  // namespace pipestudio::cli
