#include "SolveController.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QPointer>
#include <QThread>
#include <QtConcurrent/QtConcurrentRun>

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
  if (m_cancel) m_cancel->store(true);
  const quint64 generation = ++m_generation;
  auto cancelFlag = std::make_shared<std::atomic<bool>>(false);
  m_cancel = cancelFlag;
  m_running = true;
  ++m_inFlight;
  Q_EMIT started(generation);
  QPointer<SolveController> self(this);
  auto lastPercent = std::make_shared<std::atomic<int>>(-1);
  SolveFunction solveFunction = m_solve;
  DiagnoseFunction diagnoseFunction = m_diagnose;
  // The worker owns copies of everything it reads; it reports back through queued calls only.
  (void)QtConcurrent::run([self, solveFunction, diagnoseFunction, request = std::move(request), cancelFlag, generation,
                           lastPercent]() {
    SolveControl control;
    control.cancel = cancelFlag.get();
    control.progress = [self, generation, lastPercent](double fraction) {
      const int percent = static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * 100));
      if (lastPercent->exchange(percent) == percent) return;
      if (!self) return;
      QMetaObject::invokeMethod(
          self.data(),
          [self, generation, percent]() {
            if (self && self->m_generation == generation) Q_EMIT self->progress(percent / 100.0);
          },
          Qt::QueuedConnection);
    };
    QElapsedTimer timer;
    timer.start();
    auto outcome = std::make_shared<Outcome>(solveFunction(request, control));
    outcome->elapsedMs = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    if (!outcome->result && !cancelFlag->load() && diagnoseFunction) {
      SolveControl quiet;  // the diagnosis reports no progress: the solve already reached 100 %
      quiet.cancel = cancelFlag.get();
      if (auto diagnosis = diagnoseFunction(request, quiet))
        outcome->diagnosis = std::make_shared<const MemoryDiagnosis>(std::move(*diagnosis));
    }
    outcome->cancelled = cancelFlag->load();
    if (!self) return;
    QMetaObject::invokeMethod(
        self.data(),
        [self, generation, outcome]() {
          if (self) self->finish(generation, outcome);
        },
        Qt::QueuedConnection);
  });
  return generation;
}

void SolveController::finish(quint64 generation, std::shared_ptr<Outcome> outcome) {
  --m_inFlight;
  if (generation != m_generation) return;  // stale: a newer request superseded it
  m_running = false;
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
  if (m_cancel) m_cancel->store(true);
}

bool SolveController::waitForIdle(int timeoutMs) {
  QElapsedTimer timer;
  timer.start();
  while (m_inFlight > 0 || m_debounce.isActive()) {
    if (timer.elapsed() > timeoutMs) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(1);
  }
  return true;
}

}  // namespace pipestudio::gui
