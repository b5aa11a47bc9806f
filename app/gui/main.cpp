// pipestudio: the workstation. `pipestudio` restores the last session (or opens the bundled
// default, already solved); `pipestudio FILE` opens a workspace, model, cluster, plan or trace.

#include <QApplication>
#include <QCommandLineParser>
#include <QSettings>
#include <QTimer>

#include "MainWindow.hpp"
#include "MenuController.hpp"

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
                               QStringLiteral("workspace, model, cluster, plan or trace to open"),
                               QStringLiteral("[file]"));
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
    // A file named on the command line (or by a file manager): when it cannot be opened the
    // window says so in a dialog and stays empty, rather than quietly showing something else.
    if (!window.openFromCommandLine(files.front())) qWarning("%s", qPrintable(window.statusText()));
  } else {
    window.openStartupWorkspace();
  }
  if (parser.isSet(quitAfter)) {
    QTimer::singleShot(parser.value(quitAfter).toInt(), &app, &QApplication::quit);
  }
  return QApplication::exec();
}
