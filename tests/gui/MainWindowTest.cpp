#include <gtest/gtest.h>

#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QLabel>
#include <QSpinBox>
#include <QUndoStack>

#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SolveController.hpp"
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
      if (spec.components[static_cast<std::size_t>(window->layerModel()->layerOfRow(r).first)].trainable) return r;
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
    EXPECT_TRUE(message->text().contains(QStringLiteral("DiffusionPipe chose ") + QString::fromStdString(plan->config.schedule)))
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
  const QModelIndex cell = layers->index(row, viz::LayerTableModel::ForwardMs);
  ASSERT_TRUE(layers->setData(cell, QStringLiteral("250")));
  EXPECT_TRUE(window->solveController()->isPending() || window->solveController()->isRunning());
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  const auto after = window->currentPlan();
  ASSERT_NE(after, before);
  const auto [component, layer] = layers->layerOfRow(row);
  EXPECT_DOUBLE_EQ(*after->model.components[static_cast<std::size_t>(component)]
                        .layers[static_cast<std::size_t>(layer)].forwardMs, 250.0);
  EXPECT_GT(viz::metricsOf(*after).makespanMs, viz::metricsOf(*before).makespanMs);

  // Undo re-solves back to the original costs.
  window->undoStack()->undo();
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_NEAR(viz::metricsOf(*window->currentPlan()).makespanMs, viz::metricsOf(*before).makespanMs, 1e-6);

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

TEST_F(MainWindowTest, PinnedBaselineFeedsTheCompareView) {
  window->pinBaseline();
  EXPECT_EQ(window->baselinePlan(), window->currentPlan());
  window->solverPanel().microbatches->setValue(window->currentPlan()->config.microbatches * 2);
  ASSERT_TRUE(window->solveController()->waitForIdle(60000));
  EXPECT_NE(window->baselinePlan(), window->currentPlan());
}

}  // namespace
}  // namespace pipestudio::gui
