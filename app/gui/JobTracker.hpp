#pragma once
// JobTracker: the one way the GUI runs background work (docs/style.md, Threads; modelled on KDAB
// hotspot's jobtracker.h). One tracker per kind of job (a solve, the history listing, a
// deployment): start() runs the job on the tracker's own thread pool, never on the GUI thread,
// and hands its result to `done` on the context object's thread. Each start() bumps the kind's
// generation and raises the previous job's cancel flag; a result (or a post()) whose generation
// is no longer current when it arrives is dropped. Nothing is delivered after the tracker (a
// member of the context) is destroyed; its destructor cancels and waits for running jobs.
//
//   m_listJob.start([path](const JobTracker::Control&) { return listRuns(path); },
//                   [this](Expected<Runs> runs) { showRuns(std::move(runs)); });

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QMetaObject>
#include <QObject>
#include <QThread>
#include <QThreadPool>
#include <atomic>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

namespace pipestudio::gui {

class JobTracker {
  struct State {
    std::mutex mutex;
    QObject* context = nullptr;  ///< guarded by mutex; null once the tracker is gone
    std::atomic<quint64> generation{0};
    std::atomic<int> inFlight{0};  ///< started and not yet delivered (or dropped)
  };

 public:
  /// What a job sees on its worker thread.
  class Control {
   public:
    /// Superseded by a newer job of this kind, or cancel()ed.
    bool cancelled() const { return m_cancel->load(); }
    /// The flag itself, for solvers that poll a `const std::atomic<bool>*` (SolveControl).
    const std::atomic<bool>* cancelFlag() const { return m_cancel.get(); }
    quint64 generation() const { return m_generation; }
    /// Runs `f()` on the context's thread, unless this job is stale by then (progress, logs).
    template <typename F>
    void post(F f) const {
      JobTracker::post(m_state, m_generation, std::move(f));
    }

   private:
    friend class JobTracker;
    Control(std::shared_ptr<State> state, std::shared_ptr<std::atomic<bool>> cancel, quint64 generation)
        : m_state(std::move(state)), m_cancel(std::move(cancel)), m_generation(generation) {}
    std::shared_ptr<State> m_state;
    std::shared_ptr<std::atomic<bool>> m_cancel;
    quint64 m_generation;
  };

  /// `context` receives the results (its thread runs `done`); `maxThreads` bounds this kind's
  /// concurrent jobs (a superseded job may still be winding down next to the current one).
  explicit JobTracker(QObject* context, int maxThreads = 2) : m_state(std::make_shared<State>()) {
    m_state->context = context;
    m_pool.setMaxThreadCount(maxThreads);
  }
  JobTracker(const JobTracker&) = delete;
  JobTracker& operator=(const JobTracker&) = delete;
  ~JobTracker() {
    {
      std::lock_guard lock(m_state->mutex);
      m_state->context = nullptr;  // late results and posts are dropped from here on
    }
    cancel();
    m_pool.waitForDone();
  }

  /// Runs `job(const Control&)` off the GUI thread, then `done(result)` on the context's thread
  /// if no newer start() came meanwhile. A job returning void gets `done()`. Returns the job's
  /// generation.
  template <typename Job, typename Done>
  quint64 start(Job job, Done done) {
    using Result = std::invoke_result_t<Job&, const Control&>;
    if (m_cancel) m_cancel->store(true);
    auto cancel = std::make_shared<std::atomic<bool>>(false);
    m_cancel = cancel;
    const quint64 generation = ++m_state->generation;
    ++m_state->inFlight;
    m_pool.start([state = m_state, cancel, generation, job = std::move(job), done = std::move(done)]() mutable {
      const Control control(state, cancel, generation);
      if constexpr (std::is_void_v<Result>) {
        job(control);
        deliver(state, generation, [done = std::move(done)]() mutable { done(); });
      } else {
        auto result = std::make_shared<Result>(job(control));
        deliver(state, generation, [done = std::move(done), result]() mutable { done(std::move(*result)); });
      }
    });
    return generation;
  }

  /// Raises the current job's cancel flag; its result still arrives (the job says what it did).
  void cancel() {
    if (m_cancel) m_cancel->store(true);
  }
  /// Cancels and drops the result of every job started so far.
  void invalidate() {
    cancel();
    ++m_state->generation;
  }
  quint64 generation() const { return m_state->generation; }
  /// Some job of this kind (current or superseded) has not delivered yet.
  bool isRunning() const { return m_state->inFlight > 0; }
  /// Processes events until every job has delivered; for tests and shutdown. false on timeout.
  bool waitForIdle(int timeoutMs) const {
    QElapsedTimer timer;
    timer.start();
    while (isRunning()) {
      if (timer.elapsed() > timeoutMs) return false;
      QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
      QThread::msleep(1);
    }
    return true;
  }

 private:
  template <typename F>
  static void post(const std::shared_ptr<State>& state, quint64 generation, F f) {
    std::lock_guard lock(state->mutex);
    if (state->context == nullptr) return;
    QMetaObject::invokeMethod(
        state->context,
        [state, generation, f = std::move(f)]() mutable {
          if (state->generation == generation) f();
        },
        Qt::QueuedConnection);
  }

  template <typename F>
  static void deliver(const std::shared_ptr<State>& state, quint64 generation, F f) {
    std::lock_guard lock(state->mutex);
    if (state->context == nullptr) return;
    QMetaObject::invokeMethod(
        state->context,
        [state, generation, f = std::move(f)]() mutable {
          --state->inFlight;
          if (state->generation == generation) f();
        },
        Qt::QueuedConnection);
  }

  std::shared_ptr<State> m_state;
  std::shared_ptr<std::atomic<bool>> m_cancel;  ///< the current job's
  QThreadPool m_pool;
};

}  // namespace pipestudio::gui
