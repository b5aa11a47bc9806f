#pragma once
// One QApplication for a GoogleTest binary, on the offscreen platform unless the environment
// names another (STYLE.md: real widgets under QT_QPA_PLATFORM=offscreen).

#include <QApplication>
#include <QStandardPaths>

namespace pipestudio::testing {

inline QApplication* qtApp() {
  static int argc = 1;
  static char name[] = "pipestudio-tests";
  static char* argv[] = {name, nullptr};
  static QApplication* app = [] {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QStandardPaths::setTestModeEnabled(true);  // QSettings and data under ~/.qttest, not the user's
    auto* a = new QApplication(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("PipeStudioTests"));
    QApplication::setApplicationName(QStringLiteral("PipeStudioTests"));
    return a;
  }();
  return app;
}

}  // namespace pipestudio::testing
