#include "MainWindow.hpp"

#include <QCloseEvent>
#include <QLabel>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QUndoStack>
#include <algorithm>

#include "Docks.hpp"
#include "FailureDetails.hpp"
#include "GuiText.hpp"
#include "MenuController.hpp"
#include "MetricsPanel.hpp"
#include "RunController.hpp"
#include "SettingsFit.hpp"
#include "SolveController.hpp"
#include "SolverPanel.hpp"
#include "WorkspaceController.hpp"
#ifdef PIPESTUDIO_HAVE_HISTORY
#include "HistoryDock.hpp"
#include "MeasuredRunReader.hpp"
#endif
#include "pipestudio/common/Units.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {

namespace {
QString q(const std::string& s) { return QString::fromStdString(s); }
/// What a window manager's frame usually takes around a window (title bar and borders).
constexpr int kFrameAllowancePx = 40;

/// A status-bar label that ends a text too long for it in "…" (the whole text is its tooltip),
/// rather than cutting it mid-word.
class ElidedLabel : public QLabel {
 public:
  using QLabel::QLabel;

 protected:
  void paintEvent(QPaintEvent* /*event*/) override {
    QPainter painter(this);
    painter.setPen(palette().color(foregroundRole()));
    const QRect area = contentsRect();
    painter.drawText(area, Qt::AlignLeft | Qt::AlignVCenter,
                     fontMetrics().elidedText(text().simplified(), Qt::ElideRight, area.width()));
  }
};
}  // namespace

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

  m_docks = new Docks(this, *this, m_undo, m_timeline);
  m_workspace = new WorkspaceController(this, *this, *m_docks, m_undo, m_tabs);
  m_runs = new RunController(
      this, *this, m_timeline, [this]() { return m_workspace->isNamedByUser() ? m_workspace->name() : QString(); },
      [this]() { return m_workspace->path(); });
  buildStatusBar();
  connectSolver();

  SolverPanel* panel = m_docks->solverPanel();
  connect(panel, &SolverPanel::configEdited, this, &MainWindow::onParametersChanged);
  connect(panel, &SolverPanel::solveRequested, this, &MainWindow::solveNow);
  connect(panel, &SolverPanel::cancelRequested, m_solver, &SolveController::cancel);
  connect(panel, &SolverPanel::detailsRequested, this, [this]() { showFailureDetails(); });
  connect(panel, &SolverPanel::settingAdjusted, this, &MainWindow::noteAdjustedSettings);
  connect(m_docks, &Docks::inputsEdited, this, &MainWindow::onParametersChanged);
  connect(m_docks, &Docks::invalidCellEntered, this,
          [this]() { markStale(QStringLiteral("an editor cell is invalid: fix the red cell to solve")); });

  MenuTargets targets;
  targets.workspace = m_workspace;
  targets.runs = m_runs;
  targets.solver = m_solver;
  targets.timeline = m_timeline;
  targets.tabs = m_tabs;
  targets.undo = m_undo;
  targets.dockActions = m_docks->toggleActions();
  targets.solve = [this]() { solveNow(); };
  targets.pinBaseline = [this]() { pinBaseline(); };
  targets.clearBaseline = [this]() { clearBaseline(); };
#ifdef PIPESTUDIO_HAVE_HISTORY
  targets.compareRunWithPlan = [this]() {
    ensureHistoryOpen();
    historyDock()->compareWithPlan();
  };
#endif
  m_menus = new MenuController(this, std::move(targets));

  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  if (!settings.contains(QStringLiteral("window/geometry"))) {
    // A first start fits the screen, whatever its size (1024×700 included).
    // The frame (title bar, borders) comes on top of the window: leave room for it, or the
    // status bar ends below the screen's edge.
    const QRect available = screen() ? screen()->availableGeometry() : QRect(0, 0, 1500, 920);
    resize(std::min(1500, available.width() - kFrameAllowancePx),
           std::min(920, available.height() - kFrameAllowancePx));
  }
  m_workspace->updateTitle();
  setStatus(QStringLiteral("Ready"));
}

MainWindow::~MainWindow() {
  m_solver->cancel();
  m_solver->waitForIdle(5000);
}

