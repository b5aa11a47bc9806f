#pragma once
// The window's menus and tool bar (File, Edit, View, Plan, Help): every action, its shortcut and
// what it calls. Help > Keyboard and Mouse lists the shortcuts, gestures and the legend.

#include <QList>
#include <QObject>
#include <QString>
#include <functional>

class QAction;
class QMainWindow;
class QTabWidget;
class QUndoStack;

namespace pipestudio::viz {
class TimelineView;
}

namespace pipestudio::gui {

class WorkspaceController;
class RunController;
class SolveController;

/// What the actions act on.
struct MenuTargets {
  WorkspaceController* workspace = nullptr;
  RunController* runs = nullptr;
  SolveController* solver = nullptr;
  viz::TimelineView* timeline = nullptr;
  QTabWidget* tabs = nullptr;
  QUndoStack* undo = nullptr;
  QList<QAction*> dockActions;  ///< View menu: show/hide each dock
  std::function<void()> solve;
  std::function<void()> pinBaseline;
  std::function<void()> clearBaseline;
  std::function<void()> compareRunWithPlan;  ///< empty in builds without core/history
};

class MenuController : public QObject {
  Q_OBJECT
 public:
  MenuController(QMainWindow* window, MenuTargets targets);

  /// Plan > Run Locally… and Plan > Deploy… (nullptr where the build lacks them).
  QAction* runLocallyAction() const { return m_runAction; }
  QAction* deployAction() const { return m_deployAction; }
  /// Actions that run the solve of the current settings (Run Locally, Deploy): disabled, with
  /// `why` as their tooltip, while there is none.
  void setPlanActionsEnabled(bool enabled, const QString& why = {});

  /// Help > Keyboard, Mouse and Legend: every shortcut and gesture, and the legend (HTML).
  static QString shortcutsHtml();
  void showHelp();

 private:
  void buildFileMenu();
  void buildEditMenu();
  void buildViewMenu();
  void buildPlanMenu();
  void buildHelpMenu();
  void buildToolBar();

  QMainWindow* m_window;
  MenuTargets m_targets;
  QAction* m_runAction = nullptr;
  QAction* m_deployAction = nullptr;
  QAction* m_criticalPath = nullptr;
};

/// Applies a dark or light Fusion palette: `theme` is "dark", "light" or "system" (GTK_THEME,
/// the platform palette).
void applyTheme(const QString& theme);

}  // namespace pipestudio::gui
