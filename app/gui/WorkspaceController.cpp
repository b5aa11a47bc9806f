#include "WorkspaceController.hpp"

#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QLineEdit>
#include <QMainWindow>
#include <QMenu>
#include <QSettings>
#include <QStandardPaths>
#include <QTabWidget>
#include <QUndoStack>
#include <algorithm>

#include "BundledFiles.hpp"
#include "Docks.hpp"
#include "GuiText.hpp"
#include "MainWindowInterface.hpp"
#include "SettingsFit.hpp"
#include "SolverPanel.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/SolverNames.hpp"

namespace pipestudio::gui {

namespace {

constexpr int kMaxRecentFiles = 8;

QString q(const std::string& s) { return QString::fromStdString(s); }

// How a workspace's copy differs from the bundled file of its name ("differs from the bundled
// llama3-8b.json: …"), or nothing where no file has the name or the copy is the file.
QString bundledDifference(const std::optional<BundledDocument>& file, const Json& copy) {
  if (!file) return {};
  const QStringList diff = jsonDifferences(file->json, copy, 3);
  if (diff.isEmpty()) return {};
  return QStringLiteral("differs from the bundled %1: %2").arg(file->fileName, diff.join(QStringLiteral("; ")));
}

}  // namespace

WorkspaceController::WorkspaceController(QMainWindow* window, MainWindowInterface& host, Docks& docks, QUndoStack* undo,
                                         QTabWidget* tabs)
    : QObject(window), m_window(window), m_host(host), m_docks(docks), m_undo(undo), m_tabs(tabs) {
  connect(&m_docks, &Docks::bundledFileRequested, this, &WorkspaceController::useBundledFile);
}

Workspace WorkspaceController::current() const {
  Workspace ws;
  ws.name = m_name.toStdString();
  ws.named = m_named;
  ws.model = m_docks.modelSpec();
  ws.cluster = m_docks.clusterSpec();
  ws.solver = m_docks.solverPanel()->config();
  // Only the solve of these settings is saved with them (a dimmed last good plan or a measured
  // run on screen would reopen as if it were their solve).
  if (auto plan = m_host.solvedPlan()) ws.plan = *plan;
  return ws;
}

void WorkspaceController::setWorkspace(const Workspace& ws, const QString& path) {
  m_undo->clear();
  m_path = path;
  m_name = q(ws.name);
  m_named = ws.named;
  m_docks.setModelSpec(ws.model);
  m_docks.setClusterSpec(ws.cluster);
  m_docks.solverPanel()->setConfig(ws.solver);
  m_host.forgetFailure();
  m_host.unpinBaseline(QString());
  setClean();
  checkAgainstBundledFiles(true);
  if (ws.plan) {
    m_host.showSettledPlan(std::make_shared<const Plan>(*ws.plan));
    m_host.setStatus(QStringLiteral("Opened %1").arg(path.isEmpty() ? QStringLiteral("the workspace") : path));
  } else {
    m_host.solveChangedInputs(QStringLiteral("workspace opened: solving…"));
  }
}

bool WorkspaceController::openDefaultWorkspace() {
  if (!confirmReplace(QStringLiteral("opening the default workspace"))) return false;
  const QString path = QStringLiteral(":/workspaces/default.pipestudio");
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly)) {
    m_host.setStatus(QStringLiteral("The bundled default workspace is missing from this build"), true);
    return false;
  }
  auto doc = parseJson(file.readAll().toStdString(), path.toStdString());
  if (!doc) {
    m_host.setStatus(q(doc.message()), true);
    return false;
  }
  auto ws = readWorkspace(*doc, solverNames());
  if (!ws) {
    m_host.setStatus(q(ws.message()), true);
    return false;
  }
  setWorkspace(*ws, QString());
  return true;
}

QString WorkspaceController::sessionFilePath() {
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/session.pipestudio");
}

