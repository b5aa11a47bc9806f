#include <gtest/gtest.h>

#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QLabel>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QUndoStack>
#include <algorithm>
#include <cstdint>

#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SolveController.hpp"
#ifdef PIPESTUDIO_HAVE_HISTORY
#include "HistoryDock.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#endif
#include "pipestudio/viz/CompareView.hpp"
#include "pipestudio/viz/MetricsModel.hpp"
#include "pipestudio/viz/SpecModels.hpp"
#include "pipestudio/viz/TimelineView.hpp"

namespace pipestudio::gui {
namespace {

QString outputDir() {
  const QString dir = QStringLiteral(PIPESTUDIO_BINARY_DIR) + QStringLiteral("/test-output/gui");
  QDir().mkpath(dir);
  return dir;
}

class MainWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pipestudio::testing::qtApp();
    window = std::make_unique<MainWindow>();
    window->solveController()->setDebounceMs(20);
    ASSERT_TRUE(window->openDefaultWorkspace());
    ASSERT_TRUE(window->solveController()->waitForIdle(60000));
    ASSERT_TRUE(window->currentPlan()) << window->statusText().toStdString();
  }
  /// Row of the first trainable layer in the layer table.
  int trainableRow() const {
    const ModelSpec& spec = window->layerModel()->modelSpec();
    for (int r = 0; r < window->layerModel()->rowCount(); ++r) {
      if (spec.component(window->layerModel()->layerOfRow(r).first).trainable) return r;
    }
    return -1;
  }
  std::unique_ptr<MainWindow> window;
};

TEST_F(MainWindowTest, OpensTheDefaultWorkspaceSolved) {
  const auto plan = window->currentPlan();
  EXPECT_FALSE(plan->ops.empty());
  ASSERT_NE(window->timelineView()->timeline(), nullptr);
  EXPECT_EQ(window->timelineView()->timeline()->plan(), plan.get());
  EXPECT_EQ(window->metricsModel()->rowCount(), plan->config.devices);
  EXPECT_GT(window->layerModel()->rowCount(), 0);
  EXPECT_GT(window->componentModel()->rowCount(), 0);
  EXPECT_GT(window->clusterModel()->rowCount(), 2);
  // The workspace asks for 1f1b with the diffusionpipe partition, which picks the schedule
  // itself: the solver panel names the one it chose.
  const auto* message = window->findChild<QLabel*>(QStringLiteral("SolverMessage"));
  ASSERT_NE(message, nullptr);
  if (plan->config.schedule != "1f1b") {
    EXPECT_TRUE(message->text().contains(QStringLiteral("DiffusionPipe chose ") +
                                         QString::fromStdString(plan->config.schedule)))
        << message->text().toStdString();
  } else {
    EXPECT_FALSE(message->text().contains(QStringLiteral("chose"))) << message->text().toStdString();
  }
}

TEST_F(MainWindowTest, EditingACellReSolves) {
  const auto before = window->currentPlan();
  const int row = trainableRow();
  ASSERT_GE(row, 0);
  viz::LayerTableModel* layers = window->layerModel();
  // The default workspace's layers are shaped (FLOPs): their times are the shape's and a measured
  // time beside it is refused, as the loader refuses it; a size may be measured beside FLOPs.
  const QModelIndex forward = layers->index(row, viz::LayerTableModel::ForwardMs);
  EXPECT_FALSE(layers->setData(forward, QStringLiteral("250")));
  ASSERT_TRUE(layers->setData(forward, QString()));  // back to the shape's time: the red mark goes
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  const QModelIndex cell = layers->index(row, viz::LayerTableModel::ActivationBytes);
  ASSERT_TRUE(layers->setData(cell, QStringLiteral("2GiB")));
  EXPECT_TRUE(window->solveController()->isPending() || window->solveController()->isRunning());
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  const auto after = window->currentPlan();
  ASSERT_NE(after, before);
  const auto [component, layer] = layers->layerOfRow(row);
  EXPECT_EQ(*after->model.component(component).layers[static_cast<std::size_t>(layer)].activationBytes,
            std::int64_t{2} << 30);
  const auto peak = [](const Plan& p) {
    std::int64_t most = 0;
    for (const DeviceMetrics& d : viz::metricsOf(p).devices) most = std::max(most, d.peakMemoryBytes);
    return most;
  };
  EXPECT_GT(peak(*after), peak(*before));

  // Undo re-solves back to the original costs.
  window->undoStack()->undo();
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_NEAR(viz::metricsOf(*window->currentPlan()).makespanMs, viz::metricsOf(*before).makespanMs, 1e-6);
  EXPECT_EQ(peak(*window->currentPlan()), peak(*before));

  // An invalid cell does not reach the solver.
  const auto current = window->currentPlan();
  EXPECT_FALSE(layers->setData(cell, QStringLiteral("abc")));
  EXPECT_FALSE(window->solveController()->isPending());
  EXPECT_EQ(window->currentPlan(), current);
}

