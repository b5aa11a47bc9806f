#include "DeployDialog.hpp"

#include <unistd.h>

#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPointer>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QTableView>
#include <QVBoxLayout>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>

#include "ExecutorPath.hpp"
#include "pipestudio/model/Launch.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/remote/HistorySink.hpp"

namespace pipestudio::gui {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }
QString q(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

// Log lines of the launcher itself (launcher slurm|mpirun), shown under "All ranks".
constexpr int kLauncherLog = remote::HistorySink::kLauncherRank;

// What the log shows before a line: the rank, or the launcher's own words.
QString logPrefix(int rank) {
  return rank == kLauncherLog ? QStringLiteral("[launcher] ") : QStringLiteral("[rank %1] ").arg(rank);
}

/// What a connection test or a deployment hands back to the GUI thread.
struct Outcome {
  QString text;
  QString fingerprint;  ///< connection test: the host key's SHA256 fingerprint
  bool error = true;
  history::RunId run = 0;
  bool connectionLost = false;
};

QStandardItem* cell(const QString& text) {
  auto* item = new QStandardItem(text);
  item->setEditable(false);
  return item;
}

}  // namespace

/// What the GUI thread and the worker share.
struct DeployDialog::Job {
  std::atomic<bool> closing{false};  ///< the dialog is being destroyed: stop waiting for answers
  std::mutex mutex;
  remote::Deployment* deployment = nullptr;  ///< guarded by mutex; set while run() executes
  bool cancelRequested = false;              ///< guarded by mutex
};

DeployDialog::DeployDialog(std::shared_ptr<const Plan> plan, QString planName, QString historyPath, QWidget* parent)
    : QDialog(parent), m_plan(std::move(plan)), m_planName(std::move(planName)), m_historyPath(std::move(historyPath)) {
  setWindowTitle(QStringLiteral("Deploy plan"));
  setObjectName(QStringLiteral("DeployDialog"));
  m_job = std::make_shared<Job>();

  snapshotPlan();

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(buildSetup());

  auto* buttons = new QHBoxLayout;
  m_testButton = new QPushButton(QStringLiteral("Test connection"), this);
  m_deployButton = new QPushButton(QStringLiteral("Deploy"), this);
  m_deployButton->setDefault(true);
  m_cancelButton = new QPushButton(QStringLiteral("Cancel run"), this);
  m_openRunButton = new QPushButton(QStringLiteral("Open run"), this);
  m_openRunButton->setToolTip(QStringLiteral("Open the recorded run in the compare view against this plan"));
  auto* close = new QPushButton(QStringLiteral("Close"), this);
  for (QPushButton* b : {m_testButton, m_deployButton, m_cancelButton, m_openRunButton}) buttons->addWidget(b);
  buttons->addStretch(1);
  buttons->addWidget(close);
  layout->addLayout(buttons);

  m_jobState = new QLabel(this);
  m_jobState->setObjectName(QStringLiteral("DeployJobState"));
  m_jobState->setTextFormat(Qt::PlainText);
  m_jobState->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_jobState->setVisible(false);
  layout->addWidget(m_jobState);

  m_message = new QLabel(this);
  m_message->setObjectName(QStringLiteral("DeployMessage"));
  m_message->setWordWrap(true);
  m_message->setTextFormat(Qt::PlainText);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_message);

  layout->addWidget(buildRunView(), 1);
  resize(820, 640);

  connect(m_testButton, &QPushButton::clicked, this, &DeployDialog::testConnection);
  connect(m_deployButton, &QPushButton::clicked, this, &DeployDialog::deploy);
  connect(m_cancelButton, &QPushButton::clicked, this, &DeployDialog::cancelDeploy);
  connect(m_openRunButton, &QPushButton::clicked, this, [this]() {
    if (m_lastRun != 0) Q_EMIT openRunRequested(m_lastRun);
  });
  connect(close, &QPushButton::clicked, this, &DeployDialog::reject);
  connect(m_logFilter, &QComboBox::currentIndexChanged, this, &DeployDialog::rebuildLog);
  setBusy(false);
  if (!m_planError.isEmpty()) showMessage(m_planError, true);
}

