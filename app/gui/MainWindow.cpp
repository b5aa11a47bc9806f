#include "MainWindow.hpp"

#include <algorithm>
#include <cmath>

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QStatusBar>
#include <QStyleFactory>
#include <QTabWidget>
#include <QTableView>
#include <QToolBar>
#include <QUndoStack>
#include <QVBoxLayout>

#include "SolveController.hpp"
#ifdef PIPESTUDIO_HAVE_REMOTE
#include "DeployDialog.hpp"
#endif
#ifdef PIPESTUDIO_HAVE_HISTORY
#include "HistoryDock.hpp"
#include "pipestudio/history/TraceImport.hpp"
#endif
#include "pipestudio/common/Units.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {

namespace {

constexpr int kMaxRecentFiles = 8;

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

QString q(const std::string& s) { return QString::fromStdString(s); }

/// Adds an action to a menu or tool bar (QMenu's own receiver overloads are deprecated in 6.4).
template <typename Context, typename Functor>
QAction* makeAction(QWidget* container, const QString& text, const QKeySequence& shortcut, const Context* context,
                    Functor functor) {
  auto* action = new QAction(text, container);
  if (!shortcut.isEmpty()) action->setShortcut(shortcut);
  QObject::connect(action, &QAction::triggered, context, functor);
  container->addAction(action);
  return action;
}

}  // namespace

void applyTheme(const QString& theme) {
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  bool dark = theme == QStringLiteral("dark");
  if (theme != QStringLiteral("dark") && theme != QStringLiteral("light")) {
    const QString gtk = qEnvironmentVariable("GTK_THEME").toLower();
    dark = gtk.contains(QStringLiteral("dark")) ||
           QApplication::style()->standardPalette().color(QPalette::Window).lightness() < 128;
  }
  QPalette p = QApplication::style()->standardPalette();
  if (dark) {
    p.setColor(QPalette::Window, QColor(0x2d, 0x2f, 0x33));
    p.setColor(QPalette::WindowText, QColor(0xe6, 0xe6, 0xe6));
    p.setColor(QPalette::Base, QColor(0x1f, 0x21, 0x24));
    p.setColor(QPalette::AlternateBase, QColor(0x28, 0x2a, 0x2e));
    p.setColor(QPalette::ToolTipBase, QColor(0x3a, 0x3d, 0x42));
    p.setColor(QPalette::ToolTipText, QColor(0xf0, 0xf0, 0xf0));
    p.setColor(QPalette::Text, QColor(0xe6, 0xe6, 0xe6));
    p.setColor(QPalette::Button, QColor(0x35, 0x38, 0x3d));
    p.setColor(QPalette::ButtonText, QColor(0xe6, 0xe6, 0xe6));
    p.setColor(QPalette::Highlight, QColor(0x3d, 0x7e, 0xd6));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::PlaceholderText, QColor(0x90, 0x90, 0x90));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x80, 0x80, 0x80));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x80, 0x80, 0x80));
  }
  QApplication::setPalette(p);
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setObjectName(QStringLiteral("PipeStudioMainWindow"));
  setAcceptDrops(true);
  setDockNestingEnabled(true);
  m_undo = new QUndoStack(this);
  m_solver = new SolveController(this);

  m_tabs = new QTabWidget(this);
  m_timeline = new viz::TimelineView(m_tabs);
  m_compare = new viz::CompareView(m_tabs);
  m_tabs->addTab(m_timeline, QStringLiteral("Timeline"));
  m_tabs->addTab(m_compare, QStringLiteral("Compare"));
  m_tabs->setDocumentMode(true);
  setCentralWidget(m_tabs);

  // Editors.
  m_components = new viz::ComponentTableModel(this);
  m_layers = new viz::LayerTableModel(this);
  m_cluster = new viz::ClusterTableModel(this);
  for (viz::SpecTableModel* model : std::initializer_list<viz::SpecTableModel*>{m_components, m_layers, m_cluster}) {
    model->setUndoStack(m_undo);
    connect(model, &viz::SpecTableModel::specEdited, this, [this, model]() {
      // The component and layer tables edit one ModelSpec: keep the other one in step.
      if (m_loading) return;
      m_loading = true;
      if (model == m_components) m_layers->setModelSpec(m_components->modelSpec());
      if (model == m_layers) m_components->setModelSpec(m_layers->modelSpec());
      m_loading = false;
      onParametersChanged();
    });
  }
  auto* modelTabs = new QTabWidget(this);
  modelTabs->addTab(makeTable(m_components, modelTabs), QStringLiteral("Components"));
  m_layerView = makeTable(m_layers, modelTabs);
  modelTabs->addTab(m_layerView, QStringLiteral("Layers"));
  auto* modelDock = new QDockWidget(QStringLiteral("Model"), this);
  modelDock->setObjectName(QStringLiteral("ModelDock"));
  modelDock->setWidget(modelTabs);
  auto* clusterDock = new QDockWidget(QStringLiteral("Cluster"), this);
  clusterDock->setObjectName(QStringLiteral("ClusterDock"));
  clusterDock->setWidget(makeTable(m_cluster, clusterDock));
  auto* solverDock = new QDockWidget(QStringLiteral("Solver"), this);
  solverDock->setObjectName(QStringLiteral("SolverDock"));
  solverDock->setWidget(buildSolverPanel());

  // Metrics.
  m_metrics = new viz::MetricsModel(this);
  auto* metricsWidget = new QWidget(this);
  auto* metricsLayout = new QVBoxLayout(metricsWidget);
  metricsLayout->setContentsMargins(4, 4, 4, 4);
  m_metricsSummary = new QLabel(metricsWidget);
  m_metricsSummary->setTextFormat(Qt::RichText);
  m_metricsSummary->setWordWrap(true);
  m_metricsSummary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  metricsLayout->addWidget(m_metricsSummary);
  auto* metricsTable = new QTableView(metricsWidget);
  metricsTable->setModel(m_metrics);
  metricsTable->verticalHeader()->setVisible(false);
  metricsTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  metricsTable->horizontalHeader()->setStretchLastSection(true);
  metricsTable->verticalHeader()->setDefaultSectionSize(metricsTable->fontMetrics().height() + 4);
  metricsLayout->addWidget(metricsTable);
  auto* metricsDock = new QDockWidget(QStringLiteral("Metrics"), this);
  metricsDock->setObjectName(QStringLiteral("MetricsDock"));
  metricsDock->setWidget(metricsWidget);

  addDockWidget(Qt::LeftDockWidgetArea, solverDock);
  addDockWidget(Qt::LeftDockWidgetArea, modelDock);
  tabifyDockWidget(modelDock, clusterDock);
  modelDock->raise();
  addDockWidget(Qt::RightDockWidgetArea, metricsDock);
