// Issue 16 (the workstation as a newcomer meets it) and the GUI part of issue 13 (hybrid
// parallelism), driven through the real MainWindow on the offscreen platform.
#include <gtest/gtest.h>

#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QThread>
#include <QUndoStack>
#include <cstdio>
#include <memory>

#include "GuiText.hpp"
#include "HistoryDock.hpp"
#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "RunLocalDialog.hpp"
#include "SolveController.hpp"
#include "WindowFixtures.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/SolverNames.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MemoryBreakdownView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SelectionPanel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/RunCommand.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio::gui {
namespace {

const std::string kResources = PIPESTUDIO_RESOURCES;

QString workstationDir() {
  const QString dir = QStringLiteral(PIPESTUDIO_BINARY_DIR) + QStringLiteral("/test-output/workstation");
  QDir().mkpath(dir);
  return dir;
}

/// Processes events until `done` holds (or the time is up).
template <typename Predicate>
bool waitFor(Predicate done, int timeoutMs) {
  QElapsedTimer timer;
  timer.start();
  while (!done()) {
    if (timer.elapsed() > timeoutMs) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(5);
  }
  return true;
}

using pipestudio::testing::bundledWorkspace;
using pipestudio::testing::pipelineConfig;
using pipestudio::testing::recomputedPipelineConfig;

class WorkstationTest : public pipestudio::testing::FreshWindowTest {
 protected:
  void SetUp() override {
    FreshWindowTest::SetUp();
    openDefault();
  }
  void solve() {
    window->solveNow();
    ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  }
};

// --- the state on screen is true ------------------------------------------------------------

TEST_F(WorkstationTest, TitleNamesModelClusterAndFileAndMarksChanges) {
  const QString title = window->windowTitle();
  EXPECT_TRUE(title.contains(QString::fromStdString(window->layerModel()->modelSpec().name))) << title.toStdString();
  EXPECT_TRUE(title.contains(QString::fromStdString(window->clusterModel()->clusterSpec().name)))
      << title.toStdString();
  EXPECT_TRUE(title.contains(QStringLiteral("[*]")));
  EXPECT_FALSE(window->isWindowModified());
  window->solverPanel().microbatches->setValue(window->solverPanel().microbatches->value() + 2);
  EXPECT_TRUE(window->isModified());
  EXPECT_TRUE(window->isWindowModified());
  const QString path = workstationDir() + QStringLiteral("/titled.pipestudio");
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  ASSERT_TRUE(window->saveWorkspaceTo(path));
  EXPECT_FALSE(window->isWindowModified());
  EXPECT_TRUE(window->windowTitle().contains(QStringLiteral("titled.pipestudio")))
      << window->windowTitle().toStdString();
}

TEST_F(WorkstationTest, QuittingWithUnsavedChangesAsks) {
  window->show();
  int asked = 0;
  window->setUnsavedChangesHandler([&] {
    ++asked;
    return QMessageBox::Cancel;
  });
  EXPECT_TRUE(window->close());  // nothing changed: no question
  EXPECT_EQ(asked, 0);
  window->show();
  window->solverPanel().chunks->setValue(2);
  EXPECT_FALSE(window->close());  // Cancel keeps the window
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(window->isVisible());
  window->setUnsavedChangesHandler([&] {
    ++asked;
    return QMessageBox::Discard;
  });
  EXPECT_TRUE(window->close());
  EXPECT_EQ(asked, 2);
}

TEST_F(WorkstationTest, TheLastSessionIsRestoredOnStart) {
  // Saved, then changed and the change kept: the next start shows it, plan included, unsolved
  // work not redone, on the tab that was open.
  const QString path = workstationDir() + QStringLiteral("/session.pipestudio");
  ASSERT_TRUE(window->saveWorkspaceTo(path));
  window->solverPanel().microbatches->setValue(12);
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  ASSERT_EQ(window->currentPlan()->config.microbatches, 12);
  window->centralTabs()->setCurrentIndex(1);
  window->setUnsavedChangesHandler([] { return QMessageBox::Save; });  // saves to `path`
  window->show();
  ASSERT_TRUE(window->close());
  const auto ops = window->currentPlan()->ops.size();

  MainWindow next;
  next.openStartupWorkspace();
  EXPECT_FALSE(next.solveController()->isRunning());  // the plan came with the session
  ASSERT_TRUE(next.currentPlan());
  EXPECT_EQ(next.currentPlan()->ops.size(), ops);
  EXPECT_EQ(next.solverPanel().microbatches->value(), 12);
  EXPECT_EQ(next.workspacePath(), path);
  EXPECT_EQ(next.centralTabs()->currentIndex(), 1);
  EXPECT_FALSE(next.isModified());

  // Changes thrown away at quit are not restored: the saved file opens instead.
  next.solverPanel().microbatches->setValue(20);
  next.setUnsavedChangesHandler([] { return QMessageBox::Discard; });
  next.show();
  ASSERT_TRUE(next.close());
  MainWindow third;
  third.solveController()->setDebounceMs(20);
  third.openStartupWorkspace();
  ASSERT_TRUE(third.solveController()->waitForIdle(60000));
  EXPECT_EQ(third.solverPanel().microbatches->value(), 12);
  EXPECT_EQ(third.workspacePath(), path);
}

TEST_F(WorkstationTest, AFailedSolveLeavesTheLastGoodPlanDimmedAndLabelled) {
  const auto good = window->currentPlan();
  EXPECT_FALSE(window->timelineView()->isStale());
  // GPUs of 2 GiB: the plan does not fit.
  viz::ClusterTableModel* cluster = window->clusterModel();
  ASSERT_TRUE(cluster->setData(cluster->index(0, viz::ClusterTableModel::MemoryGib), QStringLiteral("2")));
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  EXPECT_EQ(window->currentPlan(), good);  // still on screen …
  viz::TimelineView* timeline = window->timelineView();
  EXPECT_TRUE(timeline->isStale());  // … but dimmed and labelled as what it is
  EXPECT_TRUE(timeline->plottable()->dimmed());
  EXPECT_TRUE(timeline->staleLabel().startsWith(QStringLiteral("last good plan: ") +
                                                QString::fromStdString(good->config.schedule)))
      << timeline->staleLabel().toStdString();
  EXPECT_TRUE(timeline->staleLabel().contains(QStringLiteral("current settings failed")))
      << timeline->staleLabel().toStdString();
  // One line in the panel, the whole story behind Details….
  const auto* message = window->findChild<QLabel*>(QStringLiteral("SolverMessage"));
  ASSERT_NE(message, nullptr);
  EXPECT_FALSE(message->text().contains(QLatin1Char('\n')));
  EXPECT_TRUE(window->solverPanel().details->isVisibleTo(window.get()));
  ASSERT_TRUE(window->lastDiagnosis()) << window->lastFailure().toStdString();
  const MemoryDiagnosis& d = *window->lastDiagnosis();
  ASSERT_EQ(d.devices.size(), static_cast<std::size_t>(good->config.devices));
  bool over = false;
  for (const DeviceOverage& o : d.devices) {
    EXPECT_EQ(o.capacityBytes, 2LL << 30);
    EXPECT_EQ(o.neededBytes, o.peakBytes + o.memory.marginBytes());
    over = over || o.overBytes() > 0;
  }
  EXPECT_TRUE(over);
  QDialog* details = window->showFailureDetails();
  ASSERT_NE(details, nullptr);
  auto* table = details->findChild<QTableWidget*>(QStringLiteral("FailureTable"));
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->rowCount(), good->config.devices);
  EXPECT_FALSE(table->item(0, 4)->text().isEmpty());  // the largest part is named
  auto* hint = details->findChild<QLabel*>(QStringLiteral("FailureHint"));
  ASSERT_NE(hint, nullptr);
  // 8 devices already use the cluster's 8 GPUs: the hint says what else helps.
  EXPECT_TRUE(hint->text().contains(QStringLiteral("Recompute"))) << hint->text().toStdString();
  details->close();