void MainWindow::buildStatusBar() {
  // What is happening, what is under the mouse, solve progress.
  m_statusLabel = new ElidedLabel(this);
  m_statusLabel->setMinimumWidth(10);
  m_statusLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  m_hoverLabel = new ElidedLabel(this);
  m_hoverLabel->setTextFormat(Qt::PlainText);
  m_hoverLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  m_statusProgress = new QProgressBar(this);
  m_statusProgress->setMaximumWidth(160);
  m_statusProgress->setRange(0, 100);
  m_statusProgress->setVisible(false);
  statusBar()->addWidget(m_statusLabel, 1);
  statusBar()->addWidget(m_hoverLabel, 1);
  statusBar()->addPermanentWidget(m_statusProgress);
  connect(m_timeline, &viz::TimelineView::hovered, m_hoverLabel, [this](const QString& text) {
    m_hoverLabel->setText(text);
    m_hoverLabel->setToolTip(text);
  });
}

void MainWindow::connectSolver() {
  connect(m_solver, &SolveController::started, this, [this](quint64) {
    m_docks->solverPanel()->setSolving(true);
    m_statusProgress->setValue(0);
    m_statusProgress->setVisible(true);
    setStatus(QStringLiteral("Solving %1 on %2 devices…")
                  .arg(q(currentRequest().config.schedule))
                  .arg(m_docks->solverPanel()->devices->value()));
    if (m_plan && !m_timeline->isStale()) markStale(QStringLiteral("solving the current settings…"), false);
  });
  connect(m_solver, &SolveController::progress, this, [this](double f) {
    m_docks->solverPanel()->setProgress(f);
    m_statusProgress->setValue(static_cast<int>(f * 100));
  });
  connect(m_solver, &SolveController::solved, this, &MainWindow::onSolved);
  connect(m_solver, &SolveController::failed, this, &MainWindow::onSolveFailed);
  connect(m_solver, &SolveController::cancelled, this, [this]() {
    m_docks->solverPanel()->setSolving(false);
    m_statusProgress->setVisible(false);
    setStatus(QStringLiteral("Solve cancelled"));
    m_docks->solverPanel()->setMessage(QStringLiteral("Solve cancelled: the plan shown is not of the current settings"),
                                       true, false);
    markStale(QStringLiteral("solve cancelled: the current settings are not solved"));
  });
}

// --- documents, exports and runs (delegated) -------------------------------------------------

bool MainWindow::openFile(const QString& path, QString* error, bool quiet) {
  return m_workspace->openFile(path, error, quiet);
}
bool MainWindow::openFromCommandLine(const QString& path) { return m_workspace->openFromCommandLine(path); }
QMessageBox* MainWindow::openErrorBox() const { return m_workspace->openErrorBox(); }
bool MainWindow::openDefaultWorkspace() { return m_workspace->openDefaultWorkspace(); }
void MainWindow::openStartupWorkspace() { m_workspace->openStartupWorkspace(); }
void MainWindow::setWorkspace(const Workspace& workspace, const QString& path) {
  m_workspace->setWorkspace(workspace, path);
}
bool MainWindow::saveWorkspaceTo(const QString& path, QString* error) { return m_workspace->saveTo(path, error); }
QString MainWindow::workspacePath() const { return m_workspace->path(); }
QString MainWindow::workspaceName() const { return m_workspace->name(); }
void MainWindow::renameWorkspace(const QString& name) { m_workspace->rename(name); }
bool MainWindow::isModified() const { return m_workspace->isModified(); }
QStringList MainWindow::bundledDifferences() const { return m_workspace->bundledDifferences(); }
QString MainWindow::sessionFilePath() { return WorkspaceController::sessionFilePath(); }
void MainWindow::setUnsavedChangesHandler(std::function<QMessageBox::StandardButton()> handler) {
  m_workspace->setUnsavedChangesHandler(std::move(handler));
}
bool MainWindow::exportTo(const QString& path, QString* error) { return m_runs->exportTo(path, error); }
bool MainWindow::exportPlanJson(const QString& path, QString* error) { return m_runs->exportPlanJson(path, error); }
bool MainWindow::exportAs(ExportFormat format, const QString& path, QString* error) {
  return m_runs->exportAs(format, path, error);
}
#ifdef PIPESTUDIO_HAVE_HISTORY
bool MainWindow::importTraces(const QStringList& files, QString* error) { return m_runs->importTraces(files, error); }
#endif
QAction* MainWindow::deployAction() const { return m_menus->deployAction(); }
QAction* MainWindow::runLocallyAction() const { return m_menus->runLocallyAction(); }
void MainWindow::openDeployDialog() { m_runs->openDeployDialog(); }
RunLocalDialog* MainWindow::openRunLocalDialog() { return m_runs->openRunLocalDialog(); }
QString MainWindow::shortcutsHtml() { return MenuController::shortcutsHtml(); }