#ifdef PIPESTUDIO_HAVE_HISTORY
  // History browser: the database opens the first time the dock is shown (tests and first
  // starts do not touch the user's history until asked).
  m_history = new HistoryDock(this);
  auto* historyDock = new QDockWidget(QStringLiteral("History"), this);
  historyDock->setObjectName(QStringLiteral("HistoryDock"));
  historyDock->setWidget(m_history);
  addDockWidget(Qt::RightDockWidgetArea, historyDock);
  tabifyDockWidget(metricsDock, historyDock);
  metricsDock->raise();
  connect(historyDock, &QDockWidget::visibilityChanged, this, [this](bool visible) {
    if (visible && !m_history->store())
      m_history->openDatabase(QString::fromStdString(history::defaultHistoryPath()));
  });
  connect(m_history, &HistoryDock::message, this, [this](const QString& text, bool error) { setStatus(text, error); });
  connect(m_history, &HistoryDock::openRunRequested, this,
          [this](std::shared_ptr<const Plan> plan, const QString& title) {
            // A measured run is compared against the plan on screen (the pinned baseline).
            if (m_plan && !m_baseline) m_baseline = m_plan;
            m_solver->cancel();
            showPlan(std::move(plan));
            m_tabs->setCurrentIndex(0);
            setStatus(QStringLiteral("Opened %1 from the history").arg(title));
          });
  connect(m_history, &HistoryDock::compareRequested, this,
          [this](std::shared_ptr<const Plan> a, std::shared_ptr<const Plan> b) {
            m_compare->setPlans(std::move(a), std::move(b));
            m_tabs->setCurrentIndex(1);
          });
#endif
  resizeDocks({solverDock, metricsDock}, {300, 330}, Qt::Horizontal);

  // Status bar: what is happening, what is under the mouse, solve progress.
  m_statusLabel = new QLabel(this);
  m_hoverLabel = new QLabel(this);
  m_hoverLabel->setTextFormat(Qt::PlainText);
  m_statusProgress = new QProgressBar(this);
  m_statusProgress->setMaximumWidth(160);
  m_statusProgress->setRange(0, 100);
  m_statusProgress->setVisible(false);
  statusBar()->addWidget(m_statusLabel, 0);
  statusBar()->addWidget(m_hoverLabel, 1);
  statusBar()->addPermanentWidget(m_statusProgress);
  connect(m_timeline, &viz::TimelineView::hovered, m_hoverLabel, &QLabel::setText);

  connect(m_solver, &SolveController::started, this, [this](quint64) {
    m_panel.progress->setValue(0);
    m_panel.progress->setVisible(true);
    m_panel.cancel->setEnabled(true);
    m_statusProgress->setValue(0);
    m_statusProgress->setVisible(true);
    setStatus(QStringLiteral("Solving %1 on %2 devices…").arg(m_panel.schedule->currentText()).arg(m_panel.devices->value()));
  });
  connect(m_solver, &SolveController::progress, this, [this](double f) {
    m_panel.progress->setValue(static_cast<int>(f * 100));
    m_statusProgress->setValue(static_cast<int>(f * 100));
  });
  connect(m_solver, &SolveController::solved, this, &MainWindow::onSolved);
  connect(m_solver, &SolveController::failed, this, &MainWindow::onSolveFailed);
  connect(m_solver, &SolveController::cancelled, this, [this]() {
    m_panel.progress->setVisible(false);
    m_panel.cancel->setEnabled(false);
    m_statusProgress->setVisible(false);
    setStatus(QStringLiteral("Solve cancelled"));
  });

  buildActions();
  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  if (!settings.contains(QStringLiteral("window/geometry"))) resize(1500, 920);
  updateTitle();
  setStatus(QStringLiteral("Ready"));
}

MainWindow::~MainWindow() {
  m_solver->cancel();
  m_solver->waitForIdle(5000);
}

