#include "MainWindow.hpp"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyleFactory>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTextBrowser>
#include <QToolBar>
#include <QUndoStack>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "GuiText.hpp"
#include "SolveController.hpp"
#ifdef PIPESTUDIO_HAVE_REMOTE
#include "DeployDialog.hpp"
#endif
#ifdef PIPESTUDIO_HAVE_HISTORY
#include "HistoryDock.hpp"
#include "pipestudio/history/TraceImport.hpp"
#endif
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
#include "RunLocalDialog.hpp"
#endif
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MemoryBreakdownView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SelectionPanel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {

namespace {

constexpr int kMaxRecentFiles = 8;
constexpr const char* kAuto = "auto";

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
QString bytes(double b) { return q(formatBytes(b)); }

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

QSpinBox* degreeSpin(QWidget* parent, int max, const QString& tip) {
  auto* spin = new QSpinBox(parent);
  spin->setRange(1, max);
  spin->setToolTip(tip);
  return spin;
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
  // The central view gets the space first: the docks give way, not the timeline.
  m_tabs->setMinimumSize(420, 300);
  setCentralWidget(m_tabs);

  buildDocks();

  // Status bar: what is happening, what is under the mouse, solve progress.
  m_statusLabel = new QLabel(this);
  m_statusLabel->setMinimumWidth(10);
  m_statusLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  m_hoverLabel = new QLabel(this);
  m_hoverLabel->setTextFormat(Qt::PlainText);
  m_hoverLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  m_statusProgress = new QProgressBar(this);
  m_statusProgress->setMaximumWidth(160);
  m_statusProgress->setRange(0, 100);
  m_statusProgress->setVisible(false);
  statusBar()->addWidget(m_statusLabel, 1);
  statusBar()->addWidget(m_hoverLabel, 1);
  statusBar()->addPermanentWidget(m_statusProgress);
  connect(m_timeline, &viz::TimelineView::hovered, m_hoverLabel, &QLabel::setText);

  connect(m_solver, &SolveController::started, this, [this](quint64) {
    m_panel.progress->setValue(0);
    m_panel.progress->setVisible(true);
    m_panel.cancel->setEnabled(true);
    m_statusProgress->setValue(0);
    m_statusProgress->setVisible(true);
    setStatus(QStringLiteral("Solving %1 on %2 devices…")
                  .arg(q(currentRequest().config.schedule))
                  .arg(m_panel.devices->value()));
    if (m_plan && !m_timeline->isStale()) markStale(QStringLiteral("solving the current settings…"), false);
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
    setPanelMessage(QStringLiteral("Solve cancelled: the plan shown is not of the current settings"), true, false);
    markStale(QStringLiteral("solve cancelled: the current settings are not solved"));
  });

  buildActions();
  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  if (!settings.contains(QStringLiteral("window/geometry"))) {
    // A first start fits the screen, whatever its size (1024×700 included).
    const QRect available = screen() ? screen()->availableGeometry() : QRect(0, 0, 1500, 920);
    resize(std::min(1500, available.width()), std::min(920, available.height()));
  }
  updateTitle();
  setStatus(QStringLiteral("Ready"));
}

MainWindow::~MainWindow() {
  m_solver->cancel();
  m_solver->waitForIdle(5000);
}

void MainWindow::buildDocks() {
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
    // A rejected edit blocks solving: say so at once.
    connect(model, &QAbstractItemModel::dataChanged, this, [this]() {
      if (!m_loading && (m_components->firstProblem() || m_layers->firstProblem() || m_cluster->firstProblem()))
        markStale(QStringLiteral("an editor cell is invalid: fix the red cell to solve"));
    });
  }
  m_modelTabs = new QTabWidget(this);
  m_componentView = makeTable(m_components, m_modelTabs);
  m_modelTabs->addTab(m_componentView, QStringLiteral("Components"));
  m_layerView = makeTable(m_layers, m_modelTabs);
  m_modelTabs->addTab(m_layerView, QStringLiteral("Layers"));
  m_modelDock = new QDockWidget(QStringLiteral("Model"), this);
  m_modelDock->setObjectName(QStringLiteral("ModelDock"));
  m_modelDock->setWidget(m_modelTabs);
  m_clusterDock = new QDockWidget(QStringLiteral("Cluster"), this);
  m_clusterDock->setObjectName(QStringLiteral("ClusterDock"));
  m_clusterView = makeTable(m_cluster, m_clusterDock);
  m_clusterDock->setWidget(m_clusterView);
  auto* solverDock = new QDockWidget(QStringLiteral("Solver"), this);
  solverDock->setObjectName(QStringLiteral("SolverDock"));
  // The panel scrolls inside its dock: it never makes the window taller than the screen.
  auto* solverScroll = new QScrollArea(solverDock);
  solverScroll->setWidgetResizable(true);
  solverScroll->setFrameShape(QFrame::NoFrame);
  solverScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  solverScroll->setWidget(buildSolverPanel());
  solverScroll->setMinimumWidth(220);
  solverDock->setWidget(solverScroll);

  // Metrics: the summary, the per-device memory breakdown, the per-device table.
  m_metrics = new viz::MetricsModel(this);
  auto* metricsSplit = new QSplitter(Qt::Vertical, this);
  auto* summaryScroll = new QScrollArea(metricsSplit);
  summaryScroll->setWidgetResizable(true);
  summaryScroll->setFrameShape(QFrame::NoFrame);
  m_metricsSummary = new QLabel(summaryScroll);
  m_metricsSummary->setObjectName(QStringLiteral("MetricsSummary"));
  m_metricsSummary->setTextFormat(Qt::RichText);
  m_metricsSummary->setWordWrap(true);
  m_metricsSummary->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  m_metricsSummary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_metricsSummary->setMargin(4);
  summaryScroll->setWidget(m_metricsSummary);
  auto* metricsTabs = new QTabWidget(metricsSplit);
  m_memoryBreakdown = new viz::MemoryBreakdownView(metricsTabs);
  metricsTabs->addTab(m_memoryBreakdown, QStringLiteral("Memory per GPU"));
  auto* metricsTable = new QTableView(metricsTabs);
  metricsTable->setModel(m_metrics);
  metricsTable->verticalHeader()->setVisible(false);
  metricsTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  metricsTable->horizontalHeader()->setStretchLastSection(true);
  metricsTable->verticalHeader()->setDefaultSectionSize(metricsTable->fontMetrics().height() + 4);
  metricsTabs->addTab(metricsTable, QStringLiteral("Devices"));
  metricsSplit->addWidget(summaryScroll);
  metricsSplit->addWidget(metricsTabs);
  metricsSplit->setStretchFactor(0, 1);
  metricsSplit->setStretchFactor(1, 1);
  metricsSplit->setSizes({1000, 1000});
  auto* metricsDock = new QDockWidget(QStringLiteral("Metrics"), this);
  metricsDock->setObjectName(QStringLiteral("MetricsDock"));
  metricsDock->setWidget(metricsSplit);

  // Selection: the clicked op and the measured range.
  m_selection = new viz::SelectionPanel(m_timeline, this);
  auto* selectionDock = new QDockWidget(QStringLiteral("Selection"), this);
  selectionDock->setObjectName(QStringLiteral("SelectionDock"));
  selectionDock->setWidget(m_selection);
  connect(m_timeline, &viz::TimelineView::opSelected, this, [selectionDock](int op) {
    if (op >= 0) selectionDock->raise();
  });
  connect(m_timeline, &viz::TimelineView::rangeMeasured, this, [selectionDock]() { selectionDock->raise(); });

  addDockWidget(Qt::LeftDockWidgetArea, solverDock);
  addDockWidget(Qt::LeftDockWidgetArea, m_modelDock);
  tabifyDockWidget(m_modelDock, m_clusterDock);
  m_modelDock->raise();
  addDockWidget(Qt::RightDockWidgetArea, metricsDock);
  tabifyDockWidget(metricsDock, selectionDock);
#ifdef PIPESTUDIO_HAVE_HISTORY
  // History browser: the database opens the first time the dock is shown (tests and first
  // starts do not touch the user's history until asked).
  m_history = new HistoryDock(this);
  auto* historyDock = new QDockWidget(QStringLiteral("History"), this);
  historyDock->setObjectName(QStringLiteral("HistoryDock"));
  historyDock->setWidget(m_history);
  addDockWidget(Qt::RightDockWidgetArea, historyDock);
  tabifyDockWidget(metricsDock, historyDock);
  connect(historyDock, &QDockWidget::visibilityChanged, this, [this](bool visible) {
    if (visible) ensureHistoryOpen();
  });
  connect(m_history, &HistoryDock::message, this, [this](const QString& text, bool error) { setStatus(text, error); });
  connect(
      m_history, &HistoryDock::openRunRequested, this, [this](std::shared_ptr<const Plan> plan, const QString& title) {
        // A measured run in the timeline: compared against the plan on screen (the pinned
        // baseline), and labelled so nobody takes it for a solve of the panel's settings.
        if (m_plan && !m_baseline) m_baseline = m_plan;
        m_solver->cancel();
        showPlan(std::move(plan));
        markStale(QStringLiteral("showing %1 from the history, not a solve of the current settings").arg(title), false);
        m_tabs->setCurrentIndex(0);
        setStatus(QStringLiteral("Opened %1 from the history").arg(title));
      });
  connect(m_history, &HistoryDock::compareRequested, this,
          [this](std::shared_ptr<const Plan> a, std::shared_ptr<const Plan> b) {
            m_compare->setPlans(std::move(a), std::move(b));
            m_tabs->setCurrentIndex(1);
          });
#endif
  metricsDock->raise();
  // Side docks start narrow and may shrink further: the central view gets the space first.
  resizeDocks({solverDock, metricsDock}, {280, 320}, Qt::Horizontal);
}

QWidget* MainWindow::buildSolverPanel() {
  auto* widget = new QWidget(this);
  auto* outer = new QVBoxLayout(widget);
  outer->setContentsMargins(4, 4, 4, 4);

  auto* pipeline = new QGroupBox(QStringLiteral("Pipeline"), widget);
  auto* form = new QFormLayout(pipeline);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  m_panel.schedule = new QComboBox(pipeline);
  for (const std::string& name : scheduleNames()) m_panel.schedule->addItem(q(name), q(name));
  m_panel.devices = degreeSpin(pipeline, 4096, QStringLiteral("Pipeline size P: one lane per pipeline rank"));
  m_panel.microbatches = new QSpinBox(pipeline);
  m_panel.microbatches->setRange(1, 1 << 20);
  m_panel.chunks = new QSpinBox(pipeline);
  m_panel.chunks->setRange(1, 64);
  m_panel.partition = new QComboBox(pipeline);
  for (const std::string& name : partitionNames()) m_panel.partition->addItem(q(name));
  m_panel.fill = new QComboBox(pipeline);
  for (const std::string& name : fillModeNames()) m_panel.fill->addItem(q(name));
  m_panel.memoryLimit = new QLineEdit(pipeline);
  m_panel.memoryLimit->setPlaceholderText(QStringLiteral("GPU memory"));
  m_panel.memoryLimit->setToolTip(QStringLiteral("Per-device memory limit, e.g. 40GiB; empty = the GPU's memory"));
  form->addRow(QStringLiteral("Schedule"), m_panel.schedule);
  form->addRow(QStringLiteral("Devices"), m_panel.devices);
  form->addRow(QStringLiteral("Microbatches"), m_panel.microbatches);
  form->addRow(QStringLiteral("Chunks / device"), m_panel.chunks);
  form->addRow(QStringLiteral("Partition"), m_panel.partition);
  form->addRow(QStringLiteral("Fill"), m_panel.fill);
  form->addRow(QStringLiteral("Memory limit"), m_panel.memoryLimit);
  outer->addWidget(pipeline);

  auto* parallel = new QGroupBox(QStringLiteral("Parallelism"), widget);
  auto* pform = new QFormLayout(parallel);
  pform->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  m_panel.tp = degreeSpin(parallel, 1024, QStringLiteral("Tensor parallelism T (Megatron): must divide the heads"));
  m_panel.cp =
      degreeSpin(parallel, 1024, QStringLiteral("Context parallelism C (ring attention): the sequence splits over C"));
  m_panel.ep =
      degreeSpin(parallel, 4096, QStringLiteral("Expert parallelism E inside the data-parallel group (MoE models)"));
  m_panel.dp = degreeSpin(parallel, 1 << 20, QStringLiteral("Data-parallel replicas D of the whole pipeline"));
  m_panel.sequenceParallel = new QCheckBox(QStringLiteral("Sequence parallel"), parallel);
  m_panel.sequenceParallel->setToolTip(QStringLiteral("Korthikanti et al. 2022 §4.2.2 (only with TP > 1)"));
  m_panel.recompute = new QComboBox(parallel);
  m_panel.recompute->addItems({QStringLiteral("none"), QStringLiteral("selective"), QStringLiteral("full")});
  m_panel.recompute->setToolTip(
      QStringLiteral("Activation recomputation: selective recomputes attention's core, full "
                     "each layer's forward inside its backward"));
  m_panel.zero = new QComboBox(parallel);
  m_panel.zero->addItems({QStringLiteral("0"), QStringLiteral("1"), QStringLiteral("2"), QStringLiteral("3")});
  m_panel.zero->setToolTip(
      QStringLiteral("ZeRO stage: 1 = distributed optimizer, 2 = + gradients, 3 = + parameters (FSDP)"));
  pform->addRow(QStringLiteral("TP"), m_panel.tp);
  pform->addRow(QStringLiteral("CP"), m_panel.cp);
  pform->addRow(QStringLiteral("EP"), m_panel.ep);
  pform->addRow(QStringLiteral("DP"), m_panel.dp);
  pform->addRow(m_panel.sequenceParallel);
  pform->addRow(QStringLiteral("Recompute"), m_panel.recompute);
  pform->addRow(QStringLiteral("ZeRO"), m_panel.zero);
  outer->addWidget(parallel);

  auto* batch = new QGroupBox(QStringLiteral("Batch"), widget);
  auto* bform = new QFormLayout(batch);
  bform->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  m_panel.globalBatch = new QSpinBox(batch);
  m_panel.globalBatch->setRange(0, std::numeric_limits<int>::max());
  m_panel.globalBatch->setSpecialValueText(QStringLiteral("off"));
  m_panel.globalBatch->setToolTip(
      QStringLiteral("Samples per training step; with it, Microbatches = Global batch / "
                     "(Micro-batch size × DP)"));
  m_panel.microBatchSize = new QSpinBox(batch);
  m_panel.microBatchSize->setRange(0, 1 << 20);
  m_panel.microBatchSize->setSpecialValueText(QStringLiteral("model's"));
  m_panel.microBatchSize->setToolTip(QStringLiteral("Samples per microbatch (the model file's when not set)"));
  m_panel.optimizerSync = new QComboBox(batch);
  m_panel.optimizerSync->addItems({QStringLiteral("global"), QStringLiteral("post-validation")});
  m_panel.optimizerSync->setToolTip(
      QStringLiteral("post-validation: Zero Bubble's optimizer step overlaps iterations"));
  bform->addRow(QStringLiteral("Global batch"), m_panel.globalBatch);
  bform->addRow(QStringLiteral("Micro-batch size"), m_panel.microBatchSize);
  bform->addRow(QStringLiteral("Optimizer sync"), m_panel.optimizerSync);
  outer->addWidget(batch);

  m_panel.autoSolve = new QCheckBox(QStringLiteral("Re-solve on change"), widget);
  m_panel.autoSolve->setChecked(true);
  outer->addWidget(m_panel.autoSolve);
  auto* buttons = new QHBoxLayout;
  m_panel.solve = new QPushButton(QStringLiteral("Solve"), widget);
  m_panel.solve->setDefault(true);
  m_panel.solve->setToolTip(QStringLiteral("Solve now (F5)"));
  m_panel.cancel = new QPushButton(QStringLiteral("Cancel"), widget);
  m_panel.cancel->setEnabled(false);
  buttons->addWidget(m_panel.solve);
  buttons->addWidget(m_panel.cancel);
  outer->addLayout(buttons);
  m_panel.progress = new QProgressBar(widget);
  m_panel.progress->setRange(0, 100);
  m_panel.progress->setVisible(false);
  outer->addWidget(m_panel.progress);
  auto* messageRow = new QHBoxLayout;
  m_panel.message = new QLabel(widget);
  m_panel.message->setObjectName(QStringLiteral("SolverMessage"));
  m_panel.message->setWordWrap(true);
  m_panel.message->setTextFormat(Qt::PlainText);
  m_panel.message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // One summary line (wrapped to at most three); the panel never grows with a long message.
  m_panel.message->setMaximumHeight(3 * m_panel.message->fontMetrics().lineSpacing() + 4);
  m_panel.message->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  m_panel.details = new QPushButton(QStringLiteral("Details…"), widget);
  m_panel.details->setVisible(false);
  messageRow->addWidget(m_panel.message, 1);
  messageRow->addWidget(m_panel.details, 0, Qt::AlignTop);
  outer->addLayout(messageRow);
  outer->addStretch(1);

  connect(m_panel.solve, &QPushButton::clicked, this, &MainWindow::solveNow);
  connect(m_panel.cancel, &QPushButton::clicked, m_solver, &SolveController::cancel);
  connect(m_panel.details, &QPushButton::clicked, this, [this]() { showFailureDetails(); });
  connect(m_panel.partition, &QComboBox::currentTextChanged, this, &MainWindow::onPartitionChanged);
  connect(m_panel.schedule, &QComboBox::currentIndexChanged, this, [this]() {
    if (!m_loading && m_panel.schedule->currentData().toString() != QLatin1String(kAuto))
      m_explicitSchedule = m_panel.schedule->currentData().toString();
  });
  for (QComboBox* combo : {m_panel.schedule, m_panel.fill, m_panel.recompute, m_panel.zero, m_panel.optimizerSync})
    connect(combo, &QComboBox::currentTextChanged, this, &MainWindow::onParametersChanged);
  for (QSpinBox* spin : {m_panel.devices, m_panel.microbatches, m_panel.chunks, m_panel.tp, m_panel.cp, m_panel.ep,
                         m_panel.dp, m_panel.globalBatch, m_panel.microBatchSize})
    connect(spin, &QSpinBox::valueChanged, this, &MainWindow::onParametersChanged);
  connect(m_panel.sequenceParallel, &QCheckBox::toggled, this, &MainWindow::onParametersChanged);
  connect(m_panel.memoryLimit, &QLineEdit::editingFinished, this, &MainWindow::onParametersChanged);
  m_explicitSchedule = m_panel.schedule->currentData().toString();
  return widget;
}

void MainWindow::buildActions() {
  QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
  makeAction(file, QStringLiteral("&Open…"), QKeySequence::Open, this, &MainWindow::openDialog);
  m_recentMenu = file->addMenu(QStringLiteral("Open &Recent"));
  makeAction(file, QStringLiteral("Open &Default Workspace"), QKeySequence(), this,
             [this]() { openDefaultWorkspace(); });
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
  makeAction(exportMenu, QStringLiteral("Plan &JSON…"), QKeySequence(), this,
             [this]() { exportDialog(QStringLiteral("PipeStudio plan (*.plan.json)"), QStringLiteral(".plan.json")); });
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
  edit->addSeparator();
  makeAction(edit, QStringLiteral("&Find in Timeline…"), QKeySequence::Find, this, [this]() {
    m_tabs->setCurrentIndex(0);
    m_timeline->showSearch();
  });

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
  QAction* title = view->addAction(QStringLiteral("&Title Line"));
  title->setCheckable(true);
  title->setChecked(false);
  connect(title, &QAction::toggled, m_timeline, &viz::TimelineView::setTitleVisible);
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
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
  plan->addSeparator();
  m_runAction = makeAction(plan, QStringLiteral("&Run Locally…"), QKeySequence(Qt::CTRL | Qt::Key_R), this,
                           [this]() { openRunLocalDialog(); });
  m_runAction->setEnabled(false);
#endif
#ifdef PIPESTUDIO_HAVE_REMOTE
  if (!m_runAction) plan->addSeparator();
  m_deployAction = makeAction(plan, QStringLiteral("&Deploy…"), QKeySequence(Qt::CTRL | Qt::Key_D), this,
                              &MainWindow::openDeployDialog);
  m_deployAction->setEnabled(m_plan != nullptr);
#endif
#ifdef PIPESTUDIO_HAVE_HISTORY
  makeAction(plan, QStringLiteral("Compare Selected Run with its &Plan"), QKeySequence(), this, [this]() {
    ensureHistoryOpen();
    m_history->compareWithPlan();
  });
#endif

  QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
  makeAction(help, QStringLiteral("&Keyboard, Mouse and Legend…"), QKeySequence::HelpContents, this,
             &MainWindow::showHelp);
  makeAction(help, QStringLiteral("&About PipeStudio"), QKeySequence(), this, [this]() {
    QMessageBox::about(
        this, QStringLiteral("About PipeStudio"),
        QStringLiteral("<b>PipeStudio %1</b><p>A workstation for pipeline-parallel training: plan, look, "
                       "run, compare.</p>")
            .arg(QApplication::applicationVersion()));
  });

  auto* tools = addToolBar(QStringLiteral("Main"));
  tools->setObjectName(QStringLiteral("MainToolBar"));
  tools->setMovable(false);
  makeAction(tools, QStringLiteral("Open"), QKeySequence(), this, &MainWindow::openDialog);
  makeAction(tools, QStringLiteral("Save"), QKeySequence(), this, [this]() { saveDialog(false); });
  tools->addSeparator();
  makeAction(tools, QStringLiteral("Solve"), QKeySequence(), this, &MainWindow::solveNow);
  makeAction(tools, QStringLiteral("Fit"), QKeySequence(), m_timeline, &viz::TimelineView::fitToView);
  makeAction(tools, QStringLiteral("Find"), QKeySequence(), this, [this]() {
    m_tabs->setCurrentIndex(0);
    m_timeline->showSearch();
  });
  makeAction(tools, QStringLiteral("Pin baseline"), QKeySequence(), this, &MainWindow::pinBaseline);
  if (m_runAction) tools->addAction(m_runAction);
  tools->addAction(critical);
  rebuildRecentMenu();
}

QString MainWindow::shortcutsHtml() {
  QString html = QStringLiteral("<h3>Timeline</h3><table cellspacing='3'>");
  const std::pair<const char*, const char*> rows[] = {
      {"Wheel", "zoom time about the cursor"},
      {"Ctrl+Wheel", "zoom the lanes (taller or more devices)"},
      {"Shift+Wheel, ↑ / ↓", "scroll the lanes"},
      {"Shift+↑ / Shift+↓", "zoom the lanes"},
      {"Drag", "pan"},
      {"Shift+Drag", "zoom to the rubber band"},
      {"Ctrl+Drag", "measure a range: duration and idle time per device (Selection dock)"},
      {"Double-click, F, 0, Ctrl+0", "fit the whole plan"},
      {"W / S, + / -", "zoom in / out"},
      {"A / D, ← / →", "pan left / right"},
      {"Click", "select an op: dependency chain, arrows to its neighbours, fields in the Selection dock"},
      {"Ctrl+F", "find ops: “mb 7”, “W”, “vs 12”, “gpu 3”, “F B mb 4-7”; Enter: next match"},
      {"Esc", "clear selection, search and measurement"},
      {"Ctrl+K / Ctrl+M", "critical path / memory plot on or off"},
      {"Memory plot", "hover reads a curve out; click a legend entry to hide or show a GPU"}};
  for (const auto& [key, what] : rows)
    html +=
        QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(QString::fromUtf8(key), QString::fromUtf8(what));
  html += QStringLiteral("</table><h3>Window</h3><table cellspacing='3'>");
  const std::pair<const char*, const char*> window[] = {{"F5", "solve"},
                                                        {"Shift+Esc", "cancel the solve"},
                                                        {"Ctrl+B", "pin the plan as baseline"},
                                                        {"Ctrl+R", "run the plan locally"},
                                                        {"Ctrl+D", "deploy"},
                                                        {"Ctrl+1 / Ctrl+2", "timeline / compare"},
                                                        {"Ctrl+S", "save the workspace"},
                                                        {"Ctrl+E", "export the timeline as PNG"}};
  for (const auto& [key, what] : window)
    html +=
        QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(QString::fromUtf8(key), QString::fromUtf8(what));
  html += QStringLiteral("</table><h3>Legend</h3><p>");
  const viz::TimelinePalette palette = viz::TimelinePalette::light();
  const std::pair<viz::ColourSlot, const char*> kinds[] = {
      {viz::ColourSlot::F, "F forward"},
      {viz::ColourSlot::B, "B input gradient"},
      {viz::ColourSlot::W, "W weight gradient"},
      {viz::ColourSlot::BW, "BW fused backward"},
      {viz::ColourSlot::N, "N frozen component (“next iteration” when filled across iterations)"},
      {viz::ColourSlot::S, "S / T vocabulary passes"},
      {viz::ColourSlot::OPT, "OPT optimizer step"},
      {viz::ColourSlot::CommForward, "activation transfer (sub-lane under the device)"},
      {viz::ColourSlot::CommBackward, "gradient transfer"}};
  for (const auto& [slot, what] : kinds) {
    html += QStringLiteral("<span style='background:%1'>&nbsp;&nbsp;&nbsp;&nbsp;</span> %2<br>")
                .arg(palette.colour(slot).name(), QString::fromUtf8(what));
  }
  html += QStringLiteral(
      "Hatching: bubble (idle inside the device's span) · red outline: critical path (a thin "
      "underline where ops are narrow) · orange outline: the selected op's microbatch chain · "
      "numbers: microbatch · a dimmed, labelled plan is the last good one, not of the current "
      "settings.</p>");
  return html;
}

void MainWindow::showHelp() {
  auto* dialog = new QDialog(this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(QStringLiteral("PipeStudio: keyboard, mouse and legend"));
  auto* layout = new QVBoxLayout(dialog);
  auto* text = new QTextBrowser(dialog);
  text->setHtml(shortcutsHtml());
  layout->addWidget(text);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
  connect(box, &QDialogButtonBox::rejected, dialog, &QDialog::close);
  layout->addWidget(box);
  dialog->resize(560, 600);
  dialog->show();
}

// --- request, parameters ------------------------------------------------------------------

PlanRequest MainWindow::currentRequest() const {
  PlanRequest request;
  request.model = m_layers->modelSpec();
  request.cluster = m_cluster->clusterSpec();
  PlanConfig& c = request.config;
  const QString schedule = m_panel.schedule->currentData().toString();
  c.schedule = (schedule == QLatin1String(kAuto) ? m_explicitSchedule : schedule).toStdString();
  c.devices = m_panel.devices->value();
  c.microbatches = m_panel.microbatches->value();
  c.chunksPerDevice = m_panel.chunks->value();
  c.partition = m_panel.partition->currentText().toStdString();
  c.fill = m_panel.fill->currentText().toStdString();
  const QString limit = m_panel.memoryLimit->text().trimmed();
  if (!limit.isEmpty()) {
    if (auto b = parseBytes(limit.toStdString()); b && *b > 0) c.memoryLimitBytes = *b;
  }
  Parallelism& par = c.parallel;
  par.tensor = m_panel.tp->value();
  par.context = m_panel.cp->value();
  par.expert = m_panel.ep->value();
  par.data = m_panel.dp->value();
  par.sequenceParallel = par.tensor > 1 && m_panel.sequenceParallel->isChecked();
  par.recompute = recomputeFromName(m_panel.recompute->currentText().toStdString()).value_or(Recompute::None);
  par.zeroStage = m_panel.zero->currentIndex();
  if (m_panel.globalBatch->value() > 0) c.globalBatch = m_panel.globalBatch->value();
  if (m_panel.microBatchSize->value() > 0) c.microBatchSize = m_panel.microBatchSize->value();
  c.optimizerSync = m_panel.optimizerSync->currentText().toStdString();
  return request;
}

void MainWindow::onPartitionChanged() {
  // With the diffusionpipe partition DiffusionPipe searches the schedules itself: the box says
  // "auto" (and, once solved, which one it chose) instead of a schedule it will not honour.
  const bool wasLoading = m_loading;
  m_loading = true;
  const bool diffusion = m_panel.partition->currentText() == QStringLiteral("diffusionpipe");
  const bool hasAuto =
      m_panel.schedule->count() > 0 && m_panel.schedule->itemData(0).toString() == QLatin1String(kAuto);
  if (diffusion && !hasAuto) {
    m_panel.schedule->insertItem(0, QStringLiteral("auto — DiffusionPipe picks the schedule"),
                                 QString::fromLatin1(kAuto));
    m_panel.schedule->setCurrentIndex(0);
    m_panel.schedule->setEnabled(false);
    m_panel.schedule->setToolTip(
        QStringLiteral("The diffusionpipe partition plans partition and schedule together: "
                       "it tries every schedule and keeps the fastest that fits"));
  } else if (!diffusion && hasAuto) {
    m_panel.schedule->removeItem(0);
    const int index = m_panel.schedule->findData(m_explicitSchedule);
    if (index >= 0) m_panel.schedule->setCurrentIndex(index);
    m_panel.schedule->setEnabled(true);
    m_panel.schedule->setToolTip(QString());
  }
  m_loading = wasLoading;
  onParametersChanged();
}

void MainWindow::updateDerivedFields() {
  // Fields the resolved request derives show it: the microbatch count from the global batch,
  // sequence parallelism only with TP; the layer table's "auto" cells under these degrees.
  const bool fromBatch = m_panel.globalBatch->value() > 0;
  m_panel.microbatches->setEnabled(!fromBatch);
  m_panel.sequenceParallel->setEnabled(m_panel.tp->value() > 1);
  PlanRequest request = currentRequest();
  if (fromBatch) {
    // microbatches = G / (B·D) (resolveRequest's rule), shown even while another field is wrong.
    const std::int64_t b = request.config.microBatchSize.value_or(request.model.samplesPerMicrobatch);
    const std::int64_t perMicrobatch = std::max<std::int64_t>(1, b) * request.config.parallel.data;
    const std::int64_t g = *request.config.globalBatch;
    if (g % perMicrobatch == 0 && g / perMicrobatch <= m_panel.microbatches->maximum()) {
      const QSignalBlocker block(m_panel.microbatches);
      m_panel.microbatches->setValue(static_cast<int>(g / perMicrobatch));
    }
  }
  m_panel.microbatches->setToolTip(fromBatch ? QStringLiteral("Derived: Global batch / (Micro-batch size × DP)")
                                             : QString());
  auto resolved = resolveRequest(request);
  if (resolved) {
    m_layers->setCostContext(resolved->cluster, resolved->config, resolved->model.samplesPerMicrobatch);
  } else {
    m_layers->setCostContext(request.cluster, PlanConfig{}, request.model.samplesPerMicrobatch);
  }
}

void MainWindow::onParametersChanged() {
  if (m_loading) return;
  markModified();
  const QString limit = m_panel.memoryLimit->text().trimmed();
  if (!limit.isEmpty()) {
    auto b = parseBytes(limit.toStdString());
    if (!b || *b <= 0) {
      // Shown in place: the field turns red and says what it expects.
      m_panel.memoryLimit->setStyleSheet(QStringLiteral("QLineEdit { background: rgba(229, 57, 53, 0.35); }"));
      m_panel.memoryLimit->setToolTip(
          QStringLiteral("'%1' is not a size (expected e.g. 40GiB, 80GB or bytes)").arg(limit));
      setStatus(QStringLiteral("Memory limit '%1' is not a size (expected e.g. 40GiB)").arg(limit), true);
      markStale(QStringLiteral("the Memory limit is not a size: fix it to solve"));
      return;
    }
  }
  m_panel.memoryLimit->setStyleSheet(QString());
  m_panel.memoryLimit->setToolTip(QStringLiteral("Per-device memory limit, e.g. 40GiB; empty = the GPU's memory"));
  updateDerivedFields();
  if (m_components->firstProblem() || m_layers->firstProblem() || m_cluster->firstProblem()) {
    setStatus(QStringLiteral("Fix the cells marked red before solving"), true);
    markStale(QStringLiteral("an editor cell is invalid: fix the red cell to solve"));
    return;
  }
  if (m_panel.autoSolve->isChecked()) {
    m_solver->scheduleSolve(currentRequest());
    markStale(QStringLiteral("settings changed: solving…"), false);
  } else {
    markStale(QStringLiteral("settings changed: press Solve (F5)"));
  }
}

bool MainWindow::focusFirstInvalidCell() {
  struct Candidate {
    viz::SpecTableModel* model;
    QTableView* view;
    QDockWidget* dock;
    QString table;
  };
  const Candidate candidates[] = {{m_components, m_componentView, m_modelDock, QStringLiteral("Components")},
                                  {m_layers, m_layerView, m_modelDock, QStringLiteral("Layers")},
                                  {m_cluster, m_clusterView, m_clusterDock, QStringLiteral("Cluster")}};
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
    const QString where = QStringLiteral("%1 row %2, %3")
                              .arg(c.table)
                              .arg(problem->row + 1)
                              .arg(c.model->headerData(problem->column, Qt::Horizontal).toString());
    const QString text = QStringLiteral("Fix the red cell first: %1: %2").arg(where, problem->message);
    setStatus(text, true);
    setPanelMessage(text, true, false);
    return true;
  }
  return false;
}

void MainWindow::solveNow() {
  if (focusFirstInvalidCell()) {
    markStale(QStringLiteral("an editor cell is invalid: fix the red cell to solve"));
    return;
  }
  m_solver->solve(currentRequest());
}

// --- results ------------------------------------------------------------------------------

void MainWindow::setPanelMessage(const QString& text, bool error, bool details) {
  m_panel.message->setText(firstLine(text));
  m_panel.message->setToolTip(text);
  m_panel.message->setStyleSheet(error ? QStringLiteral("QLabel { color: #e53935; }") : QString());
  m_panel.details->setVisible(details);
}

void MainWindow::onSolved(std::shared_ptr<const Plan> plan, double elapsedMs) {
  m_panel.progress->setVisible(false);
  m_panel.cancel->setEnabled(false);
  m_statusProgress->setVisible(false);
  m_failure.clear();
  m_diagnosis.reset();
  // DiffusionPipe picks the schedule itself: the box and the message say which.
  const QString chosen = q(plan->config.schedule);
  const bool picked = plan->config.partition == "diffusionpipe";
  if (picked && m_panel.schedule->itemData(0).toString() == QLatin1String(kAuto)) {
    m_loading = true;
    const QString text = QStringLiteral("auto — DiffusionPipe chose %1").arg(chosen);
    m_panel.schedule->setItemText(0, text);
    // The narrow box may cut the text: its tooltip says it whole.
    m_panel.schedule->setToolTip(text + QStringLiteral(" (the diffusionpipe partition tries every schedule and keeps "
                                                       "the fastest that fits)"));
    m_loading = false;
  }
  setPanelMessage(picked ? QStringLiteral("Solved in %1; DiffusionPipe chose %2").arg(q(formatMs(elapsedMs)), chosen)
                         : QStringLiteral("Solved in %1").arg(q(formatMs(elapsedMs))),
                  false, false);
  m_timeline->setStale(QString());
  showPlan(std::move(plan));
  const Metrics& m = m_metrics->metrics();
  setStatus(QStringLiteral("Solved %1: makespan %2, bubble %3 % (%4)")
                .arg(q(m_plan->config.schedule), q(formatMs(m.makespanMs)))
                .arg(m.bubbleRatio * 100, 0, 'f', 1)
                .arg(q(formatMs(elapsedMs))));
}

void MainWindow::onSolveFailed(const QString& message, std::shared_ptr<const MemoryDiagnosis> diagnosis) {
  m_panel.progress->setVisible(false);
  m_panel.cancel->setEnabled(false);
  m_statusProgress->setVisible(false);
  m_failure = withFieldNames(message);
  m_diagnosis = std::move(diagnosis);
  QString summary = firstLine(m_failure);
  if (m_diagnosis && m_diagnosis->smallestFittingDevices)
    summary += QStringLiteral(" — fits with Devices %1").arg(*m_diagnosis->smallestFittingDevices);
  setPanelMessage(summary, true, summary != m_failure.trimmed() || m_diagnosis != nullptr);
  m_panel.message->setToolTip(m_failure);
  setStatus(QStringLiteral("Solve failed: ") + summary, true);
  markStale(QStringLiteral("current settings failed: %1").arg(summary));
}

void MainWindow::markStale(const QString& why, bool dim) {
  if (!m_plan) {
    m_timeline->setStale(QStringLiteral("no plan · %1").arg(why), dim);
    return;
  }
  // Transient states (solving) are named but not dimmed, so editing does not flicker.
  m_timeline->setStale(QStringLiteral("last good plan: %1 · %2").arg(q(m_plan->config.schedule), why), dim);
}

QDialog* MainWindow::showFailureDetails() {
  if (m_failure.isEmpty()) return nullptr;
  auto* dialog = new QDialog(this);
  dialog->setObjectName(QStringLiteral("FailureDetails"));
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(QStringLiteral("Why the solve failed"));
  auto* layout = new QVBoxLayout(dialog);
  auto* text = new QTextBrowser(dialog);
  text->setObjectName(QStringLiteral("FailureText"));
  text->setPlainText(m_failure);
  layout->addWidget(text, 1);
  if (m_diagnosis) {
    const MemoryDiagnosis& d = *m_diagnosis;
    auto* heading = new QLabel(QStringLiteral("<b>%1 per device at its peak</b> against %2 (margin: CUDA context, "
                                              "workspaces and fragmentation kept back by each GPU)")
                                   .arg(q(d.schedule), d.explicitLimit ? QStringLiteral("the Memory limit")
                                                                       : QStringLiteral("the GPU's memory")),
                               dialog);
    heading->setWordWrap(true);
    layout->addWidget(heading);
    const QStringList columns{
        QStringLiteral("GPU"),       QStringLiteral("needed"),       QStringLiteral("capacity"),
        QStringLiteral("over by"),   QStringLiteral("largest part"), QStringLiteral("parameters"),
        QStringLiteral("gradients"), QStringLiteral("optimizer"),    QStringLiteral("activations"),
        QStringLiteral("buffers"),   QStringLiteral("margin")};
    auto* table = new QTableWidget(static_cast<int>(d.devices.size()), static_cast<int>(columns.size()), dialog);
    table->setObjectName(QStringLiteral("FailureTable"));
    table->setHorizontalHeaderLabels(columns);
    table->verticalHeader()->setVisible(false);
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    for (std::size_t r = 0; r < d.devices.size(); ++r) {
      const DeviceOverage& o = d.devices[r];
      const QString cells[] = {QString::number(o.device),
                               bytes(static_cast<double>(o.neededBytes)),
                               bytes(static_cast<double>(o.capacityBytes)),
                               o.overBytes() > 0 ? bytes(static_cast<double>(o.overBytes())) : QStringLiteral("fits"),
                               q(o.largestPart),
                               bytes(static_cast<double>(o.memory.parameterBytes)),
                               bytes(static_cast<double>(o.memory.gradientBytes)),
                               bytes(static_cast<double>(o.memory.optimizerBytes)),
                               bytes(static_cast<double>(o.memory.activationBytes)),
                               bytes(static_cast<double>(o.memory.communicationBytes)),
                               bytes(static_cast<double>(d.explicitLimit ? 0 : o.memory.marginBytes))};
      for (int c = 0; c < static_cast<int>(columns.size()); ++c) {
        auto* item = new QTableWidgetItem(cells[c]);
        if (c == 3 && o.overBytes() > 0) item->setForeground(QColor(0xd0, 0x3a, 0x3a));
        table->setItem(static_cast<int>(r), c, item);
      }
    }
    table->resizeColumnsToContents();
    layout->addWidget(table, 2);
    QString hint;
    if (d.smallestFittingDevices) {
      hint = QStringLiteral("The smallest pipeline that fits: <b>Devices %1</b> (busiest GPU %2).")
                 .arg(*d.smallestFittingDevices)
                 .arg(bytes(static_cast<double>(d.fittingPeakBytes)));
    } else if (d.largestTriedDevices > 0) {
      hint = QStringLiteral(
                 "No pipeline up to Devices %1 fits at these degrees: try TP, Recompute, ZeRO or a schedule "
                 "with less activation memory (v-half, v-min).")
                 .arg(d.largestTriedDevices);
    } else {
      hint = QStringLiteral(
          "The cluster has no GPUs for a deeper pipeline at these degrees: try TP, Recompute, ZeRO "
          "or a schedule with less activation memory (v-half, v-min).");
    }
    auto* hintLabel = new QLabel(hint, dialog);
    hintLabel->setObjectName(QStringLiteral("FailureHint"));
    hintLabel->setWordWrap(true);
    layout->addWidget(hintLabel);
  }
  auto* box = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
  connect(box, &QDialogButtonBox::rejected, dialog, &QDialog::close);
  layout->addWidget(box);
  dialog->resize(760, m_diagnosis ? 520 : 320);
  dialog->show();
  return dialog;
}

void MainWindow::showPlan(std::shared_ptr<const Plan> plan) {
  m_plan = std::move(plan);
  m_timeline->setPlan(m_plan, true);
  m_timeline->selectOp(-1);
  std::int64_t limit = 0;
  if (m_plan) {
    limit = m_plan->config.memoryLimitBytes.value_or(0);
    if (limit == 0 && m_plan->cluster.gpu.memoryGib > 0) limit = m_plan->cluster.gpu.memoryBytes();
  }
  m_timeline->setMemoryLimit(limit);
  m_metrics->setPlan(m_plan);
  m_memoryBreakdown->setPlan(m_plan);
  m_compare->setPlans(m_baseline, m_plan);
  updateMetricsSummary();
  if (m_deployAction != nullptr) m_deployAction->setEnabled(m_plan != nullptr);
  if (m_runAction != nullptr) m_runAction->setEnabled(m_plan != nullptr);
}

void MainWindow::showMeasuredAgainstPlan(std::shared_ptr<const Plan> plan, std::shared_ptr<const Plan> measured,
                                         const QString& title) {
  // The compare view only: the timeline keeps the solve of the panel's settings.
  m_compare->setPlans(std::move(plan), std::move(measured));
  m_tabs->setCurrentIndex(1);
  setStatus(QStringLiteral("Compare: %1 against its plan").arg(title));
}

void MainWindow::ensureHistoryOpen() {
#ifdef PIPESTUDIO_HAVE_HISTORY
  if (!m_history->store()) m_history->openDatabase(q(history::defaultHistoryPath()));
#endif
}

RunLocalDialog* MainWindow::openRunLocalDialog() {
#ifdef PIPESTUDIO_HAVE_LOCAL_RUN
  if (!m_plan) {
    setStatus(QStringLiteral("Run locally: no plan (solve first)"), true);
    return nullptr;
  }
  ensureHistoryOpen();
  const QString historyPath =
      m_history->store() != nullptr ? q(m_history->store()->path()) : q(history::defaultHistoryPath());
  if (!m_runDialog) {
    m_runDialog = new RunLocalDialog(this);
    connect(m_runDialog, &RunLocalDialog::runRecorded, this,
            [this](history::RunId run, bool complete, std::shared_ptr<const Plan> plan) {
              m_history->refresh();
              setStatus(QStringLiteral("Run %1 recorded in the history%2")
                            .arg(run)
                            .arg(complete ? QString() : QStringLiteral(" (not complete)")),
                        !complete);
              if (!complete) return;
              // A finished run opens against the plan it ran (the compare view), read off the
              // GUI thread.
              m_history->readRunPlan(run, [this, plan, run](std::shared_ptr<const Plan> measured) {
                showMeasuredAgainstPlan(plan, std::move(measured), QStringLiteral("run %1").arg(run));
              });
            });
    connect(m_runDialog, &RunLocalDialog::openRunRequested, this,
            [this](history::RunId run, std::shared_ptr<const Plan> plan) {
              m_history->readRunPlan(run, [this, plan, run](std::shared_ptr<const Plan> measured) {
                showMeasuredAgainstPlan(plan, std::move(measured), QStringLiteral("run %1").arg(run));
              });
            });
  }
  const QString name = m_workspaceName.isEmpty() ? q(m_plan->config.schedule)
                                                 : m_workspaceName + QStringLiteral(" · ") + q(m_plan->config.schedule);
  if (!m_runDialog->busy()) m_runDialog->setPlan(m_plan, name, historyPath);
  m_runDialog->show();
  m_runDialog->raise();
  return m_runDialog;
#else
  setStatus(QStringLiteral("Run locally: this build has no executor or history"), true);
  return nullptr;
#endif
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
    // The measured run against the plan it executed (issue 8: the finished run opens in the
    // compare view against its plan), read off the GUI thread.
    m_history->readRunPlan(run, [this, deployed, run](std::shared_ptr<const Plan> measured) {
      showMeasuredAgainstPlan(deployed, std::move(measured), QStringLiteral("deployed run %1").arg(run));
    });
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
  setStatus(
      QStringLiteral("Pinned %1 as baseline: later solves are compared against it").arg(q(m_plan->config.schedule)));
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
  const bool base = m_baseline != nullptr;
  QString html = QStringLiteral("<table cellspacing='2'>");
  auto row = [&](const QString& name, const QString& value, const QString& d) {
    // A value and its Δ never wrap apart in the narrow dock.
    html += QStringLiteral("<tr><td>%1</td><td align='right' style='white-space:nowrap'><b>%2</b>%3</td></tr>")
                .arg(name, value, d);
  };
  const PlanConfig& c = m_plan->config;
  const Parallelism& par = c.parallel;
  row(QStringLiteral("Schedule"), q(c.schedule), QString());
  QString layout = QStringLiteral("PP %1").arg(c.devices);
  if (par.tensor > 1) layout += QStringLiteral(" × TP %1").arg(par.tensor);
  if (par.context > 1) layout += QStringLiteral(" × CP %1").arg(par.context);
  if (par.data > 1) layout += QStringLiteral(" × DP %1").arg(par.data);
  layout += QStringLiteral(" = %1 GPUs").arg(c.totalGpus());
  row(QStringLiteral("Layout"), layout, QString());
  QStringList extras;
  if (par.expert > 1) extras << QStringLiteral("EP %1").arg(par.expert);
  if (par.sequenceParallel) extras << QStringLiteral("SP");
  if (par.zeroStage > 0) extras << QStringLiteral("ZeRO %1").arg(par.zeroStage);
  if (par.recompute != Recompute::None)
    extras << QStringLiteral("recompute %1").arg(q(std::string(recomputeName(par.recompute))));
  if (!extras.isEmpty()) row(QString(), extras.join(QStringLiteral(" · ")), QString());
  row(QStringLiteral("Makespan"), q(formatMs(m.makespanMs)),
      base ? delta(m.makespanMs, b.makespanMs, true, {}) : QString());
  if (m.iterationMs > 0) {
    row(QStringLiteral("Iteration"), q(formatMs(m.iterationMs)),
        base ? delta(m.iterationMs, b.iterationMs, true, {}) : QString());
    row(QStringLiteral("&nbsp;&nbsp;gradient sync (exposed)"), q(formatMs(m.gradientSyncMs)), QString());
    row(QStringLiteral("&nbsp;&nbsp;optimizer step"), q(formatMs(m.optimizerMs)), QString());
  }
  row(QStringLiteral("Bubble ratio"), QStringLiteral("%1 %").arg(m.bubbleRatio * 100, 0, 'f', 1),
      base ? delta(m.bubbleRatio, b.bubbleRatio, true,
                   QStringLiteral("%1 pp").arg((m.bubbleRatio - b.bubbleRatio) * 100, 0, 'f', 1))
           : QString());
  row(QStringLiteral("Throughput"), QStringLiteral("%1 samples/s").arg(m.throughputSamplesPerS, 0, 'f', 1),
      base ? delta(m.throughputSamplesPerS, b.throughputSamplesPerS, false, {}) : QString());
  if (m.tokensPerS > 0) {
    row(QStringLiteral("Tokens/s"), QLocale().toString(m.tokensPerS, 'f', 0),
        base ? delta(m.tokensPerS, b.tokensPerS, false, {}) : QString());
  }
  if (m.modelTflopsPerGpu > 0) {
    row(QStringLiteral("Model TFLOP/s per GPU"), QString::number(m.modelTflopsPerGpu, 'f', 1),
        base ? delta(m.modelTflopsPerGpu, b.modelTflopsPerGpu, false, {}) : QString());
    row(QStringLiteral("MFU"), QStringLiteral("%1 %").arg(m.mfu * 100, 0, 'f', 1),
        base ? delta(m.mfu, b.mfu, false, QStringLiteral("%1 pp").arg((m.mfu - b.mfu) * 100, 0, 'f', 1)) : QString());
  }
  row(QStringLiteral("Peak memory"), bytes(static_cast<double>(peak)),
      base ? delta(static_cast<double>(peak), static_cast<double>(basePeak), true, {}) : QString());
  row(QStringLiteral("Ops"), QString::number(m_plan->ops.size()), QString());
  html += QStringLiteral("</table>");
  if (m_baseline)
    html += QStringLiteral("<small>Δ against the pinned baseline (%1)</small>").arg(q(m_baseline->config.schedule));
  m_metricsSummary->setText(html);
}

void MainWindow::setPanelFromConfig(const PlanConfig& c) {
  const bool wasLoading = m_loading;
  m_loading = true;
  m_explicitSchedule = q(c.schedule);
  m_panel.partition->setCurrentText(QStringLiteral("balanced"));  // leaves "auto" mode, if on
  onPartitionChanged();
  const int scheduleIndex = m_panel.schedule->findData(q(c.schedule));
  if (scheduleIndex >= 0) {
    m_panel.schedule->setCurrentIndex(scheduleIndex);
  } else if (!c.schedule.empty()) {
    m_panel.schedule->addItem(q(c.schedule), q(c.schedule));
    m_panel.schedule->setCurrentIndex(m_panel.schedule->count() - 1);
  }
  m_panel.devices->setValue(c.devices);
  m_panel.microbatches->setValue(c.microbatches);
  m_panel.chunks->setValue(c.chunksPerDevice);
  if (m_panel.fill->findText(q(c.fill)) < 0) m_panel.fill->addItem(q(c.fill));
  m_panel.fill->setCurrentText(q(c.fill));
  m_panel.memoryLimit->setText(c.memoryLimitBytes ? q(formatBytes(static_cast<double>(*c.memoryLimitBytes)))
                                                  : QString());
  const Parallelism& par = c.parallel;
  m_panel.tp->setValue(par.tensor);
  m_panel.cp->setValue(par.context);
  m_panel.ep->setValue(par.expert);
  m_panel.dp->setValue(par.data);
  // At TP 1 the box shows the default for when TP is raised (on, as the command line).
  m_panel.sequenceParallel->setChecked(par.tensor > 1 ? par.sequenceParallel : true);
  m_panel.recompute->setCurrentText(q(std::string(recomputeName(par.recompute))));
  m_panel.zero->setCurrentIndex(std::clamp(par.zeroStage, 0, 3));
  m_panel.globalBatch->setValue(
      c.globalBatch ? static_cast<int>(std::min<std::int64_t>(*c.globalBatch, std::numeric_limits<int>::max())) : 0);
  m_panel.microBatchSize->setValue(
      c.microBatchSize ? static_cast<int>(std::min<std::int64_t>(*c.microBatchSize, 1 << 20)) : 0);
  m_panel.optimizerSync->setCurrentText(q(c.optimizerSync));
  if (m_panel.partition->findText(q(c.partition)) < 0) m_panel.partition->addItem(q(c.partition));
  m_panel.partition->setCurrentText(q(c.partition));
  onPartitionChanged();
  updateDerivedFields();
  m_loading = wasLoading;
}

// --- documents ----------------------------------------------------------------------------

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
  m_failure.clear();
  m_diagnosis.reset();
  setPanelMessage(QString(), false, false);
  setClean();
  if (ws.plan) {
    m_solver->cancel();
    m_timeline->setStale(QString());
    showPlan(std::make_shared<const Plan>(*ws.plan));
    setStatus(QStringLiteral("Opened %1").arg(path.isEmpty() ? QStringLiteral("the workspace") : path));
  } else {
    if (m_plan) markStale(QStringLiteral("workspace opened: solving…"), false);
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

QString MainWindow::sessionFilePath() {
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/session.pipestudio");
}

void MainWindow::openStartupWorkspace() {
  QSettings settings;
  const QString session = sessionFilePath();
  if (QFileInfo::exists(session)) {
    auto ws = loadWorkspace(session.toStdString());
    if (ws) {
      QString path = settings.value(QStringLiteral("session/workspacePath")).toString();
      if (!path.isEmpty() && !QFileInfo::exists(path)) path.clear();
      setWorkspace(*ws, path);
      if (settings.value(QStringLiteral("session/modified")).toBool()) markModified();
      m_tabs->setCurrentIndex(
          std::clamp(settings.value(QStringLiteral("session/tab")).toInt(), 0, m_tabs->count() - 1));
      setStatus(QStringLiteral("Restored the last session%1")
                    .arg(path.isEmpty() ? QString() : QStringLiteral(" (") + path + QLatin1Char(')')));
      return;
    }
    setStatus(QStringLiteral("The last session could not be restored: %1").arg(q(ws.message())), true);
  }
  const QString last = settings.value(QStringLiteral("session/lastWorkspace")).toString();
  if (!last.isEmpty() && QFileInfo::exists(last) && openFile(last, nullptr, true)) return;
  openDefaultWorkspace();
}

void MainWindow::writeSession(bool discardEdits) {
  QSettings settings;
  settings.setValue(QStringLiteral("session/workspacePath"), m_workspacePath);
  settings.setValue(QStringLiteral("session/tab"), m_tabs->currentIndex());
  const QString session = sessionFilePath();
  if (discardEdits) {
    // The user threw the edits away: next time the saved file (or the default) opens.
    QFile::remove(session);
    settings.setValue(QStringLiteral("session/modified"), false);
    return;
  }
  QDir().mkpath(QFileInfo(session).absolutePath());
  Workspace ws;
  ws.name = m_workspaceName.toStdString();
  ws.model = m_layers->modelSpec();
  ws.cluster = m_cluster->clusterSpec();
  ws.solver = currentRequest().config;
  if (m_plan && !m_timeline->isStale()) ws.plan = *m_plan;
  if (Status s = saveWorkspace(session.toStdString(), ws); !s) {
    QFile::remove(session);
    return;
  }
  settings.setValue(QStringLiteral("session/modified"), m_dirty);
}

bool MainWindow::openFromCommandLine(const QString& path) {
  QString error;
  if (openFile(path, &error, true)) return true;
  m_plan.reset();
  showPlan(nullptr);
  m_timeline->setStale(QStringLiteral("no plan · %1 could not be opened: File > Open… or File > Open Default Workspace")
                           .arg(QFileInfo(path).fileName()));
  setStatus(QStringLiteral("Cannot open %1").arg(path), true);
  m_openErrorBox = new QMessageBox(QMessageBox::Critical, QStringLiteral("Cannot open file"),
                                   QStringLiteral("PipeStudio could not open %1.").arg(path), QMessageBox::Ok, this);
  m_openErrorBox->setObjectName(QStringLiteral("OpenErrorBox"));
  m_openErrorBox->setInformativeText(firstLine(error));
  m_openErrorBox->setDetailedText(error);
  m_openErrorBox->setAttribute(Qt::WA_DeleteOnClose);
  connect(m_openErrorBox, &QObject::destroyed, this, [this]() { m_openErrorBox = nullptr; });
  m_openErrorBox->open();
  return false;
}

bool MainWindow::openFile(const QString& path, QString* error, bool quiet) {
  auto doc = openDocument(path.toStdString());
  if (!doc) {
    const QString message = q(doc.message());
    if (error) *error = message;
    setStatus(firstLine(message), true);
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
      markModified();
      updateDerivedFields();
      markStale(QStringLiteral("model %1 opened: solving…").arg(q(doc->model->name)));
      setStatus(QStringLiteral("Model %1 loaded").arg(q(doc->model->name)));
      solveNow();
      break;
    case DocumentKind::Cluster:
      m_loading = true;
      m_cluster->setClusterSpec(*doc->cluster);
      m_loading = false;
      markModified();
      updateDerivedFields();
      markStale(QStringLiteral("cluster %1 opened: solving…").arg(q(doc->cluster->name)));
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
      m_timeline->setStale(QString());
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
      markStale(
          QStringLiteral("showing the trace %1, not a solve of the current settings").arg(QFileInfo(path).fileName()),
          false);
      setStatus(QStringLiteral("Trace %1 opened (%2 op ranges)").arg(path).arg(measured->ops.size()));
      break;
    }
  }
  updateTitle();
  addRecentFile(QFileInfo(path).absoluteFilePath());
  return true;
}

bool MainWindow::saveWorkspaceTo(const QString& path, QString* error) {
  Workspace ws;
  ws.name =
      m_workspaceName.isEmpty() ? QFileInfo(path).completeBaseName().toStdString() : m_workspaceName.toStdString();
  ws.model = m_layers->modelSpec();
  ws.cluster = m_cluster->clusterSpec();
  ws.solver = currentRequest().config;
  // A plan that no longer matches the settings is not saved with them (it would reopen as
  // if it were their solve).
  if (m_plan && !m_timeline->isStale()) ws.plan = *m_plan;
  Status status = saveWorkspace(path.toStdString(), ws);
  if (!status) {
    if (error) *error = q(status.message());
    setStatus(q(status.message()), true);
    return false;
  }
  m_workspacePath = path;
  m_workspaceName = q(ws.name);
  m_undo->setClean();
  setClean();
  QSettings().setValue(QStringLiteral("session/lastWorkspace"), QFileInfo(path).absoluteFilePath());
  addRecentFile(QFileInfo(path).absoluteFilePath());
  setStatus(QStringLiteral("Saved %1").arg(path));
  return true;
}

bool MainWindow::exportPlanJson(const QString& path, QString* error) {
  if (!m_plan) {
    if (error) *error = QStringLiteral("Nothing to export: solve or open a plan first");
    setStatus(QStringLiteral("Nothing to export: solve or open a plan first"), true);
    return false;
  }
  if (Status s = savePlan(path.toStdString(), *m_plan); !s) {
    if (error) *error = q(s.message());
    setStatus(q(s.message()), true);
    return false;
  }
  setStatus(QStringLiteral("Exported %1 (run it with pipestudio-cli run)").arg(path));
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
  if (lower.endsWith(QStringLiteral(".plan.json"))) return exportPlanJson(path, error);
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
    if (!m_timeline->exportImage(path, 1600, 900, true)) return fail(QStringLiteral("Could not write %1").arg(path));
  } else {
    return fail(
        QStringLiteral("%1: unknown export format (expected .png, .svg, .pdf, .plan.json, .json, .csv, .sh or .toml)")
            .arg(path));
  }
  setStatus(QStringLiteral("Exported %1").arg(path));
  return true;
}

