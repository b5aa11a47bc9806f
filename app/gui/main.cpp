// pipestudio: the workstation. `pipestudio` opens the last workspace (or the bundled default,
// already solved); `pipestudio FILE` opens a workspace, model, cluster, plan or trace.

#include <QApplication>
#include <QCommandLineParser>
#include <QSettings>
#include <QTimer>

#include "MainWindow.hpp"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("PipeStudio"));
  QApplication::setOrganizationName(QStringLiteral("PipeStudio"));
  QApplication::setApplicationVersion(QStringLiteral(PIPESTUDIO_VERSION));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("PipeStudio: pipeline-parallel schedule design workstation"));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("file"),
                               QStringLiteral("workspace, model, cluster, plan or trace to open"), QStringLiteral("[file]"));
  QCommandLineOption quitAfter(QStringLiteral("quit-after-ms"),
                               QStringLiteral("Quit this many ms after the window is drawn (smoke tests, benches)."),
                               QStringLiteral("ms"));
  parser.addOption(quitAfter);
  parser.process(app);

  pipestudio::gui::applyTheme(QSettings().value(QStringLiteral("ui/theme"), QStringLiteral("system")).toString());
  pipestudio::gui::MainWindow window;
  window.show();
  const QStringList files = parser.positionalArguments();
  if (!files.isEmpty()) {
    QString error;
    if (!window.openFile(files.front(), &error, true)) {
      // Still open the window (with the default workspace) and show why the file was refused.
      window.openDefaultWorkspace();
      qWarning("%s", qPrintable(error));
    }
  } else {
    window.openStartupWorkspace();
  }
  if (parser.isSet(quitAfter)) {
    QTimer::singleShot(parser.value(quitAfter).toInt(), &app, &QApplication::quit);
  }
  return QApplication::exec();
}