QWidget* MainWindow::buildSolverPanel() {
  auto* widget = new QWidget(this);
  auto* form = new QFormLayout(widget);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  m_panel.schedule = new QComboBox(widget);
  for (const std::string& name : scheduleNames()) m_panel.schedule->addItem(q(name));
  m_panel.devices = new QSpinBox(widget);
  m_panel.devices->setRange(1, 4096);
  m_panel.microbatches = new QSpinBox(widget);
  m_panel.microbatches->setRange(1, 1 << 20);
  m_panel.chunks = new QSpinBox(widget);
  m_panel.chunks->setRange(1, 64);
  m_panel.partition = new QComboBox(widget);
  m_panel.partition->addItems({QStringLiteral("uniform"), QStringLiteral("balanced"), QStringLiteral("dp"),
                               QStringLiteral("diffusionpipe")});
  m_panel.fill = new QComboBox(widget);
  m_panel.fill->addItems({QStringLiteral("none"), QStringLiteral("greedy")});
  m_panel.memoryLimit = new QLineEdit(widget);
  m_panel.memoryLimit->setPlaceholderText(QStringLiteral("GPU memory"));
  m_panel.memoryLimit->setToolTip(QStringLiteral("Per-device memory limit, e.g. 40GiB; empty = the GPU's memory"));
  m_panel.autoSolve = new QCheckBox(QStringLiteral("Re-solve on change"), widget);
  m_panel.autoSolve->setChecked(true);
  form->addRow(QStringLiteral("Schedule"), m_panel.schedule);
  form->addRow(QStringLiteral("Devices"), m_panel.devices);
  form->addRow(QStringLiteral("Microbatches"), m_panel.microbatches);
  form->addRow(QStringLiteral("Chunks / device"), m_panel.chunks);
  form->addRow(QStringLiteral("Partition"), m_panel.partition);
  form->addRow(QStringLiteral("Fill"), m_panel.fill);
  form->addRow(QStringLiteral("Memory limit"), m_panel.memoryLimit);
  form->addRow(m_panel.autoSolve);
  auto* buttons = new QHBoxLayout;
  m_panel.solve = new QPushButton(QStringLiteral("Solve"), widget);
  m_panel.solve->setDefault(true);
  m_panel.solve->setToolTip(QStringLiteral("Solve now (F5)"));
  m_panel.cancel = new QPushButton(QStringLiteral("Cancel"), widget);
  m_panel.cancel->setEnabled(false);
  buttons->addWidget(m_panel.solve);
  buttons->addWidget(m_panel.cancel);
  form->addRow(buttons);
  m_panel.progress = new QProgressBar(widget);
  m_panel.progress->setRange(0, 100);
  m_panel.progress->setVisible(false);
  form->addRow(m_panel.progress);
  m_panel.message = new QLabel(widget);
  m_panel.message->setObjectName(QStringLiteral("SolverMessage"));
  m_panel.message->setWordWrap(true);
  m_panel.message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  form->addRow(m_panel.message);

  connect(m_panel.solve, &QPushButton::clicked, this, &MainWindow::solveNow);
  connect(m_panel.cancel, &QPushButton::clicked, m_solver, &SolveController::cancel);
  for (QComboBox* combo : {m_panel.schedule, m_panel.partition, m_panel.fill})
    connect(combo, &QComboBox::currentTextChanged, this, &MainWindow::onParametersChanged);
  for (QSpinBox* spin : {m_panel.devices, m_panel.microbatches, m_panel.chunks})
    connect(spin, &QSpinBox::valueChanged, this, &MainWindow::onParametersChanged);
  connect(m_panel.memoryLimit, &QLineEdit::editingFinished, this, &MainWindow::onParametersChanged);
  return widget;
}