  // A good solve clears the mark.
  window->undoStack()->undo();
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  EXPECT_FALSE(timeline->isStale());
  EXPECT_FALSE(timeline->plottable()->dimmed());
}

TEST_F(WorkstationTest, TheSmallestFittingPipelineIsFound) {
  // Llama-2-70B on 4 devices without TP cannot fit an 80 GB GPU; a deeper pipeline can.
  PlanConfig c = recomputedPipelineConfig("1f1b", 4, 16);
  c.partition = "uniform";
  window->setWorkspace(bundledWorkspace("llama2-70b.json", "h100-4x8-ib.json", c), QString());
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  ASSERT_TRUE(window->lastDiagnosis()) << window->lastFailure().toStdString();
  // A copy: the next solve replaces the window's diagnosis.
  const std::optional<int> fitting = window->lastDiagnosis()->smallestFittingDevices;
  ASSERT_TRUE(fitting.has_value());
  const int smallest = *fitting;
  EXPECT_GT(smallest, 4);
  // It is the smallest: one device fewer does not fit.
  window->solverPanel().devices->setValue(smallest);
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  EXPECT_TRUE(window->lastFailure().isEmpty()) << window->lastFailure().toStdString();
  ASSERT_TRUE(window->currentPlan());
  EXPECT_EQ(window->currentPlan()->config.devices, smallest);
  if (smallest > 5) {
    window->solverPanel().devices->setValue(smallest - 1);
    ASSERT_TRUE(window->solveController()->waitForIdle(120000));
    EXPECT_FALSE(window->lastFailure().isEmpty());
  }
}