viz::LayerTableModel* MainWindow::layerModel() const { return m_docks->layers(); }
viz::ComponentTableModel* MainWindow::componentModel() const { return m_docks->components(); }
viz::ClusterTableModel* MainWindow::clusterModel() const { return m_docks->cluster(); }
QTableView* MainWindow::layerView() const { return m_docks->layerView(); }
viz::MetricsModel* MainWindow::metricsModel() const { return m_docks->metrics()->model(); }
QLabel* MainWindow::metricsSummary() const { return m_docks->metrics()->summary(); }
viz::MemoryBreakdownView* MainWindow::memoryBreakdown() const { return m_docks->metrics()->breakdown(); }
viz::SelectionPanel* MainWindow::selectionPanel() const { return m_docks->selection(); }
const SolverPanel& MainWindow::solverPanel() const { return *m_docks->solverPanel(); }
HistoryDock* MainWindow::historyDock() const { return m_docks->history(); }
ConfigureDock* MainWindow::configureDock() const { return m_docks->configure(); }

bool MainWindow::ensureHistoryOpen(QString* error) {
#ifdef PIPESTUDIO_HAVE_HISTORY
  HistoryDock* history = m_docks->history();
  if (history->store()) return true;
  const QString path = q(history::defaultHistoryPath());
  QString why;
  if (history->openDatabase(path, &why)) return true;
  if (error) *error = QStringLiteral("The history database %1 cannot be opened: %2").arg(path, why);
  return false;
#else
  if (error) *error = QStringLiteral("This build has no history (core/history)");
  return false;
#endif
}

// --- request, parameters ------------------------------------------------------------------

PlanRequest MainWindow::currentRequest() const {
  PlanRequest request;
  request.model = m_docks->modelSpec();
  request.cluster = m_docks->clusterSpec();
  request.config = m_docks->solverPanel()->config();
  return request;
}

void MainWindow::updateDerivedFields() {
  // Fields the resolved request derives show it: the microbatch count from the global batch,
  // sequence parallelism only with TP; the layer table's "auto" cells under these degrees.
  PlanRequest request = currentRequest();
  m_docks->solverPanel()->updateDerivedFields(request.model.samplesPerMicrobatch, hasExperts(request.model));
  request.config = m_docks->solverPanel()->config();
  if (auto resolved = resolveRequest(request)) {
    m_docks->layers()->setCostContext(resolved->cluster, resolved->config, resolved->model.samplesPerMicrobatch);
  } else {
    m_docks->layers()->setCostContext(request.cluster, PlanConfig{}, request.model.samplesPerMicrobatch);
  }
}

void MainWindow::onParametersChanged() {
  m_workspace->markModified();
  setSettled(nullptr);
  SolverPanel* panel = m_docks->solverPanel();
  if (const auto problem = panel->memoryLimitProblem()) {
    setStatus(QStringLiteral("Memory limit ") + *problem, true);
    markStale(QStringLiteral("the Memory limit is not a size: fix it to solve"));
    return;
  }
  updateDerivedFields();
  if (m_docks->hasInvalidCell()) {
    setStatus(QStringLiteral("Fix the cells marked red before solving"), true);
    markStale(QStringLiteral("an editor cell is invalid: fix the red cell to solve"));
    return;
  }
  if (panel->autoSolveEnabled()) {
    m_solver->scheduleSolve(currentRequest());
    markStale(QStringLiteral("settings changed: solving…"), false);
  } else {
    markStale(QStringLiteral("settings changed: press Solve (F5)"));
  }
}

bool MainWindow::focusFirstInvalidCell() {
  const auto where = m_docks->focusFirstInvalidCell();
  if (!where) return false;
  const QString text = QStringLiteral("Fix the red cell first: %1").arg(*where);
  setStatus(text, true);
  m_docks->solverPanel()->setMessage(text, true, false);
  return true;
}

void MainWindow::solveNow() {
  if (focusFirstInvalidCell()) {
    markStale(QStringLiteral("an editor cell is invalid: fix the red cell to solve"));
    return;
  }
  m_solver->solve(currentRequest());
}

