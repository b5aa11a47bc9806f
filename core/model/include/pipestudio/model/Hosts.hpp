#pragma once
/// \file HostsSpec: `pipestudio.hosts/1` (DESIGN.md §9), where deploy runs the ranks.

#include <string>
#include <vector>

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

struct HostsSpec {
  std::vector<HostEntry> hosts;
  std::string launcher = "ssh";  ///< ssh | slurm | mpirun
  int totalGpus() const;
};

}  // namespace pipestudio