QString MainWindow::statusText() const { return m_statusLabel->text(); }

void MainWindow::setStatus(const QString& text, bool error) {
  m_statusLabel->setText(text);
  m_statusLabel->setToolTip(text);
  m_statusLabel->setStyleSheet(error ? QStringLiteral("QLabel { color: #e53935; }") : QString());
}

void MainWindow::markModified() {
  m_dirty = true;
  updateTitle();
}

void MainWindow::setClean() {
  m_dirty = false;
  updateTitle();
}

void MainWindow::updateTitle() {
  // "model · cluster — file[*]": what is being planned, on what, saved where.
  const QString file =
      !m_workspacePath.isEmpty()
          ? QFileInfo(m_workspacePath).fileName()
          : (m_workspaceName.isEmpty() ? QStringLiteral("untitled") : m_workspaceName + QStringLiteral(" (not saved)"));
  QStringList what;
  if (!m_layers->modelSpec().name.empty()) what << q(m_layers->modelSpec().name);
  if (!m_cluster->clusterSpec().name.empty()) what << q(m_cluster->clusterSpec().name);
  const QString head = what.isEmpty() ? QString() : what.join(QStringLiteral(" · ")) + QStringLiteral(" — ");
  setWindowTitle(QStringLiteral("%1%2[*] — PipeStudio").arg(head, file));
  setWindowModified(m_dirty);
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
    makeAction(m_recentMenu, QFileInfo(path).fileName(), QKeySequence(), this, [this, path]() {
      openFile(path);
    })->setToolTip(path);
  }
  m_recentMenu->setEnabled(!files.isEmpty());
}