TEST_F(WorkstationTest, CancellingAndOpeningAnotherModelMarkThePlan) {
  window->solverPanel().autoSolve->setChecked(false);
  window->solverPanel().microbatches->setValue(window->solverPanel().microbatches->value() + 4);
  EXPECT_TRUE(window->timelineView()->isStale());  // settings changed, not solved
  EXPECT_TRUE(window->timelineView()->staleLabel().contains(QStringLiteral("press Solve")));
  window->solveNow();
  window->solveController()->cancel();
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_TRUE(window->timelineView()->staleLabel().contains(QStringLiteral("cancelled")))
      << window->timelineView()->staleLabel().toStdString();

  QString error;
  ASSERT_TRUE(window->openFile(QString::fromStdString(kResources + "/models/gpt3-1.3b.json"), &error, true))
      << error.toStdString();
  EXPECT_TRUE(window->timelineView()->isStale());
  EXPECT_TRUE(window->timelineView()->staleLabel().contains(QStringLiteral("GPT-3")) ||
              window->timelineView()->staleLabel().contains(QStringLiteral("model")))
      << window->timelineView()->staleLabel().toStdString();
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  if (window->lastFailure().isEmpty()) {
    EXPECT_FALSE(window->timelineView()->isStale());
    EXPECT_EQ(window->currentPlan()->model.name, window->layerModel()->modelSpec().name);
  } else {
    EXPECT_TRUE(window->timelineView()->staleLabel().contains(QStringLiteral("failed")));
  }
}

TEST_F(WorkstationTest, MessagesUseTheFieldNamesOfTheWindow) {
  EXPECT_EQ(withFieldNames(QStringLiteral("--tp 3 does not divide; --micro-batch-size 2 × --dp 4; --devices")),
            QStringLiteral("TP 3 does not divide; Micro-batch size 2 × DP 4; Devices"));
  EXPECT_EQ(withFieldNames(QStringLiteral("--unknown-flag stays")), QStringLiteral("--unknown-flag stays"));
  window->solverPanel().tp->setValue(3);
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  const QString failure = window->lastFailure();
  EXPECT_TRUE(failure.contains(QStringLiteral("TP 3 does not divide"))) << failure.toStdString();
  EXPECT_FALSE(failure.contains(QStringLiteral("--"))) << failure.toStdString();
  EXPECT_FALSE(window->lastDiagnosis());  // not a memory problem
}

TEST_F(WorkstationTest, TheScheduleBoxNamesWhatDiffusionPipeChose) {
  // The bundled workspace uses the diffusionpipe partition: the box says auto and the choice.
  QComboBox* schedule = window->solverPanel().schedule;
  const QString chosen = QString::fromStdString(window->currentPlan()->config.schedule);
  EXPECT_FALSE(schedule->isEnabled());
  EXPECT_EQ(schedule->currentText(), QStringLiteral("auto — DiffusionPipe chose ") + chosen);
  EXPECT_TRUE(schedule->toolTip().contains(QStringLiteral("DiffusionPipe chose ") + chosen))
      << schedule->toolTip().toStdString();
  // Another partition honours the schedule chosen before (the workspace's 1f1b).
  window->solverPanel().partition->setCurrentText(QStringLiteral("balanced"));
  EXPECT_TRUE(schedule->isEnabled());
  EXPECT_EQ(schedule->currentText(), QStringLiteral("1f1b"));
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_EQ(window->currentPlan()->config.schedule, "1f1b");
  window->solverPanel().partition->setCurrentText(QStringLiteral("diffusionpipe"));
  EXPECT_TRUE(schedule->currentText().startsWith(QStringLiteral("auto")));
  EXPECT_EQ(window->currentRequest().config.schedule, "1f1b");
}

TEST_F(WorkstationTest, InvalidCellsBlockSolvingAndTheMessageJumpsToThem) {
  viz::LayerTableModel* layers = window->layerModel();
  int row = -1;
  for (int r = 0; r < layers->rowCount() && row < 0; ++r) {
    const auto [c, l] = layers->layerOfRow(r);
    if (layers->modelSpec().components[static_cast<std::size_t>(c)].trainable) row = r;
  }
  ASSERT_GE(row, 0);
  const QModelIndex cell = layers->index(row, viz::LayerTableModel::ForwardMs);
  EXPECT_FALSE(layers->setData(cell, QStringLiteral("fast")));
  const auto before = window->currentPlan();
  window->solveNow();
  EXPECT_FALSE(window->solveController()->isRunning());
  EXPECT_EQ(window->currentPlan(), before);
  EXPECT_TRUE(window->statusText().contains(QStringLiteral("Fix the red cell first: Layers row %1").arg(row + 1)))
      << window->statusText().toStdString();
  EXPECT_EQ(window->layerView()->currentIndex(), cell);
  EXPECT_TRUE(window->timelineView()->isStale());
  // A good value unblocks.
  EXPECT_TRUE(layers->setData(cell, QString()));
  EXPECT_FALSE(window->focusFirstInvalidCell());
}

