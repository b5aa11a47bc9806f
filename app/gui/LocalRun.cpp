#include "LocalRun.hpp"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "pipestudio/executor/Launcher.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::gui {

namespace {

/// A private temporary copy of the plan for the executor, removed when done.
class TempPlanFile {
 public:
  explicit TempPlanFile(const Plan& plan) {
    std::error_code ec;
    std::string pattern = (std::filesystem::temp_directory_path(ec) / "pipestudio-run-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) {
      m_error = "cannot create a temporary plan file in " + std::filesystem::temp_directory_path(ec).string();
      return;
    }
    ::close(fd);
    m_path = pattern;
    if (Status s = savePlan(m_path, plan); !s) m_error = s.message();
  }
  ~TempPlanFile() {
    if (!m_path.empty()) std::remove(m_path.c_str());
  }
  TempPlanFile(const TempPlanFile&) = delete;
  TempPlanFile& operator=(const TempPlanFile&) = delete;
  const std::string& path() const { return m_path; }
  const std::string& error() const { return m_error; }

 private:
  std::string m_path;
  std::string m_error;
};

}  // namespace

std::vector<std::string> localBackends() {
  std::vector<std::string> out{std::string(name(Backend::Cpu))};
  std::error_code ec;
  // The NVIDIA driver's control device exists exactly where a GPU can be used.
  if (std::filesystem::exists("/dev/nvidiactl", ec)) {
    out.emplace_back(name(Backend::CudaSingle));
    out.emplace_back(name(Backend::Cuda));
  }
  return out;
}

Expected<LocalRunResult> runLocally(const LocalRunRequest& request, const std::function<void(double)>& progress) {
  TempPlanFile planFile(request.plan);
  if (!planFile.error().empty()) return Error{planFile.error()};
  auto store = history::HistoryStore::open(request.historyPath);
  if (!store) return Error{request.historyPath + ": " + store.message()};
  auto planId = store->addPlan(request.plan, request.name);
  if (!planId) return Error{request.historyPath + ": " + planId.message()};
  history::RunInfo info;
  info.name = request.name;
  info.source = "run";
  info.planId = *planId;
  info.backend = request.backend;
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  info.host = host.data();
  if (const char* user = std::getenv("USER")) info.user = user;
  auto run = store->beginRun(info);
  if (!run) return Error{request.historyPath + ": " + run.message()};

  exec::LaunchRequest launch;
  launch.executable = request.executable;
  launch.planPath = planFile.path();
  launch.backend = parseBackend(request.backend).value_or(Backend::Cpu);
  launch.world = ranksFor(launch.backend, request.plan.config.devices);
  launch.iterations = request.iterations;
  launch.runId = std::to_string(*run);
  launch.peerExitTimeoutS = request.timeoutS + 10;
  launch.silenceTimeoutS = request.timeoutS + 10;
  launch.extraArgs = {"--timeout-s", std::to_string(request.timeoutS)};
  if (request.maxOpMs > 0)
    launch.extraArgs.insert(launch.extraArgs.end(), {"--max-op-ms", std::to_string(request.maxOpMs)});
  if (request.cancelled != nullptr) {
    launch.stopRequested = [cancelled = request.cancelled]() -> std::optional<std::string> {
      if (cancelled->load()) return std::string("cancelled (the Run Locally dialog was closed)");
      return std::nullopt;
    };
  }

  // One ingest per rank, fed as bytes arrive; progress counts completed op ranges.
  std::vector<std::unique_ptr<history::StreamIngest>> ingest;
  std::string dbError;
  const double expected = static_cast<double>(std::max<std::size_t>(1, request.plan.ops.size())) * request.iterations;
  double done = 0;
  int lastPercent = -1;
  auto onFrame = [&](int, const trace::Frame& frame) {
    const auto* range = std::get_if<trace::OpRange>(&frame);
    if (range == nullptr || range->begin) return;
    done += 1;
    const int percent = static_cast<int>(std::min(1.0, done / expected) * 100);
    if (percent != lastPercent && progress) progress(percent / 100.0);
    lastPercent = percent;
  };
  auto onBytes = [&](int rank, std::string_view bytes) {
    while (static_cast<int>(ingest.size()) <= rank)
      ingest.push_back(std::make_unique<history::StreamIngest>(*store, *run));
    if (auto st = ingest[static_cast<std::size_t>(rank)]->feed(bytes); !st && dbError.empty()) dbError = st.message();
  };
  auto outcome = exec::launchLocal(launch, onFrame, onBytes);

  // Final status as pipestudio-cli run decides it: the launcher's verdict (a run stopped from
  // outside is incomplete), then the streams'.
  LocalRunResult result;
  result.run = *run;
  result.status = history::RunStatus::Complete;
  if (!outcome) {
    result.status = history::RunStatus::Failed;
    result.message = outcome.message();
  } else if (!outcome->ok) {
    result.status = outcome->stopped ? history::RunStatus::Incomplete : history::RunStatus::Failed;
    result.message = outcome->failure;
  }
  for (auto& in : ingest) {
    if (auto st = in->flush(); !st && dbError.empty()) dbError = st.message();
    const auto s = in->suggestedStatus();
    if (s == history::RunStatus::Failed) result.status = history::RunStatus::Failed;
    if (s == history::RunStatus::Incomplete && result.status == history::RunStatus::Complete)
      result.status = history::RunStatus::Incomplete;
    if (result.message.empty() && !in->problem().empty()) result.message = in->problem();
  }
  if (ingest.empty()) {
    result.status = history::RunStatus::Failed;
    if (result.message.empty()) result.message = "no rank produced a trace stream";
  }
  if (!dbError.empty()) result.message += (result.message.empty() ? "" : "; ") + ("history: " + dbError);
  if (Status st = store->finishRun(*run, result.status, result.message); !st) return Error{st.message()};
  return result;
}

}  // namespace pipestudio::gui
