#pragma once
// Private runtime shared by every backend: the clock, the frame sink, the run control
// (abort, progress, watchdog bookkeeping), the in-process mailbox and the plan-walking loop
// that drives a backend's Lane. Backends only say how to compute, move and allocate.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/executor/Executor.hpp"
#include "pipestudio/executor/Program.hpp"
#include "pipestudio/trace/Stream.hpp"

namespace pipestudio::exec {

/// One clock for every record: steady-clock nanoseconds since the stream's origin.
class Clock {
 public:
  Clock();
  std::int64_t originNs() const { return m_originNs; }
  std::int64_t wallNs() const { return m_wallNs; }
  /// Now, relative to the origin.
  std::int64_t nowNs() const;
  /// Absolute steady-clock value → relative to the origin.
  std::int64_t relative(std::int64_t steadyNs) const { return steadyNs - m_originNs; }
  static std::int64_t steadyNs();

 private:
  std::int64_t m_originNs = 0;
  std::int64_t m_wallNs = 0;
};

/// Thread-safe writer of trace frames to a file descriptor. Frames are written whole. A stream
/// that cannot be written (the reader went away, a full disk) is a failed run: output stops,
/// `onBroken` is called once (outside the sink's lock) and broken() stays true, so the process
/// exits non-zero instead of reporting a run nobody received.
class FrameSink {
 public:
  explicit FrameSink(int fd);
  void start();
  void write(const trace::Frame& frame);
  /// A heartbeat frame (trace::kHeartbeatFrameType).
  void writeHeartbeat();
  void setOnBroken(std::function<void(const std::string& why)> onBroken);
  bool broken() const;
  std::string brokenReason() const;

 private:
  /// Writes encoded frames under the lock; reports a stream this call broke.
  void send(const std::string& bytes);
  bool writeBytes(const std::string& bytes);  ///< false when this call broke the stream
  void reportBroken();
  int m_fd;
  mutable std::mutex m_mutex;
  bool m_broken = false;
  std::string m_reason;
  std::function<void(const std::string&)> m_onBroken;
};

enum class LaneState : int { Starting, Computing, Waiting, Done, Dead };

/// Shared by the lanes of one process and its watchdog.
class RunControl {
 public:
  explicit RunControl(int devices);
  bool aborted() const { return m_abort.load(std::memory_order_relaxed); }
  /// First failure wins: remembers which rank/device failed and why, wakes every waiter.
  void fail(int rank, const std::string& why);
  int failedRank() const;
  std::string failure() const;
  void progress(int device, LaneState state, int waitingFor = -1);
  /// Like progress() without counting as progress (a lane polling a GPU that does not finish).
  void setState(int device, LaneState state, int waitingFor = -1);
  /// Called by waiters so they wake on abort.
  void registerWakeup(std::function<void()> wake);

  struct LaneView {
    LaneState state;
    std::int64_t lastProgressNs;
    int waitingFor;
  };
  LaneView view(int device) const;
  int devices() const { return m_lanes.size(); }

 private:
  struct LaneInfo {
    std::atomic<int> state{0};
    std::atomic<std::int64_t> lastProgressNs{0};
    std::atomic<int> waitingFor{-1};
  };
  std::atomic<bool> m_abort{false};
  mutable std::mutex m_mutex;
  int m_failedRank = -1;
  std::string m_failure;
  IdVector<std::unique_ptr<LaneInfo>> m_lanes;  ///< by device
  std::vector<std::function<void()>> m_wakeups;
};

/// Watchdog: when a lane of this process has made no progress for `timeoutS`, names the lane
/// at the end of the chain of waits (a dead, hung or remote device) and fails the run.
/// `onAbort` runs once after the failure (the CUDA backend aborts its NCCL communicator).
class Watchdog {
 public:
  Watchdog(RunControl& control, double timeoutS, std::vector<int> localDevices, std::function<void()> onAbort);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void stop();

 private:
  void loop();
  RunControl& m_control;
  double m_timeoutS;
  std::vector<int> m_local;
  std::function<void()> m_onAbort;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

/// Writes a heartbeat frame every `intervalS` while the run has not failed: what a launcher
/// watches to tell a live rank from a stopped or hung one (a silent warm-up or a long CUDA
/// iteration still beats; a rank whose watchdog fired, or that is stopped, does not).
class Heartbeat {
 public:
  Heartbeat(FrameSink& sink, const RunControl& control, double intervalS);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  void stop();

 private:
  FrameSink& m_sink;
  const RunControl& m_control;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::thread m_thread;
};

/// In-process transport: messages keyed by (iteration, producer op, consumer op). Payloads
/// are backend-specific (host bytes on the CPU backend, a device buffer plus an event on
/// cuda-single).
class Mailbox {
 public:
  explicit Mailbox(RunControl& control);
  void post(int iteration, const Transfer& t, std::shared_ptr<void> payload);
  /// Blocks until the message arrives or the run is aborted (then nullptr).
  std::shared_ptr<void> take(int iteration, const Transfer& t);

 private:
  using Key = std::tuple<int, std::int32_t, std::int32_t>;
  RunControl& m_control;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::map<Key, std::shared_ptr<void>> m_messages;
};

/// What a backend provides for one device. Calls come from that device's thread, in plan
/// order. Any error fails the run.
class Lane {
 public:
  virtual ~Lane() = default;
  virtual int device() const = 0;
  /// Sends the data of the previous op and receives what the next op needs (grouped where
  /// the transport requires it; NCCL point-to-point pairs, Megatron-style).
  virtual Status exchange(std::span<const Transfer> sends, std::span<const Transfer> receives, int iteration) = 0;
  /// True when sends block until the peer receives (NCCL): the driver then posts the
  /// program's rendezvous groups (Step::rendezvous) instead of the buffered sends/receives,
  /// and compute() must wait for the groups holding the op's receives.
  virtual bool rendezvous() const { return false; }
  virtual Status allocate(const BufferRef& buffer) = 0;
  virtual Status release(const BufferRef& buffer) = 0;
  /// The op's work; records its range (record=false during warm-up).
  virtual Status compute(const Step& step, int iteration, bool record) = 0;
  virtual Status optimizerStep(int iteration, bool record) = 0;
  virtual Status beginIteration(int iteration, bool record) = 0;
  virtual Status endIteration(int iteration, bool record) = 0;
  /// Host-clock span of the last iteration, for the summary's step times.
  virtual std::pair<std::int64_t, std::int64_t> iterationSpanNs() const = 0;
};

struct WalkOptions {
  int iterations = 1;
  int warmup = 0;
  FaultSpec fault;
  int faultTarget = -1;  ///< the device the fault applies to, -1 = none here
};

/// The plan-walking loop shared by every backend: ops strictly in plan order, receives before
/// the op, sends after it, buffers allocated at op start and released at op end, the
/// optimizer step after the flush when the plan lists none. Returns per measured iteration
/// the lane's (start, end) ns.
Expected<std::vector<std::pair<std::int64_t, std::int64_t>>> walkDevice(const DeviceProgram& program, Lane& lane,
                                                                        RunControl& control,
                                                                        const WalkOptions& options);

/// Small dense matrix work used by the CPU backend and for calibration.
double runGemmUnits(std::int64_t units, const std::atomic<bool>* abort);
/// Milliseconds one GEMM unit takes on this machine (measured once, at start-up).
double calibrateGemmUnitMs();

}  // namespace pipestudio::exec