TEST_F(WorkstationTest, AutoCellsShowTheDerivedValueInGrey) {
  viz::LayerTableModel* layers = window->layerModel();
  int shaped = -1;
  for (int r = 0; r < layers->rowCount() && shaped < 0; ++r) {
    const auto [c, l] = layers->layerOfRow(r);
    const Layer& layer =
        layers->modelSpec().components[static_cast<std::size_t>(c)].layers[static_cast<std::size_t>(l)];
    if ((layer.transformer || layer.flopsForward) && !layer.forwardMs) shaped = r;
  }
  ASSERT_GE(shaped, 0);
  const QModelIndex forward = layers->index(shaped, viz::LayerTableModel::ForwardMs);
  const QString text = layers->data(forward).toString();
  ASSERT_TRUE(text.startsWith(QStringLiteral("auto · "))) << text.toStdString();
  bool ok = false;
  const double ms = text.mid(7).toDouble(&ok);
  EXPECT_TRUE(ok) << text.toStdString();
  EXPECT_GT(ms, 0.0);
  const QBrush grey = layers->data(forward, Qt::ForegroundRole).value<QBrush>();
  EXPECT_EQ(grey.color(), QColor(0x80, 0x80, 0x80));
  EXPECT_TRUE(layers->data(layers->index(shaped, viz::LayerTableModel::ParameterBytes))
                  .toString()
                  .startsWith(QStringLiteral("auto · ")));
}

TEST_F(WorkstationTest, ABrokenFileFromTheCommandLineShowsTheErrorNotTheDefault) {
  MainWindow fresh;
  const QString broken = workstationDir() + QStringLiteral("/broken.pipestudio");
  QFile file(broken);
  ASSERT_TRUE(file.open(QIODevice::WriteOnly));
  file.write("{ \"schema\": \"pipestudio.workspace/1\", \"model\": ");
  file.close();
  EXPECT_FALSE(fresh.openFromCommandLine(broken));
  ASSERT_NE(fresh.openErrorBox(), nullptr);
  EXPECT_TRUE(fresh.openErrorBox()->isVisible());
  EXPECT_TRUE(fresh.openErrorBox()->text().contains(QStringLiteral("broken.pipestudio")));
  EXPECT_TRUE(fresh.openErrorBox()->detailedText().contains(QStringLiteral("broken.pipestudio:1:")))
      << fresh.openErrorBox()->detailedText().toStdString();
  EXPECT_FALSE(fresh.currentPlan());  // not the default workspace
  EXPECT_TRUE(fresh.timelineView()->staleLabel().contains(QStringLiteral("broken.pipestudio")));
  fresh.openErrorBox()->close();
}

TEST_F(WorkstationTest, TheWindowFitsA1024x700Screen) {
  window->show();
  window->resize(1024, 700);
  QApplication::processEvents();
  EXPECT_EQ(window->size(), QSize(1024, 700))
      << "minimum size " << window->minimumSizeHint().width() << "x" << window->minimumSizeHint().height();
  EXPECT_LE(window->minimumSizeHint().width(), 1024);
  // The central view gets the space first.
  EXPECT_GE(window->centralWidget()->width(), 1024 * 45 / 100) << window->centralWidget()->width();
  EXPECT_GE(window->centralWidget()->height(), 700 / 2) << window->centralWidget()->height();
  // A long failure does not grow the panel (one line).
  window->solverPanel().tp->setValue(3);
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  QApplication::processEvents();
  EXPECT_EQ(window->size(), QSize(1024, 700));
}

TEST_F(WorkstationTest, HelpListsShortcutsAndTheLegend) {
  const QString html = MainWindow::shortcutsHtml();
  for (const char* text : {"Ctrl+F", "Ctrl+Drag", "Shift+Wheel", "Ctrl+Wheel", "Legend", "critical path", "bubble"}) {
    EXPECT_TRUE(html.contains(QString::fromUtf8(text), Qt::CaseInsensitive)) << text;
  }
  bool help = false;
  for (QAction* action : window->menuBar()->actions()) help = help || action->text() == QStringLiteral("&Help");
  EXPECT_TRUE(help);
}

// --- hybrid parallelism (issue 13, GUI) -------------------------------------------------------

TEST_F(WorkstationTest, ParallelismControlsMapOntoThePlanConfigAndTheWorkspace) {
  const SolverPanel& p = window->solverPanel();
  window->solverPanel().autoSolve->setChecked(false);
  p.partition->setCurrentText(QStringLiteral("balanced"));
  p.tp->setValue(2);
  p.cp->setValue(2);
  p.dp->setValue(2);
  p.ep->setValue(1);
  p.sequenceParallel->setChecked(false);
  p.recompute->setCurrentText(QStringLiteral("selective"));
  p.zero->setCurrentIndex(3);
  p.globalBatch->setValue(256);
  p.microBatchSize->setValue(2);
  p.optimizerSync->setCurrentText(QStringLiteral("post-validation"));
  const PlanConfig c = window->currentRequest().config;
  EXPECT_EQ(c.parallel.tensor, 2);
  EXPECT_EQ(c.parallel.context, 2);
  EXPECT_EQ(c.parallel.data, 2);
  EXPECT_EQ(c.parallel.expert, 1);
  EXPECT_FALSE(c.parallel.sequenceParallel);
  EXPECT_EQ(c.parallel.recompute, Recompute::Selective);
  EXPECT_EQ(c.parallel.zeroStage, 3);
  EXPECT_EQ(c.globalBatch, 256);
  EXPECT_EQ(c.microBatchSize, 2);
  EXPECT_EQ(c.optimizerSync, "post-validation");
  // The microbatch count is derived (256 / (2 × 2)) and not editable.
  EXPECT_FALSE(p.microbatches->isEnabled());
  EXPECT_EQ(p.microbatches->value(), 64);

  // Saved and reopened: the same fields, in the workspace's solver section.
  const QString path = workstationDir() + QStringLiteral("/hybrid.pipestudio");
  ASSERT_TRUE(window->saveWorkspaceTo(path));
  QFile file(path);
  ASSERT_TRUE(file.open(QIODevice::ReadOnly));
  const QByteArray text = file.readAll();
  for (const char* field :
       {"\"tp\": 2", "\"cp\": 2", "\"dp\": 2", "\"zero\": 3", "\"recompute\": \"selective\"", "\"global_batch\": 256",
        "\"micro_batch_size\": 2", "\"optimizer_sync\": \"post-validation\"", "\"sequence_parallel\": false"}) {
    EXPECT_TRUE(text.contains(field)) << field;
  }
  MainWindow other;
  ASSERT_TRUE(other.openFile(path, nullptr, true));
  EXPECT_EQ(other.currentRequest().config.parallel, c.parallel);
  EXPECT_EQ(other.currentRequest().config.globalBatch, 256);
  EXPECT_EQ(other.solverPanel().microBatchSize->value(), 2);
  other.solveController()->cancel();
  ASSERT_TRUE(other.solveController()->waitForIdle(60000));
}

