#pragma once
// Plan > Run Locally (issue 16): the plan on screen executed on this machine by
// pipestudio-exec (cpu, or cuda / cuda-single where a GPU exists), its rank streams ingested
// into the history while they arrive — what `pipestudio-cli run` does, for the window. Qt-free;
// the dialog runs it as a JobTracker job, whose cancel flag stops the ranks.

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/model/Launch.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::gui {

struct LocalRunRequest {
  Plan plan;
  std::string name;                                     ///< run name in the history
  std::string historyPath;                              ///< database the run is recorded in
  std::string executable;                               ///< pipestudio-exec
  std::string backend{pipestudio::name(Backend::Cpu)};  ///< a name from localBackends()
  int iterations = 1;
  double maxOpMs = 0;    ///< scale planned times so the longest op lasts this long (0: as planned)
  double timeoutS = 60;  ///< a rank without progress for this long fails the run
  /// Polled while the ranks run (JobTracker::Control::cancelFlag()): once set, the ranks are
  /// ended and the run is recorded incomplete, as `pipestudio-cli run` records an interrupt.
  const std::atomic<bool>* cancelled = nullptr;
};

struct LocalRunResult {
  history::RunId run = 0;
  history::RunStatus status = history::RunStatus::Failed;
  std::string message;  ///< why it is not complete
};

/// Backends this machine can run: cpu, plus cuda and cuda-single when an NVIDIA GPU is present.
std::vector<std::string> localBackends();

/// Runs the plan and records it. `progress` gets the share of planned op ranges received
/// (0..1, from the worker thread). An Error only when nothing could be started or recorded.
Expected<LocalRunResult> runLocally(const LocalRunRequest& request, const std::function<void(double)>& progress);

}  // namespace pipestudio::gui