TEST_F(MainWindowTest, SolverParametersReSolve) {
  const int microbatches = window->currentPlan()->config.microbatches;
  window->solverPanel().microbatches->setValue(microbatches + 8);
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_EQ(window->currentPlan()->config.microbatches, microbatches + 8);
}

TEST_F(MainWindowTest, SavesOpensAndExports) {
  const QString dir = outputDir();
  const QString path = dir + QStringLiteral("/saved.pipestudio");
  QString error;
  ASSERT_TRUE(window->saveWorkspaceTo(path, &error)) << error.toStdString();
  const std::size_t ops = window->currentPlan()->ops.size();
  MainWindow other;
  ASSERT_TRUE(other.openFile(path, &error, true)) << error.toStdString();
  ASSERT_TRUE(other.currentPlan());  // the saved plan is shown without solving
  EXPECT_EQ(other.currentPlan()->ops.size(), ops);
  EXPECT_FALSE(other.openFile(dir + QStringLiteral("/missing.json"), &error, true));
  EXPECT_TRUE(error.contains(QStringLiteral("missing.json")));

  for (const QString& name : {QStringLiteral("export.png"), QStringLiteral("export.svg"), QStringLiteral("export.pdf"),
                              QStringLiteral("export.json")}) {
    const QString out = dir + QLatin1Char('/') + name;
    QFile::remove(out);
    EXPECT_TRUE(window->exportTo(out, &error)) << name.toStdString() << ": " << error.toStdString();
    EXPECT_GT(QFileInfo(out).size(), 100) << name.toStdString();
  }
  EXPECT_FALSE(window->exportTo(dir + QStringLiteral("/export.xyz"), &error));
}