// Issue 31: seq1f1b's sequence splits and PipeOffload's offload ratio are panel fields; the
// Microbatches field counts training microbatches (the plan K times as many chunks), as the CLI's
// --microbatches does.
TEST_F(WorkstationTest, SequenceSplitsAndOffloadRatioMapOntoThePlanConfigAndTheWorkspace) {
  const SolverPanel& p = window->solverPanel();
  p.autoSolve->setChecked(false);
  p.schedule->setCurrentIndex(p.schedule->findData(QStringLiteral("seq1f1b")));
  p.microbatches->setValue(4);
  p.seqSplits->setValue(2);
  p.offloadRatio->setValue(0.5);
  const PlanConfig c = window->currentRequest().config;
  EXPECT_EQ(c.schedule, "seq1f1b");
  EXPECT_EQ(c.seqSplits, 2);
  EXPECT_EQ(c.microbatches, 8);
  EXPECT_DOUBLE_EQ(c.offloadRatio, 0.5);

  const QString path = workstationDir() + QStringLiteral("/sequence.pipestudio");
  ASSERT_TRUE(window->saveWorkspaceTo(path));
  MainWindow other;
  ASSERT_TRUE(other.openFile(path, nullptr, true));
  EXPECT_EQ(other.currentRequest().config.seqSplits, 2);
  EXPECT_EQ(other.currentRequest().config.microbatches, 8);
  EXPECT_EQ(other.solverPanel().microbatches->value(), 4);
  EXPECT_DOUBLE_EQ(other.solverPanel().offloadRatio->value(), 0.5);
  other.solveController()->cancel();
  ASSERT_TRUE(other.solveController()->waitForIdle(60000));
}

TEST_F(WorkstationTest, RecipeControlsSetPrecisionAndOverlapsAndSurviveTheWorkspace) {
  const SolverPanel& p = window->solverPanel();
  p.autoSolve->setChecked(false);
  p.tp->setValue(2);
  EXPECT_TRUE(p.tpCommOverlap->isEnabled());
  p.precision->setCurrentText(QStringLiteral("fp8"));
  p.overlapGradReduce->setChecked(false);
  p.overlapParamGather->setChecked(false);
  p.tpCommOverlap->setChecked(false);
  const PlanConfig c = window->currentRequest().config;
  EXPECT_EQ(c.precision, Precision::Fp8);
  EXPECT_FALSE(c.parallel.overlapGradReduce);
  EXPECT_FALSE(c.parallel.overlapParamGather);
  EXPECT_FALSE(c.parallel.tpCommOverlap);
  // Each is one undoable edit.
  ASSERT_NE(window->undoStack(), nullptr);
  window->undoStack()->undo();
  EXPECT_TRUE(p.tpCommOverlap->isChecked());
  window->undoStack()->redo();
  EXPECT_FALSE(p.tpCommOverlap->isChecked());
  const QString path = workstationDir() + QStringLiteral("/recipe.pipestudio");
  ASSERT_TRUE(window->saveWorkspaceTo(path));
  MainWindow other;
  ASSERT_TRUE(other.openFile(path, nullptr, true));
  EXPECT_EQ(other.solverPanel().precision->currentText(), QStringLiteral("fp8"));
  EXPECT_FALSE(other.solverPanel().overlapParamGather->isChecked());
  EXPECT_EQ(other.currentRequest().config.precision, Precision::Fp8);
  EXPECT_EQ(other.currentRequest().config.parallel, c.parallel);
  other.solveController()->cancel();
  ASSERT_TRUE(other.solveController()->waitForIdle(60000));
  // At TP 1 there is no TP communication to overlap.
  p.tp->setValue(1);
  EXPECT_FALSE(p.tpCommOverlap->isEnabled());
}

