#include "Docks.hpp"

#include <QAction>
#include <QDockWidget>
#include <QFrame>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMainWindow>
#include <QPushButton>
#include <QScrollArea>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <array>
#include <functional>
#include <initializer_list>

#include "ConfigureDock.hpp"
#include "MainWindowInterface.hpp"
#include "MetricsPanel.hpp"
#include "SolverPanel.hpp"
#ifdef PIPESTUDIO_HAVE_HISTORY
#include "HistoryDock.hpp"
#endif
#include "pipestudio/viz/SelectionPanel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {

namespace {

QTableView* makeTable(QAbstractItemModel* model, QWidget* parent) {
  auto* view = new QTableView(parent);
  view->setModel(model);
  view->setAlternatingRowColors(true);
  view->setSelectionBehavior(QAbstractItemView::SelectItems);
  view->horizontalHeader()->setStretchLastSection(true);
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 6);
  view->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed |
                        QAbstractItemView::AnyKeyPressed);
  return view;
}

/// A hidden row above an editor: a note (how the table differs from a bundled file) and a
/// button that loads the file instead.
QWidget* makeNoteRow(QWidget* parent, QLabel*& label, const std::function<void()>& useBundled) {
  auto* row = new QWidget(parent);
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(4, 2, 4, 2);
  label = new QLabel(row);
  label->setWordWrap(true);
  label->setTextFormat(Qt::PlainText);
  label->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  label->setStyleSheet(QStringLiteral("QLabel { color: #8a5a00; }"));
  auto* button = new QPushButton(QStringLiteral("Use the bundled file"), row);
  button->setToolTip(QStringLiteral("Replace the workspace's copy with the file that comes with PipeStudio"));
  QObject::connect(button, &QPushButton::clicked, row, useBundled);
  layout->addWidget(label, 1);
  layout->addWidget(button, 0, Qt::AlignTop);
  row->setVisible(false);
  return row;
}

/// `table` under `note` in one widget.
QWidget* stacked(QWidget* parent, QWidget* note, QWidget* table) {
  auto* box = new QWidget(parent);
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  note->setParent(box);
  table->setParent(box);
  layout->addWidget(note);
  layout->addWidget(table, 1);
  return box;
}

QDockWidget* makeDock(QMainWindow* window, const QString& title, const QString& objectName, QWidget* content) {
  auto* dock = new QDockWidget(title, window);
  dock->setObjectName(objectName);
  if (content) dock->setWidget(content);
  return dock;
}

}  // namespace

Docks::Docks(QMainWindow* window, MainWindowInterface& host, QUndoStack* undo, viz::TimelineView* timeline)
    : QObject(window), m_host(host) {
  buildEditors(window, undo);
  QDockWidget* solverDock = buildSolverDock(window);
  m_panel->setUndoStack(undo);
  QDockWidget* metricsDock = buildMetricsDock(window);
  QDockWidget* selectionDock = buildSelectionDock(window, timeline);

  window->addDockWidget(Qt::LeftDockWidgetArea, solverDock);
  window->addDockWidget(Qt::LeftDockWidgetArea, m_modelDock);
  window->tabifyDockWidget(m_modelDock, m_clusterDock);
  m_modelDock->raise();
  window->addDockWidget(Qt::RightDockWidgetArea, metricsDock);
  window->tabifyDockWidget(metricsDock, selectionDock);
  if (QDockWidget* historyDock = buildHistoryDock(window)) {
    window->addDockWidget(Qt::RightDockWidgetArea, historyDock);
    window->tabifyDockWidget(metricsDock, historyDock);
  }
  QDockWidget* configureDock = buildConfigureDock(window);
  window->addDockWidget(Qt::RightDockWidgetArea, configureDock);
  window->tabifyDockWidget(metricsDock, configureDock);
  metricsDock->raise();
  // Side docks start narrow and may shrink further: the central view gets the space first.
  window->resizeDocks({solverDock, metricsDock}, {280, 320}, Qt::Horizontal);
  m_docks = {solverDock, m_modelDock, m_clusterDock, metricsDock, selectionDock};
  if (auto* historyDock = window->findChild<QDockWidget*>(QStringLiteral("HistoryDock"))) m_docks << historyDock;
  m_docks << configureDock;
}

QList<QAction*> Docks::toggleActions() const {
  QList<QAction*> actions;
  for (QDockWidget* dock : m_docks) actions << dock->toggleViewAction();
  return actions;
}

// --- editors --------------------------------------------------------------------------------