void MainWindow::openDialog() {
  const QString path = QFileDialog::getOpenFileName(
      this, QStringLiteral("Open"), QString(),
      QStringLiteral("PipeStudio documents (*.pipestudio *.json *.pstrace *.trace);;All files (*)"));
  if (!path.isEmpty()) openFile(path);
}

bool MainWindow::saveDialog(bool saveAs) {
  QString path = m_workspacePath;
  if (saveAs || path.isEmpty()) {
    path = QFileDialog::getSaveFileName(this, QStringLiteral("Save Workspace"), path,
                                        QStringLiteral("PipeStudio workspace (*.pipestudio)"));
  }
  if (path.isEmpty()) return false;
  if (!path.endsWith(QStringLiteral(".pipestudio"))) path += QStringLiteral(".pipestudio");
  QString error;
  if (!saveWorkspaceTo(path, &error)) {
    QMessageBox::warning(this, QStringLiteral("Cannot save"), error);
    return false;
  }
  return true;
}

#ifdef PIPESTUDIO_HAVE_HISTORY
/// What File > Import Trace produced: the run and, when it matched the plan op by op, the
/// measured run as a plan to draw under it.
struct TraceImportOutcome {
  history::TraceImportResult result;
  std::shared_ptr<const Plan> measured;
};

