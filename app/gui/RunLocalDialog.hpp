#pragma once
// Plan > Run Locally… (issue 16): backend, iterations and op scale, a Run button with progress,
// the recorded run's status, and "Open against plan". The run (LocalRun.hpp) is a JobTracker
// job, as all background work of the window is; progress and the result come back on the GUI
// thread. Closing the dialog while a run is under way cancels it: the ranks are ended and the
// run is recorded incomplete (the result still arrives, so the window hears of it). The
// destructor cancels too and waits for the ranks to end.

#include <QDialog>
#include <memory>

#include "JobTracker.hpp"
#include "LocalRun.hpp"

class QComboBox;
class QSpinBox;
class QDoubleSpinBox;
class QLineEdit;
class QPushButton;
class QProgressBar;
class QLabel;

namespace pipestudio::gui {

class RunLocalDialog : public QDialog {
  Q_OBJECT
 public:
  RunLocalDialog(QWidget* parent = nullptr);

  /// The plan to run, its name in the history and the database it is recorded in.
  void setPlan(std::shared_ptr<const Plan> plan, const QString& name, const QString& historyPath);
  /// Nothing to run (the window's settings are not solved): Run is disabled and `why` shown.
  void setNoPlan(const QString& why);
  /// Starts the run (no-op while one runs or without a plan).
  void start();
  /// Close, Esc or the window's close button: hides the dialog and cancels a run under way.
  void reject() override;
  bool busy() const { return m_busy; }
  /// Processes events until the run ends; false on timeout (tests).
  bool waitForFinished(int timeoutMs);
  history::RunId lastRun() const { return m_lastRun; }
  QComboBox* backendCombo() const { return m_backend; }
  QSpinBox* iterationsSpin() const { return m_iterations; }
  QDoubleSpinBox* maxOpSpin() const { return m_maxOpMs; }
  QLineEdit* executorEdit() const { return m_executor; }
  QProgressBar* progressBar() const { return m_progress; }
  QLabel* messageLabel() const { return m_message; }

 Q_SIGNALS:
  /// A run ended and is in the history (any status).
  void runRecorded(pipestudio::history::RunId run, bool complete, std::shared_ptr<const pipestudio::Plan> plan);
  /// "Open against plan": the recorded run in the compare view against the plan it ran.
  void openRunRequested(pipestudio::history::RunId run, std::shared_ptr<const pipestudio::Plan> plan);

 private:
  void finish(const Expected<LocalRunResult>& result);

  std::shared_ptr<const Plan> m_plan;
  QString m_name;
  QString m_historyPath;
  QComboBox* m_backend = nullptr;
  QSpinBox* m_iterations = nullptr;
  QDoubleSpinBox* m_maxOpMs = nullptr;
  QLineEdit* m_executor = nullptr;
  QLabel* m_planLabel = nullptr;
  QPushButton* m_run = nullptr;
  QPushButton* m_open = nullptr;
  QProgressBar* m_progress = nullptr;
  QLabel* m_message = nullptr;
  bool m_busy = false;
  history::RunId m_lastRun = 0;
  std::shared_ptr<const Plan> m_lastPlan;
  JobTracker m_job{this, 1};  // last member: destroyed first, cancels and waits for the run
};

}  // namespace pipestudio::gui