TEST_F(WorkstationTest, OldWorkspacesWithoutTheNewFieldsStillLoad) {
  auto ws = loadWorkspace(kResources + "/workspaces/default.pipestudio", solverNames());
  ASSERT_THAT(ws, HasValue());
  EXPECT_TRUE(ws->solver.parallel.isPurePipeline());
  EXPECT_EQ(ws->solver.parallel.data, 1);
  EXPECT_FALSE(ws->solver.globalBatch);
  const std::string bad = QString(workstationDir() + QStringLiteral("/bad-recompute.pipestudio")).toStdString();
  Json j = workspaceToJson(*ws);
  j["solver"]["recompute"] = "sometimes";
  j["solver"]["tp"] = 0;
  ASSERT_TRUE(saveJsonFile(bad, j));
  auto broken = loadWorkspace(bad, solverNames());
  EXPECT_THAT(broken, HasError("/solver/recompute"));
  EXPECT_THAT(broken, HasError("/solver/tp"));
  // Each out-of-range field is named with what was expected.
  const std::pair<const char*, Json> hostile[] = {{"zero", Json(7)},
                                                  {"optimizer_sync", Json("later")},
                                                  {"global_batch", Json(0)},
                                                  {"micro_batch_size", Json(-2)},
                                                  {"sequence_parallel", Json("yes")},
                                                  {"dp", Json(1.5)}};
  for (const auto& [field, value] : hostile) {
    Json h = workspaceToJson(*ws);
    h["solver"][field] = value;
    ASSERT_TRUE(saveJsonFile(bad, h));
    auto refused = loadWorkspace(bad, solverNames());
    ASSERT_FALSE(refused) << field;
    EXPECT_THAT(refused, HasError(std::string("/solver/") + field));
  }
}

TEST_F(WorkstationTest, MetricsShowMfuTokensIterationAndTheMemoryBreakdown) {
  // Llama-2-70B as NVIDIA trains it: TP 8 × PP 4, distributed optimizer, selective recompute.
  PlanConfig c = pipelineConfig("1f1b", 4);
  c.parallel.tensor = 8;
  c.parallel.sequenceParallel = true;
  c.parallel.zeroStage = 1;
  c.parallel.recompute = Recompute::Selective;
  c.globalBatch = 64;
  c.microBatchSize = 1;
  window->setWorkspace(bundledWorkspace("llama2-70b.json", "h100-4x8-ib.json", c), QString());
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  ASSERT_TRUE(window->lastFailure().isEmpty()) << window->lastFailure().toStdString();
  const auto plan = window->currentPlan();
  ASSERT_EQ(plan->config.parallel.tensor, 8);
  const QString summary = window->metricsSummary()->text();
  for (const char* row : {"MFU", "Tokens/s", "Model TFLOP/s per GPU", "Iteration", "gradient sync", "optimizer step",
                          "TP 8", "32 GPUs", "ZeRO 1", "recompute selective"}) {
    EXPECT_TRUE(summary.contains(QString::fromLatin1(row))) << row;
  }
  EXPECT_TRUE(summary.contains(QStringLiteral("%1 %").arg(plan->metrics.mfu * 100, 0, 'f', 1)))
      << summary.toStdString();
  // The stacked bar: one per device, parts as the planner reports them.
  viz::MemoryBreakdownView* breakdown = window->memoryBreakdown();
  ASSERT_EQ(breakdown->deviceCount(), 4);
  const auto parts = viz::MemoryBreakdownView::partsOf(plan->metrics.devices[0]);
  EXPECT_DOUBLE_EQ(parts[0], static_cast<double>(plan->metrics.devices[0].memory.parameterBytes));
  EXPECT_GT(parts[2], 0.0);  // optimizer state
  double keptBack = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) keptBack += memoryParts()[i].keptBack ? parts[i] : 0.0;
  EXPECT_EQ(keptBack, static_cast<double>(plan->metrics.devices[0].memory.marginBytes()));  // the margin kept back
  EXPECT_GT(keptBack, 0.0);
  EXPECT_TRUE(breakdown->describe(0).contains(QStringLiteral("free")));
  // The op tooltip says which share of an op is collectives (TP all-reduces here).
  const viz::TimelineData* data = window->timelineView()->timeline();
  ASSERT_NE(data, nullptr);
  int forward = -1;
  for (std::size_t i = 0; i < plan->ops.size() && forward < 0; ++i) {
    if (plan->ops[i].kind == OpKind::F && plan->ops[i].device == 1) forward = static_cast<int>(i);
  }
  ASSERT_GE(forward, 0);
  const auto costs = stageCosts(*plan);
  const auto& stage = costs[static_cast<std::size_t>(plan->op(forward).virtualStage)];
  ASSERT_GT(stage.forwardCommMs, 0.0);
  const viz::CollectiveShare share = data->collectiveShare(forward);
  EXPECT_DOUBLE_EQ(share.collectiveMs, stage.forwardCommMs);
  EXPECT_DOUBLE_EQ(share.passMs, stage.forwardMs);
  // What the recipe's overlap hides is reported beside what it exposes (issue 25).
  EXPECT_DOUBLE_EQ(share.hiddenMs, stage.forwardHiddenCommMs);
  const std::string tip = data->describe({viz::ItemRef::Kind::Op, forward});
  EXPECT_NE(tip.find("collectives (TP/CP/EP/ZeRO)"), std::string::npos) << tip;
  EXPECT_NE(tip.find(" exposed"), std::string::npos) << tip;
  EXPECT_NE(tip.find(" hidden"), std::string::npos) << tip;
}