void Docks::buildEditors(QMainWindow* window, QUndoStack* undo) {
  m_components = new viz::ComponentTableModel(this);
  m_layers = new viz::LayerTableModel(this);
  m_cluster = new viz::ClusterTableModel(this);
  for (viz::SpecTableModel* model : std::initializer_list<viz::SpecTableModel*>{m_components, m_layers, m_cluster}) {
    model->setUndoStack(undo);
    connect(model, &viz::SpecTableModel::specEdited, this, [this, model]() {
      // The component and layer tables edit one ModelSpec: keep the other one in step.
      if (m_syncing) return;
      m_syncing = true;
      if (model == m_components) m_layers->setModelSpec(m_components->modelSpec());
      if (model == m_layers) m_components->setModelSpec(m_layers->modelSpec());
      m_syncing = false;
      Q_EMIT inputsEdited();
    });
    // A rejected edit blocks solving: say so at once.
    connect(model, &QAbstractItemModel::dataChanged, this, [this]() {
      if (!m_syncing && hasInvalidCell()) Q_EMIT invalidCellEntered();
    });
  }
  m_modelTabs = new QTabWidget(window);
  m_componentView = makeTable(m_components, m_modelTabs);
  m_modelTabs->addTab(m_componentView, QStringLiteral("Components"));
  m_layerView = makeTable(m_layers, m_modelTabs);
  m_modelTabs->addTab(m_layerView, QStringLiteral("Layers"));
  m_modelNoteRow = makeNoteRow(window, m_modelNote, [this]() { Q_EMIT bundledFileRequested(true); });
  m_modelDock = makeDock(window, QStringLiteral("Model"), QStringLiteral("ModelDock"),
                         stacked(window, m_modelNoteRow, m_modelTabs));
  m_clusterDock = makeDock(window, QStringLiteral("Cluster"), QStringLiteral("ClusterDock"), nullptr);
  m_clusterView = makeTable(m_cluster, m_clusterDock);
  m_clusterNoteRow = makeNoteRow(window, m_clusterNote, [this]() { Q_EMIT bundledFileRequested(false); });
  m_clusterNote->setObjectName(QStringLiteral("ClusterBundledNote"));
  m_clusterDock->setWidget(stacked(m_clusterDock, m_clusterNoteRow, m_clusterView));
}

ModelSpec Docks::modelSpec() const { return m_layers->modelSpec(); }
ClusterSpec Docks::clusterSpec() const { return m_cluster->clusterSpec(); }

void Docks::setModelSpec(const ModelSpec& model) {
  m_syncing = true;
  m_components->setModelSpec(model);
  m_layers->setModelSpec(model);
  m_syncing = false;
  if (m_configure) m_configure->inputsReplaced(model.name, clusterSpec().name);
}

void Docks::setClusterSpec(const ClusterSpec& cluster) {
  m_syncing = true;
  m_cluster->setClusterSpec(cluster);
  m_syncing = false;
  if (m_configure) m_configure->inputsReplaced(modelSpec().name, cluster.name);
}

void Docks::setBundledNotes(const QString& model, const QString& cluster) {
  struct Note {
    QDockWidget* dock;
    QWidget* row;
    QLabel* label;
    QString title;
    QString text;
  };
  const std::array<Note, 2> notes{
      {{m_modelDock, m_modelNoteRow, m_modelNote, QStringLiteral("Model"), model},
       {m_clusterDock, m_clusterNoteRow, m_clusterNote, QStringLiteral("Cluster"), cluster}}};
  for (const Note& n : notes) {
    n.dock->setWindowTitle(n.text.isEmpty() ? n.title : n.title + QStringLiteral(" (not the bundled file)"));
    n.label->setText(QStringLiteral("This copy ") + n.text);
    n.label->setToolTip(n.label->text());
    n.row->setVisible(!n.text.isEmpty());
  }
}

bool Docks::hasInvalidCell() const {
  return m_components->firstProblem() || m_layers->firstProblem() || m_cluster->firstProblem();
}

std::optional<QString> Docks::focusFirstInvalidCell() {
  struct Candidate {
    viz::SpecTableModel* model;
    QTableView* view;
    QDockWidget* dock;
    QString table;
  };
  const std::array<Candidate, 3> candidates{{{m_components, m_componentView, m_modelDock, QStringLiteral("Components")},
                                             {m_layers, m_layerView, m_modelDock, QStringLiteral("Layers")},
                                             {m_cluster, m_clusterView, m_clusterDock, QStringLiteral("Cluster")}}};
  for (const Candidate& c : candidates) {
    const auto problem = c.model->firstProblem();
    if (!problem) continue;
    c.dock->show();
    c.dock->raise();
    if (c.dock == m_modelDock) m_modelTabs->setCurrentWidget(c.view);
    const QModelIndex index = c.model->index(problem->row, problem->column);
    c.view->setCurrentIndex(index);
    c.view->scrollTo(index);
    c.view->setFocus();
    return QStringLiteral("%1 row %2, %3: %4")
        .arg(c.table)
        .arg(problem->row + 1)
        .arg(c.model->headerData(problem->column, Qt::Horizontal).toString(), problem->message);
  }
  return std::nullopt;
}