void DeployDialog::snapshotPlan() {
  // The uploaded plan is this snapshot of the plan on screen (later solves do not change it).
  if (!m_plan) {
    m_planError = QStringLiteral("no plan to deploy (solve first)");
  } else if (!m_tempDir.isValid()) {
    m_planError = QStringLiteral("cannot create a temporary directory: ") + m_tempDir.errorString();
  } else {
    m_planPath = m_tempDir.filePath(QStringLiteral("plan.json"));
    if (auto st = savePlan(m_planPath.toStdString(), *m_plan); !st) {
      m_planError = q(st.message());
      m_planPath.clear();
    }
  }
}

// The hosts file and its hosts, backend, iterations, executor and the plan.
QGroupBox* DeployDialog::buildSetup() {
  auto* setup = new QGroupBox(QStringLiteral("Hosts and run"), this);
  auto* form = new QFormLayout(setup);
  auto* hostsRow = new QHBoxLayout;
  m_hostsPath = new QLineEdit(setup);
  m_hostsPath->setReadOnly(true);
  m_hostsPath->setPlaceholderText(QStringLiteral("pipestudio.hosts/1 file"));
  auto* browse = new QPushButton(QStringLiteral("Browse…"), setup);
  hostsRow->addWidget(m_hostsPath, 1);
  hostsRow->addWidget(browse);
  form->addRow(QStringLiteral("Hosts file"), hostsRow);

  m_hosts = new QStandardItemModel(0, HostColumnCount, this);
  m_hosts->setHorizontalHeaderLabels({QStringLiteral("Host"), QStringLiteral("Port"), QStringLiteral("User"),
                                      QStringLiteral("GPUs"), QStringLiteral("Remote dir"),
                                      QStringLiteral("Fingerprint")});
  m_hostsView = new QTableView(setup);
  m_hostsView->setModel(m_hosts);
  m_hostsView->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_hostsView->setSelectionMode(QAbstractItemView::SingleSelection);
  m_hostsView->horizontalHeader()->setStretchLastSection(true);
  m_hostsView->verticalHeader()->setVisible(false);
  m_hostsView->setMinimumHeight(90);
  form->addRow(m_hostsView);

  m_backend = new QComboBox(setup);
  for (Backend b : kBackends) m_backend->addItem(QString::fromStdString(std::string(name(b))), static_cast<int>(b));
  form->addRow(QStringLiteral("Backend"), m_backend);
  m_iterations = new QSpinBox(setup);
  m_iterations->setRange(0, 1 << 20);
  m_iterations->setSpecialValueText(QStringLiteral("executor default"));
  form->addRow(QStringLiteral("Iterations"), m_iterations);
  m_executor = new QLineEdit(defaultExecutor(), setup);
  m_executor->setToolTip(QStringLiteral("Local pipestudio-exec uploaded to the hosts (same OS and architecture)"));
  form->addRow(QStringLiteral("Executor"), m_executor);
  if (m_plan) {
    form->addRow(QStringLiteral("Plan"),
                 new QLabel(QStringLiteral("%1 (%2 devices)").arg(m_planName).arg(m_plan->config.devices), setup));
  }
  connect(browse, &QPushButton::clicked, this, &DeployDialog::browseHosts);
  return setup;
}