void WorkspaceController::openStartupWorkspace() {
  QSettings settings;
  const QString session = sessionFilePath();
  if (QFileInfo::exists(session)) {
    auto ws = loadWorkspace(session.toStdString(), solverNames());
    if (ws) {
      QString path = settings.value(QStringLiteral("session/workspacePath")).toString();
      if (!path.isEmpty() && !QFileInfo::exists(path)) path.clear();
      setWorkspace(*ws, path);
      if (settings.value(QStringLiteral("session/modified")).toBool()) markModified();
      m_tabs->setCurrentIndex(
          std::clamp(settings.value(QStringLiteral("session/tab")).toInt(), 0, m_tabs->count() - 1));
      m_host.setStatus(QStringLiteral("Restored the last session%1")
                           .arg(path.isEmpty() ? QString() : QStringLiteral(" (") + path + QLatin1Char(')')));
      return;
    }
    m_host.setStatus(QStringLiteral("The last session could not be restored: %1").arg(q(ws.message())), true);
  }
  const QString last = settings.value(QStringLiteral("session/lastWorkspace")).toString();
  if (!last.isEmpty() && QFileInfo::exists(last) && openFile(last, nullptr, true)) return;
  openDefaultWorkspace();
}

void WorkspaceController::writeSession(bool discardEdits) {
  QSettings settings;
  settings.setValue(QStringLiteral("session/workspacePath"), m_path);
  settings.setValue(QStringLiteral("session/tab"), m_tabs->currentIndex());
  const QString session = sessionFilePath();
  if (discardEdits) {
    // The user threw the edits away: next time the saved file (or the default) opens.
    QFile::remove(session);
    settings.setValue(QStringLiteral("session/modified"), false);
    return;
  }
  QDir().mkpath(QFileInfo(session).absolutePath());
  if (Status s = saveWorkspace(session.toStdString(), current()); !s) {
    QFile::remove(session);
    return;
  }
  settings.setValue(QStringLiteral("session/modified"), m_dirty);
}

bool WorkspaceController::openFromCommandLine(const QString& path) {
  QString error;
  if (openFile(path, &error, true)) return true;
  m_host.clearPlan(QStringLiteral("%1 could not be opened: File > Open… or File > Open Default Workspace")
                       .arg(QFileInfo(path).fileName()));
  m_host.setStatus(QStringLiteral("Cannot open %1").arg(path), true);
  m_openErrorBox =
      new QMessageBox(QMessageBox::Critical, QStringLiteral("Cannot open file"),
                      QStringLiteral("PipeStudio could not open %1.").arg(path), QMessageBox::Ok, m_window);
  m_openErrorBox->setObjectName(QStringLiteral("OpenErrorBox"));
  m_openErrorBox->setInformativeText(summaryLine(error));
  m_openErrorBox->setDetailedText(error);
  m_openErrorBox->setAttribute(Qt::WA_DeleteOnClose);
  connect(m_openErrorBox, &QObject::destroyed, this, [this]() { m_openErrorBox = nullptr; });
  m_openErrorBox->open();
  return false;
}