// --- solver, metrics, selection ---------------------------------------------------------------

QDockWidget* Docks::buildSolverDock(QMainWindow* window) {
  auto* dock = makeDock(window, QStringLiteral("Solver"), QStringLiteral("SolverDock"), nullptr);
  // The panel scrolls inside its dock: it never makes the window taller than the screen.
  auto* scroll = new QScrollArea(dock);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_panel = new SolverPanel(scroll);
  scroll->setWidget(m_panel);
  scroll->setMinimumWidth(220);
  dock->setWidget(scroll);
  return dock;
}

QDockWidget* Docks::buildMetricsDock(QMainWindow* window) {
  m_metrics = new MetricsPanel(window);
  return makeDock(window, QStringLiteral("Metrics"), QStringLiteral("MetricsDock"), m_metrics);
}

QDockWidget* Docks::buildSelectionDock(QMainWindow* window, viz::TimelineView* timeline) {
  // The clicked op and the measured range.
  m_selection = new viz::SelectionPanel(timeline, window);
  QDockWidget* dock = makeDock(window, QStringLiteral("Selection"), QStringLiteral("SelectionDock"), m_selection);
  connect(timeline, &viz::TimelineView::opSelected, dock, [dock](int op) {
    if (op >= 0) dock->raise();
  });
  connect(timeline, &viz::TimelineView::rangeMeasured, dock, [dock]() { dock->raise(); });
  return dock;
}

// --- history --------------------------------------------------------------------------------

QDockWidget* Docks::buildHistoryDock(QMainWindow* window) {
#ifdef PIPESTUDIO_HAVE_HISTORY
  // The database opens the first time the dock is shown (tests and first starts do not touch
  // the user's history until asked).
  m_history = new HistoryDock(window);
  QDockWidget* dock = makeDock(window, QStringLiteral("History"), QStringLiteral("HistoryDock"), m_history);
  connect(dock, &QDockWidget::visibilityChanged, this, [this](bool visible) {
    if (visible) m_host.ensureHistoryOpen();
  });
  connect(m_history, &HistoryDock::message, this,
          [this](const QString& text, bool error) { m_host.setStatus(text, error); });
  connect(m_history, &HistoryDock::openRunRequested, this, [this](const MeasuredRunView& run) {
    const QString title = QStringLiteral("run %1").arg(run.id);
    m_host.showMeasuredInTimeline(run.measured, title + QStringLiteral(" from the history"), run.run.activity);
    m_host.setStatus(QStringLiteral("Opened %1 from the history: %2").arg(title, run.run.label));
  });
  connect(m_history, &HistoryDock::runAgainstPlanRequested, this,
          [this](const MeasuredRunView& run) { m_host.showRunAgainstPlan(run); });
  connect(m_history, &HistoryDock::compareRequested, this,
          [this](std::shared_ptr<const Plan> a, std::shared_ptr<const Plan> b) {
            m_host.showComparison(std::move(a), std::move(b));
          });
  return dock;
#else
  (void)window;
  return nullptr;
#endif
}

// --- configurator ---------------------------------------------------------------------------

QDockWidget* Docks::buildConfigureDock(QMainWindow* window) {
  // The search runs over the model and cluster in the editors; a chosen configuration becomes
  // one undoable edit of the solver panel, which then re-solves.
  m_configure = new ConfigureDock(
      [this]() {
        PlanRequest request;
        request.model = modelSpec();
        request.cluster = clusterSpec();
        request.config = m_panel->config();
        return request;
      },
      window);
  QDockWidget* dock = makeDock(window, QStringLiteral("Configure"), QStringLiteral("ConfigureDock"), m_configure);
  connect(m_configure, &ConfigureDock::configurationChosen, this,
          [this](const PlanConfig& config) { m_panel->loadConfig(config, QStringLiteral("load configuration")); });
  connect(m_configure, &ConfigureDock::compareRequested, this,
          [this](std::shared_ptr<const Plan> a, std::shared_ptr<const Plan> b) {
            m_host.showComparison(std::move(a), std::move(b));
          });
  connect(m_configure, &ConfigureDock::message, this,
          [this](const QString& text, bool error) { m_host.setStatus(text, error); });
  return dock;
}

}  // namespace pipestudio::gui