// Each rank's progress above the log of the ranks (filtered by rank).
QWidget* DeployDialog::buildRunView() {
  auto* split = new QSplitter(Qt::Vertical, this);
  m_progress = new QStandardItemModel(0, RankColumnCount, this);
  m_progress->setHorizontalHeaderLabels({QStringLiteral("Rank"), QStringLiteral("Host"), QStringLiteral("State"),
                                         QStringLiteral("Iteration"), QStringLiteral("Events"),
                                         QStringLiteral("Message")});
  auto* progressView = new QTableView(split);
  progressView->setModel(m_progress);
  progressView->horizontalHeader()->setStretchLastSection(true);
  progressView->verticalHeader()->setVisible(false);
  auto* logBox = new QWidget(split);
  auto* logLayout = new QVBoxLayout(logBox);
  logLayout->setContentsMargins(0, 0, 0, 0);
  auto* filterRow = new QHBoxLayout;
  m_logFilter = new QComboBox(logBox);
  m_logFilter->addItem(QStringLiteral("All ranks"), -1);
  filterRow->addWidget(new QLabel(QStringLiteral("Log"), logBox));
  filterRow->addWidget(m_logFilter);
  filterRow->addStretch(1);
  logLayout->addLayout(filterRow);
  m_log = new QPlainTextEdit(logBox);
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(20000);  // a chatty executor must not grow the widget without bound
  m_log->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  logLayout->addWidget(m_log);
  split->addWidget(progressView);
  split->addWidget(logBox);
  return split;
}

DeployDialog::~DeployDialog() {
  // Unblock a worker waiting for an answer and stop the ranks; m_work's destructor then waits
  // for the job (its sink and store live in the job) and drops its late reports.
  m_job->closing = true;
  cancelDeploy();
}

QString DeployDialog::defaultExecutor() { return guiExecutorPath(); }

void DeployDialog::browseHosts() {
  const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Hosts file"), m_hostsPath->text(),
                                                    QStringLiteral("Hosts files (*.json);;All files (*)"));
  if (!path.isEmpty()) loadHostsFile(path);
}

bool DeployDialog::loadHostsFile(const QString& path) {
  auto spec = loadHosts(path.toStdString());
  m_hostsPath->setText(path);
  m_hosts->removeRows(0, m_hosts->rowCount());
  if (!spec) {
    m_haveHosts = false;
    showMessage(q(spec.message()), true);
    setBusy(m_busy);
    return false;
  }
  m_spec = std::move(*spec);
  m_haveHosts = !m_spec.hosts.empty();
  for (const HostEntry& h : m_spec.hosts) {
    m_hosts->appendRow({cell(q(h.host)), cell(QString::number(h.port)),
                        cell(h.user.empty() ? QStringLiteral("(local user)") : q(h.user)),
                        cell(QString::number(h.gpus)), cell(q(h.remoteDir)), cell(QString())});
  }
  if (m_hosts->rowCount() > 0) m_hostsView->selectRow(0);
  m_jobState->setVisible(m_spec.launcher == Launcher::Slurm);
  m_jobState->setText(QStringLiteral("Slurm job: not submitted"));
  showMessage(QStringLiteral("%1 host(s), %2 GPU(s), launcher %3")
                  .arg(m_spec.hosts.size())
                  .arg(m_spec.totalGpus())
                  .arg(q(std::string(name(m_spec.launcher)))),
              false);
  setBusy(m_busy);
  return true;
}

void DeployDialog::setBusy(bool busy) {
  m_busy = busy;
  m_testButton->setEnabled(!busy && m_haveHosts);
  m_deployButton->setEnabled(!busy && m_haveHosts && !m_planPath.isEmpty());
  m_cancelButton->setEnabled(busy);
  m_openRunButton->setEnabled(!busy && m_lastRun != 0);
}

void DeployDialog::showMessage(const QString& text, bool error) {
  m_message->setStyleSheet(error ? QStringLiteral("QLabel { color: #e53935; }") : QString());
  m_message->setText(text);
}

