#pragma once
// The workstation window (DESIGN.md §7, issue 16): timeline and compare view in the centre,
// description editors, solver panel, metrics, selection and history as docks that shrink or
// tab; exports, recent files, the last session restored on start.
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

#include "JobTracker.hpp"
#include "SolveDiagnosis.hpp"
#include "Workspace.hpp"
#include "pipestudio/planner/Planner.hpp"

class QComboBox;
class QSpinBox;
class QLineEdit;
class QPushButton;
class QProgressBar;
class QLabel;
class QCheckBox;
class QTabWidget;
class QTableView;
class QUndoStack;
class QMenu;
class QAction;
class QDockWidget;
class QDialog;

namespace pipestudio::viz {
class TimelineView;
class CompareView;
class MetricsModel;
class LayerTableModel;
class ComponentTableModel;
class ClusterTableModel;
class SpecTableModel;
class SelectionPanel;
class MemoryBreakdownView;
}  // namespace pipestudio::viz

namespace pipestudio::gui {

class SolveController;
class HistoryDock;
class RunLocalDialog;

/// Solver parameter widgets; the window reads them into a PlanConfig (one field per PlanConfig
/// member, the same names GuiText.cpp maps the CLI's flags to).
struct SolverPanel {
  QComboBox* schedule = nullptr;
  QSpinBox* devices = nullptr;
  QSpinBox* microbatches = nullptr;
  QSpinBox* chunks = nullptr;
  QComboBox* partition = nullptr;
  QComboBox* fill = nullptr;
  QLineEdit* memoryLimit = nullptr;
  // Hybrid parallelism (issue 13): PlanConfig::parallel, globalBatch, microBatchSize, optimizerSync.
  QSpinBox* tp = nullptr;
  QSpinBox* cp = nullptr;
  QSpinBox* ep = nullptr;
  QSpinBox* dp = nullptr;
  QCheckBox* sequenceParallel = nullptr;
  QComboBox* recompute = nullptr;
  QComboBox* zero = nullptr;
  QSpinBox* globalBatch = nullptr;     ///< 0: off (the microbatch count is given directly)
  QSpinBox* microBatchSize = nullptr;  ///< 0: the model's samples per microbatch
  QComboBox* optimizerSync = nullptr;
  QCheckBox* autoSolve = nullptr;
  QPushButton* solve = nullptr;
  QPushButton* cancel = nullptr;
  QProgressBar* progress = nullptr;
  QLabel* message = nullptr;  ///< one line; the whole message behind `details`
  QPushButton* details = nullptr;
};

struct TraceImportOutcome;  // File > Import Trace

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Opens a workspace, model, cluster, plan or trace file. Errors go to the status bar and a
  /// dialog unless `quiet` (tests); returns false on failure with the message in `error`.
  bool openFile(const QString& path, QString* error = nullptr, bool quiet = false);
  /// A file named on the command line or by a file manager: on failure the error dialog shows
  /// (non-modal) and the window stays empty, saying so — never a silent default workspace.
  bool openFromCommandLine(const QString& path);
  /// The error dialog of the last failed openFromCommandLine (nullptr when none is open).
  QMessageBox* openErrorBox() const { return m_openErrorBox; }
  /// Opens the bundled default workspace (from the resources compiled into the binary).
  bool openDefaultWorkspace();
  /// Restores the last session (workspace with its plan, unsaved edits when the user kept
  /// them), else the last saved workspace, else the bundled default.
  void openStartupWorkspace();
  void setWorkspace(const Workspace& workspace, const QString& path);
  bool saveWorkspaceTo(const QString& path, QString* error = nullptr);
  /// Export by suffix: .png/.svg/.pdf (timeline image with legend and title), .plan.json (the
  /// plan document), .json (Chrome trace), .csv (schedule), .sh (Megatron-LM arguments), .toml
  /// (torchtitan [parallelism] with the schedule CSV beside it).
  bool exportTo(const QString& path, QString* error = nullptr);
  /// File > Export > Plan JSON.
  bool exportPlanJson(const QString& path, QString* error = nullptr);
#ifdef PIPESTUDIO_HAVE_HISTORY
  /// File > Import Trace: the files as one run (one rank each) into the history dock's database,
  /// aligned with the current plan when there is one; a run aligned op by op is drawn under the
  /// plan in the compare view.
  /// Runs on the calling thread (scripts, tests); the menu's dialog runs it as a background job.
  bool importTraces(const QStringList& files, QString* error = nullptr);
#endif

  /// The solve the panel and editors describe now.
  PlanRequest currentRequest() const;
  void solveNow();
  void pinBaseline();

  std::shared_ptr<const Plan> currentPlan() const { return m_plan; }
  std::shared_ptr<const Plan> baselinePlan() const { return m_baseline; }
  viz::TimelineView* timelineView() const { return m_timeline; }
  viz::CompareView* compareView() const { return m_compare; }
  viz::LayerTableModel* layerModel() const { return m_layers; }
  viz::ComponentTableModel* componentModel() const { return m_components; }
  viz::ClusterTableModel* clusterModel() const { return m_cluster; }
  viz::MetricsModel* metricsModel() const { return m_metrics; }
  viz::SelectionPanel* selectionPanel() const { return m_selection; }
  viz::MemoryBreakdownView* memoryBreakdown() const { return m_memoryBreakdown; }
  SolveController* solveController() const { return m_solver; }
  QUndoStack* undoStack() const { return m_undo; }
  const SolverPanel& solverPanel() const { return m_panel; }
  QTabWidget* centralTabs() const { return m_tabs; }
  QTableView* layerView() const { return m_layerView; }
  QLabel* metricsSummary() const { return m_metricsSummary; }
  QString workspacePath() const { return m_workspacePath; }
  QString statusText() const;
  /// Unsaved changes since the last open or save.
  bool isModified() const { return m_dirty; }
  /// The history browser, or nullptr in builds without core/history.
  HistoryDock* historyDock() const { return m_history; }
  /// Plan > Deploy… (nullptr in builds without core/remote); enabled while a plan is shown.
  QAction* deployAction() const { return m_deployAction; }
  /// Plan > Run Locally… (nullptr in builds without the executor or history).
  QAction* runLocallyAction() const { return m_runAction; }
  /// Opens the deploy dialog for the plan on screen (non-modal, deleted on close).
  void openDeployDialog();
  /// Opens the Run Locally dialog for the plan on screen (nullptr without executor/history).
  RunLocalDialog* openRunLocalDialog();

