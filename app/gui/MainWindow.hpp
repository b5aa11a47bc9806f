#pragma once
// The workstation window (docs/gui.md, issue 16): timeline and compare view in the centre,
// description editors, solver panel, metrics, selection and history as docks that shrink or
// tab; exports, recent files, the last session restored on start.
//
// The window keeps the plan on screen and the solve loop (settings → SolveController → timeline,
// metrics); everything else is delegated (hotspot's mainwindow.cpp, Orbit's
// MainWindowInterface.h): Docks builds and wires the docks, WorkspaceController owns the
// document (file, name, unsaved changes, session), RunController exports, imports and runs,
// MenuController the menus. They reach back through MainWindowInterface.
//
// Honest state: the window title names model, cluster and file, with `*` while modified; a
// plan that no longer matches the inputs (failed or cancelled solve, another model or cluster
// opened, settings changed) stays on screen dimmed and labelled as the last good plan; errors
// read in the panel's own field names with the whole story one click away (Details…).

#include <QMainWindow>
#include <QMessageBox>
#include <QStringList>
#include <functional>
#include <memory>

#include "MainWindowInterface.hpp"
#include "SolveDiagnosis.hpp"
#include "SolverPanel.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/workspace/Workspace.hpp"

class QLabel;
class QProgressBar;
class QTabWidget;
class QTableView;
class QUndoStack;
class QAction;
class QDialog;

namespace pipestudio::viz {
class TimelineView;
class CompareView;
class MetricsModel;
class LayerTableModel;
class ComponentTableModel;
class ClusterTableModel;
class SelectionPanel;
class MemoryBreakdownView;
}  // namespace pipestudio::viz

namespace pipestudio::gui {

class SolveController;
class HistoryDock;
class RunLocalDialog;
class Docks;
class WorkspaceController;
class RunController;
enum class ExportFormat;
class MenuController;
class ConfigureDock;

class MainWindow : public QMainWindow, public MainWindowInterface {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Documents (WorkspaceController) ------------------------------------------------------------
  /// Opens a workspace, model, cluster, plan or trace file. Errors go to the status bar and a
  /// dialog unless `quiet` (tests); returns false on failure with the message in `error`.
  bool openFile(const QString& path, QString* error = nullptr, bool quiet = false);
  /// A file named on the command line or by a file manager: on failure the error dialog shows
  /// (non-modal) and the window stays empty, saying so — never a silent default workspace.
  bool openFromCommandLine(const QString& path);
  /// The error dialog of the last failed openFromCommandLine (nullptr when none is open).
  QMessageBox* openErrorBox() const;
  /// Opens the bundled default workspace (from the resources compiled into the binary).
  bool openDefaultWorkspace();
  /// Restores the last session (workspace with its plan, unsaved edits when the user kept
  /// them), else the last saved workspace, else the bundled default.
  void openStartupWorkspace();
  void setWorkspace(const Workspace& workspace, const QString& path);
  bool saveWorkspaceTo(const QString& path, QString* error = nullptr);
  QString workspacePath() const;
  /// The workspace's name (runs are recorded under it): "model on cluster" unless the user
  /// named it with renameWorkspace (an empty name lets it follow the content again).
  QString workspaceName() const;
  void renameWorkspace(const QString& name);
  /// Unsaved changes since the last open or save.
  bool isModified() const;
  /// How the workspace's model and cluster differ from the bundled files of their names (empty:
  /// they do not, or no bundled file has the name).
  QStringList bundledDifferences() const;
  /// Where the last session is kept (a workspace document with its plan).
  static QString sessionFilePath();
  /// What closing asks when there are unsaved changes (tests answer without a dialog).
  void setUnsavedChangesHandler(std::function<QMessageBox::StandardButton()> handler);

  // Exports, imports, runs (RunController) -----------------------------------------------------
  /// Export by suffix: .png/.svg/.pdf, .plan.json, .json (Chrome trace), .csv, .sh (Megatron-LM),
  /// .toml (torchtitan, with the schedule CSV beside it).
  bool exportTo(const QString& path, QString* error = nullptr);
  bool exportPlanJson(const QString& path, QString* error = nullptr);
  /// Export as `format` whatever the path's suffix (what File > Export's dialogs do).
  bool exportAs(ExportFormat format, const QString& path, QString* error = nullptr);
#ifdef PIPESTUDIO_HAVE_HISTORY
  /// File > Import Trace: the files as one run (one rank each) into the history dock's database,
  /// aligned with the current plan when there is one; a run aligned op by op is drawn under the
  /// plan in the compare view. Runs on the calling thread (the menu runs it as a background job).
  bool importTraces(const QStringList& files, QString* error = nullptr);
#endif
  /// Plan > Deploy… (nullptr in builds without core/remote); enabled while a plan is shown.
  QAction* deployAction() const;
  /// Plan > Run Locally… (nullptr in builds without the executor or history).
  QAction* runLocallyAction() const;
  void openDeployDialog();
  /// Opens the Run Locally dialog for the plan on screen (nullptr without executor/history).
  RunLocalDialog* openRunLocalDialog();

