#pragma once
// The window's docks (docs/gui.md) and what they hold: the model and cluster editors, the
// solver panel, metrics, selection, the history browser and the configurator. Each dock is built and wired to the
// window (through MainWindowInterface) here, so adding a dock touches this file and the dock's
// own widget; the window only places the central view and reacts to the signals below.

#include <QList>
#include <QObject>
#include <QString>
#include <optional>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"

class QAction;
class QLabel;
class QDockWidget;
class QMainWindow;
class QTabWidget;
class QTableView;
class QUndoStack;

namespace pipestudio::viz {
class TimelineView;
class LayerTableModel;
class ComponentTableModel;
class ClusterTableModel;
class SpecTableModel;
class SelectionPanel;
}  // namespace pipestudio::viz

namespace pipestudio::gui {

class MainWindowInterface;
class SolverPanel;
class MetricsPanel;
class HistoryDock;
class ConfigureDock;

class Docks : public QObject {
  Q_OBJECT
 public:
  /// Builds every dock into `window` (the editors and the panel edit through `undo`).
  Docks(QMainWindow* window, MainWindowInterface& host, QUndoStack* undo, viz::TimelineView* timeline);

  viz::LayerTableModel* layers() const { return m_layers; }
  viz::ComponentTableModel* components() const { return m_components; }
  viz::ClusterTableModel* cluster() const { return m_cluster; }
  QTableView* layerView() const { return m_layerView; }
  SolverPanel* solverPanel() const { return m_panel; }
  MetricsPanel* metrics() const { return m_metrics; }
  viz::SelectionPanel* selection() const { return m_selection; }
  /// nullptr in builds without core/history.
  HistoryDock* history() const { return m_history; }
  ConfigureDock* configure() const { return m_configure; }
  /// Show/hide actions of every dock, for the View menu.
  QList<QAction*> toggleActions() const;

  /// The model and cluster in the editors; setting them is not an edit (no inputsEdited). A
  /// model or cluster other than the one searched clears the Configure dock's results.
  ModelSpec modelSpec() const;
  ClusterSpec clusterSpec() const;
  void setModelSpec(const ModelSpec& model);
  void setClusterSpec(const ClusterSpec& cluster);
  /// How the editors' model and cluster differ from the bundled files of their names (empty:
  /// they do not): the Model and Cluster docks' titles say so, a line above each table says how,
  /// with a button that loads the bundled file instead (bundledFileRequested).
  void setBundledNotes(const QString& model, const QString& cluster);
  /// The line above the cluster table (nullptr-safe for tests: never null).
  QLabel* clusterNote() const { return m_clusterNote; }
  /// Some editor cell blocks solving (a rejected edit or a cross-row problem).
  bool hasInvalidCell() const;
  /// Shows and focuses the first such cell; what is wrong there ("Layers row 3, Forward ms: …"),
  /// or nullopt when there is none.
  std::optional<QString> focusFirstInvalidCell();

 Q_SIGNALS:
  /// The user edited the model or cluster (or undid an edit).
  void inputsEdited();
  /// An edit was rejected: an editor cell is invalid.
  void invalidCellEntered();
  /// "Use the bundled file" above the model (`model`) or cluster table.
  void bundledFileRequested(bool model);

 private:
  void buildEditors(QMainWindow* window, QUndoStack* undo);
  QDockWidget* buildSolverDock(QMainWindow* window);
  QDockWidget* buildMetricsDock(QMainWindow* window);
  QDockWidget* buildSelectionDock(QMainWindow* window, viz::TimelineView* timeline);
  QDockWidget* buildHistoryDock(QMainWindow* window);
  QDockWidget* buildConfigureDock(QMainWindow* window);

  MainWindowInterface& m_host;
  viz::ComponentTableModel* m_components = nullptr;
  viz::LayerTableModel* m_layers = nullptr;
  viz::ClusterTableModel* m_cluster = nullptr;
  QTableView* m_componentView = nullptr;
  QTableView* m_layerView = nullptr;
  QTableView* m_clusterView = nullptr;
  QTabWidget* m_modelTabs = nullptr;
  QDockWidget* m_modelDock = nullptr;
  QDockWidget* m_clusterDock = nullptr;
  QLabel* m_modelNote = nullptr;
  QLabel* m_clusterNote = nullptr;
  QWidget* m_modelNoteRow = nullptr;
  QWidget* m_clusterNoteRow = nullptr;
  SolverPanel* m_panel = nullptr;
  MetricsPanel* m_metrics = nullptr;
  viz::SelectionPanel* m_selection = nullptr;
  HistoryDock* m_history = nullptr;
  ConfigureDock* m_configure = nullptr;
  QList<QDockWidget*> m_docks;
  bool m_syncing = false;  ///< setting specs programmatically: not an edit
};

}  // namespace pipestudio::gui