void MainWindow::buildActions() {
  QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
  makeAction(file, QStringLiteral("&Open…"), QKeySequence::Open, this, &MainWindow::openDialog);
  m_recentMenu = file->addMenu(QStringLiteral("Open &Recent"));
  makeAction(file, QStringLiteral("Open &Default Workspace"), QKeySequence(), this, [this]() { openDefaultWorkspace(); });
  file->addSeparator();
  makeAction(file, QStringLiteral("&Save Workspace"), QKeySequence::Save, this, [this]() { saveDialog(false); });
  makeAction(file, QStringLiteral("Save Workspace &As…"), QKeySequence::SaveAs, this, [this]() { saveDialog(true); });
  file->addSeparator();
  QMenu* exportMenu = file->addMenu(QStringLiteral("&Export"));
  makeAction(exportMenu, QStringLiteral("Timeline as &PNG…"), QKeySequence(Qt::CTRL | Qt::Key_E), this,
                        [this]() { exportDialog(QStringLiteral("PNG image (*.png)"), QStringLiteral(".png")); });
  makeAction(exportMenu, QStringLiteral("Timeline as &SVG…"), QKeySequence(), this,
                        [this]() { exportDialog(QStringLiteral("SVG image (*.svg)"), QStringLiteral(".svg")); });
  makeAction(exportMenu, QStringLiteral("Timeline as P&DF…"), QKeySequence(), this,
                        [this]() { exportDialog(QStringLiteral("PDF document (*.pdf)"), QStringLiteral(".pdf")); });
  makeAction(exportMenu, QStringLiteral("&Chrome Trace (Perfetto)…"), QKeySequence(), this,
                        [this]() { exportDialog(QStringLiteral("Chrome trace (*.json)"), QStringLiteral(".json")); });
  makeAction(exportMenu, QStringLiteral("Schedule C&SV…"), QKeySequence(), this,
                        [this]() { exportDialog(QStringLiteral("Schedule CSV (*.csv)"), QStringLiteral(".csv")); });
  makeAction(exportMenu, QStringLiteral("&Megatron-LM Arguments…"), QKeySequence(), this,
             [this]() { exportDialog(QStringLiteral("Megatron-LM arguments (*.sh)"), QStringLiteral(".sh")); });
  makeAction(exportMenu, QStringLiteral("&torchtitan Config…"), QKeySequence(), this,
             [this]() { exportDialog(QStringLiteral("torchtitan TOML (*.toml)"), QStringLiteral(".toml")); });
#ifdef PIPESTUDIO_HAVE_HISTORY
  makeAction(file, QStringLiteral("&Import Trace…"), QKeySequence(), this, [this]() { importTraceDialog(); });
#endif
  file->addSeparator();
  makeAction(file, QStringLiteral("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* edit = menuBar()->addMenu(QStringLiteral("&Edit"));
  QAction* undo = m_undo->createUndoAction(this, QStringLiteral("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  QAction* redo = m_undo->createRedoAction(this, QStringLiteral("&Redo"));
  redo->setShortcut(QKeySequence::Redo);
  edit->addAction(undo);
  edit->addAction(redo);

  QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
  makeAction(view, QStringLiteral("&Fit to View"), QKeySequence(Qt::CTRL | Qt::Key_0), m_timeline,
                  &viz::TimelineView::fitToView);
  makeAction(view, QStringLiteral("Zoom &In"), QKeySequence::ZoomIn, this, [this]() { m_timeline->zoom(0.7); });
  makeAction(view, QStringLiteral("Zoom &Out"), QKeySequence::ZoomOut, this, [this]() { m_timeline->zoom(1 / 0.7); });
  QAction* critical = view->addAction(QStringLiteral("&Critical Path"));
  critical->setCheckable(true);
  critical->setChecked(true);
  critical->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_K));
  connect(critical, &QAction::toggled, m_timeline, &viz::TimelineView::setShowCriticalPath);
  QAction* memory = view->addAction(QStringLiteral("&Memory Plot"));
  memory->setCheckable(true);
  memory->setChecked(true);
  memory->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_M));
  connect(memory, &QAction::toggled, m_timeline, &viz::TimelineView::setMemoryVisible);
  view->addSeparator();
  makeAction(view, QStringLiteral("&Timeline"), QKeySequence(Qt::CTRL | Qt::Key_1), this,
                  [this]() { m_tabs->setCurrentIndex(0); });
  makeAction(view, QStringLiteral("Co&mpare"), QKeySequence(Qt::CTRL | Qt::Key_2), this,
                  [this]() { m_tabs->setCurrentIndex(1); });
  view->addSeparator();
  QMenu* theme = view->addMenu(QStringLiteral("T&heme"));
  for (const QString& name : {QStringLiteral("system"), QStringLiteral("light"), QStringLiteral("dark")}) {
    makeAction(theme, name, QKeySequence(), this, [name]() {
      QSettings().setValue(QStringLiteral("ui/theme"), name);
      applyTheme(name);
    });
  }
  view->addSeparator();
  for (QDockWidget* dock : findChildren<QDockWidget*>()) view->addAction(dock->toggleViewAction());

  QMenu* plan = menuBar()->addMenu(QStringLiteral("&Plan"));
  makeAction(plan, QStringLiteral("&Solve"), QKeySequence(Qt::Key_F5), this, &MainWindow::solveNow);
  makeAction(plan, QStringLiteral("&Cancel Solve"), QKeySequence(Qt::SHIFT | Qt::Key_Escape), m_solver,
                  &SolveController::cancel);
  makeAction(plan, QStringLiteral("&Pin as Baseline"), QKeySequence(Qt::CTRL | Qt::Key_B), this,
                  &MainWindow::pinBaseline);
  makeAction(plan, QStringLiteral("C&lear Baseline"), QKeySequence(), this, [this]() {
    m_baseline.reset();
    m_compare->setPlans(nullptr, m_plan);
    updateMetricsSummary();
  });
#ifdef PIPESTUDIO_HAVE_REMOTE
  plan->addSeparator();
  m_deployAction = makeAction(plan, QStringLiteral("&Deploy…"), QKeySequence(Qt::CTRL | Qt::Key_D), this,
                              &MainWindow::openDeployDialog);
  m_deployAction->setEnabled(m_plan != nullptr);
#endif

  auto* tools = addToolBar(QStringLiteral("Main"));
  tools->setObjectName(QStringLiteral("MainToolBar"));
  tools->setMovable(false);
  makeAction(tools, QStringLiteral("Open"), QKeySequence(), this, &MainWindow::openDialog);
  makeAction(tools, QStringLiteral("Save"), QKeySequence(), this, [this]() { saveDialog(false); });
  tools->addSeparator();
  makeAction(tools, QStringLiteral("Solve"), QKeySequence(), this, &MainWindow::solveNow);
  makeAction(tools, QStringLiteral("Fit"), QKeySequence(), m_timeline, &viz::TimelineView::fitToView);
  makeAction(tools, QStringLiteral("Pin baseline"), QKeySequence(), this, &MainWindow::pinBaseline);
  tools->addAction(critical);
  rebuildRecentMenu();
}

PlanRequest MainWindow::currentRequest() const {
  PlanRequest request;
  request.model = m_layers->modelSpec();
  request.cluster = m_cluster->clusterSpec();
  PlanConfig& c = request.config;
  c.schedule = m_panel.schedule->currentText().toStdString();
  c.devices = m_panel.devices->value();
  c.microbatches = m_panel.microbatches->value();
  c.chunksPerDevice = m_panel.chunks->value();
  c.partition = m_panel.partition->currentText().toStdString();
  c.fill = m_panel.fill->currentText().toStdString();
  const QString limit = m_panel.memoryLimit->text().trimmed();
  if (!limit.isEmpty()) {
    if (auto bytes = parseBytes(limit.toStdString()); bytes && *bytes > 0) c.memoryLimitBytes = *bytes;
  }
  return request;
}

