// pipestudio-cli run: executes a plan on this machine with pipestudio-exec and records the
// run in the history (docs/cli.md, issue 7). A workspace saved with its plan (the GUI's
// File > Save) runs that plan (issue 16).
//
// Where pipestudio-exec is found: $PIPESTUDIO_EXEC, next to pipestudio-cli, in
// <build>/executor/ (the build tree layout: <build>/app/pipestudio-cli), then PATH.
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Output.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/executor/Launcher.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/model/Launch.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/SolverNames.hpp"
#include "pipestudio/workspace/Workspace.hpp"

namespace pipestudio::cli {
namespace {

struct RunArgs {
  std::string plan;
  std::string backend{pipestudio::name(Backend::Cpu)};
  int iterations = 1;
  int warmup = 0;
  std::string history;
  bool json = false;
  double maxOpMs = 0;
  double timeoutS = 60;
};

// The rank streams go into one history run, one StreamIngest per rank, while they arrive.
class RunRecorder {
 public:
  static Expected<RunRecorder> start(const RunArgs& args, const Plan& plan) {
    const std::string path = args.history.empty() ? history::defaultHistoryPath() : args.history;
    history::OpenOptions open;
    open.createDirectories = args.history.empty();  // a --history path's folder must exist
    auto store = history::HistoryStore::open(path, open);
    if (!store) return Error{path + ": " + store.message()};
    RunRecorder r(std::make_unique<history::HistoryStore>(std::move(*store)));
    auto planId = r.m_store->addPlan(plan, args.plan);
    if (!planId) return Error{path + ": " + planId.message()};
    history::RunInfo info;
    info.name = plan.config.schedule + " on " + args.backend;
    info.source = "run";
    info.sourcePath = args.plan;
    info.planId = *planId;
    info.backend = args.backend;
    std::array<char, 256> host{};
    ::gethostname(host.data(), host.size() - 1);
    info.host = host.data();
    if (const char* user = std::getenv("USER")) info.user = user;
    info.executorVersion = "0.1.0";
    auto run = r.m_store->beginRun(info);
    if (!run) return Error{path + ": " + run.message()};
    r.m_run = *run;
    return r;
  }

  history::RunId id() const { return m_run; }

  void feed(int rank, std::string_view bytes) {
    while (static_cast<int>(m_ingest.size()) <= rank) {
      m_ingest.push_back(std::make_unique<history::StreamIngest>(*m_store, m_run));
    }
    if (auto st = m_ingest[static_cast<std::size_t>(rank)]->feed(bytes); !st && m_dbError.empty()) {
      m_dbError = st.message();
    }
  }

  /// Why the run must stop now: the history cannot store what the ranks send (disk full).
  std::optional<std::string> storeFailure() const {
    if (m_dbError.empty()) return std::nullopt;
    return "history: " + m_dbError;
  }

  // Final status: the launcher's verdict first (a killed rank; a run stopped from outside is
  // incomplete), then what the streams say.
  Status finish(const exec::LaunchOutcome& outcome, std::string& message) {
    history::RunStatus status = history::RunStatus::Complete;
    message = outcome.ok ? "" : outcome.failure;
    if (!outcome.ok) status = outcome.stopped ? history::RunStatus::Incomplete : history::RunStatus::Failed;
    for (auto& ingest : m_ingest) {
      if (auto st = ingest->flush(); !st && m_dbError.empty()) m_dbError = st.message();
      const auto s = ingest->suggestedStatus();
      if (s == history::RunStatus::Failed) status = history::RunStatus::Failed;
      if (s == history::RunStatus::Incomplete && status == history::RunStatus::Complete) {
        status = history::RunStatus::Incomplete;
      }
      if (message.empty() && !ingest->problem().empty()) message = ingest->problem();
    }
    if (m_ingest.empty() && status == history::RunStatus::Complete) status = history::RunStatus::Failed;
    if (!m_dbError.empty() && message.find(m_dbError) == std::string::npos) {
      message += (message.empty() ? "" : "; ") + ("history: " + m_dbError);
    }
    m_status = status;
    return m_store->finishRun(m_run, status, message);
  }

