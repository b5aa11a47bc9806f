#include "Runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <iostream>

#include "pipestudio/common/Try.hpp"

namespace pipestudio::exec {

Clock::Clock() : m_originNs(steadyNs()) {
  m_wallNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::int64_t Clock::steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t Clock::nowNs() const { return steadyNs() - m_originNs; }

FrameSink::FrameSink(int fd) : m_fd(fd) {}

void FrameSink::send(const std::string& bytes) {
  bool brokeNow = false;
  {
    std::lock_guard lock(m_mutex);
    brokeNow = writeBytes(bytes);
  }
  if (brokeNow) reportBroken();
}

void FrameSink::start() {
  std::string bytes;
  trace::encodeStreamStart(bytes);
  send(bytes);
}

void FrameSink::write(const trace::Frame& frame) {
  std::string bytes;
  trace::encodeFrame(frame, bytes);
  send(bytes);
}

void FrameSink::writeHeartbeat() {
  std::string bytes;
  trace::encodeHeartbeat(bytes);
  send(bytes);
}

Heartbeat::Heartbeat(FrameSink& sink, const RunControl& control, double intervalS) : m_sink(sink), m_control(control) {
  const auto interval = std::chrono::duration<double>(intervalS);
  m_thread = std::thread([this, interval] {
    std::unique_lock lock(m_mutex);
    while (!m_wake.wait_for(lock, interval, [this] { return m_stop; })) {
      if (m_control.aborted()) continue;  // a failed run falls silent: its launcher stops it
      lock.unlock();
      m_sink.writeHeartbeat();
      lock.lock();
    }
  });
}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::stop() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void FrameSink::setOnBroken(std::function<void(const std::string&)> onBroken) {
  std::lock_guard lock(m_mutex);
  m_onBroken = std::move(onBroken);
}

bool FrameSink::broken() const {
  std::lock_guard lock(m_mutex);
  return m_broken;
}

std::string FrameSink::brokenReason() const {
  std::lock_guard lock(m_mutex);
  return m_reason;
}

void FrameSink::reportBroken() {
  std::function<void(const std::string&)> callback;
  std::string why;
  {
    std::lock_guard lock(m_mutex);
    callback = m_onBroken;
    why = m_reason;
  }
  std::cerr << "pipestudio-exec: " << why << '\n';
  if (callback) callback(why);
}

bool FrameSink::writeBytes(const std::string& bytes) {
  std::size_t off = 0;
  while (!m_broken && off < bytes.size()) {
    const ssize_t n = ::write(m_fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      m_broken = true;
      m_reason = err == EPIPE ? "trace stream closed by the reader (broken pipe)"
                              : std::string("cannot write the trace stream: ") + std::strerror(err);
      return true;
    }
    off += static_cast<std::size_t>(n);
  }
  return false;
}

RunControl::RunControl(int devices) {
  for (int d = 0; d < devices; ++d) {
    m_lanes.push_back(std::make_unique<LaneInfo>());
    m_lanes.back()->lastProgressNs = Clock::steadyNs();
  }
}

void RunControl::fail(int rank, const std::string& why) {
  std::vector<std::function<void()>> wakeups;
  {
    std::lock_guard lock(m_mutex);
    if (m_abort.load()) return;
    m_failedRank = rank;
    m_failure = why;
    m_abort.store(true);
    wakeups = m_wakeups;
  }
  for (auto& w : wakeups) w();
}

int RunControl::failedRank() const {
  std::lock_guard lock(m_mutex);
  return m_failedRank;
}

std::string RunControl::failure() const {
  std::lock_guard lock(m_mutex);
  return m_failure;
}

void RunControl::progress(int device, LaneState state, int waitingFor) {
  if (device < 0 || device >= devices()) return;
  LaneInfo& l = *m_lanes[device];
  l.state.store(static_cast<int>(state));
  l.waitingFor.store(waitingFor);
  l.lastProgressNs.store(Clock::steadyNs());
}

void RunControl::setState(int device, LaneState state, int waitingFor) {
  if (device < 0 || device >= devices()) return;
  LaneInfo& l = *m_lanes[device];
  l.state.store(static_cast<int>(state));
  l.waitingFor.store(waitingFor);
}

void RunControl::registerWakeup(std::function<void()> wake) {
  std::lock_guard lock(m_mutex);
  m_wakeups.push_back(std::move(wake));
}

RunControl::LaneView RunControl::view(int device) const {
  const LaneInfo& l = *m_lanes[device];
  return {static_cast<LaneState>(l.state.load()), l.lastProgressNs.load(), l.waitingFor.load()};
}

Watchdog::Watchdog(RunControl& control, double timeoutS, std::vector<int> localDevices, std::function<void()> onAbort)
    : m_control(control), m_timeoutS(timeoutS), m_local(std::move(localDevices)), m_onAbort(std::move(onAbort)) {
  m_thread = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  m_stop.store(true);
  if (m_thread.joinable()) m_thread.join();
}

void Watchdog::loop() {
  const auto timeoutNs = static_cast<std::int64_t>(m_timeoutS * 1e9);
  bool aborted = false;
  while (!m_stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (m_control.aborted()) {
      if (!aborted && m_onAbort) m_onAbort();
      aborted = true;
      continue;
    }
    // A run is stuck when no local lane has moved for the timeout.
    const std::int64_t now = Clock::steadyNs();
    bool anyActive = false;
    std::int64_t latest = 0;
    for (int d : m_local) {
      const auto v = m_control.view(d);
      if (v.state == LaneState::Done) continue;
      anyActive = true;
      latest = std::max(latest, v.lastProgressNs);
    }
    if (!anyActive || now - latest < timeoutNs) continue;
    // Blame, in order: a lane that died, a lane stuck computing, else the end of the chain
    // of waits (a device of another process, or a cycle).
    const std::string timeout = std::to_string(static_cast<int>(std::ceil(m_timeoutS)));
    int blame = -1;
    std::string why;
    for (int d : m_local) {
      if (m_control.view(d).state == LaneState::Dead) {
        blame = d;
        why = "died";
        break;
      }
    }
    for (int d : m_local) {
      const auto s = m_control.view(d).state;
      if (blame < 0 && (s == LaneState::Computing || s == LaneState::Starting)) {
        blame = d;
        why = "made no progress for " + timeout + " s (hung; watchdog)";
      }
    }
    if (blame < 0) {
      for (int d : m_local) {
        if (m_control.view(d).state == LaneState::Waiting) {
          blame = d;
          break;
        }
      }
      for (int hops = 0; blame >= 0 && hops <= m_control.devices(); ++hops) {
        const bool local = std::find(m_local.begin(), m_local.end(), blame) != m_local.end();
        if (!local) {
          why = "sent nothing for " + timeout + " s (the rank died or hung; watchdog)";
          break;
        }
        const auto v = m_control.view(blame);
        if (v.state != LaneState::Waiting || v.waitingFor < 0 || v.waitingFor == blame) {
          why = "waited " + timeout + " s without progress (watchdog)";
          break;
        }
        blame = v.waitingFor;
      }
      if (why.empty()) why = "waits in a cycle (watchdog)";
    }
    if (blame < 0) blame = m_local.front();
    m_control.fail(blame, "device " + std::to_string(blame) + " " + why);
  }
}

Mailbox::Mailbox(RunControl& control) : m_control(control) {
  m_control.registerWakeup([this] {
    std::lock_guard lock(m_mutex);
    m_cv.notify_all();
  });
}

void Mailbox::post(int iteration, const Transfer& t, std::shared_ptr<void> payload) {
  {
    std::lock_guard lock(m_mutex);
    m_messages[{iteration, t.producerOp, t.consumerOp}] = std::move(payload);
  }
  m_cv.notify_all();
}

std::shared_ptr<void> Mailbox::take(int iteration, const Transfer& t) {
  std::unique_lock lock(m_mutex);
  const Key key{iteration, t.producerOp, t.consumerOp};
  for (;;) {
    if (m_control.aborted()) return nullptr;
    auto it = m_messages.find(key);
    if (it != m_messages.end()) {
      auto payload = std::move(it->second);
      m_messages.erase(it);
      return payload;
    }
    m_cv.wait_for(lock, std::chrono::milliseconds(50));
  }
}

Expected<std::vector<std::pair<std::int64_t, std::int64_t>>> walkDevice(const DeviceProgram& program, Lane& lane,
                                                                        RunControl& control,
                                                                        const WalkOptions& options) {
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  const int device = lane.device();
  const bool faulty = options.faultTarget == device && options.fault.mode != FaultSpec::Mode::None;
  std::int64_t measuredOps = 0;
  for (int it = 0; it < options.warmup + options.iterations; ++it) {
    const bool record = it >= options.warmup;
    const int iteration = it - options.warmup;  // warm-up iterations are negative, never streamed
    PS_RETURN_IF_ERROR(lane.beginIteration(iteration, record));
    std::span<const Transfer> pendingSends;
    const bool rendezvous = lane.rendezvous();
    for (const Step& step : program.steps) {
      control.progress(device, LaneState::Waiting, step.receives.empty() ? -1 : step.receives.front().fromDevice);
      PS_RETURN_IF_ERROR(rendezvous ? lane.exchange(step.rendezvous.sends, step.rendezvous.receives, iteration)
                                    : lane.exchange(pendingSends, step.receives, iteration));
      if (control.aborted()) return Error{"aborted"};
      control.progress(device, LaneState::Computing);
      for (const BufferRef& b : step.allocate) {
        PS_RETURN_IF_ERROR(lane.allocate(b));
      }
      PS_RETURN_IF_ERROR(lane.compute(step, iteration, record));
      for (const BufferRef& b : step.release) {
        PS_RETURN_IF_ERROR(lane.release(b));
      }
      pendingSends = step.sends;
      control.progress(device, LaneState::Computing);
      if (record && faulty && ++measuredOps == options.fault.afterOps) {
        switch (options.fault.mode) {
          case FaultSpec::Mode::Crash:
            std::cerr << "pipestudio-exec: fault injection: killing the process at device " << device << '\n';
            std::cerr.flush();
            ::kill(::getpid(), SIGKILL);
            break;
          case FaultSpec::Mode::Die:
            std::cerr << "pipestudio-exec: fault injection: device " << device << " stops silently\n";
            control.progress(device, LaneState::Dead);
            return Error{"dead"};
          case FaultSpec::Mode::Hang:
            std::cerr << "pipestudio-exec: fault injection: device " << device << " hangs\n";
            while (!control.aborted()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
            return Error{"aborted"};
          case FaultSpec::Mode::Error:
            return Error{"fault injection after " + std::to_string(measuredOps) + " ops"};
          case FaultSpec::Mode::None:
            break;
        }
      }
      if (control.aborted()) return Error{"aborted"};
    }
    PS_RETURN_IF_ERROR(rendezvous ? lane.exchange(program.trailing.sends, program.trailing.receives, iteration)
                                  : lane.exchange(pendingSends, program.endReceives, iteration));
    if (!program.hasOptimizerStep) {
      PS_RETURN_IF_ERROR(lane.optimizerStep(iteration, record));
    }
    PS_RETURN_IF_ERROR(lane.endIteration(iteration, record));
    if (record) spans.push_back(lane.iterationSpanNs());
  }
  control.progress(device, LaneState::Done);
  return spans;
}

namespace {
// One GEMM unit: C += A·B on 32×32 floats (65,536 FLOPs), small enough to time ops of 0.1 ms.
constexpr std::size_t kUnitN = 32;
}  // namespace

double runGemmUnits(std::int64_t units, const std::atomic<bool>* abort) {
  thread_local std::vector<float> a(kUnitN * kUnitN, 0.5F), b(kUnitN * kUnitN, 0.25F), c(kUnitN * kUnitN, 0.0F);
  std::size_t bounded = 0;  // the cell halved after each unit, cycling through C
  for (std::int64_t u = 0; u < units; ++u) {
    if (abort != nullptr && (u & 63) == 0 && abort->load(std::memory_order_relaxed)) break;
    for (std::size_t i = 0; i < kUnitN; ++i) {
      for (std::size_t k = 0; k < kUnitN; ++k) {
        const float aik = a[i * kUnitN + k];
        for (std::size_t j = 0; j < kUnitN; ++j) c[i * kUnitN + j] += aik * b[k * kUnitN + j];
      }
    }
    // Keep values bounded so the loop never degenerates into denormals or infinities.
    c[bounded] *= 0.5F;
    bounded = (bounded + 1) % c.size();
  }
  return static_cast<double>(c[0]);
}

double calibrateGemmUnitMs() {
  // Best of several short runs: the fastest is the least disturbed by other processes.
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    const std::int64_t t0 = Clock::steadyNs();
    volatile double sink = runGemmUnits(200, nullptr);
    (void)sink;
    const double ms = static_cast<double>(Clock::steadyNs() - t0) / 1e6 / 200.0;
    best = std::min(best, ms);
  }
  return std::max(best, 1e-6);
}

}  // namespace pipestudio::exec