remote::SessionCallbacks DeployDialog::sessionCallbacks() {
  // Runs `ask` on the GUI thread and waits for its answer; `fallback` when the dialog goes
  // away first (a blocking queued call would deadlock against the destructor's join).
  auto askOnGui = [job = m_job, self = QPointer<DeployDialog>(this)](auto ask, auto fallback) {
    using T = decltype(fallback);
    auto answer = std::make_shared<std::promise<T>>();
    auto future = answer->get_future();
    QMetaObject::invokeMethod(
        qApp, [self, answer, ask, fallback]() { answer->set_value(self ? ask(self.data()) : fallback); },
        Qt::QueuedConnection);
    while (future.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (job->closing) return fallback;
    }
    return future.get();
  };
  remote::SessionCallbacks callbacks;
  callbacks.unknownHostKey = [askOnGui](const remote::HostKeyPrompt& p) {
    return askOnGui(
        [p](QWidget* parent) {
          QMessageBox box(
              QMessageBox::Question, QStringLiteral("Unknown host"),
              QStringLiteral("The authenticity of host %1 cannot be established.\n\n%2 key fingerprint:\n%3\n\n"
                             "Accepted keys are saved to %4.")
                  .arg(q(p.hostPort), q(p.keyType), q(p.fingerprintSha256), q(p.knownHostsFile)),
              QMessageBox::NoButton, parent);
          QPushButton* reject = box.addButton(QStringLiteral("Reject"), QMessageBox::RejectRole);
          QPushButton* once = box.addButton(QStringLiteral("Accept once"), QMessageBox::AcceptRole);
          QPushButton* save = box.addButton(QStringLiteral("Accept and save"), QMessageBox::AcceptRole);
          box.setDefaultButton(reject);
          box.exec();
          if (box.clickedButton() == save) return remote::HostKeyDecision::AcceptAndSave;
          if (box.clickedButton() == once) return remote::HostKeyDecision::AcceptOnce;
          return remote::HostKeyDecision::Reject;
        },
        remote::HostKeyDecision::Reject);
  };
  callbacks.passphrase = [askOnGui](const std::string& prompt) {
    return askOnGui(
        [prompt](QWidget* parent) -> std::optional<std::string> {
          bool ok = false;
          const QString text = QInputDialog::getText(parent, QStringLiteral("Key passphrase"), q(prompt),
                                                     QLineEdit::Password, QString(), &ok);
          if (!ok) return std::nullopt;
          return text.toStdString();
        },
        std::optional<std::string>{});
  };
  return callbacks;
}

void DeployDialog::testConnection() {
  if (m_busy || !m_haveHosts) return;
  int row = m_hostsView->currentIndex().isValid() ? m_hostsView->currentIndex().row() : 0;
  if (row < 0 || row >= static_cast<int>(m_spec.hosts.size())) row = 0;
  const HostEntry host = m_spec.hosts[static_cast<std::size_t>(row)];
  setBusy(true);
  m_cancelButton->setEnabled(false);  // nothing to cancel: the connect is bounded by its timeout
  showMessage(QStringLiteral("Connecting to %1:%2…").arg(q(host.host)).arg(host.port), false);
  m_work.start(
      [host, callbacks = sessionCallbacks()](const JobTracker::Control&) {
        auto report = remote::testConnection(host, callbacks);
        Outcome out;
        out.error = !report;
        if (report) {
          out.fingerprint = q(report->fingerprintSha256);
          out.text = QStringLiteral("%1: connected, %2, host key %3")
                         .arg(q(report->hostPort), q(report->system), out.fingerprint);
        } else {
          out.text = q(report.message());
        }
        return out;
      },
      [this, row](const Outcome& out) {
        if (!out.fingerprint.isEmpty() && row < m_hosts->rowCount())
          m_hosts->setItem(row, HostFingerprint, cell(out.fingerprint));
        setBusy(false);
        showMessage(out.text, out.error);
      });
}