namespace {

/// The import itself, free of widgets: runs on the GUI thread (importTraces) or a worker.
Expected<TraceImportOutcome> importTraceFiles(history::HistoryStore& store, const QStringList& files,
                                              const std::shared_ptr<const Plan>& plan) {
  std::vector<std::string> paths;
  for (const QString& f : files) paths.push_back(f.toStdString());
  history::TraceImportOptions options;
  if (plan) options.plan = plan.get();
  auto result = history::importTraces(store, paths, options);
  if (!result) return result.error();
  TraceImportOutcome out{*result, nullptr};
  if (plan) {
    if (auto id = store.addPlan(*plan, "workspace plan")) (void)store.linkRunToPlan(result->runId, *id);
  }
  if (plan && result->matchedOps > 0) {
    if (auto measured = store.runAsPlan(result->runId, 0))
      out.measured = std::make_shared<const Plan>(std::move(*measured));
  }
  return out;
}

}  // namespace

void MainWindow::showImportedTrace(const TraceImportOutcome& outcome) {
  m_history->refresh();
  // The measured run drawn under the plan it executed (the compare view's lanes, one axis).
  if (m_plan && outcome.measured) {
    m_compare->setPlans(m_plan, outcome.measured);
    m_tabs->setCurrentIndex(1);
  }
  setStatus(QStringLiteral("Imported run %1: %2 events, %3 ops matched to the plan")
                .arg(outcome.result.runId)
                .arg(outcome.result.events)
                .arg(outcome.result.matchedOps));
}