void MainWindow::onParametersChanged() {
  if (m_loading) return;
  const QString limit = m_panel.memoryLimit->text().trimmed();
  if (!limit.isEmpty()) {
    auto bytes = parseBytes(limit.toStdString());
    if (!bytes || *bytes <= 0) {
      // Shown in place: the field turns red and says what it expects.
      m_panel.memoryLimit->setStyleSheet(QStringLiteral("QLineEdit { background: rgba(229, 57, 53, 0.35); }"));
      m_panel.memoryLimit->setToolTip(
          QStringLiteral("'%1' is not a size (expected e.g. 40GiB, 80GB or bytes)").arg(limit));
      setStatus(QStringLiteral("Memory limit '%1' is not a size (expected e.g. 40GiB)").arg(limit), true);
      return;
    }
  }
  m_panel.memoryLimit->setStyleSheet(QString());
  m_panel.memoryLimit->setToolTip(QStringLiteral("Per-device memory limit, e.g. 40GiB; empty = the GPU's memory"));
  if (m_components->hasErrors() || m_cluster->hasErrors()) {
    setStatus(QStringLiteral("Fix the cells marked red before solving"), true);
    return;
  }
  if (m_panel.autoSolve->isChecked()) m_solver->scheduleSolve(currentRequest());
}

void MainWindow::solveNow() {
  if (m_components->hasErrors() || m_cluster->hasErrors()) {
    setStatus(QStringLiteral("Fix the cells marked red before solving"), true);
    return;
  }
  m_solver->solve(currentRequest());
}

void MainWindow::onSolved(std::shared_ptr<const Plan> plan, double elapsedMs) {
  m_panel.progress->setVisible(false);
  m_panel.cancel->setEnabled(false);
  m_statusProgress->setVisible(false);
  m_panel.message->setStyleSheet(QString());
  // DiffusionPipe picks the schedule itself: say so rather than let the panel's choice stand.
  const QString chosen = q(plan->config.schedule);
  const bool picked = plan->config.partition == "diffusionpipe" && chosen != m_panel.schedule->currentText();
  m_panel.message->setText(picked ? QStringLiteral("Solved in %1; DiffusionPipe chose %2").arg(q(formatMs(elapsedMs)), chosen)
                                  : QStringLiteral("Solved in %1").arg(q(formatMs(elapsedMs))));
  showPlan(std::move(plan));
  const Metrics& m = m_metrics->metrics();
  setStatus(QStringLiteral("Solved %1: makespan %2, bubble %3 % (%4)")
                .arg(q(m_plan->config.schedule), q(formatMs(m.makespanMs)))
                .arg(m.bubbleRatio * 100, 0, 'f', 1)
                .arg(q(formatMs(elapsedMs))));
}

void MainWindow::onSolveFailed(const QString& message) {
  m_panel.progress->setVisible(false);
  m_panel.cancel->setEnabled(false);
  m_statusProgress->setVisible(false);
  m_panel.message->setStyleSheet(QStringLiteral("QLabel { color: #e53935; }"));
  m_panel.message->setText(message);
  setStatus(QStringLiteral("Solve failed: ") + message.section(QLatin1Char('\n'), 0, 0), true);
}

void MainWindow::showPlan(std::shared_ptr<const Plan> plan) {
  m_plan = std::move(plan);
  m_timeline->setPlan(m_plan, true);
  std::int64_t limit = 0;
  if (m_plan) {
    limit = m_plan->config.memoryLimitBytes.value_or(0);
    if (limit == 0 && m_plan->cluster.gpu.memoryGib > 0) limit = m_plan->cluster.gpu.memoryBytes();
  }
  m_timeline->setMemoryLimit(limit);
  m_metrics->setPlan(m_plan);
  m_compare->setPlans(m_baseline, m_plan);
  updateMetricsSummary();
  if (m_deployAction != nullptr) m_deployAction->setEnabled(m_plan != nullptr);
}

