#pragma once
/// \file Remote command lines: which host runs which rank, the executor's arguments, the
/// watchdog wrapper that ends a rank when its SSH channel closes, and the srun / mpirun
/// lines for `launcher: slurm|mpirun` (DESIGN.md §5, §9). Pure functions, unit-tested.

#include <cstddef>
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

/// Assigns ranks 0..world-1 to the hosts in order (DESIGN.md §9). Error when the hosts have
/// fewer GPUs than `world`.
Expected<std::vector<RankPlacement>> placeRanks(const HostsSpec& hosts, int world);

/// How many executor processes a backend needs for a plan with `devices` devices:
/// `cuda` one per device; `cuda-single` and `cpu` one process driving every device
/// (the CPU backend moves tensors between devices in-process, DESIGN.md §4).
int ranksForBackend(const std::string& backend, int devices);

/// What one executor process is told.
struct ExecutorArgs {
  std::string executor;    ///< path of pipestudio-exec on the remote host
  std::string plan;        ///< path of the plan on the remote host
  int rank = 0;
  int world = 1;
  std::string backend = "cuda";
  int iterations = 0;      ///< 0: the executor's default
  std::string ncclIdHex;   ///< ranks > 0 of a cuda run: rank 0's NCCL unique id
  int localDevice = -1;    ///< >= 0: CUDA_VISIBLE_DEVICES for this rank
};

/// argv of one executor process (`env CUDA_VISIBLE_DEVICES=k` first when localDevice >= 0).
std::vector<std::string> executorArgv(const ExecutorArgs& args);

/// The command line sent over an SSH exec channel: runs `argv` in `workDir` under a
/// `sh -c` watchdog that sends SIGTERM (then SIGKILL after `graceSeconds`) to the rank
/// once the channel's stdin reaches EOF — which happens when the SSH session dies or the
/// workstation cancels — so nothing keeps running on the cluster after a lost connection.
/// Every word is shell-quoted; the wrapper's exit status is the rank's.
std::string watchdogCommand(const std::string& workDir, const std::vector<std::string>& argv, int graceSeconds = 3);

/// For `launcher: slurm` and `mpirun`: one command, run on the first host, that starts every
/// rank; rank r writes its trace stream to `<workDir>/rank-r.trace` and its log to
/// `<workDir>/rank-r.log` (a launcher merges stdout of all tasks, which a binary stream
/// cannot survive). The rank number comes from the launcher's environment
/// (SLURM_PROCID; OMPI_COMM_WORLD_RANK or PMI_RANK).
std::string slurmCommand(const HostsSpec& hosts, const std::string& workDir, const ExecutorArgs& args);
std::string mpirunCommand(const HostsSpec& hosts, const std::string& workDir, const ExecutorArgs& args);

}  // namespace pipestudio::remote
