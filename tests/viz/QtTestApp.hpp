#pragma once
// One QApplication for a GoogleTest binary, on the offscreen platform unless the environment
// names another (docs/style.md: real widgets under QT_QPA_PLATFORM=offscreen).

#include <QApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>
#include <cerrno>
#include <csignal>

namespace pipestudio::testing {

/// Removes the settings files and data folders ("PipeStudioTests-<pid>") of test processes
/// that no longer run. (Not at exit: Qt's globals are gone by then.)
inline void removeFinishedTestProcessFiles() {
  auto finished = [](const QString& name) {
    bool ok = false;
    const qint64 pid = name.section(QLatin1Char('-'), 1).section(QLatin1Char('.'), 0, 0).toLongLong(&ok);
    return ok && pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  };
  const QFileInfo settings(QSettings().fileName());
  const QDir config = settings.dir();
  for (const QString& f : config.entryList({QStringLiteral("PipeStudioTests-*.conf")}, QDir::Files)) {
    if (finished(f)) QFile::remove(config.filePath(f));
  }
  QDir data(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation));
  if (!data.cdUp()) return;
  for (const QString& d : data.entryList({QStringLiteral("PipeStudioTests-*")}, QDir::Dirs | QDir::NoDotAndDotDot)) {
    if (finished(d)) QDir(data.filePath(d)).removeRecursively();
  }
}

inline QApplication* qtApp() {
  static int argc = 1;
  static char name[] = "pipestudio-tests";
  static char* argv[] = {name, nullptr};
  static QApplication* app = [] {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QStandardPaths::setTestModeEnabled(true);  // QSettings and data under ~/.qttest, not the user's
    auto* a = new QApplication(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("PipeStudioTests"));
    // One settings file and data folder (the saved session) per process: ctest runs the tests
    // of one binary as parallel processes, and one test clearing the session in its SetUp must
    // not clear it under another that is restoring it.
    QApplication::setApplicationName(QStringLiteral("PipeStudioTests-%1").arg(QCoreApplication::applicationPid()));
    removeFinishedTestProcessFiles();
    return a;
  }();
  return app;
}

}  // namespace pipestudio::testing