void DeployDialog::deploy() {
  if (m_busy) return;
  if (!m_planError.isEmpty() || m_planPath.isEmpty()) {
    showMessage(m_planError.isEmpty() ? QStringLiteral("no plan to deploy") : m_planError, true);
    return;
  }
  if (!m_haveHosts) {
    showMessage(QStringLiteral("choose a hosts file first"), true);
    return;
  }
  // The store is opened here (a bad history path is reported at once) and then used only by
  // the worker.
  auto opened = history::HistoryStore::open(m_historyPath.toStdString());
  if (!opened) {
    showMessage(q(opened.message()), true);
    return;
  }
  auto store = std::make_shared<history::HistoryStore>(std::move(*opened));
  const std::string planName = m_planName.isEmpty() ? std::string("plan") : m_planName.toStdString();
  auto planId = store->addPlan(*m_plan, planName);
  if (!planId) {
    showMessage(q(planId.message()), true);
    return;
  }

  remote::DeployRequest request;
  request.planPath = m_planPath.toStdString();
  request.devices = m_plan->config.devices;
  request.hosts = m_spec;
  request.backend = static_cast<Backend>(m_backend->currentData().toInt());
  request.iterations = m_iterations->value();
  request.executorPath = m_executor->text().trimmed().toStdString();
  request.runId = "deploy-" +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count()) +
                  "-" + std::to_string(::getpid());

  history::RunInfo info;
  info.name = planName + " on " + m_spec.hosts.front().host;
  info.source = "deploy";
  info.sourcePath = request.planPath;
  info.planId = *planId;
  info.host = m_spec.hosts.front().host;
  info.backend = name(request.backend);

  m_progress->removeRows(0, m_progress->rowCount());
  m_logLines.clear();
  m_partialLines.clear();
  m_log->clear();
  while (m_logFilter->count() > 1) m_logFilter->removeItem(1);
  m_lastRun = 0;
  m_deployButton->setText(QStringLiteral("Deploy"));
  if (m_spec.launcher == Launcher::Slurm) m_jobState->setText(QStringLiteral("Slurm job: submitting…"));
  {
    std::lock_guard lock(m_job->mutex);
    m_job->cancelRequested = false;
  }
  setBusy(true);
  showMessage(QStringLiteral("Deploying %1 to %2 host(s)…").arg(q(planName)).arg(m_spec.hosts.size()), false);

  // `this` is dereferenced only in what the tracker delivers, which never outlives the dialog.
  m_work.start(
      [this, job = m_job, store, req = std::move(request), runInfo = std::move(info),
       session = sessionCallbacks()](const JobTracker::Control& control) {
        auto post = [this, &control](auto f) { control.post([this, f]() mutable { f(*this); }); };
        // Records the ranks' streams into one history run, as pipestudio-cli deploy does; the logs
        // go to the dialog.
        remote::HistorySink sink(*store, runInfo, [post](int rank, std::string_view text) {
          post([rank, text = q(text)](DeployDialog& d) { d.appendLog(rank, text); });
        });
        remote::DeployCallbacks callbacks;
        callbacks.session = session;
        callbacks.progress = [post](const remote::RankProgress& p) {
          post([p](DeployDialog& d) { d.applyProgress(p); });
        };
        callbacks.job = [post](const remote::JobProgress& j) { post([j](DeployDialog& d) { d.applyJob(j); }); };
        remote::Deployment deployment(req, callbacks, sink);
        {
          std::lock_guard lock(job->mutex);
          job->deployment = &deployment;
          if (job->cancelRequested) deployment.cancel();
        }
        auto result = deployment.run();
        {
          std::lock_guard lock(job->mutex);
          job->deployment = nullptr;
        }
        QString message;
        bool error = true;
        bool lost = false;
        history::RunId run = 0;
        if (!result) {
          message = QStringLiteral("Deploy failed: ") + q(result.message());
          if (sink.started()) {
            (void)store->finishRun(sink.runId(), history::RunStatus::Failed, result.message());
            run = sink.runId();
          }
        } else if (auto st = sink.finish(*result); !st) {
          message = QStringLiteral("Deploy: recording the run failed: ") + q(st.message());
          run = sink.runId();
        } else {
          run = sink.runId();
          auto summary = store->runSummary(run);
          const QString status = summary ? q(history::runStatusName(summary->status)) : QStringLiteral("?");
          error = status != QStringLiteral("complete");
          lost = result->connectionLost;
          message = QStringLiteral("Run %1: %2 (%3)").arg(run).arg(status, q(result->message));
        }
        Outcome out;
        out.text = message;
        out.error = error;
        out.run = run;
        out.connectionLost = lost;
        return out;
      },
      [this](const Outcome& out) { finishDeploy(out.text, out.error, out.run, out.connectionLost); });
}

