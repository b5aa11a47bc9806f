#pragma once
// What the window's tests share: a workspace of bundled model and cluster files, and a session
// with nothing left from earlier tests.

#include <gtest/gtest.h>

#include <QFile>
#include <QMessageBox>
#include <QSettings>
#include <QString>
#include <memory>
#include <string>
#include <vector>

#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SolveController.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "pipestudio/workspace/Workspace.hpp"
#include "support/ExpectedMatchers.hpp"

namespace pipestudio::testing {

/// A workspace of resources/models/`model` and resources/clusters/`cluster` with the given
/// solver settings; a file that does not load fails the test.
inline Workspace bundledWorkspace(const std::string& model, const std::string& cluster, const PlanConfig& config) {
  const std::string resources = PIPESTUDIO_RESOURCES;
  Workspace ws;
  auto m = loadModel(resources + "/models/" + model);
  auto c = loadCluster(resources + "/clusters/" + cluster);
  EXPECT_THAT(m, test::HasValue());
  EXPECT_THAT(c, test::HasValue());
  if (m) ws.model = *m;
  if (c) ws.cluster = *c;
  ws.name = model + " on " + cluster;
  ws.solver = config;
  return ws;
}

/// Solver settings the window tests start from: `schedule` over `devices` pipeline devices with
/// `microbatches` microbatches and `chunks` chunks per device, balanced partition.
inline PlanConfig pipelineConfig(const std::string& schedule, int devices, int microbatches = 1, int chunks = 1) {
  PlanConfig c;
  c.schedule = schedule;
  c.devices = devices;
  c.microbatches = microbatches;
  c.chunksPerDevice = chunks;
  c.partition = "balanced";
  return c;
}

/// pipelineConfig with full recomputation and ZeRO-1: what fits Llama-3-8B (and Llama-2-70B
/// deep enough) in a GPU's memory on few devices.
inline PlanConfig recomputedPipelineConfig(const std::string& schedule, int devices, int microbatches, int chunks = 1) {
  PlanConfig c = pipelineConfig(schedule, devices, microbatches, chunks);
  c.parallel.recompute = Recompute::Full;
  c.parallel.zeroStage = 1;
  return c;
}

/// A trace stream's first frame, the header of a CPU-backend run `runId` over `world` ranks, to
/// which a test appends its op ranges.
inline std::vector<trace::Frame> cpuRunFrames(const std::string& runId, int world) {
  trace::Header header;
  header.runId = runId;
  header.world = world;
  header.backend = "cpu";
  return {trace::Frame(header)};
}

/// Forgets what earlier tests left in the (test-mode) settings and session.
inline void forgetSession() {
  QSettings settings;
  settings.remove(QStringLiteral("session"));
  settings.remove(QStringLiteral("window"));
  QFile::remove(gui::MainWindow::sessionFilePath());
}

/// A test of a fresh MainWindow: no session of an earlier test (before and after), unsaved
/// changes discarded when the window asks, solves 20 ms after an edit.
class FreshWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    qtApp();
    forgetSession();
    window = std::make_unique<gui::MainWindow>();
    window->setUnsavedChangesHandler([] { return QMessageBox::Discard; });
    window->solveController()->setDebounceMs(20);
  }
  void TearDown() override { forgetSession(); }
  /// Opens the default workspace and waits for its plan.
  void openDefault() {
    ASSERT_TRUE(window->openDefaultWorkspace());
    ASSERT_TRUE(window->solveController()->waitForIdle(60000));
    ASSERT_TRUE(window->currentPlan()) << window->statusText().toStdString();
  }
  std::unique_ptr<gui::MainWindow> window;
};

}  // namespace pipestudio::testing