bool MainWindow::importTraces(const QStringList& files, QString* error) {
  auto fail = [&](const QString& message) {
    if (error) *error = message;
    setStatus(message, true);
    return false;
  };
  if (!m_history || !m_history->store()) return fail(QStringLiteral("No history database is open"));
  auto outcome = importTraceFiles(*m_history->store(), files, m_plan);
  if (!outcome) return fail(q(outcome.message()));
  showImportedTrace(*outcome);
  return true;
}

void MainWindow::importTraceDialog() {
  const QStringList files = QFileDialog::getOpenFileNames(
      this, QStringLiteral("Import Trace (one file per rank)"), QString(),
      QStringLiteral("Profiler traces (*.json *.json.gz *.sqlite *.pstrace);;All files (*)"));
  if (files.isEmpty()) return;
  if (!m_history || !m_history->store()) {
    QMessageBox::warning(this, QStringLiteral("Import failed"), QStringLiteral("No history database is open"));
    return;
  }
  setStatus(QStringLiteral("Importing %1 trace file(s)…").arg(files.size()));
  // A worker with its own connection: large traces take seconds to parse and store.
  m_importJob.start(
      [path = m_history->store()->path(), files,
       plan = m_plan](const JobTracker::Control&) -> Expected<TraceImportOutcome> {
        auto store = history::HistoryStore::open(path);
        if (!store) return store.error();
        return importTraceFiles(*store, files, plan);
      },
      [this](const Expected<TraceImportOutcome>& outcome) {
        if (!outcome) {
          setStatus(q(outcome.message()), true);
          QMessageBox::warning(this, QStringLiteral("Import failed"), q(outcome.message()));
          return;
        }
        showImportedTrace(*outcome);
      });
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
  bool discard = false;
  if (m_dirty) {
    const QMessageBox::StandardButton answer =
        m_askUnsaved
            ? m_askUnsaved()
            : QMessageBox::question(this, QStringLiteral("Unsaved changes"),
                                    QStringLiteral("The workspace has unsaved changes. Save them before "
                                                   "quitting?"),
                                    QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel) {
      event->ignore();
      return;
    }
    if (answer == QMessageBox::Save && !saveDialog(false)) {
      event->ignore();
      return;
    }
    discard = answer == QMessageBox::Discard;
  }
  writeSession(discard);
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
