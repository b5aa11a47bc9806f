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

#include "MainWindow.hpp"
#include "QtTestApp.hpp"
#include "SolveController.hpp"
#include "pipestudio/model/ModelIO.hpp"
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