// --- the loop in the GUI ------------------------------------------------------------------

TEST_F(WorkstationTest, ExportsThePlanAsJson) {
  const QString path = workstationDir() + QStringLiteral("/exported.plan.json");
  QFile::remove(path);
  QString error;
  ASSERT_TRUE(window->exportTo(path, &error)) << error.toStdString();
  auto plan = loadPlan(path.toStdString());
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->ops.size(), window->currentPlan()->ops.size());
  EXPECT_EQ(plan->config.schedule, window->currentPlan()->config.schedule);
}

TEST_F(WorkstationTest, RunLocallyRecordsARunAndOpensItAgainstItsPlan) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  ASSERT_TRUE(window->historyDock()->openDatabase(dir.filePath(QStringLiteral("history.sqlite"))));
  ASSERT_TRUE(window->historyDock()->waitForIdle(30000));
  EXPECT_TRUE(window->historyDock()->emptyHint()->isVisibleTo(window->historyDock()));
  ASSERT_NE(window->runLocallyAction(), nullptr);
  EXPECT_TRUE(window->runLocallyAction()->isEnabled());
  RunLocalDialog* dialog = window->openRunLocalDialog();
  ASSERT_NE(dialog, nullptr);
  EXPECT_EQ(dialog->backendCombo()->itemText(0), QStringLiteral("cpu"));
  dialog->iterationsSpin()->setValue(1);
  dialog->maxOpSpin()->setValue(1.0);
  const auto plan = window->currentPlan();
  dialog->start();
  EXPECT_TRUE(dialog->busy());
  ASSERT_TRUE(dialog->waitForFinished(180000));
  ASSERT_GT(dialog->lastRun(), 0) << dialog->messageLabel()->text().toStdString();
  EXPECT_TRUE(dialog->messageLabel()->text().contains(QStringLiteral("complete")))
      << dialog->messageLabel()->text().toStdString();
  EXPECT_EQ(dialog->progressBar()->value(), 100);
  // In the history …
  HistoryDock* history = window->historyDock();
  history->refresh();
  ASSERT_TRUE(history->waitForIdle(30000));
  ASSERT_EQ(history->model()->rowCount(), 1);
  EXPECT_EQ(history->model()->run(0).id, dialog->lastRun());
  EXPECT_EQ(history->model()->run(0).status, history::RunStatus::Complete);
  EXPECT_FALSE(history->emptyHint()->isVisibleTo(history));
  // … and opened against its plan in the compare view; the timeline keeps the solve.
  EXPECT_EQ(window->centralTabs()->currentIndex(), 1);
  EXPECT_EQ(window->compareView()->baseline(), plan);
  ASSERT_TRUE(window->compareView()->current());
  // Every planned op was measured, plus one optimizer step per device.
  EXPECT_EQ(window->compareView()->current()->ops.size(),
            plan->ops.size() + static_cast<std::size_t>(plan->config.devices));
  EXPECT_EQ(window->currentPlan(), plan);
}

// Closing the dialog cancels the run (a JobTracker job): the ranks are ended, and the run is in
// the history as incomplete, with the reason, as `pipestudio-cli run` records an interrupt.
TEST_F(WorkstationTest, ClosingRunLocallyCancelsTheRunAndRecordsItIncomplete) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  ASSERT_TRUE(window->historyDock()->openDatabase(dir.filePath(QStringLiteral("history.sqlite"))));
  ASSERT_TRUE(window->historyDock()->waitForIdle(30000));
  RunLocalDialog* dialog = window->openRunLocalDialog();
  ASSERT_NE(dialog, nullptr);
  // Long enough that it is still running when the dialog closes.
  dialog->iterationsSpin()->setValue(20);
  dialog->maxOpSpin()->setValue(20.0);
  dialog->start();
  ASSERT_TRUE(dialog->busy());
  // Close once the ranks stream (a run cancelled before any rank wrote is simply failed).
  QElapsedTimer started;
  started.start();
  while (dialog->progressBar()->value() == 0 && dialog->busy() && started.elapsed() < 60000) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
  }
  ASSERT_TRUE(dialog->busy()) << dialog->messageLabel()->text().toStdString();
  ASSERT_GT(dialog->progressBar()->value(), 0);
  dialog->close();
  EXPECT_FALSE(dialog->isVisible());
  ASSERT_TRUE(dialog->waitForFinished(60000));
  ASSERT_GT(dialog->lastRun(), 0) << dialog->messageLabel()->text().toStdString();
  EXPECT_LT(dialog->progressBar()->value(), 100);
  EXPECT_TRUE(dialog->messageLabel()->text().contains(QStringLiteral("incomplete")))
      << dialog->messageLabel()->text().toStdString();
  EXPECT_TRUE(dialog->messageLabel()->text().contains(QStringLiteral("cancelled")))
      << dialog->messageLabel()->text().toStdString();
  HistoryDock* history = window->historyDock();
  history->refresh();
  ASSERT_TRUE(history->waitForIdle(30000));
  ASSERT_EQ(history->model()->rowCount(), 1);
  EXPECT_EQ(history->model()->run(0).id, dialog->lastRun());
  EXPECT_EQ(history->model()->run(0).status, history::RunStatus::Incomplete);
}