  // The solve loop ------------------------------------------------------------------------------
  /// The solve the panel and editors describe now.
  PlanRequest currentRequest() const;
  void solveNow();
  void pinBaseline();
  std::shared_ptr<const Plan> currentPlan() const override { return m_plan; }
  std::shared_ptr<const Plan> solvedPlan() const override { return m_settled; }
  std::shared_ptr<const Plan> baselinePlan() const { return m_baseline; }
  /// The last failed solve: its message (in the panel's field names) and, for plans that do
  /// not fit, the per-device diagnosis.
  QString lastFailure() const { return m_failure; }
  std::shared_ptr<const MemoryDiagnosis> lastDiagnosis() const { return m_diagnosis; }
  /// Opens the Details… dialog of the last failure (non-modal; returned for tests).
  QDialog* showFailureDetails();
  /// Moves the focus to the first editor cell marked invalid; false when there is none.
  bool focusFirstInvalidCell();

  // What is on screen ---------------------------------------------------------------------------
  viz::TimelineView* timelineView() const { return m_timeline; }
  viz::CompareView* compareView() const { return m_compare; }
  QTabWidget* centralTabs() const { return m_tabs; }
  viz::LayerTableModel* layerModel() const;
  viz::ComponentTableModel* componentModel() const;
  viz::ClusterTableModel* clusterModel() const;
  QTableView* layerView() const;
  viz::MetricsModel* metricsModel() const;
  QLabel* metricsSummary() const;
  viz::MemoryBreakdownView* memoryBreakdown() const;
  viz::SelectionPanel* selectionPanel() const;
  const SolverPanel& solverPanel() const;
  SolveController* solveController() const { return m_solver; }
  QUndoStack* undoStack() const { return m_undo; }
  /// The history browser, or nullptr in builds without core/history.
  HistoryDock* historyDock() const override;
  /// The Configure dock (the configurator's search, ranked configurations).
  ConfigureDock* configureDock() const;
  QString statusText() const;
  /// Help > Keyboard and Mouse: every shortcut and gesture, and the legend (HTML).
  static QString shortcutsHtml();

  // MainWindowInterface -------------------------------------------------------------------------
  QWidget* dialogParent() override { return this; }
  void setStatus(const QString& text, bool error = false) override;
  bool planMatchesSettings() const override;
  void showSettledPlan(std::shared_ptr<const Plan> plan) override;
  void showMeasuredInTimeline(std::shared_ptr<const Plan> measured, const QString& what,
                              std::shared_ptr<const viz::ActivityTrace> activity = nullptr) override;
  void forgetFailure() override;
  void clearPlan(const QString& why) override;
  void solveChangedInputs(const QString& why) override;
  void noteAdjustedSettings(const QString& note) override;
  void showComparison(std::shared_ptr<const Plan> baseline, std::shared_ptr<const Plan> current) override;
  void unpinBaseline(const QString& why) override;
  void showRunAgainstPlan(const MeasuredRunView& run) override;
  bool ensureHistoryOpen(QString* error = nullptr) override;

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildStatusBar();
  void connectSolver();
  void onParametersChanged();
  void updateDerivedFields();
  void onSolved(std::shared_ptr<const Plan> plan, double elapsedMs);
  void onSolveFailed(const QString& message, std::shared_ptr<const MemoryDiagnosis> diagnosis);
  /// `measured`: the plan is a measured run, not a solve (compared against the solve of the
  /// settings unless a baseline is pinned).
  void showPlan(std::shared_ptr<const Plan> plan, std::shared_ptr<const viz::ActivityTrace> activity = nullptr,
                bool measured = false);
  /// The Metrics dock's deltas and the compare view: the plan on screen against the pinned
  /// baseline (a measured run: against the solve of the settings when none is pinned).
  void showComparisons();
  /// The settings changed (or were solved: `plan`): what Run Locally and Deploy may run.
  void setSettled(std::shared_ptr<const Plan> plan);
  void markStale(const QString& why, bool dim = true);
  void setStale(const QString& label, bool dim = true);
  void clearBaseline();

  viz::TimelineView* m_timeline = nullptr;
  viz::CompareView* m_compare = nullptr;
  QTabWidget* m_tabs = nullptr;
  QLabel* m_statusLabel = nullptr;
  QLabel* m_hoverLabel = nullptr;
  QProgressBar* m_statusProgress = nullptr;
  QUndoStack* m_undo = nullptr;
  SolveController* m_solver = nullptr;
  Docks* m_docks = nullptr;
  WorkspaceController* m_workspace = nullptr;
  RunController* m_runs = nullptr;
  MenuController* m_menus = nullptr;
  QString m_adjusted;  ///< noteAdjustedSettings, said with the next solve's result
  QString m_failure;
  std::shared_ptr<const MemoryDiagnosis> m_diagnosis;
  std::shared_ptr<const Plan> m_plan;
  std::shared_ptr<const Plan> m_settled;  ///< the solve of the current settings (solvedPlan)
  std::shared_ptr<const Plan> m_baseline;
  bool m_measuredOnScreen = false;  ///< m_plan is a measured run
};

}  // namespace pipestudio::gui
