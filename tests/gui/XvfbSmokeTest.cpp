// The app must start on a real X display and stay up with the default workspace.
#include <gtest/gtest.h>

#include <QElapsedTimer>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>

#include "QtTestApp.hpp"

namespace {

TEST(XvfbSmoke, StartsAndStaysUpOnARealDisplay) {
  pipestudio::testing::qtApp();
  const QString xvfbRun = QStandardPaths::findExecutable(QStringLiteral("xvfb-run"));
  if (xvfbRun.isEmpty()) GTEST_SKIP() << "xvfb-run not found: install xvfb to run this test";
  QTemporaryDir home;
  ASSERT_TRUE(home.isValid());
  QProcess app;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.remove(QStringLiteral("QT_QPA_PLATFORM"));  // the real xcb platform
  env.insert(QStringLiteral("XDG_CONFIG_HOME"), home.path() + QStringLiteral("/config"));
  env.insert(QStringLiteral("XDG_DATA_HOME"), home.path() + QStringLiteral("/data"));
  app.setProcessEnvironment(env);
  app.setProcessChannelMode(QProcess::MergedChannels);
  QElapsedTimer timer;
  timer.start();
  app.start(xvfbRun, {QStringLiteral("-a"), QStringLiteral("-s"), QStringLiteral("-screen 0 1600x1000x24"),
                      QStringLiteral(PIPESTUDIO_GUI_BINARY), QStringLiteral("--quit-after-ms"), QStringLiteral("4000")});
  ASSERT_TRUE(app.waitForStarted(10000));
  // Still running after 2 s: it did not crash while opening and solving the default workspace.
  EXPECT_FALSE(app.waitForFinished(2000)) << app.readAll().toStdString();
  ASSERT_TRUE(app.waitForFinished(60000)) << "did not quit";
  const QString output = QString::fromLocal8Bit(app.readAll());
  EXPECT_EQ(app.exitStatus(), QProcess::NormalExit) << output.toStdString();
  EXPECT_EQ(app.exitCode(), 0) << output.toStdString();
  EXPECT_GE(timer.elapsed(), 3500);
}

}  // namespace
