#pragma once
// What leaves and enters the window besides workspaces (issue 16): exports of the plan on screen
// (images, plan JSON, Chrome trace, schedule CSV, Megatron-LM and torchtitan settings), traces
// imported into the history, local runs and deployments, each recorded run opened against the
// plan it ran.
//
// Runs and imports are of the solve of the current settings (MainWindowInterface::solvedPlan),
// never of whatever the timeline shows: a dimmed last good plan or a measured run is not run,
// recorded or compared with (issue 47).

#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

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

/// What File > Export writes.
enum class ExportFormat {
  Png,
  Svg,
  Pdf,
  PlanJson,
  ChromeTrace,
  ScheduleCsv,
  Megatron,
  TorchtitanPython,  ///< torchtitan main's Python configuration (--module / --config)
  TorchtitanToml,    ///< torchtitan v0.2.2 and earlier (--job.config_file)
};

/// The format an export path's suffix names (.plan.json before .json), or nullopt.
std::optional<ExportFormat> exportFormatOfPath(const QString& path);
/// The suffix a file of `format` gets (".plan.json", ".py", …).
QString exportSuffix(ExportFormat format);

class RunController : public QObject {
  Q_OBJECT
 public:
  /// `userWorkspaceName` is the name the user gave the workspace (empty while it follows its
  /// model and cluster): runs are recorded under it, else under the plan's own model and cluster.
  RunController(QWidget* window, MainWindowInterface& host, viz::TimelineView* timeline,
                std::function<QString()> userWorkspaceName, std::function<QString()> workspacePath);
  ~RunController() override;

  /// Export by suffix (exportFormatOfPath): .png/.svg/.pdf (timeline image with legend and
  /// title), .plan.json (the plan document), .json (Chrome trace), .csv (schedule), .sh
  /// (Megatron-LM arguments), .py (torchtitan main's Python configuration) or .toml (its legacy
  /// TOML), the last two with the schedule CSV beside them.
  bool exportTo(const QString& path, QString* error = nullptr);
  /// Export as `format` whatever the path's suffix (the dialog's choice).
  bool exportAs(ExportFormat format, const QString& path, QString* error = nullptr);
  bool exportPlanJson(const QString& path, QString* error = nullptr);
  /// File > Export > …: asks for the file (offering `formats`, the first as default) in the
  /// last export folder, then exports. The format is the typed suffix's when it is one of
  /// `formats`, else the chosen filter's, whose suffix is then added.
  void exportDialog(const std::vector<ExportFormat>& formats);
  /// The path and format an export dialog's answer means (see exportDialog): `path` as typed,
  /// `filterFormat` the filter chosen.
  static std::pair<QString, ExportFormat> resolveExportPath(const QString& path, ExportFormat filterFormat,
                                                            const std::vector<ExportFormat>& formats);
#ifdef PIPESTUDIO_HAVE_HISTORY
  /// File > Import Trace on the calling thread (scripts, tests); importTraceDialog runs it as a
  /// background job. The history database opens on demand; the run is compared with the solve
  /// of the current settings, or with nothing (said so) when there is none.
  bool importTraces(const QStringList& files, QString* error = nullptr);
  void importTraceDialog();
#endif
  /// Plan > Run Locally… (nullptr without executor/history, or without a solve of the current
  /// settings: the status line says why).
  RunLocalDialog* openRunLocalDialog();
  /// Plan > Deploy… (non-modal, deleted on close).
  void openDeployDialog();
  /// The solve of the current settings changed (or there is none): an idle Run Locally dialog
  /// follows it.
  void solvedPlanChanged();

 private:
#ifdef PIPESTUDIO_HAVE_HISTORY
  void showImportedTrace(const TraceImportOutcome& outcome);
  QString historyPath() const;
  /// Reads recorded run `run` and shows it against `plan` (the plan that ran) in the compare view.
  void showRunAgainst(std::int64_t run, std::shared_ptr<const Plan> plan);
#endif
  /// The name a run of `plan` is recorded under ("name · schedule").
  QString runName(const Plan& plan, const QString& separator) const;
  /// Where an export dialog opens: the last export folder, else the workspace's, else home.
  QString exportFolder() const;

  QWidget* m_window;
  MainWindowInterface& m_host;
  viz::TimelineView* m_timeline;
  std::function<QString()> m_userWorkspaceName;
  std::function<QString()> m_workspacePath;
  RunLocalDialog* m_runDialog = nullptr;
#ifdef PIPESTUDIO_HAVE_HISTORY
  JobTracker m_importJob{this, 1};  ///< File > Import Trace (last member: destroyed first)
#endif
};

}  // namespace pipestudio::gui
