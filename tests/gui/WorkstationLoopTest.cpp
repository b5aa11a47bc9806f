// Issue 29 (the workstation closes the loop), driven through the real MainWindow on the
// offscreen platform: the Configure dock, the mouse wheel and undo, plain profiler traces,
// run against plan, two-pipe idle and chunk shades, workspace names, and the smaller items.
#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QBrush>
#include <QCheckBox>
#include <QComboBox>
#include <QDate>
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
#include <QTemporaryDir>
#include <QTest>
#include <QUndoStack>
#include <QWheelEvent>
#include <memory>
#include <set>

#include "ConfigureDock.hpp"
#include "HistoryDock.hpp"
#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "RunLocalDialog.hpp"
#include "SolveController.hpp"
#include "SolverPanel.hpp"
#include "WindowFixtures.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MemoryBreakdownView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio::gui {
namespace {

const std::string kLoopResources = PIPESTUDIO_RESOURCES;

using pipestudio::testing::bundledWorkspace;
using pipestudio::testing::pipelineConfig;
using pipestudio::testing::recomputedPipelineConfig;

class LoopTest : public pipestudio::testing::FreshWindowTest {
 protected:
  void openBundled(const std::string& model, const std::string& cluster, const PlanConfig& config) {
    window->setWorkspace(bundledWorkspace(model, cluster, config), QString());
    ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  }
  /// The window on screen at 1400×900 with the whole plan in its timeline, drawn.
  viz::TimelineView* showFittedTimeline() {
    window->resize(1400, 900);
    window->show();
    viz::TimelineView* view = window->timelineView();
    view->fitToView();
    QApplication::processEvents();
    view->plot()->replot(QCustomPlot::rpImmediateRefresh);
    return view;
  }
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
  PlanConfig c = pipelineConfig("1f1b", 4);
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
    if (r > 0) {
      EXPECT_LE(cand.throughputSamplesPerS, model->candidate(r - 1).throughputSamplesPerS);
    }
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
  PlanConfig c = pipelineConfig("1f1b", 8);
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

// --- 3: plain profiler traces ---------------------------------------------------------------

/// The compare view's summary row named `name`, or nullptr.
const viz::CompareModel::Row* compareRow(const viz::CompareView* view, const QString& name) {
  for (const auto& row : view->model()->rows()) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

TEST_F(LoopTest, APlainProfilerTraceShowsItsGpuActivityAndComparesPerDeviceAndIteration) {
  QTemporaryDir dir;
  ASSERT_TRUE(window->historyDock()->openDatabase(dir.filePath(QStringLiteral("history.sqlite"))));
  QString error;
  ASSERT_TRUE(window->openFile(QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/plan-zb-h1.json"), &error, true))
      << error.toStdString();
  const auto plan = window->currentPlan();
  // Two ranks of HolisticTraceAnalysis' sampled trace: no PP: annotations, two ProfilerSteps.
  const QString hta = QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/hta/");
  ASSERT_TRUE(
      window->importTraces({hta + QStringLiteral("rank0.json.gz"), hta + QStringLiteral("rank1.json.gz")}, &error))
      << error.toStdString();

  // The timeline shows the run: kernels, memcpy and memset on lanes per rank and stream, the
  // iterations marked, labelled as a measured run.
  const viz::TimelineData* data = window->timelineView()->timeline();
  ASSERT_NE(data, nullptr);
  ASSERT_NE(data->activity(), nullptr);
  EXPECT_EQ(data->deviceCount(), 2);
  ASSERT_EQ(data->activity()->iterations.size(), 2u);
  EXPECT_EQ(data->activity()->iterations[0].name, "ProfilerStep#551");
  std::set<std::pair<int, std::int64_t>> streams;
  for (int l = 0; l < static_cast<int>(data->lanes().size()); ++l) {
    const viz::Lane& lane = data->lane(l);
    EXPECT_TRUE(lane.activity);
    streams.insert({lane.device, lane.stream});
    if (lane.device == 0 && lane.stream == 7) {
      EXPECT_GT(lane.size(), 500u);
      EXPECT_EQ(data->laneName(l), "GPU 0 · stream 7");
      const std::string what = data->describe(lane.items.front());
      EXPECT_NE(what.find("kernel · "), std::string::npos) << what;
    }
  }
  EXPECT_TRUE(streams.count({0, 7}) && streams.count({1, 7})) << streams.size();
  EXPECT_GE(streams.size(), 6u);
  const QStringList legend = window->timelineView()->legend()->entryNames();
  for (const char* entry : {"kernel", "memcpy", "memset", "iteration (ProfilerStep)"})
    EXPECT_TRUE(legend.contains(QString::fromLatin1(entry))) << legend.join(QStringLiteral(", ")).toStdString();
  EXPECT_TRUE(window->timelineView()->staleLabel().contains(QStringLiteral("imported run")));
  // No "0 µs, −100 %" for a run that has no op ranges to time.
  const QString summary = window->metricsSummary()->text();
  EXPECT_TRUE(summary.contains(QStringLiteral("without op ranges"))) << summary.toStdString();
  EXPECT_FALSE(summary.contains(QStringLiteral("100.0 %"))) << summary.toStdString();
  // A range measured over the first step reads the GPUs' busy time from their streams.
  const auto& step = data->activity()->iterations[0];
  const viz::RangeMeasurement m = data->measure(step.startMs, step.endMs);
  EXPECT_GT(m.devices[0].busyMs, 200.0);
  EXPECT_LE(m.devices[0].busyMs, step.endMs - step.startMs);

  // The compare view: the run against the plan, per device per iteration (not 0 µs, not the
  // whole capture), two iterations, labelled measured and drawn scaled with a note.
  EXPECT_EQ(window->centralTabs()->currentIndex(), 1);
  viz::CompareView* compare = window->compareView();
  EXPECT_EQ(compare->baseline(), plan);
  ASSERT_NE(compare->measured(), nullptr);
  EXPECT_EQ(compare->measured()->iterations, 2);
  EXPECT_TRUE(compare->currentTitle().startsWith(QStringLiteral("Measured: run ")))
      << compare->currentTitle().toStdString();
  EXPECT_TRUE(compare->note().contains(QStringLiteral("scaled"))) << compare->note().toStdString();
  ASSERT_NE(compare->currentTimeline()->timeline(), nullptr);
  EXPECT_NE(compare->currentTimeline()->timeline()->activity(), nullptr);
  for (int d = 0; d < 2; ++d) {
    const auto* busy = compareRow(compare, QStringLiteral("GPU %1 busy / iteration").arg(d));
    ASSERT_NE(busy, nullptr) << d;
    EXPECT_GT(busy->current, 200.0) << d;
    EXPECT_LT(busy->current, 400.0) << d;
  }
  const auto* iterations = compareRow(compare, QStringLiteral("Iterations measured"));
  ASSERT_NE(iterations, nullptr);
  EXPECT_EQ(iterations->current, 2.0);
  QStringList tabs;
  for (int t = 0; t < compare->tables()->count(); ++t) tabs << compare->tables()->tabText(t);
  EXPECT_TRUE(tabs.contains(QStringLiteral("Per device"))) << tabs.join(QLatin1Char(',')).toStdString();
}

// --- 6: run against plan ----------------------------------------------------------------------

TEST_F(LoopTest, AMeasuredRunIsLabelledScaledColouredAndTabulatedAgainstItsPlan) {
  openDefault();
  QTemporaryDir dir;
  const QString db = dir.filePath(QStringLiteral("history.sqlite"));
  HistoryDock* dock = window->historyDock();
  ASSERT_TRUE(dock->openDatabase(db));
  const auto plan = window->currentPlan();
  {
    // A CPU run of the plan, every op three times as long, GPU 0 starting 5 ms late.
    auto store = history::HistoryStore::open(db.toStdString());
    ASSERT_THAT(store, HasValue());
    auto planId = store->addPlan(*plan, "planned");
    ASSERT_TRUE(planId);
    std::vector<trace::Frame> frames;
    trace::Header header;
    header.runId = "cpu-run";
    header.world = plan->config.devices;
    header.backend = "cpu";
    header.deviceName = "cpu";
    frames.emplace_back(header);
    for (const Op& op : plan->ops) {
      trace::OpRange r;
      r.device = op.device;
      r.virtualStage = op.virtualStage;
      r.kind = op.kind;
      r.microbatch = op.microbatch;
      r.startNs = static_cast<std::int64_t>((3.0 * op.startMs + (op.device == 0 ? 5.0 : 0.0)) * 1e6);
      r.endNs = static_cast<std::int64_t>((3.0 * op.endMs + (op.device == 0 ? 5.0 : 0.0)) * 1e6);
      frames.emplace_back(r);
    }
    history::RunInfo info;
    info.name = "cpu run";
    info.backend = "cpu";
    info.planId = *planId;
    ASSERT_TRUE(store->ingestStream(trace::encodeStream(frames), info));
  }
  dock->refresh();
  ASSERT_TRUE(dock->waitForIdle(30000));
  ASSERT_EQ(dock->model()->rowCount(), 1);
  dock->view()->selectRow(0);
  dock->compareWithPlan();
  ASSERT_TRUE(dock->waitForIdle(30000));
  viz::CompareView* compare = window->compareView();
  ASSERT_NE(compare->measured(), nullptr);
  EXPECT_EQ(window->centralTabs()->currentIndex(), 1);
  // Labelled with what measured it, on how many devices, when.
  const QString title = compare->currentTitle();
  EXPECT_TRUE(title.startsWith(QStringLiteral("Measured: run 1 · measured on cpu"))) << title.toStdString();
  EXPECT_TRUE(title.contains(QStringLiteral("%1 device(s)").arg(plan->config.devices))) << title.toStdString();
  EXPECT_TRUE(title.contains(QDate::currentDate().toString(QStringLiteral("yyyy-MM-dd")))) << title.toStdString();
  // A CPU run is drawn scaled to the plan's length, and says so; unscaled on request.
  EXPECT_TRUE(compare->scaleBox()->isChecked());
  EXPECT_NEAR(compare->scale(), 1.0 / 3.0, 0.05);
  EXPECT_TRUE(compare->note().contains(QStringLiteral("scaled"))) << compare->note().toStdString();
  const double drawnEnd = compare->currentTimeline()->timeline()->endMs();
  compare->scaleBox()->setChecked(false);
  EXPECT_DOUBLE_EQ(compare->scale(), 1.0);
  EXPECT_TRUE(compare->note().contains(QStringLiteral("measured times"))) << compare->note().toStdString();
  EXPECT_NEAR(compare->currentTimeline()->timeline()->endMs(), 3.0 * drawnEnd, 0.05 * 3.0 * drawnEnd);
  // Worse is red: a GPU busier than planned (the same work, slower) is worse, not better.
  viz::CompareModel* model = compare->model();
  int busyRow = -1;
  for (int r = 0; r < model->rowCount(); ++r) {
    if (model->rows()[static_cast<std::size_t>(r)].name == QStringLiteral("GPU 1 busy / iteration")) busyRow = r;
  }
  ASSERT_GE(busyRow, 0);
  const QModelIndex delta = model->index(busyRow, viz::CompareModel::Delta);
  EXPECT_GT(model->data(delta, Qt::UserRole).toDouble(), 0.0);
  EXPECT_EQ(model->data(delta, Qt::ForegroundRole).value<QBrush>().color(), QColor(0xd0, 0x3a, 0x3a));
  EXPECT_EQ(viz::CompareModel::percentText(5.0, 0.0), QStringLiteral("n/a"));
  EXPECT_EQ(viz::CompareModel::percentText(5.0, 1e-12), QStringLiteral("n/a"));
  EXPECT_EQ(viz::CompareModel::percentText(5.0, 10.0), QStringLiteral("+50.0 %"));
  // The per-kind and drift tables pipestudio-cli history compare prints.
  QStringList tabs;
  for (int t = 0; t < compare->tables()->count(); ++t) tabs << compare->tables()->tabText(t);
  for (const char* tab : {"Summary", "Per device", "Per op kind", "Started late", "Most drifted"})
    EXPECT_TRUE(tabs.contains(QString::fromLatin1(tab))) << tabs.join(QLatin1Char(',')).toStdString();
  auto* kinds = qobject_cast<QTableView*>(
      compare->tables()->widget(static_cast<int>(tabs.indexOf(QStringLiteral("Per op kind")))));
  ASSERT_NE(kinds, nullptr);
  QAbstractItemModelTester tester(kinds->model(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  ASSERT_GT(kinds->model()->rowCount(), 0);
  // Each kind ran three times as long: worse, in red.
  EXPECT_EQ(kinds->model()->data(kinds->model()->index(0, 4), Qt::ForegroundRole).value<QBrush>().color(),
            QColor(0xd0, 0x3a, 0x3a));
  auto* late = qobject_cast<QTableView*>(
      compare->tables()->widget(static_cast<int>(tabs.indexOf(QStringLiteral("Started late")))));
  ASSERT_NE(late, nullptr);
  ASSERT_GT(late->model()->rowCount(), 0);
  EXPECT_GT(late->model()->data(late->model()->index(0, 6), Qt::UserRole).toDouble(), 0.0);  // late by
  EXPECT_EQ(late->model()->data(late->model()->index(0, 6), Qt::ForegroundRole).value<QBrush>().color(),
            QColor(0xd0, 0x3a, 0x3a));
}

// --- 4: two pipes and chunks ---------------------------------------------------------------

TEST_F(LoopTest, TwoPipeSchedulesHatchOnlyWhereTheGpuIsIdle) {
  PlanConfig c = recomputedPipelineConfig("dualpipe", 4, 16, 2);
  openBundled("llama3-8b.json", "h100-4x8-ib.json", c);
  ASSERT_TRUE(window->lastFailure().isEmpty()) << window->lastFailure().toStdString();
  const auto plan = window->currentPlan();
  ASSERT_TRUE(plan);
  viz::TimelineView* view = showFittedTimeline();
  const viz::TimelineData* data = view->timeline();
  const Metrics m = computeMetrics(*plan);
  // Both pipes of a device share its gaps: where the GPU computes on neither.
  for (int d = 0; d < data->deviceCount(); ++d) {
    const viz::Lane& pipe0 = data->lane(data->firstLaneOf(d));
    const viz::Lane& pipe1 = data->lane(data->firstLaneOf(d) + 1);
    ASSERT_EQ(pipe1.device, d);
    EXPECT_TRUE(pipe0.hatchGapsOnly && pipe1.hatchGapsOnly);
    EXPECT_EQ(pipe0.idleGaps, pipe1.idleGaps);
    double idle = 0;
    for (const auto& [a, b] : pipe0.idleGaps) idle += b - a;
    const DeviceMetrics& dm = m.devices[static_cast<std::size_t>(d)];
    EXPECT_NEAR(idle, dm.spanMs - dm.busyMs, 1e-6 * std::max(1.0, dm.spanMs)) << "device " << d;
  }
  // Drawn: hatching covers about the bubble, not half of every device (the old empty-pipe look).
  const viz::TimelineDrawStats& stats = view->plottable()->lastDrawStats();
  const QCPAxis* time = view->timelineRect()->axis(QCPAxis::atBottom);
  const double spanPx = time->coordToPixel(data->endMs()) - time->coordToPixel(data->beginMs());
  const double hatchedShare = static_cast<double>(stats.hatchedPixels) / (2.0 * data->deviceCount() * spanPx);
  EXPECT_LT(hatchedShare, m.bubbleRatio + 0.05) << "bubble " << m.bubbleRatio;
  EXPECT_LT(hatchedShare, 0.25);
}

TEST_F(LoopTest, InterleavedChunksGetAShadeEachInLanesAndLegend) {
  PlanConfig c = recomputedPipelineConfig("interleaved-1f1b", 4, 8, 2);
  openBundled("llama3-8b.json", "h100-4x8-ib.json", c);
  ASSERT_TRUE(window->lastFailure().isEmpty()) << window->lastFailure().toStdString();
  const auto plan = window->currentPlan();
  const viz::TimelineData* data = window->timelineView()->timeline();
  ASSERT_TRUE(data->shadesChunks());
  // Forward ops of chunk 0 and chunk 1 on device 0 are drawn in two shades of one hue.
  std::set<int> shadesOfChunk[2];
  const viz::Lane& lane = data->lane(data->firstLaneOf(0));
  for (std::size_t k = 0; k < lane.size(); ++k) {
    const Op& op = plan->op(lane.items[k].index);
    if (op.kind != OpKind::F) continue;
    shadesOfChunk[plan->stage(op.virtualStage).chunk & 1].insert(lane.shade[k]);
  }
  ASSERT_EQ(shadesOfChunk[0].size(), 1u);
  ASSERT_EQ(shadesOfChunk[1].size(), 1u);
  EXPECT_NE(*shadesOfChunk[0].begin(), *shadesOfChunk[1].begin());
  const viz::TimelinePalette& palette = window->timelineView()->plottable()->timelinePalette();
  EXPECT_NE(palette.shades[*shadesOfChunk[0].begin()], palette.shades[*shadesOfChunk[1].begin()]);
  const QStringList legend = window->timelineView()->legend()->entryNames();
  for (const char* entry : {"F chunk 0", "F chunk 1", "BW chunk 0", "BW chunk 1"})
    EXPECT_TRUE(legend.contains(QString::fromLatin1(entry))) << legend.join(QStringLiteral(", ")).toStdString();
  // One chunk per device keeps the microbatch shades.
  PlanConfig one = c;
  one.schedule = "1f1b";
  one.chunksPerDevice = 1;
  openBundled("llama3-8b.json", "h100-4x8-ib.json", one);
  EXPECT_FALSE(window->timelineView()->timeline()->shadesChunks());
  EXPECT_TRUE(window->timelineView()->legend()->entryNames().contains(QStringLiteral("F forward")));
}

// --- the smaller items -----------------------------------------------------------------------

TEST_F(LoopTest, TheStatusLineNamesTheSolveTimeAsSuch) {
  openDefault();
  const QString status = window->statusText();
  const QString schedule = QString::fromStdString(window->currentPlan()->config.schedule);
  EXPECT_TRUE(status.startsWith(QStringLiteral("Solved %1 in ").arg(schedule))) << status.toStdString();
  EXPECT_FALSE(status.contains(QLatin1Char('('))) << status.toStdString();
}

TEST_F(LoopTest, AFailedSolveMarksTheMetricsAsTheLastGoodPlansAndTheBannerWraps) {
  openDefault();
  window->resize(1024, 700);
  window->show();
  QApplication::processEvents();
  auto* banner = window->findChild<QLabel*>(QStringLiteral("MetricsStale"));
  ASSERT_NE(banner, nullptr);
  EXPECT_FALSE(banner->isVisibleTo(window.get()));
  viz::ClusterTableModel* cluster = window->clusterModel();
  ASSERT_TRUE(cluster->setData(cluster->index(0, viz::ClusterTableModel::MemoryGib), QStringLiteral("2")));
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  ASSERT_FALSE(window->lastFailure().isEmpty());
  EXPECT_TRUE(banner->isVisibleTo(window.get()));
  EXPECT_TRUE(banner->text().startsWith(QStringLiteral("last good plan: "))) << banner->text().toStdString();
  EXPECT_TRUE(banner->text().contains(QStringLiteral("failed")));
  // The timeline's banner wraps to the lanes' width instead of running off both sides.
  viz::TimelineView* timeline = window->timelineView();
  timeline->plot()->replot(QCustomPlot::rpImmediateRefresh);
  timeline->setStale(timeline->staleLabel());
  const QFontMetrics fm(timeline->font());
  const QStringList lines = timeline->staleBannerText().split(QLatin1Char('\n'));
  EXPECT_GT(lines.size(), 1) << timeline->staleBannerText().toStdString();
  for (const QString& line : lines)
    EXPECT_LE(fm.horizontalAdvance(line), timeline->timelineRect()->width()) << line.toStdString();
  window->undoStack()->undo();
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  EXPECT_FALSE(banner->isVisibleTo(window.get()));
}

TEST_F(LoopTest, AFirstStartLeavesRoomForTheWindowFrame) {
  // No saved geometry: the window and its frame fit the screen, status bar included.
  const QRect available = window->screen()->availableGeometry();
  EXPECT_LE(window->height() + 30, available.height());
  EXPECT_LE(window->width(), available.width());
}

TEST_F(LoopTest, KeysZoomAboutTheMouseFitTheSelectionAndCollapseLanes) {
  PlanConfig c = recomputedPipelineConfig("dualpipe", 4, 16, 2);
  openBundled("llama3-8b.json", "h100-4x8-ib.json", c);
  ASSERT_TRUE(window->currentPlan());
  viz::TimelineView* view = showFittedTimeline();
  // W zooms about the time under the mouse: it stays under the mouse.
  QCPAxis* time = view->timelineRect()->axis(QCPAxis::atBottom);
  const QRect lanes = view->timelineRect()->rect();
  const QPoint mouse(lanes.left() + lanes.width() / 5, lanes.center().y());
  QTest::mouseMove(view->plot(), mouse);
  const double atMouse = time->pixelToCoord(mouse.x());
  const QCPRange before = view->visibleRange();
  QTest::keyClick(view, Qt::Key_W);
  const QCPRange after = view->visibleRange();
  EXPECT_LT(after.size(), before.size());
  EXPECT_NEAR(time->pixelToCoord(mouse.x()), atMouse, 1e-6 * before.size());
  // F fits the selected op and its neighbours on the device, not the whole plan.
  const auto& plan = *window->currentPlan();
  int op = -1;
  for (std::size_t i = 0; i < plan.ops.size() && op < 0; ++i) {
    const int k = static_cast<int>(i);
    if (plan.ops[i].device == 1 && view->timeline()->devicePredecessor(k) >= 0 &&
        view->timeline()->deviceSuccessor(k) >= 0)
      op = k;
  }
  ASSERT_GE(op, 0);
  view->selectOp(op);
  QTest::keyClick(view, Qt::Key_F);
  const QCPRange fitted = view->visibleRange();
  const Op& o = plan.op(op);
  EXPECT_LE(fitted.lower, o.startMs);
  EXPECT_GE(fitted.upper, o.endMs);
  EXPECT_LT(fitted.size(), 0.5 * (view->timeline()->endMs() - view->timeline()->beginMs()));
  // C folds each device into one lane (both pipes, transfers) and back.
  const std::size_t expanded = view->timeline()->lanes().size();
  EXPECT_GT(expanded, static_cast<std::size_t>(plan.config.devices));
  QTest::keyClick(view, Qt::Key_C);
  EXPECT_TRUE(view->lanesCollapsed());
  EXPECT_EQ(view->timeline()->lanes().size(), static_cast<std::size_t>(plan.config.devices));
  EXPECT_EQ(view->selectedOp(), op);  // the selection survives
  QTest::keyClick(view, Qt::Key_C);
  EXPECT_EQ(view->timeline()->lanes().size(), expanded);
}

TEST_F(LoopTest, TheChromeExportHasFlowArrowsBetweenDependentOps) {
  openDefault();
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("trace.json"));
  QString error;
  ASSERT_TRUE(window->exportTo(path, &error)) << error.toStdString();
  auto doc = loadJsonFile(path.toStdString());
  ASSERT_THAT(doc, HasValue());
  std::map<std::int64_t, std::pair<int, int>> flows;  // id → (starts, finishes)
  for (const Json& e : doc->root["traceEvents"]) {
    if (e.value("cat", "") != "dependency") continue;
    auto& f = flows[e["id"].get<std::int64_t>()];
    if (e["ph"] == "s") ++f.first;
    if (e["ph"] == "f") {
      ++f.second;
      EXPECT_EQ(e["bp"], "e");
    }
  }
  ASSERT_FALSE(flows.empty());
  for (const auto& [id, f] : flows) EXPECT_EQ(f, std::make_pair(1, 1)) << id;
  // One per cross-device data dependency: at least every forward hand-off of every microbatch.
  const auto plan = window->currentPlan();
  EXPECT_GE(static_cast<int>(flows.size()), plan->config.microbatches * (plan->config.devices - 1));
}

// --- 5: names -------------------------------------------------------------------------------

TEST_F(LoopTest, TheWorkspaceNameFollowsItsContentUnlessTheUserNamedIt) {
  openDefault();
  EXPECT_FALSE(window->workspaceName().isEmpty());
  QString error;
  // Another model: the name (title, Run Locally, the history) follows it.
  ASSERT_TRUE(window->openFile(QString::fromStdString(kLoopResources + "/models/dit-xl-t5.json"), &error, true))
      << error.toStdString();
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  const QString cluster = QString::fromStdString(window->clusterModel()->clusterSpec().name);
  EXPECT_EQ(window->workspaceName(), QStringLiteral("DiT-XL/2 with frozen T5 and VAE on ") + cluster);
  EXPECT_TRUE(window->windowTitle().contains(window->workspaceName() + QStringLiteral(" (not saved)")))
      << window->windowTitle().toStdString();
  ASSERT_TRUE(window->openFile(QString::fromStdString(kLoopResources + "/clusters/h100-4x8-ib.json"), &error, true));
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  EXPECT_EQ(window->workspaceName(), QStringLiteral("DiT-XL/2 with frozen T5 and VAE on 4x8 H100-80GB InfiniBand"));
  if (window->currentPlan() && window->runLocallyAction()) {
    RunLocalDialog* dialog = window->openRunLocalDialog();
    ASSERT_NE(dialog, nullptr);
    auto* plan = dialog->findChild<QLabel*>(QStringLiteral("RunLocalPlan"));
    ASSERT_NE(plan, nullptr);
    EXPECT_TRUE(plan->text().startsWith(window->workspaceName())) << plan->text().toStdString();
    dialog->close();
  }
  // Named by the user, it stays, through other content and a save.
  window->renameWorkspace(QStringLiteral("Diffusion study"));
  ASSERT_TRUE(
      window->openFile(QString::fromStdString(kLoopResources + "/clusters/a100-1x8-nvlink.json"), &error, true));
  EXPECT_EQ(window->workspaceName(), QStringLiteral("Diffusion study"));
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("study.pipestudio"));
  ASSERT_TRUE(window->saveWorkspaceTo(path, &error)) << error.toStdString();
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  MainWindow other;
  ASSERT_TRUE(other.openFile(path, &error, true)) << error.toStdString();
  EXPECT_EQ(other.workspaceName(), QStringLiteral("Diffusion study"));
  ASSERT_TRUE(other.openFile(QString::fromStdString(kLoopResources + "/models/gpt3-1.3b.json"), &error, true));
  EXPECT_EQ(other.workspaceName(), QStringLiteral("Diffusion study"));
  // An empty name lets it follow the content again.
  other.renameWorkspace(QString());
  EXPECT_EQ(other.workspaceName(), QStringLiteral("GPT-3 1.3B on 1x8 A100-80GB NVLink"));
  other.solveController()->cancel();
  ASSERT_TRUE(other.solveController()->waitForIdle(120000));
}

TEST_F(LoopTest, TheMemoryLegendKeepsItsDescenders) {
  openDefault();
  window->resize(1600, 1000);
  window->show();
  QApplication::processEvents();
  QCustomPlot* plot = window->memoryBreakdown()->plot();
  plot->replot(QCustomPlot::rpImmediateRefresh);
  QCPLegend* legend = plot->legend;
  // The legend names the parts this plan holds (a wrapped grid's empty cells are null items).
  int named = 0;
  for (int i = 0; i < legend->itemCount(); ++i) named += legend->item(i) != nullptr ? 1 : 0;
  EXPECT_GE(named, 4);  // parameters, gradients, optimizer, activations at least
  EXPECT_LE(named, viz::MemoryBreakdownView::kParts);
  for (int i = 0; i < legend->itemCount(); ++i) {
    QCPAbstractLegendItem* item = legend->item(i);
    if (item == nullptr) continue;
    // Each item clips to its rectangle: a line of text plus room for "g" and "p" below it.
    EXPECT_GE(item->outerRect().height(), QFontMetrics(item->font()).height() + 2) << i;
    EXPECT_TRUE(legend->outerRect().contains(item->outerRect())) << i;
  }
}

TEST_F(LoopTest, PanelEditsKeepTheSettingsThePanelDoesNotShow) {
  // A workspace trained in fp8 with DualPipe's overlap: editing TP keeps both (the panel has no
  // field for them), and the configurator searches with the same recipe.
  PlanConfig c = pipelineConfig("1f1b", 4);
  c.globalBatch = 64;
  c.precision = Precision::Fp8;
  c.overlapForwardBackward = true;
  c.parallel.overlapGradReduce = false;
  openBundled("llama3-8b.json", "h100-4x8-ib.json", c);
  window->solverPanel().tp->setValue(2);
  const PlanConfig now = window->currentRequest().config;
  EXPECT_EQ(now.parallel.tensor, 2);
  EXPECT_EQ(now.precision, Precision::Fp8);
  EXPECT_TRUE(now.overlapForwardBackward);
  EXPECT_FALSE(now.parallel.overlapGradReduce);
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  if (window->currentPlan()) {
    EXPECT_EQ(window->currentPlan()->config.precision, Precision::Fp8);
  }
}

}  // namespace
}  // namespace pipestudio::gui