  history::RunStatus status() const { return m_status; }

 private:
  explicit RunRecorder(std::unique_ptr<history::HistoryStore> store) : m_store(std::move(store)) {}
  std::unique_ptr<history::HistoryStore> m_store;
  history::RunId m_run = 0;
  std::vector<std::unique_ptr<history::StreamIngest>> m_ingest;
  std::string m_dbError;
  history::RunStatus m_status = history::RunStatus::Running;
};

// The plan of a workspace document (its "plan" member, read by the format's one reader, so `run`
// takes exactly what `validate` accepts), or nullopt when `path` is not a workspace (then it is
// read as a plan file).
std::optional<Expected<Plan>> workspacePlan(const std::string& path) {
  auto doc = loadJsonFile(path);
  if (!doc) return std::nullopt;
  auto kind = documentKind(*doc);
  if (!kind || *kind != "workspace") return std::nullopt;
  auto ws = readWorkspace(*doc, solverNames());
  if (!ws) return Expected<Plan>(ws.error());
  if (!ws->plan) {
    return Expected<Plan>(Error{path + ": the workspace has no plan (solve it in the GUI, then save it, or export "
                                       "the plan with File > Export > Plan JSON)"});
  }
  return Expected<Plan>(std::move(*ws->plan));
}

/// The executor reads a plan file: a workspace's plan goes to a private temporary one.
class PlanFileFor {
 public:
  PlanFileFor(std::string source, const Plan& plan, bool fromWorkspace) : m_path(std::move(source)) {
    if (!fromWorkspace) return;
    std::error_code ec;
    std::string pattern = (std::filesystem::temp_directory_path(ec) / "pipestudio-run-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) {
      m_error = "cannot create a temporary plan file";
      return;
    }
    ::close(fd);
    m_path = m_temp = pattern;
    if (Status s = savePlan(m_path, plan); !s) m_error = s.message();
  }
  ~PlanFileFor() {
    if (!m_temp.empty()) std::remove(m_temp.c_str());
  }
  PlanFileFor(const PlanFileFor&) = delete;
  PlanFileFor& operator=(const PlanFileFor&) = delete;
  const std::string& path() const { return m_path; }
  const std::string& error() const { return m_error; }

 private:
  std::string m_path;
  std::string m_temp;
  std::string m_error;
};

std::atomic<int> g_stopSignal{0};

extern "C" void onStopSignal(int sig) { g_stopSignal.store(sig); }  // async-signal-safe

std::string sigabbrev(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal " + std::to_string(sig);
  }
}

// Catches the signals that end an interactive run while the ranks run, restores them after.
class SignalStop {
 public:
  SignalStop() {
    g_stopSignal = 0;
    struct sigaction sa {};
    sa.sa_handler = onStopSignal;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &m_previous[i]);
  }
  ~SignalStop() {
    for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &m_previous[i], nullptr);
  }
  SignalStop(const SignalStop&) = delete;
  SignalStop& operator=(const SignalStop&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> m_previous{};
};