  /// The last failed solve: its message (in the panel's field names) and, for plans that do
  /// not fit, the per-device diagnosis.
  QString lastFailure() const { return m_failure; }
  std::shared_ptr<const MemoryDiagnosis> lastDiagnosis() const { return m_diagnosis; }
  /// Opens the Details… dialog of the last failure (non-modal; returned for tests).
  QDialog* showFailureDetails();
  /// Moves the focus to the first editor cell marked invalid; false when there is none.
  bool focusFirstInvalidCell();
  /// Where the last session is kept (a workspace document with its plan).
  static QString sessionFilePath();
  /// What closing asks when there are unsaved changes (tests answer without a dialog).
  void setUnsavedChangesHandler(std::function<QMessageBox::StandardButton()> handler) {
    m_askUnsaved = std::move(handler);
  }
  /// Help > Keyboard and Mouse: every shortcut and gesture, and the legend (HTML).
  static QString shortcutsHtml();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildDocks();
  void buildActions();
  QWidget* buildSolverPanel();
  void onParametersChanged();
  void onPartitionChanged();
  void updateDerivedFields();
  void onSolved(std::shared_ptr<const Plan> plan, double elapsedMs);
  void onSolveFailed(const QString& message, std::shared_ptr<const MemoryDiagnosis> diagnosis);
  void showPlan(std::shared_ptr<const Plan> plan);
  void showMeasuredAgainstPlan(std::shared_ptr<const Plan> plan, std::shared_ptr<const Plan> measured,
                               const QString& title);
  void markStale(const QString& why, bool dim = true);
  void updateMetricsSummary();
  void setPanelFromConfig(const PlanConfig& config);
  /// The panel's one-line message (the whole text as tooltip); `details` shows Details….
  void setPanelMessage(const QString& text, bool error, bool details);
  void addRecentFile(const QString& path);
  void rebuildRecentMenu();
  void markModified();
  void setClean();
  void updateTitle();
  void setStatus(const QString& text, bool error = false);
  void openDialog();
  bool saveDialog(bool saveAs);
  void exportDialog(const QString& filter, const QString& suffix);
#ifdef PIPESTUDIO_HAVE_HISTORY
  void importTraceDialog();
  void showImportedTrace(const TraceImportOutcome& outcome);
#endif
  void writeSession(bool discardEdits);
  void ensureHistoryOpen();
  void showHelp();

  viz::TimelineView* m_timeline = nullptr;
  viz::CompareView* m_compare = nullptr;
  QTabWidget* m_tabs = nullptr;
  viz::LayerTableModel* m_layers = nullptr;
  viz::ComponentTableModel* m_components = nullptr;
  viz::ClusterTableModel* m_cluster = nullptr;
  viz::MetricsModel* m_metrics = nullptr;
  viz::SelectionPanel* m_selection = nullptr;
  viz::MemoryBreakdownView* m_memoryBreakdown = nullptr;
  QTableView* m_layerView = nullptr;
  QTableView* m_componentView = nullptr;
  QTableView* m_clusterView = nullptr;
  QTabWidget* m_modelTabs = nullptr;
  QDockWidget* m_modelDock = nullptr;
  QDockWidget* m_clusterDock = nullptr;
  QLabel* m_metricsSummary = nullptr;
  QLabel* m_statusLabel = nullptr;
  QLabel* m_hoverLabel = nullptr;
  QProgressBar* m_statusProgress = nullptr;
  QUndoStack* m_undo = nullptr;
  SolveController* m_solver = nullptr;
  HistoryDock* m_history = nullptr;
  RunLocalDialog* m_runDialog = nullptr;
  QAction* m_deployAction = nullptr;
  QAction* m_runAction = nullptr;
  QMessageBox* m_openErrorBox = nullptr;
  SolverPanel m_panel;
  QMenu* m_recentMenu = nullptr;
  QString m_workspacePath;
  QString m_workspaceName;
  QString m_explicitSchedule;  ///< the schedule chosen before DiffusionPipe took over the box
  QString m_failure;
  std::shared_ptr<const MemoryDiagnosis> m_diagnosis;
  std::function<QMessageBox::StandardButton()> m_askUnsaved;
  std::shared_ptr<const Plan> m_plan;
  std::shared_ptr<const Plan> m_baseline;
  bool m_loading = false;  ///< setting widgets from a document: no auto re-solve
  bool m_dirty = false;
#ifdef PIPESTUDIO_HAVE_HISTORY
  JobTracker m_importJob{this, 1};  ///< File > Import Trace (last member: destroyed first)
#endif
};

/// Applies a dark or light Fusion palette: `theme` is "dark", "light" or "system" (GTK_THEME,
/// the platform palette).
void applyTheme(const QString& theme);

}  // namespace pipestudio::gui
