#pragma once
// The workstation window (DESIGN.md §7): timeline and compare view in the centre, description
// editors, solver panel and metrics as docks, exports, recent files, settings.

#include <memory>

#include <QMainWindow>
#include <QStringList>

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

namespace pipestudio::viz {
class TimelineView;
class CompareView;
class MetricsModel;
class LayerTableModel;
class ComponentTableModel;
class ClusterTableModel;
}  // namespace pipestudio::viz

namespace pipestudio::gui {

class SolveController;
class HistoryDock;

/// Solver parameter widgets; the window reads them into a PlanConfig.
struct SolverPanel {
  QComboBox* schedule = nullptr;
  QSpinBox* devices = nullptr;
  QSpinBox* microbatches = nullptr;
  QSpinBox* chunks = nullptr;
  QComboBox* partition = nullptr;
  QComboBox* fill = nullptr;
  QLineEdit* memoryLimit = nullptr;
  QCheckBox* autoSolve = nullptr;
  QPushButton* solve = nullptr;
  QPushButton* cancel = nullptr;
  QProgressBar* progress = nullptr;
  QLabel* message = nullptr;
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Opens a workspace, model, cluster, plan or trace file. Errors go to the status bar and a
  /// dialog unless `quiet` (tests); returns false on failure with the message in `error`.
  bool openFile(const QString& path, QString* error = nullptr, bool quiet = false);
  /// Opens the bundled default workspace (from the resources compiled into the binary).
  bool openDefaultWorkspace();
  /// Opens the last workspace of the previous session, else the bundled default.
  void openStartupWorkspace();
  void setWorkspace(const Workspace& workspace, const QString& path);
  bool saveWorkspaceTo(const QString& path, QString* error = nullptr);
  /// Export by suffix: .png/.svg/.pdf (timeline image), .json (Chrome trace), .csv (schedule),
  /// .sh (Megatron-LM arguments), .toml (torchtitan [parallelism] with the schedule CSV beside it).
  bool exportTo(const QString& path, QString* error = nullptr);
#ifdef PIPESTUDIO_HAVE_HISTORY
  /// File > Import Trace: the files as one run (one rank each) into the history dock's database,
  /// aligned with the current plan when there is one; a run aligned op by op is drawn under the
  /// plan in the compare view.
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
  SolveController* solveController() const { return m_solver; }
  QUndoStack* undoStack() const { return m_undo; }
  const SolverPanel& solverPanel() const { return m_panel; }
  QTabWidget* centralTabs() const { return m_tabs; }
  QTableView* layerView() const { return m_layerView; }
  QString workspacePath() const { return m_workspacePath; }
  QString statusText() const;
  /// The history browser, or nullptr in builds without core/history.
  HistoryDock* historyDock() const { return m_history; }
  /// Plan > Deploy… (nullptr in builds without core/remote); enabled while a plan is shown.
  QAction* deployAction() const { return m_deployAction; }
  /// Opens the deploy dialog for the plan on screen (non-modal, deleted on close).
  void openDeployDialog();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildActions();
  QWidget* buildSolverPanel();
  void onParametersChanged();
  void onSolved(std::shared_ptr<const Plan> plan, double elapsedMs);
  void onSolveFailed(const QString& message);
  void showPlan(std::shared_ptr<const Plan> plan);
  void updateMetricsSummary();
  void setPanelFromConfig(const PlanConfig& config);
  void addRecentFile(const QString& path);
  void rebuildRecentMenu();
  void updateTitle();
  void setStatus(const QString& text, bool error = false);
  void openDialog();
  void saveDialog(bool saveAs);
  void exportDialog(const QString& filter, const QString& suffix);
#ifdef PIPESTUDIO_HAVE_HISTORY
  void importTraceDialog();
#endif

  viz::TimelineView* m_timeline = nullptr;
  viz::CompareView* m_compare = nullptr;
  QTabWidget* m_tabs = nullptr;
  viz::LayerTableModel* m_layers = nullptr;
  viz::ComponentTableModel* m_components = nullptr;
  viz::ClusterTableModel* m_cluster = nullptr;
  viz::MetricsModel* m_metrics = nullptr;
  QTableView* m_layerView = nullptr;
  QLabel* m_metricsSummary = nullptr;
  QLabel* m_statusLabel = nullptr;
  QLabel* m_hoverLabel = nullptr;
  QProgressBar* m_statusProgress = nullptr;
  QUndoStack* m_undo = nullptr;
  SolveController* m_solver = nullptr;
  HistoryDock* m_history = nullptr;
  QAction* m_deployAction = nullptr;
  SolverPanel m_panel;
  QMenu* m_recentMenu = nullptr;
  QString m_workspacePath;
  QString m_workspaceName;
  std::shared_ptr<const Plan> m_plan;
  std::shared_ptr<const Plan> m_baseline;
  bool m_loading = false;  ///< setting widgets from a document: no auto re-solve
};

/// Applies a dark or light Fusion palette: `theme` is "dark", "light" or "system" (GTK_THEME,
/// the platform palette).
void applyTheme(const QString& theme);

}  // namespace pipestudio::gui