bool WorkspaceController::openFile(const QString& path, QString* error, bool quiet) {
  auto doc = openDocument(path.toStdString(), solverNames());
  if (!doc) {
    const QString message = q(doc.message());
    if (error) *error = message;
    m_host.setStatus(summaryLine(message), true);
    if (!quiet) QMessageBox::warning(m_window, QStringLiteral("Cannot open file"), message);
    return false;
  }
  // A workspace or plan replaces what the window holds: unsaved edits are asked about first. A
  // model or cluster goes into the workspace (which stays modified), a trace beside it.
  const bool replaces = doc->kind == DocumentKind::Workspace || doc->kind == DocumentKind::Plan;
  if (replaces && !confirmReplace(QStringLiteral("opening %1").arg(QFileInfo(path).fileName()))) {
    if (error) *error = QStringLiteral("Open cancelled: the unsaved changes are kept");
    return false;
  }
  const ModelSpec previous = m_docks.modelSpec();
  switch (doc->kind) {
    case DocumentKind::Workspace:
      setWorkspace(*doc->workspace, path);
      QSettings().setValue(QStringLiteral("session/lastWorkspace"), QFileInfo(path).absoluteFilePath());
      break;
    case DocumentKind::Model:
      // The undo steps so far are cell edits of the previous model (row, column): undone on
      // this one they would write into the wrong layers.
      m_undo->clear();
      m_docks.setModelSpec(*doc->model);
      inputOpened(QStringLiteral("Model %1 loaded").arg(q(doc->model->name)));
      modelReplaced(previous);
      m_host.solveChangedInputs(QStringLiteral("model %1 opened: solving…").arg(q(doc->model->name)));
      break;
    case DocumentKind::Cluster:
      m_undo->clear();
      m_docks.setClusterSpec(*doc->cluster);
      inputOpened(QStringLiteral("Cluster %1 loaded").arg(q(doc->cluster->name)));
      m_host.solveChangedInputs(QStringLiteral("cluster %1 opened: solving…").arg(q(doc->cluster->name)));
      break;
    case DocumentKind::Plan:
      m_docks.setModelSpec(doc->plan->model);
      m_docks.setClusterSpec(doc->plan->cluster);
      followContent();
      m_docks.solverPanel()->setConfig(doc->plan->config);
      if (previous.name != doc->plan->model.name) m_host.unpinBaseline(QString());
      checkAgainstBundledFiles(true);
      m_host.showSettledPlan(std::make_shared<const Plan>(*doc->plan));
      m_host.setStatus(QStringLiteral("Plan %1 opened").arg(path));
      break;
    case DocumentKind::Trace: {
      // A measured run: shown in the timeline and compared against the current plan.
      auto measured = std::make_shared<const Plan>(*doc->plan);
      m_host.showMeasuredInTimeline(measured, QStringLiteral("the trace %1").arg(QFileInfo(path).fileName()));
      m_host.setStatus(QStringLiteral("Trace %1 opened (%2 op ranges)").arg(path).arg(measured->ops.size()));
      break;
    }
  }
  updateTitle();
  addRecentFile(QFileInfo(path).absoluteFilePath());
  return true;
}

bool WorkspaceController::saveTo(const QString& path, QString* error) {
  Workspace ws = current();
  if (m_name.isEmpty()) ws.name = QFileInfo(path).completeBaseName().toStdString();
  Status status = saveWorkspace(path.toStdString(), ws);
  if (!status) {
    if (error) *error = q(status.message());
    m_host.setStatus(q(status.message()), true);
    return false;
  }
  m_path = path;
  m_name = q(ws.name);
  m_undo->setClean();
  setClean();
  QSettings().setValue(QStringLiteral("session/lastWorkspace"), QFileInfo(path).absoluteFilePath());
  addRecentFile(QFileInfo(path).absoluteFilePath());
  m_host.setStatus(QStringLiteral("Saved %1").arg(path));
  return true;
}

void WorkspaceController::openDialog() {
  const QString path = QFileDialog::getOpenFileName(
      m_window, QStringLiteral("Open"), QString(),
      QStringLiteral("PipeStudio documents (*.pipestudio *.json *.pstrace *.trace);;All files (*)"));
  if (!path.isEmpty()) openFile(path);
}

bool WorkspaceController::saveDialog(bool saveAs) {
  QString path = m_path;
  if (saveAs || path.isEmpty()) {
    path = QFileDialog::getSaveFileName(m_window, QStringLiteral("Save Workspace"), path,
                                        QStringLiteral("PipeStudio workspace (*.pipestudio)"));
  }
  if (path.isEmpty()) return false;
  if (!path.endsWith(QStringLiteral(".pipestudio"))) path += QStringLiteral(".pipestudio");
  QString error;
  if (!saveTo(path, &error)) {
    QMessageBox::warning(m_window, QStringLiteral("Cannot save"), error);
    return false;
  }
  return true;
}

