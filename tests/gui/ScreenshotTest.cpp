// Renders the real widgets to PNG files under <build>/screenshots/ so a person can look at them
// (the README's pictures in docs/ are these files): the main window with its legend, a
// 32-device hybrid plan, the compare view, the selection dock with a measured range, the
// Configure dock, and an imported profiler trace against its plan.
#include <gtest/gtest.h>

#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QImage>
#include <QLineEdit>
#include <QPixmap>
#include <QSettings>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <algorithm>
#include <set>

#include "ConfigureDock.hpp"
#include "HistoryDock.hpp"
#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SolveController.hpp"
#include "WindowFixtures.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/TimelinePlottable.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {
namespace {

/// Distinct colours in a downsampled image: a blank or single-colour render has very few.
int distinctColours(const QImage& image) {
  std::set<QRgb> colours;
  for (int y = 0; y < image.height(); y += 4) {
    for (int x = 0; x < image.width(); x += 4) colours.insert(image.pixel(x, y));
  }
  return static_cast<int>(colours.size());
}

QString screenshotDir() {
  const QString dir = QStringLiteral(PIPESTUDIO_BINARY_DIR) + QStringLiteral("/screenshots");
  QDir().mkpath(dir);
  return dir;
}

/// A window as a first start shows it (no saved layout), 1600×1000.
std::unique_ptr<MainWindow> freshWindow() {
  pipestudio::testing::qtApp();
  QSettings().remove(QStringLiteral("window"));
  auto window = std::make_unique<MainWindow>();
  window->setUnsavedChangesHandler([] { return QMessageBox::Discard; });
  window->resize(1600, 1000);
  window->show();
  return window;
}

QImage grabWindow(MainWindow& window) {
  QApplication::processEvents();
  window.timelineView()->plot()->replot(QCustomPlot::rpImmediateRefresh);
  window.compareView()->plot()->replot(QCustomPlot::rpImmediateRefresh);
  QApplication::processEvents();
  return window.grab().toImage();
}

/// Writes `image` to the screenshot folder as `file` and checks it is a picture, not a blank.
void saveScreenshot(const QImage& image, const QString& file, int minColours = 20) {
  EXPECT_TRUE(image.save(screenshotDir() + QLatin1Char('/') + file)) << file.toStdString();
  EXPECT_GT(distinctColours(image), minColours) << file.toStdString();
}

/// Shows resources/models/`model` on resources/clusters/`cluster` with `config` as the workspace
/// `name`; whether its solve ended.
bool showWorkspace(MainWindow& window, const std::string& name, const std::string& model, const std::string& cluster,
                   const PlanConfig& config) {
  Workspace ws = pipestudio::testing::bundledWorkspace(model, cluster, config);
  ws.name = name;
  window.setWorkspace(ws, QString());
  return window.solveController()->waitForIdle(120000);
}

TEST(Screenshots, DefaultWorkspace) {
  auto window = freshWindow();
  ASSERT_TRUE(window->openDefaultWorkspace());
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  ASSERT_TRUE(window->currentPlan()) << window->statusText().toStdString();

  saveScreenshot(grabWindow(*window), QStringLiteral("window.png"));
  EXPECT_FALSE(window->timelineView()->legend()->entryNames().isEmpty());

  viz::TimelineView* timeline = window->timelineView();
  const QCPRange range = timeline->visibleRange();
  timeline->setVisibleRange(range.lower, range.lower + range.size() * 0.22);
  timeline->plot()->replot(QCustomPlot::rpImmediateRefresh);
  saveScreenshot(timeline->grab().toImage(), QStringLiteral("timeline-zoomed.png"), 10);

  // The selection dock: an op of the critical path selected, a range measured.
  timeline->fitToView();
  const auto& critical = timeline->overlay()->criticalPath();
  ASSERT_FALSE(critical.empty());
  const int op = critical[critical.size() / 2];
  timeline->selectOp(op);
  const Op& o = window->currentPlan()->ops[static_cast<std::size_t>(op)];
  timeline->measureRange(o.startMs - 40.0, o.endMs + 40.0);
  timeline->selectOp(op);  // the selection dock in front
  saveScreenshot(grabWindow(*window), QStringLiteral("selection.png"));

  window->pinBaseline();
  // Compare against the same workspace with half the microbatches per iteration.
  QSpinBox* microbatches = window->solverPanel().microbatches;
  microbatches->setValue(std::max(1, microbatches->value() / 2));
  window->solveNow();
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  window->centralTabs()->setCurrentIndex(1);
  if (auto* metrics = window->findChild<QDockWidget*>(QStringLiteral("MetricsDock"))) metrics->raise();
  saveScreenshot(grabWindow(*window), QStringLiteral("compare.png"));
}

TEST(Screenshots, ThirtyTwoDevicePlan) {
  // Llama-2-70B over all 32 GPUs of the bundled 4×8 H100 cluster as one 32-deep pipeline.
  auto window = freshWindow();
  PlanConfig c;
  c.schedule = "zb-h1";
  c.devices = 32;
  c.partition = "uniform";
  c.parallel.recompute = Recompute::Full;
  c.parallel.zeroStage = 1;
  c.globalBatch = 64;
  c.microBatchSize = 1;
  ASSERT_TRUE(showWorkspace(*window, "Llama-2-70B, 32-stage pipeline", "llama2-70b.json", "h100-4x8-ib.json", c));
  ASSERT_TRUE(window->currentPlan()) << window->statusText().toStdString();
  ASSERT_EQ(window->currentPlan()->config.devices, 32);
  saveScreenshot(grabWindow(*window), QStringLiteral("plan-32-devices.png"));
}

TEST(Screenshots, ConfigureDock) {
  // Llama-3-8B on the 4×8 H100 cluster: the configurator's ranked configurations.
  auto window = freshWindow();
  PlanConfig c = pipestudio::testing::pipelineConfig("1f1b", 4);
  c.globalBatch = 128;
  ASSERT_TRUE(showWorkspace(*window, "Llama-3-8B on 4x8 H100", "llama3-8b.json", "h100-4x8-ib.json", c));
  ConfigureDock* dock = window->configureDock();
  qobject_cast<QLineEdit*>(dock->knob(QStringLiteral("Schedules")))
      ->setText(QStringLiteral("1f1b, interleaved-1f1b, zb-h1, zb-v"));
  dock->search();
  ASSERT_TRUE(dock->waitForIdle(300000));
  ASSERT_GT(dock->model()->rowCount(), 3);
  auto* configure = window->findChild<QDockWidget*>(QStringLiteral("ConfigureDock"));
  ASSERT_NE(configure, nullptr);
  configure->raise();
  window->resizeDocks({configure}, {640}, Qt::Horizontal);
  // The best configuration that is a pipeline (the timeline then has lanes to show).
  int row = 0;
  while (row + 1 < dock->model()->rowCount() && dock->model()->candidate(row).config.devices < 2) ++row;
  dock->table()->selectRow(row);
  dock->chooseRow(row);
  ASSERT_TRUE(window->solveController()->waitForIdle(120000));
  saveScreenshot(grabWindow(*window), QStringLiteral("configure.png"));
}

TEST(Screenshots, MixtureOfExpertsSettings) {
  // Qwen3-30B-A3B on 32 H100s with the flex dispatcher and both overlaps: the solver panel's
  // Experts group and the Metrics dock that names them.
  auto window = freshWindow();
  PlanConfig c = pipestudio::testing::pipelineConfig("1f1b", 4);
  c.globalBatch = 256;
  c.parallel.data = 8;
  c.parallel.expert = 8;
  c.parallel.expertTensor = 1;
  c.parallel.zeroStage = 1;
  c.parallel.recompute = Recompute::Full;
  c.parallel.moeFlexDispatcher = true;
  c.parallel.moeA2aOverlap = true;
  c.parallel.moeCapacityFactor = 1.25;
  ASSERT_TRUE(showWorkspace(*window, "Qwen3-30B-A3B on 4x8 H100", "qwen3-30b-a3b.json", "h100-4x8-ib.json", c));
  ASSERT_TRUE(window->solvedPlan()) << window->lastFailure().toStdString();
  grabWindow(*window);
  auto* panel = window->findChild<QWidget*>(QStringLiteral("SolverPanel"));
  ASSERT_NE(panel, nullptr);
  const QImage solver = panel->grab().toImage();
  ASSERT_TRUE(solver.save(screenshotDir() + QStringLiteral("/solver-moe.png")));
  saveScreenshot(grabWindow(*window), QStringLiteral("window-moe.png"));
}

TEST(Screenshots, ProfilerTraceAgainstItsPlan) {
  // Two ranks of HolisticTraceAnalysis' sampled PyTorch profiler trace (no PP: annotations)
  // imported against a two-device plan: activity per stream, two ProfilerSteps, per-iteration
  // busy time per GPU.
  auto window = freshWindow();
  QTemporaryDir dir;
  ASSERT_TRUE(window->historyDock()->openDatabase(dir.filePath(QStringLiteral("history.sqlite"))));
  QString error;
  ASSERT_TRUE(window->openFile(QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/plan-zb-h1.json"), &error, true));
  const QString hta = QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/hta/");
  ASSERT_TRUE(
      window->importTraces({hta + QStringLiteral("rank0.json.gz"), hta + QStringLiteral("rank1.json.gz")}, &error))
      << error.toStdString();
  window->centralTabs()->setCurrentIndex(0);
  saveScreenshot(grabWindow(*window), QStringLiteral("trace-timeline.png"));
  window->centralTabs()->setCurrentIndex(1);
  saveScreenshot(grabWindow(*window), QStringLiteral("trace-vs-plan.png"));
}

}  // namespace
}  // namespace pipestudio::gui
