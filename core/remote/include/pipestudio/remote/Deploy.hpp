#pragma once
/// \file Deploying a plan over SSH (docs/clusters-and-deploy.md, issues 8 and 17): connect to the hosts,
/// upload the executor and the plan, start one rank per GPU (or one Slurm / mpirun job from
/// the first host), stream every rank's trace and log back while it runs, stop everything on
/// cancel or lost connection (a keepalive notices a silent one).
///
/// `launcher: slurm|mpirun`: every rank runs `pipestudio-exec --task`, which sends its stream,
/// log and exit status as launcher lines on the job's merged stdout (trace/TaskLines.hpp);
/// rank 0's NCCL id reaches the others through a rendezvous file in the job's directory. For
/// Slurm the job's state comes from squeue while it is pending or running; cancel and a lost
/// session end it with scancel.
///
/// Used by `pipestudio-cli deploy` and the GUI deploy dialog. Qt-free and SQLite-free: the
/// caller's TraceSink stores the streams (the CLI feeds history::StreamIngest).
///
///   Deployment d(request, callbacks, sink);
///   std::thread t([&] { result = d.run(); });   // blocking; the GUI runs it off its thread
///   ... d.cancel();                              // any thread
///
/// Threads: run() uses one worker thread per host session. Sink methods and the progress
/// callback are called from those threads, one call at a time (serialised by the Deployment),
/// never concurrently; session callbacks (host key, passphrase) on the thread that called run().

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/model/Hosts.hpp"
#include "pipestudio/remote/SshSession.hpp"
#include "pipestudio/trace/Stream.hpp"

namespace pipestudio::remote {

enum class RankState {
  Connecting,
  Connected,
  Queued,  ///< waiting for the scheduler (Slurm job PENDING)
  Uploading,
  Starting,
  Running,
  Finished,  ///< exit status 0
  Failed,    ///< non-zero exit status or an error frame
  Lost,      ///< the SSH connection dropped while it ran
  Cancelled,
};
std::string_view rankStateName(RankState state);

/// One progress report for one rank (the GUI's per-rank row).
struct RankProgress {
  int rank = 0;
  std::string hostPort;
  RankState state = RankState::Connecting;
  int iteration = 0;         ///< iterations finished so far (from op frames)
  int iterations = 0;        ///< requested (0: the executor's default)
  std::uint64_t events = 0;  ///< trace frames received
  std::string message;       ///< what is happening / why it failed
};

/// Receives what the ranks send. A sink error (e.g. the database is full) cancels the run.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  /// Called once, after upload, right before the first rank starts (create the run record
  /// here: a deploy refused earlier leaves no trace in the history).
  virtual Status onStart(int ranks) = 0;
  /// Raw stream bytes of one rank, in order, as they arrive (feed them to a decoder/ingest).
  virtual Status onStreamBytes(int rank, std::string_view bytes) = 0;
  /// Every frame decoded from those bytes (live views); default: ignored.
  virtual void onFrame(int /*rank*/, const trace::Frame& /*frame*/) {}
  /// stderr of a rank (the executor's log), as it arrives.
  virtual void onLog(int /*rank*/, std::string_view /*text*/) {}
  /// What the launcher itself prints (srun's and mpirun's messages), whole lines.
  virtual void onLauncherLog(std::string_view /*text*/) {}
};

/// The scheduler's view of a `launcher: slurm` job (mpirun has none: only `launcher` is set).
struct JobProgress {
  std::string launcher;  ///< slurm | mpirun
  std::string jobId;     ///< empty until squeue lists the job
  std::string state;     ///< PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, TIMEOUT, CANCELLED, …
  std::string reason;    ///< Resources, Priority, PartitionConfig, … ("None" is dropped)
  std::string nodes;     ///< where it runs ("node[01-04]")
  /// "slurm job 12: PENDING (Resources)", "slurm job 12: RUNNING on node07".
  std::string text() const;
};

struct DeployRequest {
  std::string planPath;  ///< local plan file (uploaded as-is)
  int devices = 1;       ///< the plan's device count (config.devices)
  HostsSpec hosts;
  Backend backend = Backend::Cuda;
  int iterations = 0;                     ///< 0: the executor's default
  std::string executorPath;               ///< local pipestudio-exec to upload (same OS/arch as the hosts)
  std::string runId;                      ///< passed as --run-id; letters, digits, '-', '_' only
  std::vector<std::string> executorArgs;  ///< extra pipestudio-exec options (--max-op-ms 1, …)
  std::vector<std::string> environment;   ///< KEY=VALUE for every rank (NCCL_DEBUG=INFO, …)
  int connectTimeoutMs = 10000;
  int ncclIdTimeoutMs = 120000;  ///< how long rank 0 may take to report its NCCL id
  int cancelGraceMs = 8000;      ///< after cancel: how long to wait for ranks to exit
  int jobPollMs = 1000;          ///< slurm: how often squeue is asked while the job is pending
};

struct DeployCallbacks {
  SessionCallbacks session;
  std::function<void(const RankProgress&)> progress;
  /// Every change of the scheduler's job state (launcher slurm), from the deploying thread.
  std::function<void(const JobProgress&)> job;
};

enum class DeployOutcome {
  Complete,    ///< every rank exited 0 with a summary
  Failed,      ///< a rank failed (exit status, error frame) or could not start
  Incomplete,  ///< connection lost or cancelled: what arrived is kept
};

struct RankResult {
  int rank = 0;
  std::string hostPort;
  RankState state = RankState::Starting;
  int exitStatus = -1;  ///< -1: none (lost, cancelled before start)
  std::uint64_t events = 0;
  bool summarySeen = false;
  bool summaryOk = false;
  std::string errorFrames;    ///< messages of the rank's error frames
  std::string stderrTail;     ///< last 64 KiB of its stderr
  std::string streamProblem;  ///< decoder error or truncated tail
};

struct DeployResult {
  DeployOutcome outcome = DeployOutcome::Failed;
  std::string message;  ///< one paragraph: what happened, on which host/rank
  bool cancelled = false;
  bool connectionLost = false;  ///< a session died or stopped answering: deploy again to reconnect
  std::vector<RankResult> ranks;
  JobProgress job;              ///< launcher slurm: the job's last known state
  std::string launcherLogTail;  ///< launcher slurm|mpirun: the last 64 KiB the launcher printed
};

class Deployment {
 public:
  Deployment(DeployRequest request, DeployCallbacks callbacks, TraceSink& sink);
  ~Deployment();
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;

  /// Blocks until every rank ended. Error when nothing ran (bad request, host key refused,
  /// authentication, upload): then TraceSink::onStart was not called. Once ranks started the
  /// result says how the run ended.
  Expected<DeployResult> run();
  /// Stops all ranks (EOF on their stdin: the watchdog terminates them). Any thread.
  void cancel();
  bool cancelled() const { return m_cancel.load(); }

 private:
  struct State;
  DeployRequest m_request;
  DeployCallbacks m_callbacks;
  TraceSink& m_sink;
  std::atomic<bool> m_cancel{false};
};

/// The deploy dialog's "test connection": connects (host key check, authentication), runs
/// `uname -sm` and reports the host's fingerprint and system.
struct ConnectionReport {
  std::string hostPort;
  std::string fingerprintSha256;
  std::string system;  ///< "Linux x86_64"
};
Expected<ConnectionReport> testConnection(const HostEntry& host, const SessionCallbacks& callbacks,
                                          int connectTimeoutMs = 10000);

}  // namespace pipestudio::remote
