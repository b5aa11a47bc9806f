#pragma once
// What the window's tests share: a workspace of bundled model and cluster files, and a session
// with nothing left from earlier tests.

#include <gtest/gtest.h>

#include <QFile>
#include <QSettings>
#include <QString>
#include <string>

#include "MainWindow.hpp"
#include "Workspace.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "support/ExpectedMatchers.hpp"

namespace pipestudio::testing {

/// A workspace of resources/models/`model` and resources/clusters/`cluster` with the given
/// solver settings; a file that does not load fails the test.
inline gui::Workspace bundledWorkspace(const std::string& model, const std::string& cluster, const PlanConfig& config) {
  const std::string resources = PIPESTUDIO_RESOURCES;
  gui::Workspace ws;
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

}  // namespace pipestudio::testing
