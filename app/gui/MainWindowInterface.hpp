#pragma once
// What the window's controllers (WorkspaceController, RunController, Docks, MenuController) may
// ask of the window (Orbit's MainWindowInterface.h): the status line, the plan on screen and
// how to show one, the compare view. The window implements it; a controller never reaches
// into the window's widgets beyond this.

#include <QString>
#include <memory>

#include "pipestudio/plan/Plan.hpp"

class QWidget;

namespace pipestudio::viz {
struct ActivityTrace;
}

namespace pipestudio::gui {

class HistoryDock;
struct MeasuredRunView;

class MainWindowInterface {
 public:
  virtual ~MainWindowInterface() = default;

  /// Parent for dialogs.
  virtual QWidget* dialogParent() = 0;
  virtual void setStatus(const QString& text, bool error = false) = 0;

  /// The plan on screen (a solve, an opened plan, a measured run) and whether it is a solve
  /// of the settings the panel and editors hold now.
  virtual std::shared_ptr<const Plan> currentPlan() const = 0;
  virtual bool planMatchesSettings() const = 0;
  /// The solve of the settings the panel and editors hold now, whatever the timeline shows (a
  /// measured run may be on screen): what a local run executes and an imported trace is
  /// compared with. nullptr while the settings are not solved (edited since, failed, solving).
  virtual std::shared_ptr<const Plan> solvedPlan() const = 0;
  /// Shows a plan that is the solve of the current settings (opened with a workspace or as a
  /// plan file): any running solve is cancelled.
  virtual void showSettledPlan(std::shared_ptr<const Plan> plan) = 0;
  /// Shows a measured run in the timeline, compared against the plan on screen (which becomes
  /// the baseline), labelled so nobody takes it for a solve of the settings.
  virtual void showMeasuredInTimeline(std::shared_ptr<const Plan> measured, const QString& what,
                                      std::shared_ptr<const viz::ActivityTrace> activity = nullptr) = 0;
  /// Forgets the last solve's failure (a new document is open): the panel's message clears.
  virtual void forgetFailure() = 0;
  /// Nothing to show: `why` over the empty timeline.
  virtual void clearPlan(const QString& why) = 0;
  /// The inputs changed (`why`): mark the plan on screen and solve them.
  virtual void solveChangedInputs(const QString& why) = 0;
  /// Settings the window changed along with the user's action (fitted to an opened model, the
  /// chunk count on a schedule switch): said in the status line and with the next solve's result.
  virtual void noteAdjustedSettings(const QString& note) = 0;
  /// Two plans in the compare view (baseline on top), which comes to the front.
  virtual void showComparison(std::shared_ptr<const Plan> baseline, std::shared_ptr<const Plan> current) = 0;
  /// Forgets the pinned baseline (`why` goes to the status line): it was a plan of another
  /// model, so its deltas would compare unlike things.
  virtual void unpinBaseline(const QString& why) = 0;
  /// A recorded run against the plan it ran, in the compare view (labelled as measured, scaled
  /// where its clock is not the plan's, with the run-vs-plan tables); the timeline keeps the
  /// solve of the settings.
  virtual void showRunAgainstPlan(const MeasuredRunView& run) = 0;

  /// The history browser (nullptr in builds without core/history); ensureHistoryOpen opens the
  /// default database the first time it is needed (whatever needs it first: the dock shown, an
  /// import, a run) and says why when it cannot.
  virtual HistoryDock* historyDock() const = 0;
  virtual bool ensureHistoryOpen(QString* error = nullptr) = 0;
};

}  // namespace pipestudio::gui