void MainWindow::noteAdjustedSettings(const QString& note) {
  if (note.isEmpty()) return;
  m_adjusted = m_adjusted.isEmpty() ? note : m_adjusted + QStringLiteral("; ") + note;
  setStatus(QStringLiteral("Adjusted: ") + m_adjusted);
}

void MainWindow::solveChangedInputs(const QString& why) {
  setSettled(nullptr);
  updateDerivedFields();
  markStale(why, false);
  solveNow();
}

// --- results ------------------------------------------------------------------------------

void MainWindow::onSolved(std::shared_ptr<const Plan> plan, double elapsedMs) {
  SolverPanel* panel = m_docks->solverPanel();
  panel->setSolving(false);
  m_statusProgress->setVisible(false);
  m_failure.clear();
  m_diagnosis.reset();
  // DiffusionPipe picks the schedule itself: the box and the message say which.
  const QString chosen = q(plan->config.schedule);
  const bool picked = plan->config.partition == "diffusionpipe";
  if (picked) panel->showChosenSchedule(chosen);
  QString solvedText = picked
                           ? QStringLiteral("Solved in %1; DiffusionPipe chose %2").arg(q(formatMs(elapsedMs)), chosen)
                           : QStringLiteral("Solved in %1").arg(q(formatMs(elapsedMs)));
  if (!m_adjusted.isEmpty()) solvedText += QStringLiteral(" · ") + m_adjusted;
  m_adjusted.clear();
  panel->setMessage(solvedText, false, false);
  setStale(QString());
  setSettled(plan);
  showPlan(std::move(plan));
  const Metrics& m = m_docks->metrics()->model()->metrics();
  // The solve's own time is named as such: "(995.4 µs)" after the bubble read as its size.
  setStatus(QStringLiteral("Solved %1 in %2: makespan %3, bubble %4 %")
                .arg(q(m_plan->config.schedule), q(formatMs(elapsedMs)), q(formatMs(m.makespanMs)))
                .arg(m.bubbleRatio * 100, 0, 'f', 1));
}

void MainWindow::onSolveFailed(const QString& message, std::shared_ptr<const MemoryDiagnosis> diagnosis) {
  SolverPanel* panel = m_docks->solverPanel();
  panel->setSolving(false);
  m_statusProgress->setVisible(false);
  m_failure = withFieldNames(message);
  if (!m_adjusted.isEmpty()) m_failure += QStringLiteral("\n\nAdjusted before this solve: ") + m_adjusted;
  m_adjusted.clear();
  m_diagnosis = std::move(diagnosis);
  QString summary = summaryLine(m_failure);
  if (m_diagnosis && m_diagnosis->smallestFittingDevices)
    summary += QStringLiteral(" — fits with Devices %1").arg(*m_diagnosis->smallestFittingDevices);
  panel->setMessage(summary, true, summary != m_failure.simplified() || m_diagnosis != nullptr);
  panel->message->setToolTip(m_failure);
  setStatus(QStringLiteral("Solve failed: ") + summary, true);
  markStale(QStringLiteral("current settings failed: %1").arg(summary));
}

void MainWindow::forgetFailure() {
  m_failure.clear();
  m_diagnosis.reset();
  m_docks->solverPanel()->setMessage(QString(), false, false);
}

void MainWindow::markStale(const QString& why, bool dim) {
  if (!m_plan) {
    setStale(QStringLiteral("no plan · %1").arg(why), dim);
    return;
  }
  // Transient states (solving) are named but not dimmed, so editing does not flicker.
  setStale(QStringLiteral("last good plan: %1 · %2").arg(q(m_plan->config.schedule), why), dim);
}

void MainWindow::setStale(const QString& label, bool dim) {
  // The timeline and the Metrics dock say the same: their numbers are of the plan on screen.
  // A solve under way ("solving…") is transient: the dock does not flicker with it.
  m_timeline->setStale(label, dim);
  const bool transient = !dim && label.contains(QStringLiteral("solving"));
  if (!transient) m_docks->metrics()->setStale(label);
}

bool MainWindow::planMatchesSettings() const { return m_plan && !m_timeline->isStale(); }

QDialog* MainWindow::showFailureDetails() {
  if (m_failure.isEmpty()) return nullptr;
  return gui::showFailureDetails(this, m_failure, m_diagnosis.get());
}

