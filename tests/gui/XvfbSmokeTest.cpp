// The app must start on a real X display and stay up: with the default workspace, with a file
// that cannot be opened (it shows the error instead), and with a 64-device plan.
#include <gtest/gtest.h>

#include <QElapsedTimer>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>

#include "QtTestApp.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "support/SyntheticPlan.hpp"

namespace {

struct SmokeRun {
  bool skipped = false;
  bool stayedUp = false;  ///< still running 2 s after start
  int exitCode = -1;
  bool normalExit = false;
  qint64 elapsedMs = 0;
  QString output;
};

/// Starts `pipestudio ARGS… --quit-after-ms 4000` under xvfb-run with a private home.
SmokeRun runOnXvfb(const QStringList& args) {
  SmokeRun r;
  pipestudio::testing::qtApp();
  const QString xvfbRun = QStandardPaths::findExecutable(QStringLiteral("xvfb-run"));
  if (xvfbRun.isEmpty()) {
    r.skipped = true;
    return r;
  }
  QTemporaryDir home;
  QProcess app;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.remove(QStringLiteral("QT_QPA_PLATFORM"));  // the real xcb platform
  env.insert(QStringLiteral("XDG_CONFIG_HOME"), home.path() + QStringLiteral("/config"));
  env.insert(QStringLiteral("XDG_DATA_HOME"), home.path() + QStringLiteral("/data"));
  app.setProcessEnvironment(env);
  app.setProcessChannelMode(QProcess::MergedChannels);
  QElapsedTimer timer;
  timer.start();
  QStringList all{QStringLiteral("-a"), QStringLiteral("-s"), QStringLiteral("-screen 0 1600x1000x24"),
                  QStringLiteral(PIPESTUDIO_GUI_BINARY)};
  all << args << QStringLiteral("--quit-after-ms") << QStringLiteral("4000");
  app.start(xvfbRun, all);
  if (!app.waitForStarted(10000)) return r;
  // Still running after 2 s: it did not crash while opening, solving and drawing.
  r.stayedUp = !app.waitForFinished(2000);
  if (!app.waitForFinished(60000)) {
    app.kill();
    app.waitForFinished(5000);
  }
  r.output = QString::fromLocal8Bit(app.readAll());
  r.normalExit = app.exitStatus() == QProcess::NormalExit;
  r.exitCode = app.exitCode();
  r.elapsedMs = timer.elapsed();
  return r;
}

TEST(XvfbSmoke, StartsAndStaysUpOnARealDisplay) {
  const SmokeRun r = runOnXvfb({});
  if (r.skipped) GTEST_SKIP() << "xvfb-run not found: install xvfb to run this test";
  EXPECT_TRUE(r.stayedUp) << r.output.toStdString();
  EXPECT_TRUE(r.normalExit) << r.output.toStdString();
  EXPECT_EQ(r.exitCode, 0) << r.output.toStdString();
  EXPECT_GE(r.elapsedMs, 3500);
}

TEST(XvfbSmoke, ABrokenFileShowsItsErrorAndTheAppStaysUp) {
  QTemporaryDir dir;
  const QString broken = dir.filePath(QStringLiteral("broken.pipestudio"));
  QFile file(broken);
  ASSERT_TRUE(file.open(QIODevice::WriteOnly));
  file.write("{\"schema\": \"pipestudio.workspace/1\", \"model\": {\"schema\": \"pipestudio.model/1\"");
  file.close();
  const SmokeRun r = runOnXvfb({broken});
  if (r.skipped) GTEST_SKIP() << "xvfb-run not found: install xvfb to run this test";
  EXPECT_TRUE(r.stayedUp) << r.output.toStdString();
  EXPECT_EQ(r.exitCode, 0) << r.output.toStdString();
  EXPECT_TRUE(r.output.contains(QStringLiteral("Cannot open"))) << r.output.toStdString();
}

TEST(XvfbSmoke, A64DevicePlanOpensAndDraws) {
  QTemporaryDir dir;
  const std::string path = dir.filePath(QStringLiteral("wide.plan.json")).toStdString();
  ASSERT_TRUE(pipestudio::savePlan(path, pipestudio::test::syntheticPlan(64, 256)));
  const SmokeRun r = runOnXvfb({QString::fromStdString(path)});
  if (r.skipped) GTEST_SKIP() << "xvfb-run not found: install xvfb to run this test";
  EXPECT_TRUE(r.stayedUp) << r.output.toStdString();
  EXPECT_TRUE(r.normalExit) << r.output.toStdString();
  EXPECT_EQ(r.exitCode, 0) << r.output.toStdString();
}

}  // namespace