void MainWindow::openDeployDialog() {
#ifdef PIPESTUDIO_HAVE_REMOTE
  if (!m_plan) {
    setStatus(QStringLiteral("Deploy: no plan (solve first)"), true);
    return;
  }
  // The run goes into the database the history dock shows (the default one until opened).
  const QString historyPath =
      m_history->store() != nullptr ? q(m_history->store()->path()) : q(history::defaultHistoryPath());
  const QString name = m_workspaceName.isEmpty() ? q(m_plan->config.schedule)
                                                 : m_workspaceName + QLatin1Char('-') + q(m_plan->config.schedule);
  auto* dialog = new DeployDialog(m_plan, name, historyPath, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  const std::shared_ptr<const Plan> deployed = m_plan;
  connect(dialog, &DeployDialog::runRecorded, this, [this, historyPath](history::RunId run) {
    if (m_history->store() == nullptr) {
      m_history->openDatabase(historyPath);
    } else {
      m_history->refresh();
    }
    setStatus(QStringLiteral("Deployed run %1 recorded in the history").arg(run));
  });
  connect(dialog, &DeployDialog::openRunRequested, this, [this, deployed, historyPath](history::RunId run) {
    if (m_history->store() == nullptr) m_history->openDatabase(historyPath);
    auto measured = m_history->runPlan(run);
    if (!measured) {
      setStatus(QStringLiteral("Open run %1: %2").arg(run).arg(q(measured.message())), true);
      return;
    }
    // The measured run against the plan it executed (issue 8: the finished run opens in the
    // compare view against its plan).
    m_solver->cancel();
    m_baseline = deployed;
    showPlan(std::make_shared<const Plan>(std::move(*measured)));
    m_tabs->setCurrentIndex(1);
    setStatus(QStringLiteral("Opened deployed run %1 against its plan").arg(run));
  });
  dialog->show();
#else
  setStatus(QStringLiteral("Deploy: this build has no SSH support (core/remote)"), true);
#endif
}

void MainWindow::pinBaseline() {
  if (!m_plan) return;
  m_baseline = m_plan;
  m_compare->setPlans(m_baseline, m_plan);
  updateMetricsSummary();
  setStatus(QStringLiteral("Pinned %1 as baseline: later solves are compared against it").arg(q(m_plan->config.schedule)));
}

void MainWindow::updateMetricsSummary() {
  if (!m_plan) {
    m_metricsSummary->setText(QStringLiteral("<i>No plan</i>"));
    return;
  }
  const Metrics m = viz::metricsOf(*m_plan);
  std::int64_t peak = 0;
  for (const auto& d : m.devices) peak = std::max(peak, d.peakMemoryBytes);
  auto delta = [](double now, double before, bool lowerIsBetter, const QString& text) {
    if (before == 0) return QString();
    const double rel = (now - before) / std::abs(before);
    if (std::abs(rel) < 1e-9) return QStringLiteral(" <span style='color:gray'>(=)</span>");
    const bool better = lowerIsBetter ? rel < 0 : rel > 0;
    return QStringLiteral(" <span style='color:%1'>(%2%3)</span>")
        .arg(better ? QStringLiteral("#2e9d4a") : QStringLiteral("#d03a3a"), rel > 0 ? QStringLiteral("+") : QString(),
             text.isEmpty() ? QStringLiteral("%1 %").arg(rel * 100, 0, 'f', 1) : text);
  };
  Metrics b;
  std::int64_t basePeak = 0;
  if (m_baseline) {
    b = viz::metricsOf(*m_baseline);
    for (const auto& d : b.devices) basePeak = std::max(basePeak, d.peakMemoryBytes);
  }
  QString html = QStringLiteral("<table cellspacing='2'>");
  auto row = [&](const QString& name, const QString& value, const QString& d) {
    html += QStringLiteral("<tr><td>%1</td><td align='right'><b>%2</b>%3</td></tr>").arg(name, value, d);
  };
  row(QStringLiteral("Schedule"), q(m_plan->config.schedule), QString());
  row(QStringLiteral("Makespan"), q(formatMs(m.makespanMs)), m_baseline ? delta(m.makespanMs, b.makespanMs, true, {}) : QString());
  row(QStringLiteral("Bubble ratio"), QStringLiteral("%1 %").arg(m.bubbleRatio * 100, 0, 'f', 1),
      m_baseline ? delta(m.bubbleRatio, b.bubbleRatio, true,
                         QStringLiteral("%1 pp").arg((m.bubbleRatio - b.bubbleRatio) * 100, 0, 'f', 1))
                 : QString());
  row(QStringLiteral("Throughput"), QStringLiteral("%1 samples/s").arg(m.throughputSamplesPerS, 0, 'f', 1),
      m_baseline ? delta(m.throughputSamplesPerS, b.throughputSamplesPerS, false, {}) : QString());
  row(QStringLiteral("Peak memory"), q(formatBytes(static_cast<double>(peak))),
      m_baseline ? delta(static_cast<double>(peak), static_cast<double>(basePeak), true, {}) : QString());
  row(QStringLiteral("Ops"), QString::number(m_plan->ops.size()), QString());
  html += QStringLiteral("</table>");
  if (m_baseline) html += QStringLiteral("<small>Δ against the pinned baseline (%1)</small>").arg(q(m_baseline->config.schedule));
  m_metricsSummary->setText(html);
}

void MainWindow::setPanelFromConfig(const PlanConfig& c) {
  const bool wasLoading = m_loading;
  m_loading = true;
  const int scheduleIndex = m_panel.schedule->findText(q(c.schedule));
  if (scheduleIndex >= 0) m_panel.schedule->setCurrentIndex(scheduleIndex);
  else if (!c.schedule.empty()) {
    m_panel.schedule->addItem(q(c.schedule));
    m_panel.schedule->setCurrentIndex(m_panel.schedule->count() - 1);
  }
  m_panel.devices->setValue(c.devices);
  m_panel.microbatches->setValue(c.microbatches);
  m_panel.chunks->setValue(c.chunksPerDevice);
  if (m_panel.partition->findText(q(c.partition)) < 0) m_panel.partition->addItem(q(c.partition));
  m_panel.partition->setCurrentText(q(c.partition));
  if (m_panel.fill->findText(q(c.fill)) < 0) m_panel.fill->addItem(q(c.fill));
  m_panel.fill->setCurrentText(q(c.fill));
  m_panel.memoryLimit->setText(c.memoryLimitBytes ? q(formatBytes(static_cast<double>(*c.memoryLimitBytes))) : QString());
  m_loading = wasLoading;
}

void MainWindow::setWorkspace(const Workspace& ws, const QString& path) {
  m_loading = true;
  m_undo->clear();
  m_workspacePath = path;
  m_workspaceName = q(ws.name);
  m_components->setModelSpec(ws.model);
  m_layers->setModelSpec(ws.model);
  m_cluster->setClusterSpec(ws.cluster);
  setPanelFromConfig(ws.solver);
  m_loading = false;
  updateTitle();
  if (ws.plan) {
    showPlan(std::make_shared<const Plan>(*ws.plan));
    setStatus(QStringLiteral("Opened %1").arg(path));
  } else {
    m_solver->solve(currentRequest());  // opens already solved: the result arrives shortly
  }
}

bool MainWindow::openDefaultWorkspace() {
  const QString path = QStringLiteral(":/workspaces/default.pipestudio");
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly)) {
    setStatus(QStringLiteral("The bundled default workspace is missing from this build"), true);
    return false;
  }
  auto doc = parseJson(file.readAll().toStdString(), path.toStdString());
  if (!doc) {
    setStatus(q(doc.message()), true);
    return false;
  }
  auto ws = readWorkspace(*doc);
  if (!ws) {
    setStatus(q(ws.message()), true);
    return false;
  }
  setWorkspace(*ws, QString());
  return true;
}

