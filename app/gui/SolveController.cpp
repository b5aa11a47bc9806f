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

SolveController::SolveController(QObject* parent) : QObject(parent), m_solve([](const PlanRequest& r, const SolveControl& c) {
  return makePlan(r, c);
}) {
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
  // The worker owns copies of everything it reads; it reports back through queued calls only.
  (void)QtConcurrent::run([self, solveFunction, request = std::move(request), cancelFlag, generation, lastPercent]() {
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
    auto result = std::make_shared<Expected<Plan>>(solveFunction(request, control));
    const double elapsedMs = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    const bool wasCancelled = cancelFlag->load();
    if (!self) return;
    QMetaObject::invokeMethod(
        self.data(),
        [self, generation, result, elapsedMs, wasCancelled]() {
          if (self) self->finish(generation, result, elapsedMs, wasCancelled);
        },
        Qt::QueuedConnection);
  });
  return generation;
}

void SolveController::finish(quint64 generation, std::shared_ptr<Expected<Plan>> result, double elapsedMs,
                             bool wasCancelled) {
  --m_inFlight;
  if (generation != m_generation) return;  // stale: a newer request superseded it
  m_running = false;
  if (wasCancelled) {
    Q_EMIT cancelled();
    return;
  }
  if (!*result) {
    Q_EMIT failed(QString::fromStdString(result->message()));
    return;
  }
  Q_EMIT solved(std::make_shared<const Plan>(std::move(*result).value()), elapsedMs);
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