void DeployDialog::cancelDeploy() {
  std::lock_guard lock(m_job->mutex);
  m_job->cancelRequested = true;
  if (m_job->deployment != nullptr) m_job->deployment->cancel();
}

void DeployDialog::reject() {
  // Closing while ranks run stops them (the remote watchdog ends them on stdin EOF); the run
  // record is finished by the worker as `incomplete`.
  if (m_busy) cancelDeploy();
  QDialog::reject();
}

void DeployDialog::applyProgress(const remote::RankProgress& p) {
  int row = -1;
  for (int r = 0; r < m_progress->rowCount(); ++r) {
    if (m_progress->item(r, RankId)->data(Qt::UserRole).toInt() == p.rank) row = r;
  }
  if (row < 0) {
    row = m_progress->rowCount();
    auto* id = cell(QString::number(p.rank));
    id->setData(p.rank, Qt::UserRole);
    m_progress->appendRow({id, cell(QString()), cell(QString()), cell(QString()), cell(QString()), cell(QString())});
    m_logFilter->addItem(QStringLiteral("Rank %1").arg(p.rank), p.rank);
  }
  m_progress->item(row, RankHost)->setText(q(p.hostPort));
  m_progress->item(row, RankStateCol)->setText(q(remote::rankStateName(p.state)));
  m_progress->item(row, RankIteration)
      ->setText(p.iterations > 0 ? QStringLiteral("%1/%2").arg(p.iteration).arg(p.iterations)
                                 : QString::number(p.iteration));
  m_progress->item(row, RankEvents)->setText(QString::number(p.events));
  m_progress->item(row, RankMessage)->setText(q(p.message));
}

void DeployDialog::applyJob(const remote::JobProgress& job) {
  // Failed, timed-out and cancelled jobs in the error colour; pending shows Slurm's reason.
  const bool bad = job.state.rfind("FAILED", 0) == 0 || job.state == "TIMEOUT" ||
                   job.state.rfind("CANCELLED", 0) == 0 || job.state == "NODE_FAIL" || job.state == "OUT_OF_MEMORY";
  m_jobState->setStyleSheet(bad ? QStringLiteral("QLabel { color: #e53935; }") : QString());
  m_jobState->setText(q(job.text()));
  m_jobState->setVisible(true);
}

void DeployDialog::appendLog(int rank, const QString& text) {
  // Whole lines only (stderr arrives in arbitrary chunks); the rest waits for its newline.
  QString& pending = m_partialLines[rank];
  pending += text;
  qsizetype nl;
  const int filter = m_logFilter->currentData().toInt();
  while ((nl = pending.indexOf(QLatin1Char('\n'))) >= 0) {
    QString line = pending.left(nl);
    pending.remove(0, nl + 1);
    if (filter < 0 || filter == rank) m_log->appendPlainText(filter < 0 ? logPrefix(rank) + line : line);
    m_logLines.emplace_back(rank, std::move(line));
  }
}

void DeployDialog::rebuildLog() {
  const int filter = m_logFilter->currentData().toInt();
  m_log->clear();
  for (const auto& [rank, line] : m_logLines) {
    if (filter < 0 || filter == rank) m_log->appendPlainText(filter < 0 ? logPrefix(rank) + line : line);
  }
}

void DeployDialog::finishDeploy(const QString& message, bool error, history::RunId run, bool connectionLost) {
  // Flush what the ranks wrote without a final newline.
  for (auto& [rank, pending] : m_partialLines) {
    if (!pending.isEmpty()) appendLog(rank, QStringLiteral("\n"));
  }
  m_lastRun = run;
  setBusy(false);
  // A lost connection: deploying again is how to reconnect.
  if (connectionLost) m_deployButton->setText(QStringLiteral("Reconnect and deploy again"));
  showMessage(message, error);
  if (run != 0) Q_EMIT runRecorded(run);
}

}  // namespace pipestudio::gui