TEST_F(MainWindowTest, ExportsFrameworkConfigurations) {
  const QString dir = outputDir();
  QString error;
  const QString sh = dir + QStringLiteral("/export.sh");
  const QString toml = dir + QStringLiteral("/titan.toml");
  const QString csv = dir + QStringLiteral("/titan.csv");
  for (const QString& f : {sh, toml, csv}) QFile::remove(f);
  // The default workspace trains around frozen components: neither framework can say that,
  // and the refusal says why instead of writing a file.
  EXPECT_FALSE(window->exportTo(sh, &error));
  EXPECT_TRUE(error.startsWith(QStringLiteral("Megatron-LM cannot express this plan: "))) << error.toStdString();
  EXPECT_FALSE(window->exportTo(toml, &error));
  EXPECT_TRUE(error.contains(QStringLiteral("frozen"))) << error.toStdString();
  for (const QString& f : {sh, toml, csv}) EXPECT_FALSE(QFileInfo::exists(f)) << f.toStdString();

  // A one-stack zb-h1 plan (2 devices) goes to both.
  ASSERT_TRUE(window->openFile(QStringLiteral(PIPESTUDIO_TEST_DATA "/trace/plan-zb-h1.json"), &error, true))
      << error.toStdString();
  ASSERT_TRUE(window->exportTo(sh, &error)) << error.toStdString();
  QFile m(sh);
  ASSERT_TRUE(m.open(QIODevice::ReadOnly));
  EXPECT_TRUE(QString::fromUtf8(m.readAll()).contains(QStringLiteral("--pipeline-model-parallel-size 2")));
  ASSERT_TRUE(window->exportTo(toml, &error)) << error.toStdString();
  QFile t(toml);
  ASSERT_TRUE(t.open(QIODevice::ReadOnly));
  const QString text = QString::fromUtf8(t.readAll());
  EXPECT_TRUE(text.contains(QStringLiteral("[parallelism]"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("titan.csv"))) << text.toStdString();  // the CSV written beside it
  EXPECT_GT(QFileInfo(csv).size(), 0);
}

#ifdef PIPESTUDIO_HAVE_HISTORY
TEST_F(MainWindowTest, ImportsProfilerTracesAlignedWithThePlan) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  ASSERT_TRUE(window->historyDock()->openDatabase(dir.filePath(QStringLiteral("history.sqlite"))));
  auto* store = window->historyDock()->store();
  const auto plan = window->currentPlan();
  // One Kineto file per rank: GPU PP:<stage><action><mb> annotations over the plan's ops.
  QStringList files;
  for (int d = 0; d < plan->config.devices; ++d) {
    std::string events;
    for (const Op& op : plan->ops) {
      if (op.device != d) continue;
      const char* action = op.kind == OpKind::F    ? "F"
                           : op.kind == OpKind::B  ? "I"
                           : op.kind == OpKind::W  ? "W"
                           : op.kind == OpKind::BW ? "B"
                                                   : nullptr;
      if (!action) continue;
      events += ",{\"ph\":\"X\",\"cat\":\"gpu_user_annotation\",\"pid\":0,\"tid\":7,\"name\":\"PP:" +
                std::to_string(op.virtualStage) + action + std::to_string(op.microbatch) +
                "\",\"ts\":" + std::to_string((op.startMs + 1.0) * 1000.0) +
                ",\"dur\":" + std::to_string(op.durationMs() * 1000.0) + "}";
    }
    const QString path = dir.filePath(QStringLiteral("rank%1.json").arg(d));
    QFile f(path);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write(("{\"distributedInfo\":{\"rank\":" + std::to_string(d) +
             "},\"baseTimeNanoseconds\":1750000000000000000,\"traceEvents\":[" +
             (events.empty() ? std::string() : events.substr(1)) + "]}")
                .c_str());
    files << path;
  }
  QString error;
  ASSERT_TRUE(window->importTraces(files, &error)) << error.toStdString();
  auto runs = store->listRuns();
  ASSERT_TRUE(runs.hasValue());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_TRUE(runs->front().planId.has_value());  // the plan on screen, linked
  EXPECT_TRUE(window->statusText().contains(QStringLiteral("ops matched"))) << window->statusText().toStdString();
  // The measured run is drawn under the plan.
  EXPECT_EQ(window->centralTabs()->currentIndex(), 1);
  EXPECT_EQ(window->compareView()->baseline(), plan);
  ASSERT_NE(window->compareView()->current(), nullptr);
  EXPECT_FALSE(window->compareView()->current()->ops.empty());

  // A truncated gzip file is refused by name and leaves the history as it was.
  const QString broken = dir.filePath(QStringLiteral("rank9.pt.trace.json.gz"));
  QFile b(broken);
  ASSERT_TRUE(b.open(QIODevice::WriteOnly));
  b.write(QByteArray::fromHex("1f8b0800000000000003abe6"));
  b.close();
  EXPECT_FALSE(window->importTraces({broken}, &error));
  EXPECT_TRUE(error.contains(QStringLiteral("rank9.pt.trace.json.gz"))) << error.toStdString();
  runs = store->listRuns();
  ASSERT_TRUE(runs.hasValue());
  EXPECT_EQ(runs->size(), 1u);
}
#endif

TEST_F(MainWindowTest, PinnedBaselineFeedsTheCompareView) {
  window->pinBaseline();
  EXPECT_EQ(window->baselinePlan(), window->currentPlan());
  window->solverPanel().microbatches->setValue(window->currentPlan()->config.microbatches * 2);
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_NE(window->baselinePlan(), window->currentPlan());
}

}  // namespace
}  // namespace pipestudio::gui
