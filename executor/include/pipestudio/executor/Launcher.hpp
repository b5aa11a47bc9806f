#pragma once
/// \file Starting pipestudio-exec ranks on this machine and reading their trace streams while
/// they run (pipestudio-cli run, tests), and the rank's side of a cluster launcher
/// (`pipestudio-exec --task`, issue 17). POSIX only; no Qt.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/model/Launch.hpp"
#include "pipestudio/trace/Stream.hpp"

namespace pipestudio::exec {

struct LaunchRequest {
  std::string executable;  ///< path of pipestudio-exec
  std::string planPath;
  pipestudio::Backend backend = pipestudio::Backend::Cpu;
  int world = 1;  ///< processes: ranksFor(backend, the plan's devices)
  int iterations = 1;
  int warmup = 0;
  std::string runId;
  std::vector<std::string> extraArgs;  ///< appended to every rank's command line
  double peerExitTimeoutS = 30;        ///< after one rank fails, how long the others get to stop
  /// A rank whose stream brings nothing for this long (0: no limit) is stopped, SIGSTOP or hung
  /// past its own watchdog: the run fails with that reason and every rank is ended (SIGTERM and
  /// SIGCONT, then SIGKILL after 2 s). Ranks write a heartbeat frame about every second while
  /// their run goes on (trace::kHeartbeatFrameType), so give their --timeout-s plus a margin.
  double silenceTimeoutS = 0;
  /// Polled while the ranks run (every 100 ms at most): a reason ends the run now (SIGTERM,
  /// then SIGKILL after 2 s) and comes back as LaunchOutcome::stopped / failure. The CLI stops
  /// on SIGINT/SIGTERM and when the history can take no more (disk full).
  std::function<std::optional<std::string>()> stopRequested;
};

/// Environment variable the launcher sets for its ranks: the launcher's pid. pipestudio-exec
/// then asks the kernel to kill it when the launcher dies (PR_SET_PDEATHSIG), so no rank
/// outlives a `kill -9` of pipestudio-cli.
inline constexpr const char* kParentPidEnv = "PIPESTUDIO_EXEC_PARENT_PID";

struct RankOutcome {
  int rank = 0;
  int exitStatus = -1;  ///< exit code, or -1 when killed by a signal
  int signal = 0;
  std::size_t frames = 0;
  std::size_t truncatedBytes = 0;
  std::optional<std::string> streamError;
  std::string lastLog;  ///< last line the rank wrote on stderr
};

struct LaunchOutcome {
  bool ok = false;
  bool stopped = false;  ///< ended by stopRequested (the run is incomplete, not failed)
  std::string failure;   ///< which rank failed and why, when !ok
  std::vector<RankOutcome> ranks;
};

/// Frames as they arrive, tagged with the rank whose stream carried them.
using FrameCallback = std::function<void(int rank, const trace::Frame& frame)>;
/// The raw stream bytes as read (for history::StreamIngest, which decodes itself).
using BytesCallback = std::function<void(int rank, std::string_view bytes)>;

/// Starts the ranks (rank 0 first; for `cuda` the others once rank 0 has sent its NCCL id),
/// reads every stdout through a StreamDecoder and forwards stderr lines prefixed with the
/// rank. A rank that fails makes the launcher give the others peerExitTimeoutS to stop,
/// then kill them. Error only when nothing could be started.
Expected<LaunchOutcome> launchLocal(const LaunchRequest& request, const FrameCallback& onFrame,
                                    const BytesCallback& onBytes = {});

/// `pipestudio-exec --task slurm|mpirun [--nccl-rendezvous FILE] [--nccl-timeout-s S] --
/// EXECUTOR-OPTIONS…`: one rank started by srun or mpirun. Takes rank and world from the
/// launcher's environment, gets rank 0's NCCL id through the rendezvous file (rank 0 writes
/// it when its executor reports the id, the others wait for it), runs the executor and
/// writes its trace stream, its log and its exit status as launcher lines (trace/TaskLines.hpp)
/// on stdout — the launcher merges the stdout of every rank into one. Signals are passed on
/// to the executor; the exit status is the executor's (128 + n for signal n).
struct TaskOptions {
  pipestudio::Launcher launcher = pipestudio::Launcher::Slurm;  ///< slurm | mpirun
  std::string ncclRendezvous;  ///< empty: no NCCL id to hand over (cpu, cuda-single, one rank)
  double ncclTimeoutS = 300;   ///< how long ranks > 0 wait for rank 0's id
  std::vector<std::string> executorArgs;
};
Expected<TaskOptions> parseTaskArgs(const std::vector<std::string>& args);

/// Where this process sits in the launcher's job. (The GPU of a rank comes from the launcher's
/// local rank, SLURM_LOCALID or OMPI_COMM_WORLD_LOCAL_RANK, which the executor reads itself.)
struct TaskPlace {
  int rank = 0;
  int world = 1;
};
/// slurm: SLURM_PROCID, SLURM_NTASKS; mpirun: OMPI_COMM_WORLD_RANK/SIZE, else PMI_RANK/PMI_SIZE
/// (MPICH's hydra). The error names the missing variable.
Expected<TaskPlace> taskPlaceFromEnvironment(pipestudio::Launcher launcher);

/// Runs one rank as described above, spawning `executable` with the executor options plus
/// --rank/--world (and --nccl-id); lines go to `outFd`. Returns the status to exit with.
int runTask(const TaskOptions& options, const TaskPlace& place, const std::string& executable, int outFd);

/// main() of `pipestudio-exec --task …` (argv[1] is "--task").
int taskMain(int argc, char** argv);

/// pipestudio-exec next to `selfPath` (the running binary), in <build>/executor/ relative to
/// it, $PIPESTUDIO_EXEC, or on PATH.
std::optional<std::string> findExecutor(const std::string& selfPath);

}  // namespace pipestudio::exec