void MainWindow::openStartupWorkspace() {
  const QString last = QSettings().value(QStringLiteral("session/lastWorkspace")).toString();
  if (!last.isEmpty() && QFileInfo::exists(last) && openFile(last, nullptr, true)) return;
  openDefaultWorkspace();
}

bool MainWindow::openFile(const QString& path, QString* error, bool quiet) {
  auto doc = openDocument(path.toStdString());
  if (!doc) {
    const QString message = q(doc.message());
    if (error) *error = message;
    setStatus(message.section(QLatin1Char('\n'), 0, 0), true);
    if (!quiet) QMessageBox::warning(this, QStringLiteral("Cannot open file"), message);
    return false;
  }
  switch (doc->kind) {
    case DocumentKind::Workspace:
      setWorkspace(*doc->workspace, path);
      QSettings().setValue(QStringLiteral("session/lastWorkspace"), QFileInfo(path).absoluteFilePath());
      break;
    case DocumentKind::Model:
      m_loading = true;
      m_components->setModelSpec(*doc->model);
      m_layers->setModelSpec(*doc->model);
      m_loading = false;
      setStatus(QStringLiteral("Model %1 loaded").arg(q(doc->model->name)));
      solveNow();
      break;
    case DocumentKind::Cluster:
      m_loading = true;
      m_cluster->setClusterSpec(*doc->cluster);
      m_loading = false;
      setStatus(QStringLiteral("Cluster %1 loaded").arg(q(doc->cluster->name)));
      solveNow();
      break;
    case DocumentKind::Plan: {
      m_loading = true;
      m_components->setModelSpec(doc->plan->model);
      m_layers->setModelSpec(doc->plan->model);
      m_cluster->setClusterSpec(doc->plan->cluster);
      setPanelFromConfig(doc->plan->config);
      m_loading = false;
      m_solver->cancel();
      showPlan(std::make_shared<const Plan>(*doc->plan));
      setStatus(QStringLiteral("Plan %1 opened").arg(path));
      break;
    }
    case DocumentKind::Trace: {
      // A measured run: shown in the timeline and compared against the current plan.
      auto measured = std::make_shared<const Plan>(*doc->plan);
      if (m_plan && m_plan->config.schedule.rfind("measured", 0) != 0) m_baseline = m_plan;
      m_solver->cancel();
      showPlan(measured);
      setStatus(QStringLiteral("Trace %1 opened (%2 op ranges)").arg(path).arg(measured->ops.size()));
      break;
    }
  }
  addRecentFile(QFileInfo(path).absoluteFilePath());
  return true;
}

bool MainWindow::saveWorkspaceTo(const QString& path, QString* error) {
  Workspace ws;
  ws.name = m_workspaceName.isEmpty() ? QFileInfo(path).completeBaseName().toStdString() : m_workspaceName.toStdString();
  ws.model = m_layers->modelSpec();
  ws.cluster = m_cluster->clusterSpec();
  ws.solver = currentRequest().config;
  if (m_plan) ws.plan = *m_plan;
  Status status = saveWorkspace(path.toStdString(), ws);
  if (!status) {
    if (error) *error = q(status.message());
    setStatus(q(status.message()), true);
    return false;
  }
  m_workspacePath = path;
  m_undo->setClean();
  QSettings().setValue(QStringLiteral("session/lastWorkspace"), QFileInfo(path).absoluteFilePath());
  addRecentFile(QFileInfo(path).absoluteFilePath());
  updateTitle();
  setStatus(QStringLiteral("Saved %1").arg(path));
  return true;
}

bool MainWindow::exportTo(const QString& path, QString* error) {
  auto fail = [&](const QString& message) {
    if (error) *error = message;
    setStatus(message, true);
    return false;
  };
  if (!m_plan) return fail(QStringLiteral("Nothing to export: solve or open a plan first"));
  const QString lower = path.toLower();
  if (lower.endsWith(QStringLiteral(".json"))) {
    ChromeTraceOptions options;
    options.title = m_plan->config.schedule;
    Status s = writeChromeTrace(path.toStdString(), *m_plan, options);
    if (!s) return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".csv"))) {
    Status s = writeScheduleCsv(path.toStdString(), *m_plan);
    if (!s) return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".sh"))) {
    auto m = megatronExport(*m_plan);
    if (!m) return fail(q("Megatron-LM cannot express this plan: " + m.message()));
    if (Status s = writeOutputFile(path.toStdString(), m->text); !s) return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".toml"))) {
    const QFileInfo info(path);
    const std::string csvPath =
        QString(info.path() + QLatin1Char('/') + info.completeBaseName() + QStringLiteral(".csv")).toStdString();
    auto t = torchtitanExport(*m_plan, csvPath);
    if (!t) return fail(q("torchtitan cannot express this plan: " + t.message()));
    if (Status s = writeOutputFile(csvPath, t->csv); !s) return fail(q(s.message()));
    if (Status s = writeOutputFile(path.toStdString(), t->toml); !s) return fail(q(s.message()));
  } else if (lower.endsWith(QStringLiteral(".png")) || lower.endsWith(QStringLiteral(".svg")) ||
             lower.endsWith(QStringLiteral(".pdf"))) {
    if (!m_timeline->exportImage(path, 1600, 900)) return fail(QStringLiteral("Could not write %1").arg(path));
  } else {
    return fail(
        QStringLiteral("%1: unknown export format (expected .png, .svg, .pdf, .json, .csv, .sh or .toml)").arg(path));
  }
  setStatus(QStringLiteral("Exported %1").arg(path));
  return true;
}

