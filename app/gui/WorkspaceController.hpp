#pragma once
// The workspace the window edits (docs/gui.md, issue 16): which file it is, its name, whether it
// has unsaved changes (the title's `*`), the recent files, the last session; and opening any
// document the window accepts (workspace, model, cluster, plan, trace) into the editors, the
// solver panel and the timeline.

#include <QMessageBox>
#include <QObject>
#include <QString>
#include <functional>

#include "pipestudio/model/Model.hpp"
#include "pipestudio/workspace/Workspace.hpp"

class QMainWindow;
class QMenu;
class QTabWidget;
class QUndoStack;

namespace pipestudio::gui {

class Docks;
class MainWindowInterface;

class WorkspaceController : public QObject {
  Q_OBJECT
 public:
  WorkspaceController(QMainWindow* window, MainWindowInterface& host, Docks& docks, QUndoStack* undo, QTabWidget* tabs);

  /// The workspace as the window shows it: name, editors, solver panel, and the plan when it is
  /// the solve of those settings.
  Workspace current() const;
  /// Shows `workspace` (from `path`, empty when not from a file): editors, panel, its plan or a
  /// fresh solve. Clears the undo history and the modified mark.
  void setWorkspace(const Workspace& workspace, const QString& path);
  bool openDefaultWorkspace();
  void openStartupWorkspace();
  bool openFile(const QString& path, QString* error = nullptr, bool quiet = false);
  bool openFromCommandLine(const QString& path);
  QMessageBox* openErrorBox() const { return m_openErrorBox; }
  bool saveTo(const QString& path, QString* error = nullptr);
  /// File > Open… and File > Save (As)…: the file dialogs.
  void openDialog();
  bool saveDialog(bool saveAs);
  /// Asks about unsaved changes (Save / Discard / Cancel) and writes the session: false when
  /// the window must stay open.
  bool confirmClose();
  /// Before the workspace is replaced (File > Open of a workspace or plan, Open Recent, Open
  /// Default Workspace): asks about unsaved changes; false when the user cancelled (or the save
  /// failed), and the edits stay. `what` names the action ("opening x.pipestudio").
  bool confirmReplace(const QString& what);
  /// What the window says about the workspace's model and cluster against the bundled files
  /// of the same names: empty when they match or no bundled file has the name, else one line
  /// per differing document ("the workspace's cluster '1x8 A100' differs from the bundled
  /// a100-1x8-nvlink.json: gpu/efficiency 0.5 (bundled: 0.71)").
  QStringList bundledDifferences() const { return m_bundledDifferences; }

  QString path() const { return m_path; }
  /// The workspace's name: what runs of its plans are recorded under, the title of an unsaved
  /// workspace. It follows the content ("model on cluster") unless the user named it.
  QString name() const { return m_name; }
  bool isNamedByUser() const { return m_named; }
  /// Names the workspace (File > Rename Workspace…); an empty name lets it follow the content.
  void rename(const QString& name);
  void renameDialog();
  bool isModified() const { return m_dirty; }
  void markModified();
  /// Where the last session is kept (a workspace document with its plan).
  static QString sessionFilePath();
  void setUnsavedChangesHandler(std::function<QMessageBox::StandardButton()> handler) {
    m_askUnsaved = std::move(handler);
  }
  /// File > Open Recent lists into `menu` (rebuilt whenever a file is opened or saved).
  void setRecentMenu(QMenu* menu);
  /// The title: "model · cluster — file[*] — PipeStudio".
  void updateTitle();

 private:
  void setClean();
  /// An automatic name follows the model and cluster in the editors.
  void followContent();
  /// A model or cluster document replaced the editors' (`loaded` says which on the status line):
  /// the name follows it and the workspace is modified.
  void inputOpened(const QString& loaded);
  void addRecentFile(const QString& path);
  void rebuildRecentMenu();
  void writeSession(bool discardEdits);
  /// Asks Save / Discard / Cancel about unsaved changes before `what`.
  QMessageBox::StandardButton askUnsaved(const QString& what);
  /// Compares the editors' model and cluster with the bundled files of the same names and marks
  /// a copy that differs (the title, the docks' titles; `announce`: the status line too).
  void checkAgainstBundledFiles(bool announce);
  /// A model replaced the previous one: settings fitted to it, the pinned baseline and the
  /// Configure dock's results (of the previous model) let go.
  void modelReplaced(const ModelSpec& previous);
  /// "Use the bundled file": the bundled model (or cluster) of the editors' name replaces the
  /// workspace's copy, and the settings are solved again.
  void useBundledFile(bool model);

  QMainWindow* m_window;
  MainWindowInterface& m_host;
  Docks& m_docks;
  QUndoStack* m_undo;
  QTabWidget* m_tabs;
  QMenu* m_recentMenu = nullptr;
  QMessageBox* m_openErrorBox = nullptr;
  QString m_path;
  QString m_name;
  bool m_dirty = false;
  bool m_named = false;
  std::function<QMessageBox::StandardButton()> m_askUnsaved;
  QStringList m_bundledDifferences;
};

}  // namespace pipestudio::gui