TEST_F(WorkstationTest, TheHistoryDockFollowsRunsRecordedElsewhere) {
  QTemporaryDir dir;
  const QString db = dir.filePath(QStringLiteral("history.sqlite"));
  HistoryDock* dock = window->historyDock();
  ASSERT_TRUE(dock->openDatabase(db));
  dock->show();
  ASSERT_TRUE(dock->waitForIdle(30000));
  EXPECT_EQ(dock->model()->rowCount(), 0);
  EXPECT_TRUE(dock->emptyHint()->isVisibleTo(dock));
  EXPECT_TRUE(dock->emptyHint()->text().contains(QStringLiteral("Run Locally")));
  // Another writer (as pipestudio-cli run would be) records a run with its plan.
  {
    auto store = history::HistoryStore::open(db.toStdString());
    ASSERT_THAT(store, HasValue());
    auto planId = store->addPlan(*window->currentPlan(), "planned");
    ASSERT_TRUE(planId);
    std::vector<trace::Frame> frames = pipestudio::testing::cpuRunFrames("elsewhere", 1);
    for (int mb = 0; mb < 3; ++mb) {
      trace::OpRange r;
      r.device = 0;
      r.microbatch = mb;
      r.startNs = mb * 1'000'000LL;
      r.endNs = r.startNs + 500'000LL;
      frames.emplace_back(r);
    }
    history::RunInfo info;
    info.name = "recorded elsewhere";
    info.planId = *planId;
    ASSERT_TRUE(store->ingestStream(trace::encodeStream(frames), info));
  }
  ASSERT_TRUE(waitFor([&] { return dock->model()->rowCount() == 1; }, 10000)) << "the dock did not notice the run";
  EXPECT_FALSE(dock->emptyHint()->isVisibleTo(dock));
  std::shared_ptr<const Plan> planned;
  QObject receiver;  // the connection ends with the test
  QObject::connect(dock, &HistoryDock::runAgainstPlanRequested, &receiver,
                   [&planned](const MeasuredRunView& run) { planned = run.plan; });
  dock->view()->selectRow(0);
  dock->compareWithPlan();
  ASSERT_TRUE(dock->waitForIdle(30000));
  ASSERT_TRUE(planned);
  EXPECT_EQ(planned->ops.size(), window->currentPlan()->ops.size());
}

TEST(WorkstationCli, RunAcceptsAWorkspaceSavedWithItsPlan) {
  pipestudio::testing::qtApp();
  auto ws = loadWorkspace(kResources + "/workspaces/default.pipestudio", solverNames());
  ASSERT_THAT(ws, HasValue());
  ws->solver.partition = "uniform";
  ws->solver.fill = "none";
  ws->solver.devices = 2;
  ws->solver.microbatches = 4;
  const std::string dir = workstationDir().toStdString();
  const std::string withoutPlan = dir + "/no-plan.pipestudio";
  ASSERT_TRUE(saveWorkspace(withoutPlan, *ws));
  auto plan = makePlan(PlanRequest{ws->model, ws->cluster, ws->solver});
  ASSERT_THAT(plan, HasValue());
  ws->plan = *plan;
  const std::string withPlan = dir + "/with-plan.pipestudio";
  ASSERT_TRUE(saveWorkspace(withPlan, *ws));
  const std::string db = dir + "/cli-workspace.sqlite";
  std::remove(db.c_str());
  auto run = [&](const std::string& file, std::string* out) {
    const std::string cmd = std::string(PIPESTUDIO_CLI_BINARY) + " run " + file +
                            " --backend cpu --max-op-ms 1 --history " + db + " --json 2>&1";
    const test::CommandResult r = test::runCommand(cmd);
    out->append(r.out);
    return r.status;
  };
  std::string out;
  EXPECT_EQ(run(withPlan, &out), 0) << out;
  EXPECT_NE(out.find("\"id\""), std::string::npos) << out;
  auto store = history::HistoryStore::open(db);
  ASSERT_TRUE(store);
  auto runs = store->listRuns();
  ASSERT_TRUE(runs);
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, history::RunStatus::Complete);
  EXPECT_TRUE(runs->front().planId.has_value());
  std::string refused;
  EXPECT_EQ(run(withoutPlan, &refused), 1) << refused;
  EXPECT_NE(refused.find("no-plan.pipestudio: the workspace has no plan"), std::string::npos) << refused;
}

}  // namespace
}  // namespace pipestudio::gui
