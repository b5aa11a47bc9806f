// Issue 29 (the workstation closes the loop), driven through the real MainWindow on the
// offscreen platform: the Configure dock, the mouse wheel and undo, plain profiler traces,
// run against plan, two-pipe idle and chunk shades, workspace names, and the smaller items.
#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTest>
#include <QUndoStack>
#include <QWheelEvent>
#include <memory>

#include "ConfigureDock.hpp"
#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SolveController.hpp"
#include "SolverPanel.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {
namespace {

const std::string kLoopResources = PIPESTUDIO_RESOURCES;

Workspace bundledWorkspace(const std::string& model, const std::string& cluster, const PlanConfig& config) {
  Workspace ws;
  auto m = loadModel(kLoopResources + "/models/" + model);
  auto c = loadCluster(kLoopResources + "/clusters/" + cluster);
  EXPECT_TRUE(m) << (m ? "" : m.message());
  EXPECT_TRUE(c) << (c ? "" : c.message());
  if (m) ws.model = *m;
  if (c) ws.cluster = *c;
  ws.name = model + " on " + cluster;
  ws.solver = config;
  return ws;
}

void forgetSession() {
  QSettings settings;
  settings.remove(QStringLiteral("session"));
  settings.remove(QStringLiteral("window"));
  QFile::remove(MainWindow::sessionFilePath());
}

class LoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pipestudio::testing::qtApp();
    forgetSession();
    window = std::make_unique<MainWindow>();
    window->setUnsavedChangesHandler([] { return QMessageBox::Discard; });
    window->solveController()->setDebounceMs(20);
  }
  void TearDown() override { forgetSession(); }
  void openDefault() {
    ASSERT_TRUE(window->openDefaultWorkspace());
    ASSERT_TRUE(window->solveController()->waitForIdle(60000));
    ASSERT_TRUE(window->currentPlan()) << window->statusText().toStdString();
  }
  void openBundled(const std::string& model, const std::string& cluster, const PlanConfig& config) {
    window->setWorkspace(bundledWorkspace(model, cluster, config), QString());
    ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  }
  std::unique_ptr<MainWindow> window;
};

/// A wheel notch over `widget`'s centre.
void wheelOver(QWidget* widget, int notches = 1) {
  const QPointF pos(widget->width() / 2.0, widget->height() / 2.0);
  QWheelEvent event(pos, widget->mapToGlobal(pos), QPoint(), QPoint(0, 120 * notches), Qt::NoButton, Qt::NoModifier,
                    Qt::NoScrollPhase, false);
  QApplication::sendEvent(widget, &event);
}

// --- 1: the Configure dock ------------------------------------------------------------------

