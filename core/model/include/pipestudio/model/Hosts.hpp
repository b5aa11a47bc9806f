#pragma once
/// \file HostsSpec: `pipestudio.hosts/1` (docs/cli.md), where deploy runs the ranks.

#include <string>
#include <vector>

#include "pipestudio/model/Launch.hpp"

namespace pipestudio {

inline constexpr const char* kHostsSchema = "pipestudio.hosts/1";

struct HostEntry {
  std::string host;
  int port = 22;
  std::string user;            ///< empty: the local user name
  std::string identityFile;    ///< empty: ssh-agent or ~/.ssh defaults
  std::string knownHostsFile;  ///< empty: ~/.ssh/known_hosts
  int gpus = 1;
  std::string remoteDir = "~/.pipestudio";
};

/// `launcher: slurm`: how the job is asked of Slurm from the login node (hosts[0]). Empty
/// strings and zeros leave the choice to Slurm's defaults.
struct SlurmOptions {
  std::string submit = "srun";         ///< srun (interactive) | sbatch (batch job running srun)
  std::string partition;               ///< --partition
  std::string account;                 ///< --account
  std::string time;                    ///< --time, as Slurm writes it ("30", "01:00:00", "1-12:00:00")
  std::string qos;                     ///< --qos
  int nodes = 0;                       ///< --nodes (0: not given)
  int gpusPerTask = 1;                 ///< cuda: --gpus-per-task (0: not given; use gres or extra_args)
  std::string gres;                    ///< --gres ("gpu:8")
  std::vector<std::string> extraArgs;  ///< more srun (sbatch when submit is sbatch) options
};

/// `launcher: mpirun`.
struct MpirunOptions {
  std::vector<std::string> extraArgs;  ///< more mpirun options (--mca btl ^openib, …)
};

struct HostsSpec {
  std::vector<HostEntry> hosts;
  Launcher launcher = Launcher::Ssh;
  SlurmOptions slurm;
  MpirunOptions mpirun;
  /// Keepalive on every SSH connection (OpenSSH's ServerAliveInterval/ServerAliveCountMax):
  /// a probe every interval; no answer for interval × count means the connection is lost.
  int serverAliveIntervalS = 5;
  int serverAliveCountMax = 3;
  int totalGpus() const;
};

}  // namespace pipestudio
