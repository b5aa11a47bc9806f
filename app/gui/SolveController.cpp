#include "SolveController.hpp"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QPointer>
#include <QThread>
#include <algorithm>
#include <chrono>
#include <cmath>

namespace pipestudio::gui {

/// What the worker hands back: the solve's result and, after a failure, its diagnosis.
struct SolveController::Outcome {
  explicit Outcome(Expected<Plan> r) : result(std::move(r)) {}
  Expected<Plan> result;
  std::shared_ptr<const MemoryDiagnosis> diagnosis;
  double elapsedMs = 0;
  bool cancelled = false;
};

SolveController::SolveController(QObject* parent)
    : QObject(parent),
      m_solve([](const PlanRequest& r, const SolveControl& c) { return makePlan(r, c); }),
      m_diagnose([](const PlanRequest& r, const SolveControl& c) { return diagnoseMemoryFailure(r, c); }) {
  m_debounce.setSingleShot(true);
  m_debounce.setInterval(350);
  connect(&m_debounce, &QTimer::timeout, this, [this]() { solve(m_pendingRequest); });
}

SolveController::~SolveController() {
  cancel();
  waitForIdle(10000);
}

quint64 SolveController::solve(PlanRequest request) {
  m_debounce.stop();
  m_running = true;
  auto lastPercent = std::make_shared<std::atomic<int>>(-1);
  SolveFunction solveFunction = m_solve;
  DiagnoseFunction diagnoseFunction = m_diagnose;
  QPointer<SolveController> self(this);
  // The job owns copies of everything it reads; it reports back through the tracker only.
  const quint64 generation = m_job.start(
      [self, solveFunction, diagnoseFunction, request = std::move(request),
       lastPercent](const JobTracker::Control& job) {
        SolveControl control;
        control.cancel = job.cancelFlag();
        control.progress = [self, &job, lastPercent](double fraction) {
          const int percent = static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * 100));
          if (lastPercent->exchange(percent) == percent) return;
          job.post([self, percent]() {
            if (self) Q_EMIT self->progress(percent / 100.0);
          });
        };
        QElapsedTimer timer;
        timer.start();
        auto outcome = std::make_shared<Outcome>(solveFunction(request, control));
        outcome->elapsedMs = static_cast<double>(timer.nsecsElapsed()) / 1e6;
        if (!outcome->result && !job.cancelled() && diagnoseFunction) {
          SolveControl quiet;  // the diagnosis reports no progress: the solve already reached 100 %
          quiet.cancel = job.cancelFlag();
          if (auto diagnosis = diagnoseFunction(request, quiet))
            outcome->diagnosis = std::make_shared<const MemoryDiagnosis>(std::move(*diagnosis));
        }
        outcome->cancelled = job.cancelled();
        return outcome;
      },
      [this](const std::shared_ptr<Outcome>& outcome) { finish(outcome); });
  Q_EMIT started(generation);
  return generation;
}

void SolveController::finish(const std::shared_ptr<Outcome>& outcome) {
  m_running = false;  // only the current generation arrives here: stale results are dropped
  if (outcome->cancelled) {
    Q_EMIT cancelled();
    return;
  }
  if (!outcome->result) {
    Q_EMIT failed(QString::fromStdString(outcome->result.message()), outcome->diagnosis);
    return;
  }
  Q_EMIT solved(std::make_shared<const Plan>(std::move(outcome->result).value()), outcome->elapsedMs);
}

void SolveController::scheduleSolve(PlanRequest request) {
  m_pendingRequest = std::move(request);
  m_debounce.start();
}

void SolveController::cancel() {
  m_debounce.stop();
  m_job.cancel();
}

bool SolveController::waitForIdle(int timeoutMs) {
  QElapsedTimer timer;
  timer.start();
  while (m_job.isRunning() || m_debounce.isActive()) {
    if (timer.elapsed() > timeoutMs) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(1);
  }
  return true;
}

}  // namespace pipestudio::gui
