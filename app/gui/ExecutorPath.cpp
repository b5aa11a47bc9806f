#include "ExecutorPath.hpp"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>

namespace pipestudio::gui {

QString guiExecutorPath() {
  const QString env = qEnvironmentVariable("PIPESTUDIO_EXEC");
  if (!env.isEmpty()) return env;
  // Installed: next to pipestudio; build tree: <build>/app/gui/pipestudio and <build>/executor.
  const QDir app(QCoreApplication::applicationDirPath());
  for (const QString& rel : {QStringLiteral("pipestudio-exec"), QStringLiteral("../executor/pipestudio-exec"),
                             QStringLiteral("../../executor/pipestudio-exec")}) {
    const QFileInfo info(app.filePath(rel));
    if (info.isFile() && info.isExecutable()) return info.canonicalFilePath();
  }
  const QString inPath = QStandardPaths::findExecutable(QStringLiteral("pipestudio-exec"));
  return inPath.isEmpty() ? QStringLiteral("pipestudio-exec") : inPath;
}

}  // namespace pipestudio::gui
