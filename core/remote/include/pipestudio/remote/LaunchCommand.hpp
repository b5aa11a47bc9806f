#pragma once
/// \file Remote command lines: which host runs which rank, the executor's arguments, the
/// watchdog wrapper that ends a rank when its SSH channel closes, and the srun / sbatch /
/// mpirun lines for `launcher: slurm|mpirun` with what squeue says about the job
/// (docs/clusters-and-deploy.md, §9, issue 17). Pure functions, unit-tested.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/model/Hosts.hpp"

namespace pipestudio::remote {

/// Where one rank runs: hosts fill in order, `localDevice` counts GPUs on that host from 0.
struct RankPlacement {
  int rank = 0;
  std::size_t hostIndex = 0;
  int localDevice = 0;
};

/// Assigns ranks 0..world-1 to the hosts in order (docs/cli.md). Error when the hosts have
/// fewer GPUs than `world`.
Expected<std::vector<RankPlacement>> placeRanks(const HostsSpec& hosts, int world);

/// What one executor process is told.
struct ExecutorArgs {
  std::string executor;  ///< path of pipestudio-exec on the remote host
  std::string plan;      ///< path of the plan on the remote host
  int rank = 0;
  int world = 1;
  Backend backend = Backend::Cuda;
  int iterations = 0;     ///< 0: the executor's default
  std::string ncclIdHex;  ///< ranks > 0 of a cuda run: rank 0's NCCL unique id
  int localDevice = -1;   ///< >= 0: CUDA_VISIBLE_DEVICES for this rank
};

/// argv of one executor process (`env CUDA_VISIBLE_DEVICES=k` first when localDevice >= 0).
std::vector<std::string> executorArgv(const ExecutorArgs& args);

/// The command line sent over an SSH exec channel: runs `argv` in `workDir` under a
/// `sh -c` watchdog that sends SIGTERM (then SIGKILL after `graceSeconds`) to the rank
/// once the channel's stdin reaches EOF — which happens when the SSH session dies or the
/// workstation cancels — so nothing keeps running on the cluster after a lost connection.
/// Every word is shell-quoted; the wrapper's exit status is the rank's.
std::string watchdogCommand(const std::string& workDir, const std::vector<std::string>& argv, int graceSeconds = 3);

/// `launcher: slurm|mpirun`: one job that starts every rank as `pipestudio-exec --task`
/// (executor/Launcher.hpp), which writes the rank's stream and log as launcher lines
/// (trace/TaskLines.hpp) on the stdout the launcher merges and sends back over the session.
struct LauncherJob {
  std::string workDir;                    ///< the job's directory (on a file system the nodes share)
  std::string jobName;                    ///< Slurm job name: how the job is found (squeue) and cancelled (scancel)
  int ranks = 1;                          ///< tasks (processes)
  int cpusPerRank = 0;                    ///< --cpus-per-task (cpu backend: a thread per device); 0: not given
  bool gpus = false;                      ///< cuda backends: ask for the GPUs (slurm gpus_per_task / gres)
  std::string executor;                   ///< pipestudio-exec on the remote side
  std::vector<std::string> executorArgs;  ///< --plan … --backend … (no --rank/--world)
  std::vector<std::string> environment;   ///< KEY=VALUE for every rank
  std::string ncclRendezvous;             ///< file in workDir when ranks > 0 need rank 0's NCCL id
  int ncclTimeoutS = 300;
};

/// One rank's argv: [env KEY=VALUE…] executor --task LAUNCHER [--nccl-rendezvous F
/// --nccl-timeout-s S] -- executorArgs…
std::vector<std::string> taskArgv(Launcher launcher, const LauncherJob& job);
/// srun (submit srun) or sbatch --wait … --wrap "srun …" (submit sbatch) with the hosts
/// file's Slurm options; the user's extra_args come last.
std::vector<std::string> slurmArgv(const SlurmOptions& slurm, const LauncherJob& job);
/// mpirun -np N --host h1:gpus,h2:gpus --tag-output [extra_args] task…
std::vector<std::string> mpirunArgv(const HostsSpec& hosts, const LauncherJob& job);

/// The command sent over the SSH channel: runs the launcher in workDir and, when the
/// channel's stdin closes (cancel, or the session died), stops the job: scancel by job name
/// for Slurm (pending or running, nothing stays allocated), then SIGTERM and after
/// `graceSeconds` SIGKILL to the launcher. With sbatch it follows the job's output files
/// (job.out, job.err in workDir) until sbatch --wait returns. Exit status: the launcher's.
std::string launcherCommand(const HostsSpec& hosts, const LauncherJob& job, int graceSeconds = 5);

/// What squeue says about the job.
struct SlurmJobState {
  std::string jobId;
  std::string state;   ///< PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, TIMEOUT, CANCELLED, …
  std::string reason;  ///< Resources, Priority, PartitionConfig, None, …
  std::string nodes;   ///< node list once allocated
};
/// `squeue -h --states=all --name=JOB -o '%i|%T|%r|%N'`.
std::string squeueCommand(const std::string& jobName);
/// The job in squeue's output (the last one listed); nullopt when it is not listed.
std::optional<SlurmJobState> parseSqueue(const std::string& out);
/// "PENDING (Resources)", "RUNNING", "FAILED (NonZeroExitCode)".
std::string slurmStateText(const SlurmJobState& job);
/// A state the job does not leave (COMPLETED, FAILED, TIMEOUT, CANCELLED, …).
bool slurmStateIsFinal(const std::string& state);
/// A pending reason no amount of waiting clears: the request exceeds what the partition,
/// the QoS or the account allow (PartitionConfig, PartitionNodeLimit, QOSMax…PerJob…).
bool slurmReasonIsPermanent(const std::string& reason);

}  // namespace pipestudio::remote
