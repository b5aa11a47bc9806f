#include "pipestudio/remote/LaunchCommand.hpp"

#include "pipestudio/remote/ShellQuote.hpp"

namespace pipestudio::remote {

Expected<std::vector<RankPlacement>> placeRanks(const HostsSpec& hosts, int world) {
  if (world < 1) return Error{"hosts: " + std::to_string(world) + " ranks requested (expected at least 1)"};
  std::vector<RankPlacement> out;
  out.reserve(static_cast<std::size_t>(world));
  for (std::size_t h = 0; h < hosts.hosts.size() && static_cast<int>(out.size()) < world; ++h) {
    for (int g = 0; g < hosts.hosts[h].gpus && static_cast<int>(out.size()) < world; ++g) {
      out.push_back(RankPlacement{static_cast<int>(out.size()), h, g});
    }
  }
  if (static_cast<int>(out.size()) < world) {
    return Error{"hosts: the hosts file lists " + std::to_string(out.size()) + " GPU(s) but the run needs " +
                 std::to_string(world) + " rank(s) (expected gpus to add up to at least the plan's devices)"};
  }
  return out;
}

int ranksForBackend(const std::string& backend, int devices) { return backend == "cuda" ? devices : 1; }

std::vector<std::string> executorArgv(const ExecutorArgs& a) {
  std::vector<std::string> argv;
  if (a.localDevice >= 0) {
    argv.emplace_back("env");
    argv.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(a.localDevice));
  }
  argv.push_back(a.executor);
  argv.insert(argv.end(), {"--plan", a.plan, "--rank", std::to_string(a.rank), "--world", std::to_string(a.world),
                           "--backend", a.backend});
  if (a.iterations > 0) argv.insert(argv.end(), {"--iterations", std::to_string(a.iterations)});
  if (!a.ncclIdHex.empty()) argv.insert(argv.end(), {"--nccl-id", a.ncclIdHex});
  return argv;
}

std::string watchdogCommand(const std::string& workDir, const std::vector<std::string>& argv, int graceSeconds) {
  // $1 is the work dir, the rest the rank's argv: nothing from the caller is ever parsed as
  // shell code. A background list gets /dev/null as stdin (POSIX XCU 2.9.3), so the channel's
  // stdin is first saved as fd 3 and the watcher reads that. The watcher's stdout/stderr go
  // to /dev/null so it never holds the channel open after the rank ended.
  const std::string script =
      "cd -- \"$1\" || exit 126; shift; exec 3<&0; "
      "\"$@\" </dev/null 3<&- & p=$!; "
      "{ cat <&3 >/dev/null 2>&1; kill -TERM \"$p\" 2>/dev/null; sleep " +
      std::to_string(graceSeconds) +
      "; kill -KILL \"$p\" 2>/dev/null; } </dev/null >/dev/null 2>&1 & w=$!; "
      "exec 3<&-; wait \"$p\"; s=$?; kill \"$w\" 2>/dev/null; exit \"$s\"";
  std::vector<std::string> words{"sh", "-c", script, "pipestudio-watchdog", workDir};
  words.insert(words.end(), argv.begin(), argv.end());
  return joinShellWords(words);
}

namespace {

// The per-task part shared by srun and mpirun: pick the rank from the launcher's
// environment, send the stream and the log to per-rank files in the work dir.
std::vector<std::string> perTaskWords(const std::string& workDir, const ExecutorArgs& args, const char* rankExpr) {
  ExecutorArgs a = args;
  a.rank = 0;
  a.localDevice = -1;  // the launcher binds GPUs
  std::vector<std::string> argv = executorArgv(a);
  // Drop "--rank 0": the script appends the launcher's rank.
  for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--rank") {
      argv.erase(argv.begin() + static_cast<std::ptrdiff_t>(i), argv.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      break;
    }
  }
  const std::string script = std::string("cd -- \"$1\" || exit 126; shift; r=") + rankExpr +
                             "; exec \"$@\" --rank \"$r\" >\"rank-$r.trace\" 2>\"rank-$r.log\"";
  std::vector<std::string> words{"sh", "-c", script, "pipestudio-rank", workDir};
  words.insert(words.end(), argv.begin(), argv.end());
  return words;
}

}  // namespace

std::string slurmCommand(const HostsSpec& hosts, const std::string& workDir, const ExecutorArgs& args) {
  std::vector<std::string> words{"srun",
                                 "--nodes=" + std::to_string(hosts.hosts.size()),
                                 "--ntasks=" + std::to_string(args.world),
                                 "--kill-on-bad-exit=1"};
  if (args.backend == "cuda") words.emplace_back("--gpus-per-task=1");
  const auto task = perTaskWords(workDir, args, "\"${SLURM_PROCID:?not started by srun}\"");
  words.insert(words.end(), task.begin(), task.end());
  return joinShellWords(words);
}

std::string mpirunCommand(const HostsSpec& hosts, const std::string& workDir, const ExecutorArgs& args) {
  std::string hostList;
  for (const auto& h : hosts.hosts) {
    if (!hostList.empty()) hostList.push_back(',');
    hostList += h.host + ":" + std::to_string(h.gpus);
  }
  std::vector<std::string> words{"mpirun", "-np", std::to_string(args.world), "--host", hostList};
  const auto task = perTaskWords(workDir, args, "\"${OMPI_COMM_WORLD_RANK:-${PMI_RANK:?not started by mpirun}}\"");
  words.insert(words.end(), task.begin(), task.end());
  return joinShellWords(words);
}

}  // namespace pipestudio::remote