TEST_F(LoopTest, TheConfigureDockRanksConfigurationsAndLoadsOneIntoThePanel) {
  PlanConfig c;
  c.schedule = "1f1b";
  c.devices = 4;
  c.partition = "balanced";
  c.globalBatch = 64;
  openBundled("llama3-8b.json", "h100-4x8-ib.json", c);
  ConfigureDock* dock = window->configureDock();
  ASSERT_NE(dock, nullptr);
  QAbstractItemModelTester tester(dock->model(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  qobject_cast<QLineEdit*>(dock->knob(QStringLiteral("Schedules")))->setText(QStringLiteral("1f1b, zb-h1"));
  qobject_cast<QSpinBox*>(dock->knob(QStringLiteral("Keep")))->setValue(6);
  qobject_cast<QSpinBox*>(dock->knob(QStringLiteral("Global batch")))->setValue(64);
  EXPECT_EQ(dock->options().schedules, (std::vector<std::string>{"1f1b", "zb-h1"}));

  dock->search();
  // Off the GUI thread, with progress and cancel while it runs.
  EXPECT_TRUE(dock->isSearching());
  EXPECT_TRUE(dock->progressBar()->isVisibleTo(dock));
  EXPECT_TRUE(dock->cancelButton()->isEnabled());
  ASSERT_TRUE(dock->waitForIdle(300000));
  EXPECT_FALSE(dock->isSearching());
  EXPECT_FALSE(dock->cancelButton()->isEnabled());
  ConfigureModel* model = dock->model();
  ASSERT_GE(model->rowCount(), 2) << dock->summaryLabel()->text().toStdString();
  EXPECT_LE(model->rowCount(), 6);
  // How many were screened and pruned, and why the rest were rejected.
  const QString summary = dock->summaryLabel()->text();
  for (const char* part : {"configurations", "pruned by memory bounds", "screened", "ranked"})
    EXPECT_TRUE(summary.contains(QLatin1String(part))) << summary.toStdString();
  EXPECT_EQ(dock->rejectedTable()->rowCount(), static_cast<int>(model->result()->rejected.size()));
  // Ranked by throughput; each row says configuration, iteration, tokens/s, MFU, headroom.
  for (int r = 0; r < model->rowCount(); ++r) {
    const ConfigCandidate& cand = model->candidate(r);
    if (r > 0) EXPECT_LE(cand.throughputSamplesPerS, model->candidate(r - 1).throughputSamplesPerS);
    EXPECT_TRUE(model->data(model->index(r, ConfigureModel::Configuration))
                    .toString()
                    .startsWith(QString::fromStdString(cand.config.schedule)));
    EXPECT_DOUBLE_EQ(model->data(model->index(r, ConfigureModel::Mfu), Qt::UserRole).toDouble(), cand.metrics.mfu);
    EXPECT_GT(model->data(model->index(r, ConfigureModel::Headroom), Qt::UserRole).toLongLong(), 0);
    EXPECT_FALSE(model->data(model->index(r, ConfigureModel::IterationMs)).toString().isEmpty());
  }

  // A click loads the second configuration into the solver panel: one undoable edit, re-solved.
  const PlanConfig chosen = model->candidate(1).config;
  window->show();
  dock->table()->scrollTo(model->index(1, ConfigureModel::Configuration));
  const QRect cell = dock->table()->visualRect(model->index(1, ConfigureModel::Configuration));
  window->findChild<QDockWidget*>(QStringLiteral("ConfigureDock"))->raise();
  QApplication::processEvents();
  QTest::mouseClick(dock->table()->viewport(), Qt::LeftButton, Qt::NoModifier, cell.center());
  const SolverPanel& panel = window->solverPanel();
  EXPECT_EQ(panel.tp->value(), chosen.parallel.tensor);
  EXPECT_EQ(panel.dp->value(), chosen.parallel.data);
  EXPECT_EQ(panel.devices->value(), chosen.devices);
  EXPECT_EQ(window->currentRequest().config.schedule, chosen.schedule);
  EXPECT_EQ(window->currentRequest().config.microbatches, chosen.microbatches);
  EXPECT_TRUE(window->undoStack()->canUndo());
  EXPECT_TRUE(window->undoStack()->undoText().contains(QStringLiteral("configuration")));
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  ASSERT_TRUE(window->currentPlan());
  EXPECT_EQ(window->currentPlan()->config.parallel.tensor, chosen.parallel.tensor);
  EXPECT_EQ(window->currentPlan()->config.schedule, chosen.schedule);

  // Two pinned rows open side by side in the compare view.
  EXPECT_FALSE(dock->compareButton()->isEnabled());
  model->setPinned(0, true);
  model->setPinned(2 < model->rowCount() ? 2 : 1, true);
  EXPECT_TRUE(dock->compareButton()->isEnabled());
  dock->comparePinned();
  ASSERT_TRUE(dock->waitForIdle(120000));
  EXPECT_EQ(window->centralTabs()->currentIndex(), 1);
  ASSERT_TRUE(window->compareView()->baseline() && window->compareView()->current());
  EXPECT_EQ(window->compareView()->baseline()->config.parallel, model->candidate(0).config.parallel);
}

TEST_F(LoopTest, AConfigureSearchCanBeCancelled) {
  PlanConfig c;
  c.schedule = "1f1b";
  c.devices = 8;
  c.partition = "balanced";
  openBundled("llama3-70b.json", "h100-8x8-ib.json", c);
  ConfigureDock* dock = window->configureDock();
  dock->search();
  dock->cancel();
  ASSERT_TRUE(dock->waitForIdle(300000));
  EXPECT_FALSE(dock->isSearching());
  EXPECT_TRUE(dock->summaryLabel()->text().contains(QStringLiteral("cancelled")))
      << dock->summaryLabel()->text().toStdString();
  EXPECT_EQ(dock->model()->rowCount(), 0);
}

// --- 2: the wheel and undo ------------------------------------------------------------------

TEST_F(LoopTest, TheWheelEditsOnlyFocusedBoxesAndPanelEditsAreUndoable) {
  openDefault();
  window->show();
  QApplication::setActiveWindow(window.get());
  const SolverPanel& panel = window->solverPanel();
  window->setFocus();
  ASSERT_FALSE(panel.tp->hasFocus());
  const int tp = panel.tp->value();
  const int microbatches = panel.microbatches->value();
  const int recompute = panel.recompute->currentIndex();
  wheelOver(panel.tp);
  wheelOver(panel.microbatches, -1);
  wheelOver(panel.recompute, -1);
  EXPECT_EQ(panel.tp->value(), tp);
  EXPECT_EQ(panel.microbatches->value(), microbatches);
  EXPECT_EQ(panel.recompute->currentIndex(), recompute);
  EXPECT_FALSE(window->solveController()->isPending() || window->solveController()->isRunning());
  EXPECT_FALSE(window->undoStack()->canUndo());
  // Focused (a click or Tab), the wheel edits it.
  panel.microbatches->setFocus();
  ASSERT_TRUE(panel.microbatches->hasFocus());
  wheelOver(panel.microbatches, -1);
  EXPECT_EQ(panel.microbatches->value(), microbatches - 1);

  // Each edit of the panel is a step on the window's undo stack (Edit > Undo).
  ASSERT_TRUE(window->undoStack()->canUndo());
  EXPECT_EQ(window->undoStack()->undoText(), QStringLiteral("change Microbatches"));
  panel.tp->setValue(2);
  panel.recompute->setCurrentText(QStringLiteral("full"));
  EXPECT_EQ(window->undoStack()->undoText(), QStringLiteral("change Recompute"));
  window->undoStack()->undo();
  EXPECT_EQ(panel.recompute->currentIndex(), recompute);
  EXPECT_EQ(panel.tp->value(), 2);
  window->undoStack()->undo();
  EXPECT_EQ(panel.tp->value(), tp);
  window->undoStack()->undo();
  EXPECT_EQ(panel.microbatches->value(), microbatches);
  EXPECT_FALSE(window->undoStack()->canUndo());
  window->undoStack()->redo();
  EXPECT_EQ(panel.microbatches->value(), microbatches - 1);
  // An undo re-solves what it restored.
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_EQ(window->currentPlan()->config.microbatches, microbatches - 1);
  // The editors' cells share the stack: one Undo walks back through both in order.
  viz::ClusterTableModel* cluster = window->clusterModel();
  const QModelIndex memory = cluster->index(0, viz::ClusterTableModel::MemoryGib);
  const QVariant before = cluster->data(memory, Qt::EditRole);
  ASSERT_TRUE(cluster->setData(memory, QStringLiteral("40")));
  window->undoStack()->undo();
  EXPECT_EQ(cluster->data(memory, Qt::EditRole), before);
  window->undoStack()->undo();
  EXPECT_EQ(panel.microbatches->value(), microbatches);
}

}  // namespace
}  // namespace pipestudio::gui
