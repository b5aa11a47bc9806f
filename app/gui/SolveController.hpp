#pragma once
// Runs solves off the GUI thread through a JobTracker (docs/style.md, Threads): each request gets a
// generation number and its own cancel flag; a newer request cancels the older one, and a result
// whose generation is no longer current is dropped when it arrives. Progress is throttled to
// whole percents.

#include <QObject>
#include <QString>
#include <QTimer>
#include <atomic>
#include <functional>
#include <memory>

#include "JobTracker.hpp"
#include "SolveDiagnosis.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio::gui {

class SolveController : public QObject {
  Q_OBJECT
 public:
  using SolveFunction = std::function<Expected<Plan>(const PlanRequest&, const SolveControl&)>;
  /// Runs on the worker after a failed solve (not after a cancelled one): what the window can
  /// show beyond the message. Default: diagnoseMemoryFailure.
  using DiagnoseFunction = std::function<std::optional<MemoryDiagnosis>(const PlanRequest&, const SolveControl&)>;

  explicit SolveController(QObject* parent = nullptr);
  ~SolveController() override;

  /// Replaces makePlan (the bench and tests use the real one; this exists for `resimulate`).
  void setSolveFunction(SolveFunction function) { m_solve = std::move(function); }
  void setDiagnoseFunction(DiagnoseFunction function) { m_diagnose = std::move(function); }
  /// Delay of scheduleSolve() (edits in quick succession coalesce into one solve).
  void setDebounceMs(int ms) { m_debounce.setInterval(ms); }

  /// Starts solving now, cancelling whatever runs. Returns the generation.
  quint64 solve(PlanRequest request);
  /// Solves after the debounce delay; a newer call restarts the delay.
  void scheduleSolve(PlanRequest request);
  /// Cancels the running solve (and a pending scheduled one).
  void cancel();
  bool isRunning() const { return m_running; }
  bool isPending() const { return m_debounce.isActive(); }
  quint64 generation() const { return m_job.generation(); }
  /// Waits (processing events) until no solve runs; for tests and shutdown. false on timeout.
  bool waitForIdle(int timeoutMs);

 Q_SIGNALS:
  void started(quint64 generation);
  void progress(double fraction);
  void solved(std::shared_ptr<const pipestudio::Plan> plan, double elapsedMs);
  /// `diagnosis` is set when the plan did not fit in memory (per-device table, fitting size).
  void failed(const QString& message, std::shared_ptr<const pipestudio::gui::MemoryDiagnosis> diagnosis);
  void cancelled();

 private:
  struct Outcome;
  void finish(const std::shared_ptr<Outcome>& outcome);

  SolveFunction m_solve;
  DiagnoseFunction m_diagnose;
  QTimer m_debounce;
  PlanRequest m_pendingRequest;
  bool m_running = false;
  JobTracker m_job{this};  // last member: destroyed first, waits for the running solve
};

}  // namespace pipestudio::gui