void MainWindow::setSettled(std::shared_ptr<const Plan> plan) {
  m_settled = std::move(plan);
  // Run Locally and Deploy run the solve of the settings on screen, nothing else: a dimmed last
  // good plan (another model, failed settings) or a measured run is never run or recorded.
  const QString why = m_settled ? QString()
                                : QStringLiteral(
                                      "The current settings have no plan (solving, failed or edited): "
                                      "solve them first");
  if (m_menus) m_menus->setPlanActionsEnabled(m_settled != nullptr, why);
  if (m_runs) m_runs->solvedPlanChanged();
}

void MainWindow::showPlan(std::shared_ptr<const Plan> plan, std::shared_ptr<const viz::ActivityTrace> activity,
                          bool measured) {
  m_plan = std::move(plan);
  m_measuredOnScreen = measured && m_plan != nullptr;
  m_timeline->setPlan(m_plan, true, std::move(activity));
  m_timeline->selectOp(-1);
  std::int64_t limit = 0;
  if (m_plan) {
    limit = m_plan->config.memoryLimitBytes.value_or(0);
    if (limit == 0 && m_plan->cluster.gpu.memoryGib > 0) limit = m_plan->cluster.gpu.memoryBytes();
  }
  m_timeline->setMemoryLimit(limit);
  showComparisons();
}

void MainWindow::showComparisons() {
  // A measured run is compared with the pinned baseline or else the solve of the settings; the
  // pinned baseline itself stays what the user pinned.
  const auto against = m_measuredOnScreen && !m_baseline ? m_settled : m_baseline;
  m_docks->metrics()->setPlans(m_plan, against, against == m_baseline);
  m_compare->setPlans(against, m_plan, m_measuredOnScreen);
}

void MainWindow::showSettledPlan(std::shared_ptr<const Plan> plan) {
  m_solver->cancel();
  updateDerivedFields();
  setStale(QString());
  setSettled(plan);
  showPlan(std::move(plan));
}

void MainWindow::showMeasuredInTimeline(std::shared_ptr<const Plan> measured, const QString& what,
                                        std::shared_ptr<const viz::ActivityTrace> activity) {
  // Compared against the solve of the settings (or the pinned baseline, which stays pinned), and
  // labelled so nobody takes it for a solve of the panel's settings.
  m_solver->cancel();
  showPlan(std::move(measured), std::move(activity), true);
  markStale(QStringLiteral("showing %1, not a solve of the current settings").arg(what), false);
  m_tabs->setCurrentIndex(0);
}

void MainWindow::clearPlan(const QString& why) {
  setSettled(nullptr);
  showPlan(nullptr);
  setStale(QStringLiteral("no plan · %1").arg(why));
}

void MainWindow::showComparison(std::shared_ptr<const Plan> baseline, std::shared_ptr<const Plan> current) {
  m_compare->setPlans(std::move(baseline), std::move(current));
  m_tabs->setCurrentIndex(1);
}

void MainWindow::showRunAgainstPlan(const MeasuredRunView& run) {
#ifdef PIPESTUDIO_HAVE_HISTORY
  // The compare view only: the timeline keeps the solve of the panel's settings.
  m_compare->setMeasured(run.plan, run.measured, run.run);
  m_tabs->setCurrentIndex(1);
  setStatus(QStringLiteral("Compare: %1 against its plan").arg(run.run.label));
#else
  (void)run;
#endif
}

void MainWindow::pinBaseline() {
  if (!m_plan) return;
  m_baseline = m_plan;
  showComparisons();
  setStatus(
      QStringLiteral("Pinned %1 as baseline: later solves are compared against it").arg(q(m_plan->config.schedule)));
}

void MainWindow::clearBaseline() {
  m_baseline.reset();
  showComparisons();
}

void MainWindow::unpinBaseline(const QString& why) {
  if (!m_baseline) return;
  clearBaseline();
  if (!why.isEmpty()) setStatus(why);
}

QString MainWindow::statusText() const { return m_statusLabel->text(); }

void MainWindow::setStatus(const QString& text, bool error) {
  m_statusLabel->setText(text);
  m_statusLabel->setToolTip(text);
  QPalette palette = m_hoverLabel->palette();
  if (error) palette.setColor(QPalette::WindowText, QColor(0xe5, 0x39, 0x35));
  m_statusLabel->setPalette(palette);
}

// --- window events ----------------------------------------------------------------------------

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!m_workspace->confirmClose()) {
    event->ignore();
    return;
  }
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