int runPlan(const RunArgs& args) {
  auto fromWorkspace = workspacePlan(args.plan);
  auto plan = fromWorkspace ? std::move(*fromWorkspace) : loadPlan(args.plan);
  if (!plan) {
    std::cerr << plan.message() << '\n';
    return kExitFailure;
  }
  const PlanFileFor planFile(args.plan, *plan, fromWorkspace.has_value());
  if (!planFile.error().empty()) {
    std::cerr << "pipestudio-cli run: " << planFile.error() << '\n';
    return kExitFailure;
  }
  auto executable = exec::findExecutor("pipestudio-cli");
  if (!executable) {
    std::cerr << "pipestudio-cli run: pipestudio-exec not found (looked in $PIPESTUDIO_EXEC, next to pipestudio-cli, "
                 "in <build>/executor/ and on PATH)\n";
    return kExitFailure;
  }
  auto recorder = RunRecorder::start(args, *plan);
  if (!recorder) {
    std::cerr << "pipestudio-cli run: " << recorder.message() << '\n';
    return kExitFailure;
  }
  exec::LaunchRequest req;
  req.executable = *executable;
  req.planPath = planFile.path();
  req.backend = parseBackend(args.backend).value_or(Backend::Cpu);  // checked by the option
  req.world = ranksFor(req.backend, plan->config.devices);
  req.iterations = args.iterations;
  req.warmup = args.warmup;
  req.runId = std::to_string(recorder->id());
  req.peerExitTimeoutS = args.timeoutS + 10;
  req.extraArgs = {"--timeout-s", std::to_string(args.timeoutS)};
  // A rank that is stopped, or stuck where its watchdog cannot end it, is ended by the launcher.
  req.silenceTimeoutS = args.timeoutS + 10;
  if (args.maxOpMs > 0) req.extraArgs.insert(req.extraArgs.end(), {"--max-op-ms", std::to_string(args.maxOpMs)});
  // SIGINT/SIGTERM/SIGHUP stop the ranks and leave the run incomplete; so does a history that
  // can store no more (disk full): what was committed stays.
  const SignalStop signals;
  req.stopRequested = [&]() -> std::optional<std::string> {
    if (const int sig = g_stopSignal.load()) return std::string("interrupted by ") + sigabbrev(sig);
    return recorder->storeFailure();
  };
  auto outcome = exec::launchLocal(req, {}, [&](int rank, std::string_view bytes) { recorder->feed(rank, bytes); });
  exec::LaunchOutcome result;
  if (outcome) {
    result = *outcome;
  } else {
    result.failure = outcome.message();
  }
  std::string message;
  if (auto st = recorder->finish(result, message); !st) {
    std::cerr << "pipestudio-cli run: history: " << st.message() << '\n';
    return kExitFailure;
  }
  const auto status = recorder->status();
  noteOutputCarries("the run is recorded as run " + std::to_string(recorder->id()));
  if (args.json) {
    std::cout << R"({"id": )" << recorder->id() << R"(, "status": ")" << history::runStatusName(status) << "\"}\n";
  } else {
    std::cout << recorder->id() << '\n';
  }
  if (status != history::RunStatus::Complete) {
    std::cerr << "pipestudio-cli run: run " << recorder->id() << " " << history::runStatusName(status) << ": "
              << (message.empty() ? "the executor stopped early" : message) << '\n';
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void addRunCommand(CLI::App& root, int& exitCode) {
  static RunArgs args;
  auto* cmd = root.add_subcommand("run", "Run a plan on this machine (pipestudio-exec) and record it in the history");
  cmd->add_option("plan", args.plan, "Plan file (pipestudio.plan/1), or a workspace saved with its plan")->required();
  cmd->add_option("--backend", args.backend, "cpu, cuda (one process per GPU) or cuda-single (one GPU)")
      ->check(CLI::IsMember(backendNames()));
  cmd->add_option("--iterations", args.iterations, "Measured iterations")->check(intIn(1, 1 << 20));
  cmd->add_option("--warmup", args.warmup, "Warm-up iterations, not recorded")->check(intIn(0, 1 << 20));
  cmd->add_option("--history", args.history, "History database (default: the GUI's)")->check(nonEmptyPath());
  cmd->add_option("--max-op-ms", args.maxOpMs, "Scale planned times so the longest op lasts this long")
      ->check(numberIn(0, 1e6));
  cmd->add_option("--timeout-s", args.timeoutS,
                  "A rank without progress for this long fails the run; its ranks are ended (one that is stopped "
                  "or hung past its watchdog after 10 s more)")
      ->check(numberIn(0.1, 1e5));
  cmd->add_flag("--json", args.json, "Print {\"id\": …} on stdout");
  cmd->callback([&exitCode] { exitCode = runPlan(args); });
}

}  // namespace pipestudio::cli