QMessageBox::StandardButton WorkspaceController::askUnsaved(const QString& what) {
  if (m_askUnsaved) return m_askUnsaved();
  return QMessageBox::question(m_window, QStringLiteral("Unsaved changes"),
                               QStringLiteral("The workspace has unsaved changes. Save them before %1?").arg(what),
                               QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
}

bool WorkspaceController::confirmClose() {
  bool discard = false;
  if (m_dirty) {
    const QMessageBox::StandardButton answer = askUnsaved(QStringLiteral("quitting"));
    if (answer == QMessageBox::Cancel) return false;
    if (answer == QMessageBox::Save && !saveDialog(false)) return false;
    discard = answer == QMessageBox::Discard;
  }
  writeSession(discard);
  return true;
}

bool WorkspaceController::confirmReplace(const QString& what) {
  if (!m_dirty) return true;
  const QMessageBox::StandardButton answer = askUnsaved(what);
  if (answer == QMessageBox::Save && saveDialog(false)) return true;
  if (answer == QMessageBox::Discard) return true;
  m_host.setStatus(QStringLiteral("Not %1: the unsaved changes are kept").arg(what));
  return false;
}

void WorkspaceController::modelReplaced(const ModelSpec& previous) {
  const ModelSpec model = m_docks.modelSpec();
  if (previous.name != model.name) {
    m_host.unpinBaseline(QStringLiteral("Baseline unpinned: it was a plan of %1").arg(q(previous.name)));
  }
  // The previous model's settings where they still apply; the others changed and named.
  SolverPanel* panel = m_docks.solverPanel();
  const FittedSettings fit = fitSettingsToModel(panel->config(), model, m_docks.clusterSpec());
  if (!fit.changes.isEmpty()) {
    panel->setConfig(fit.config);
    m_host.noteAdjustedSettings(QStringLiteral("for %1: ").arg(q(model.name)) + fit.changes.join(QStringLiteral("; ")));
  }
  if (!fit.kept.isEmpty()) {
    m_host.noteAdjustedSettings(
        QStringLiteral("the settings of %1 were kept, but do not fit %2").arg(q(previous.name), q(model.name)));
  }
}

void WorkspaceController::useBundledFile(bool model) {
  QString what;
  m_undo->clear();  // the steps so far edit the copy being replaced
  if (model) {
    const auto file = bundledModel(m_docks.modelSpec().name);
    if (!file || !file->model) return;
    m_docks.setModelSpec(*file->model);
    what = file->fileName;
  } else {
    const auto file = bundledCluster(m_docks.clusterSpec().name);
    if (!file || !file->cluster) return;
    m_docks.setClusterSpec(*file->cluster);
    what = file->fileName;
  }
  markModified();
  m_host.setStatus(QStringLiteral("Replaced the workspace's copy with the bundled %1").arg(what));
  m_host.solveChangedInputs(QStringLiteral("the bundled %1: solving…").arg(what));
}

void WorkspaceController::checkAgainstBundledFiles(bool announce) {
  // A workspace embeds its model and cluster: a copy under a bundled file's name that differs
  // from the file plans differently from `pipestudio-cli plan --cluster FILE`. Say so.
  m_bundledDifferences.clear();
  const ModelSpec model = m_docks.modelSpec();
  const QString modelNote = bundledDifference(bundledModel(model.name), modelToJson(model));
  if (!modelNote.isEmpty()) m_bundledDifferences << QStringLiteral("the model '%1' %2").arg(q(model.name), modelNote);
  const ClusterSpec cluster = m_docks.clusterSpec();
  const QString clusterNote = bundledDifference(bundledCluster(cluster.name), clusterToJson(cluster));
  if (!clusterNote.isEmpty())
    m_bundledDifferences << QStringLiteral("the cluster '%1' %2").arg(q(cluster.name), clusterNote);
  m_docks.setBundledNotes(modelNote, clusterNote);
  updateTitle();
  if (announce && !m_bundledDifferences.isEmpty()) {
    m_host.setStatus(QStringLiteral("Not the bundled files: ") + m_bundledDifferences.join(QStringLiteral(" · ")),
                     true);
  }
}

// --- name, title and recent files -------------------------------------------------------------

void WorkspaceController::followContent() {
  if (m_named) return;
  const std::string model = m_docks.modelSpec().name;
  const std::string cluster = m_docks.clusterSpec().name;
  if (model.empty() && cluster.empty()) return;
  m_name = cluster.empty() ? q(model) : model.empty() ? q(cluster) : q(model) + QStringLiteral(" on ") + q(cluster);
  updateTitle();
}

void WorkspaceController::inputOpened(const QString& loaded) {
  followContent();
  markModified();
  m_host.setStatus(loaded);
}

void WorkspaceController::rename(const QString& name) {
  const QString trimmed = name.trimmed();
  m_named = !trimmed.isEmpty();
  if (m_named) {
    m_name = trimmed;
  } else {
    followContent();
  }
  markModified();
  m_host.setStatus(m_named ? QStringLiteral("Workspace named %1").arg(m_name)
                           : QStringLiteral("The workspace's name follows its model and cluster: %1").arg(m_name));
}

void WorkspaceController::renameDialog() {
  bool ok = false;
  const QString name = QInputDialog::getText(
      m_window, QStringLiteral("Rename Workspace"),
      QStringLiteral("Name (runs of its plans are recorded under it; empty: follow the model and cluster)"),
      QLineEdit::Normal, m_named ? m_name : QString(), &ok);
  if (ok) rename(name);
}

// --- title and recent files -------------------------------------------------------------------

void WorkspaceController::markModified() {
  m_dirty = true;
  // An edited model or cluster is no longer the bundled file it may have been opened from.
  checkAgainstBundledFiles(false);
}

void WorkspaceController::setClean() {
  m_dirty = false;
  updateTitle();
}

void WorkspaceController::updateTitle() {
  // "model · cluster — file[*]": what is being planned, on what, saved where.
  const QString file = !m_path.isEmpty()
                           ? QFileInfo(m_path).fileName()
                           : (m_name.isEmpty() ? QStringLiteral("untitled") : m_name + QStringLiteral(" (not saved)"));
  QStringList what;
  const bool modelCopy = std::any_of(m_bundledDifferences.begin(), m_bundledDifferences.end(),
                                     [](const QString& d) { return d.startsWith(QStringLiteral("the model")); });
  const bool clusterCopy = std::any_of(m_bundledDifferences.begin(), m_bundledDifferences.end(),
                                       [](const QString& d) { return d.startsWith(QStringLiteral("the cluster")); });
  const QString copy = QStringLiteral(" (not the bundled file)");
  if (const std::string model = m_docks.modelSpec().name; !model.empty())
    what << q(model) + (modelCopy ? copy : QString());
  if (const std::string cluster = m_docks.clusterSpec().name; !cluster.empty())
    what << q(cluster) + (clusterCopy ? copy : QString());
  const QString head = what.isEmpty() ? QString() : what.join(QStringLiteral(" · ")) + QStringLiteral(" — ");
  m_window->setWindowTitle(QStringLiteral("%1%2[*] — PipeStudio").arg(head, file));
  m_window->setWindowModified(m_dirty);
}

void WorkspaceController::setRecentMenu(QMenu* menu) {
  m_recentMenu = menu;
  rebuildRecentMenu();
}

void WorkspaceController::addRecentFile(const QString& path) {
  QSettings settings;
  QStringList files = settings.value(QStringLiteral("session/recentFiles")).toStringList();
  files.removeAll(path);
  files.prepend(path);
  while (files.size() > kMaxRecentFiles) files.removeLast();
  settings.setValue(QStringLiteral("session/recentFiles"), files);
  rebuildRecentMenu();
}

void WorkspaceController::rebuildRecentMenu() {
  if (!m_recentMenu) return;
  m_recentMenu->clear();
  const QStringList files = QSettings().value(QStringLiteral("session/recentFiles")).toStringList();
  for (const QString& path : files) {
    QAction* action = m_recentMenu->addAction(QFileInfo(path).fileName());
    action->setToolTip(path);
    connect(action, &QAction::triggered, this, [this, path]() { openFile(path); });
  }
  m_recentMenu->setEnabled(!files.isEmpty());
}

}  // namespace pipestudio::gui