QString MainWindow::statusText() const { return m_statusLabel->text(); }

void MainWindow::setStatus(const QString& text, bool error) {
  m_statusLabel->setText(text);
  m_statusLabel->setStyleSheet(error ? QStringLiteral("QLabel { color: #e53935; }") : QString());
}

void MainWindow::updateTitle() {
  const QString name = !m_workspacePath.isEmpty() ? QFileInfo(m_workspacePath).fileName()
                                                  : (m_workspaceName.isEmpty() ? QStringLiteral("untitled") : m_workspaceName);
  setWindowTitle(QStringLiteral("%1 — PipeStudio").arg(name));
}

void MainWindow::addRecentFile(const QString& path) {
  QSettings settings;
  QStringList files = settings.value(QStringLiteral("session/recentFiles")).toStringList();
  files.removeAll(path);
  files.prepend(path);
  while (files.size() > kMaxRecentFiles) files.removeLast();
  settings.setValue(QStringLiteral("session/recentFiles"), files);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  m_recentMenu->clear();
  const QStringList files = QSettings().value(QStringLiteral("session/recentFiles")).toStringList();
  for (const QString& path : files) {
    makeAction(m_recentMenu,  QFileInfo(path).fileName(), QKeySequence(), this, [this, path]() { openFile(path); })
        ->setToolTip(path);
  }
  m_recentMenu->setEnabled(!files.isEmpty());
}

void MainWindow::openDialog() {
  const QString path = QFileDialog::getOpenFileName(
      this, QStringLiteral("Open"), QString(),
      QStringLiteral("PipeStudio documents (*.pipestudio *.json *.pstrace *.trace);;All files (*)"));
  if (!path.isEmpty()) openFile(path);
}

void MainWindow::saveDialog(bool saveAs) {
  QString path = m_workspacePath;
  if (saveAs || path.isEmpty()) {
    path = QFileDialog::getSaveFileName(this, QStringLiteral("Save Workspace"), path,
                                        QStringLiteral("PipeStudio workspace (*.pipestudio)"));
  }
  if (path.isEmpty()) return;
  if (!path.endsWith(QStringLiteral(".pipestudio"))) path += QStringLiteral(".pipestudio");
  QString error;
  if (!saveWorkspaceTo(path, &error)) QMessageBox::warning(this, QStringLiteral("Cannot save"), error);
}

#ifdef PIPESTUDIO_HAVE_HISTORY
bool MainWindow::importTraces(const QStringList& files, QString* error) {
  auto fail = [&](const QString& message) {
    if (error) *error = message;
    setStatus(message, true);
    return false;
  };
  if (!m_history || !m_history->store()) return fail(QStringLiteral("No history database is open"));
  std::vector<std::string> paths;
  for (const QString& f : files) paths.push_back(f.toStdString());
  history::TraceImportOptions options;
  if (m_plan) options.plan = m_plan.get();
  auto result = history::importTraces(*m_history->store(), paths, options);
  if (!result) return fail(q(result.message()));
  if (m_plan) {
    if (auto id = m_history->store()->addPlan(*m_plan, "workspace plan")) {
      (void)m_history->store()->linkRunToPlan(result->runId, *id);
    }
  }
  m_history->refresh();
  // The measured run drawn under the plan it executed (the compare view's lanes, one axis).
  if (m_plan && result->matchedOps > 0) {
    if (auto measured = m_history->store()->runAsPlan(result->runId, 0)) {
      m_compare->setPlans(m_plan, std::make_shared<const Plan>(std::move(*measured)));
      m_tabs->setCurrentIndex(1);
    }
  }
  setStatus(QStringLiteral("Imported run %1: %2 events, %3 ops matched to the plan")
                .arg(result->runId)
                .arg(result->events)
                .arg(result->matchedOps));
  return true;
}

void MainWindow::importTraceDialog() {
  const QStringList files = QFileDialog::getOpenFileNames(
      this, QStringLiteral("Import Trace (one file per rank)"), QString(),
      QStringLiteral("Profiler traces (*.json *.json.gz *.sqlite *.pstrace);;All files (*)"));
  if (files.isEmpty()) return;
  QString error;
  if (!importTraces(files, &error)) QMessageBox::warning(this, QStringLiteral("Import failed"), error);
}
#endif

void MainWindow::exportDialog(const QString& filter, const QString& suffix) {
  QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export"), QString(), filter);
  if (path.isEmpty()) return;
  if (!path.toLower().endsWith(suffix)) path += suffix;
  QString error;
  if (!exportTo(path, &error)) QMessageBox::warning(this, QStringLiteral("Export failed"), error);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/state"), saveState());
  m_solver->cancel();
  QMainWindow::closeEvent(event);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  for (const QUrl& url : event->mimeData()->urls()) {
    if (url.isLocalFile()) openFile(url.toLocalFile());
  }
  event->acceptProposedAction();
}

}  // namespace pipestudio::gui
