#include "RunLocalDialog.hpp"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardPaths>
#include <QThread>
#include <QVBoxLayout>

#include "ExecutorPath.hpp"

namespace pipestudio::gui {

RunLocalDialog::RunLocalDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(QStringLiteral("Run plan locally"));
  setObjectName(QStringLiteral("RunLocalDialog"));
  auto* layout = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  m_planLabel = new QLabel(this);
  m_planLabel->setObjectName(QStringLiteral("RunLocalPlan"));
  form->addRow(QStringLiteral("Plan"), m_planLabel);
  m_backend = new QComboBox(this);
  for (const std::string& b : localBackends()) m_backend->addItem(QString::fromStdString(b));
  m_backend->setToolTip(
      QStringLiteral("cpu: one thread per device doing real matrix work; cuda-single: every device "
                     "on one GPU; cuda: one process per GPU with NCCL (listed where a GPU exists)"));
  form->addRow(QStringLiteral("Backend"), m_backend);
  m_iterations = new QSpinBox(this);
  m_iterations->setRange(1, 1000);
  m_iterations->setValue(2);
  form->addRow(QStringLiteral("Iterations"), m_iterations);
  m_maxOpMs = new QDoubleSpinBox(this);
  m_maxOpMs->setRange(0, 1e5);
  m_maxOpMs->setDecimals(1);
  m_maxOpMs->setValue(5);
  m_maxOpMs->setSuffix(QStringLiteral(" ms"));
  m_maxOpMs->setSpecialValueText(QStringLiteral("as planned"));
  m_maxOpMs->setToolTip(QStringLiteral("Scale the planned times so the longest op lasts this long (0: as planned)"));
  form->addRow(QStringLiteral("Longest op"), m_maxOpMs);
  m_executor = new QLineEdit(guiExecutorPath(), this);
  form->addRow(QStringLiteral("Executor"), m_executor);
  layout->addLayout(form);
  m_progress = new QProgressBar(this);
  m_progress->setRange(0, 100);
  m_progress->setValue(0);
  layout->addWidget(m_progress);
  m_message = new QLabel(this);
  m_message->setObjectName(QStringLiteral("RunLocalMessage"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_message);
  auto* buttons = new QHBoxLayout;
  m_run = new QPushButton(QStringLiteral("Run"), this);
  m_run->setDefault(true);
  m_open = new QPushButton(QStringLiteral("Open against plan"), this);
  m_open->setEnabled(false);
  auto* close = new QPushButton(QStringLiteral("Close"), this);
  buttons->addWidget(m_run);
  buttons->addWidget(m_open);
  buttons->addStretch(1);
  buttons->addWidget(close);
  layout->addLayout(buttons);
  connect(m_run, &QPushButton::clicked, this, &RunLocalDialog::start);
  connect(m_open, &QPushButton::clicked, this, [this]() {
    if (m_lastRun != 0) Q_EMIT openRunRequested(m_lastRun, m_lastPlan);
  });
  connect(close, &QPushButton::clicked, this, &RunLocalDialog::reject);
}

void RunLocalDialog::setPlan(std::shared_ptr<const Plan> plan, const QString& name, const QString& historyPath) {
  if (m_busy) return;
  m_plan = std::move(plan);
  m_name = name;
  m_historyPath = historyPath;
  m_planLabel->setText(
      m_plan ? QStringLiteral("%1 · %2 devices · %3 ops").arg(name).arg(m_plan->config.devices).arg(m_plan->ops.size())
             : QStringLiteral("none (solve first)"));
  m_run->setEnabled(m_plan != nullptr);
}

void RunLocalDialog::setNoPlan(const QString& why) {
  if (m_busy) return;
  m_plan.reset();
  m_name.clear();
  m_planLabel->setText(QStringLiteral("none: ") + why);
  m_run->setEnabled(false);
}

void RunLocalDialog::start() {
  if (m_busy || !m_plan) return;
  LocalRunRequest request;
  request.plan = *m_plan;
  request.name = QString(m_name + QStringLiteral(" on ") + m_backend->currentText()).toStdString();
  request.historyPath = m_historyPath.toStdString();
  request.executable = m_executor->text().trimmed().toStdString();
  request.backend = m_backend->currentText().toStdString();
  request.iterations = m_iterations->value();
  request.maxOpMs = m_maxOpMs->value();
  m_busy = true;
  m_run->setEnabled(false);
  m_open->setEnabled(false);
  m_progress->setValue(0);
  m_message->setStyleSheet(QString());
  m_message->setText(
      QStringLiteral("Running %1 iteration(s) on %2…").arg(request.iterations).arg(m_backend->currentText()));
  m_job.start(
      [this, request = std::move(request)](const JobTracker::Control& control) mutable {
        request.cancelled = control.cancelFlag();
        // post() runs on the GUI thread only while the dialog (the tracker's context) lives.
        return runLocally(request, [this, &control](double fraction) {
          control.post([this, fraction]() { m_progress->setValue(static_cast<int>(fraction * 100)); });
        });
      },
      [this, plan = m_plan](const Expected<LocalRunResult>& result) {
        m_lastPlan = plan;
        finish(result);
      });
}

void RunLocalDialog::reject() {
  m_job.cancel();
  QDialog::reject();
}

void RunLocalDialog::finish(const Expected<LocalRunResult>& result) {
  QString message;
  bool error = true;
  history::RunId run = 0;
  bool complete = false;
  if (!result) {
    message = QString::fromStdString(result.message());
  } else {
    run = result->run;
    complete = result->status == history::RunStatus::Complete;
    error = !complete;
    message = complete ? QStringLiteral("Run %1 recorded in the history (complete)").arg(run)
                       : QStringLiteral("Run %1 recorded %2: %3")
                             .arg(run)
                             .arg(QString::fromStdString(std::string(history::runStatusName(result->status))),
                                  QString::fromStdString(result->message));
  }
  m_busy = false;
  m_run->setEnabled(m_plan != nullptr);
  if (complete) m_progress->setValue(100);
  m_message->setText(message);
  m_message->setStyleSheet(error ? QStringLiteral("QLabel { color: #e53935; }") : QString());
  m_lastRun = run;
  m_open->setEnabled(run != 0);
  if (run != 0) Q_EMIT runRecorded(run, complete, m_lastPlan);
}

bool RunLocalDialog::waitForFinished(int timeoutMs) {
  QElapsedTimer timer;
  timer.start();
  while (m_busy) {
    if (timer.elapsed() > timeoutMs) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(2);
  }
  return true;
}

}  // namespace pipestudio::gui
