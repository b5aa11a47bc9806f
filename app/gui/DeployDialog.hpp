#pragma once
// Deploy dialog (docs/clusters-and-deploy.md, §7, issue 8): run the plan on the hosts of a hosts file over SSH,
// watch every rank's progress and log, record the run in the history, open it afterwards.
//
// Threads: connection tests and the deployment run one at a time as JobTracker jobs. The
// worker never touches a widget: progress, logs and results arrive through the tracker on the
// GUI thread (late reports after close are dropped). Questions to
// the user (unknown host key, key passphrase) are queued to the GUI thread and the worker
// waits for the answer; the wait gives up (reject) when the dialog closes, so closing never
// deadlocks against a worker that is waiting for the GUI.

#include <QDialog>
#include <QString>
#include <QTemporaryDir>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "JobTracker.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/model/Hosts.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/remote/Deploy.hpp"

class QComboBox;
class QGroupBox;
class QSpinBox;
class QLineEdit;
class QPushButton;
class QLabel;
class QPlainTextEdit;
class QStandardItemModel;
class QTableView;

namespace pipestudio::gui {

class DeployDialog : public QDialog {
  Q_OBJECT
 public:
  enum HostColumn { HostName, HostPort, HostUser, HostGpus, HostRemoteDir, HostFingerprint, HostColumnCount };
  enum RankColumn { RankId, RankHost, RankStateCol, RankIteration, RankEvents, RankMessage, RankColumnCount };

  /// `plan` is written to a temporary file (the uploaded plan); `historyPath` is the database
  /// the run is recorded in (the history dock's).
  DeployDialog(std::shared_ptr<const Plan> plan, QString planName, QString historyPath, QWidget* parent = nullptr);
  ~DeployDialog() override;

  /// Loads a pipestudio.hosts/1 file into the hosts table; errors are shown in the dialog.
  bool loadHostsFile(const QString& path);
  /// Starts "Test connection" for the selected host (the first when none is selected).
  void testConnection();
  /// Starts the deployment (no-op while a worker runs).
  void deploy();
  /// Asks a running deployment to stop all ranks.
  void cancelDeploy();

  bool busy() const { return m_busy; }
  QStandardItemModel* hostsModel() const { return m_hosts; }
  QStandardItemModel* progressModel() const { return m_progress; }
  QComboBox* backendCombo() const { return m_backend; }
  QSpinBox* iterationsSpin() const { return m_iterations; }
  QLineEdit* executorEdit() const { return m_executor; }
  QLabel* messageLabel() const { return m_message; }
  /// The scheduler's view of a `launcher: slurm` job ("slurm job 12: PENDING (Resources)");
  /// hidden for other launchers.
  QLabel* jobLabel() const { return m_jobState; }
  QPushButton* deployButton() const { return m_deployButton; }
  QPlainTextEdit* logView() const { return m_log; }
  QString planPath() const { return m_planPath; }
  /// The run recorded by the last deploy (0: none).
  history::RunId lastRun() const { return m_lastRun; }

  /// The pipestudio-exec to upload by default: $PIPESTUDIO_EXEC, next to the application (or
  /// the build tree's executor/), then PATH (what `pipestudio-cli deploy` does).
  static QString defaultExecutor();

 Q_SIGNALS:
  /// A deploy ended with a run recorded in the history (any status).
  void runRecorded(pipestudio::history::RunId run);
  /// The user asked to open the recorded run (compare against its plan).
  void openRunRequested(pipestudio::history::RunId run);

 protected:
  void reject() override;

 private:
  struct Job;
  void snapshotPlan();
  QGroupBox* buildSetup();
  QWidget* buildRunView();
  void browseHosts();
  void setBusy(bool busy);
  void showMessage(const QString& text, bool error);
  void applyProgress(const remote::RankProgress& progress);
  void applyJob(const remote::JobProgress& job);
  void appendLog(int rank, const QString& text);
  void rebuildLog();
  void finishDeploy(const QString& message, bool error, history::RunId run, bool connectionLost);
  remote::SessionCallbacks sessionCallbacks();

  std::shared_ptr<const Plan> m_plan;
  QString m_planName;
  QString m_historyPath;
  QTemporaryDir m_tempDir;
  QString m_planPath;
  QString m_planError;
  HostsSpec m_spec;
  bool m_haveHosts = false;
  bool m_busy = false;
  history::RunId m_lastRun = 0;

  QLineEdit* m_hostsPath = nullptr;
  QStandardItemModel* m_hosts = nullptr;
  QTableView* m_hostsView = nullptr;
  QComboBox* m_backend = nullptr;
  QSpinBox* m_iterations = nullptr;
  QLineEdit* m_executor = nullptr;
  QPushButton* m_testButton = nullptr;
  QPushButton* m_deployButton = nullptr;
  QPushButton* m_cancelButton = nullptr;
  QPushButton* m_openRunButton = nullptr;
  QStandardItemModel* m_progress = nullptr;
  QComboBox* m_logFilter = nullptr;
  QPlainTextEdit* m_log = nullptr;
  QLabel* m_message = nullptr;
  QLabel* m_jobState = nullptr;

  /// Every log line received, with its rank (the filter rebuilds the view from it).
  std::vector<std::pair<int, QString>> m_logLines;
  std::map<int, QString> m_partialLines;

  /// Shared with the worker: outlives the dialog only until the destructor joins it.
  std::shared_ptr<Job> m_job;
  JobTracker m_work{this, 1};  // last member: destroyed first, waits for the running job
};

}  // namespace pipestudio::gui
