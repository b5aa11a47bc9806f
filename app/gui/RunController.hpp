#pragma once
// What leaves and enters the window besides workspaces (issue 16): exports of the plan on screen
// (images, plan JSON, Chrome trace, schedule CSV, Megatron-LM and torchtitan settings), traces
// imported into the history, local runs and deployments, each recorded run opened against the
// plan it ran.

#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>
#include <memory>

#include "JobTracker.hpp"
#include "pipestudio/plan/Plan.hpp"

class QWidget;

namespace pipestudio::viz {
class TimelineView;
}

namespace pipestudio::gui {

class MainWindowInterface;
class RunLocalDialog;
struct TraceImportOutcome;

class RunController : public QObject {
  Q_OBJECT
 public:
  /// `workspaceName` names the workspace a run of the plan on screen is recorded under.
  RunController(QWidget* window, MainWindowInterface& host, viz::TimelineView* timeline,
                std::function<QString()> workspaceName);
  ~RunController() override;

  /// Export by suffix: .png/.svg/.pdf (timeline image with legend and title), .plan.json (the
  /// plan document), .json (Chrome trace), .csv (schedule), .sh (Megatron-LM arguments), .toml
  /// (torchtitan [parallelism] with the schedule CSV beside it).
  bool exportTo(const QString& path, QString* error = nullptr);
  bool exportPlanJson(const QString& path, QString* error = nullptr);
  /// File > Export > …: asks for the file, then exportTo.
  void exportDialog(const QString& filter, const QString& suffix);
#ifdef PIPESTUDIO_HAVE_HISTORY
  /// File > Import Trace on the calling thread (scripts, tests); importTraceDialog runs it as a
  /// background job.
  bool importTraces(const QStringList& files, QString* error = nullptr);
  void importTraceDialog();
#endif
  /// Plan > Run Locally… (nullptr without executor/history).
  RunLocalDialog* openRunLocalDialog();
  /// Plan > Deploy… (non-modal, deleted on close).
  void openDeployDialog();

 private:
#ifdef PIPESTUDIO_HAVE_HISTORY
  void showImportedTrace(const TraceImportOutcome& outcome);
  QString historyPath() const;
  /// Reads recorded run `run` and shows it against `plan` (the plan that ran) in the compare view.
  void showRunAgainst(std::int64_t run, std::shared_ptr<const Plan> plan);
#endif
  /// The name runs of the plan on screen are recorded under ("workspace · schedule").
  QString runName(const QString& separator) const;

  QWidget* m_window;
  MainWindowInterface& m_host;
  viz::TimelineView* m_timeline;
  std::function<QString()> m_workspaceName;
  RunLocalDialog* m_runDialog = nullptr;
#ifdef PIPESTUDIO_HAVE_HISTORY
  JobTracker m_importJob{this, 1};  ///< File > Import Trace (last member: destroyed first)
#endif
};

}  // namespace pipestudio::gui
