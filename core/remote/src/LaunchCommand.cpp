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

std::vector<std::string> executorArgv(const ExecutorArgs& a) {
  std::vector<std::string> argv;
  if (a.localDevice >= 0) {
    argv.emplace_back("env");
    argv.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(a.localDevice));
  }
  argv.push_back(a.executor);
  argv.insert(argv.end(), {"--plan", a.plan, "--rank", std::to_string(a.rank), "--world", std::to_string(a.world),
                           "--backend", std::string(name(a.backend))});
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

std::vector<std::string> taskArgv(Launcher launcher, const LauncherJob& job) {
  std::vector<std::string> argv;
  if (!job.environment.empty()) {
    argv.emplace_back("env");
    argv.insert(argv.end(), job.environment.begin(), job.environment.end());
  }
  argv.insert(argv.end(), {job.executor, "--task", std::string(name(launcher))});
  if (!job.ncclRendezvous.empty()) {
    argv.insert(argv.end(),
                {"--nccl-rendezvous", job.ncclRendezvous, "--nccl-timeout-s", std::to_string(job.ncclTimeoutS)});
  }
  argv.emplace_back("--");
  argv.insert(argv.end(), job.executorArgs.begin(), job.executorArgs.end());
  return argv;
}

namespace {

// Per-task resources, given to srun (and to sbatch for the allocation).
void appendTaskResources(const SlurmOptions& s, const LauncherJob& job, std::vector<std::string>& words) {
  words.push_back("--ntasks=" + std::to_string(job.ranks));
  if (job.cpusPerRank > 0) words.push_back("--cpus-per-task=" + std::to_string(job.cpusPerRank));
  if (job.gpus && s.gpusPerTask > 0) words.push_back("--gpus-per-task=" + std::to_string(s.gpusPerTask));
  if (job.gpus && !s.gres.empty()) words.push_back("--gres=" + s.gres);
}

}  // namespace

std::vector<std::string> slurmArgv(const SlurmOptions& s, const LauncherJob& job) {
  const std::vector<std::string> task = taskArgv(Launcher::Slurm, job);
  // srun's own options: a rank that fails takes the others down (they would wait for it).
  std::vector<std::string> srun{"srun", "--kill-on-bad-exit=1"};
  std::vector<std::string> allocation{"--job-name=" + job.jobName};
  if (s.nodes > 0) allocation.push_back("--nodes=" + std::to_string(s.nodes));
  if (!s.partition.empty()) allocation.push_back("--partition=" + s.partition);
  if (!s.account.empty()) allocation.push_back("--account=" + s.account);
  if (!s.time.empty()) allocation.push_back("--time=" + s.time);
  if (!s.qos.empty()) allocation.push_back("--qos=" + s.qos);
  if (s.submit == "sbatch") {
    appendTaskResources(s, job, srun);
    srun.insert(srun.end(), task.begin(), task.end());
    std::vector<std::string> words{"sbatch",
                                   "--parsable",
                                   "--wait",
                                   "--open-mode=append",
                                   "--output=" + job.workDir + "/job.out",
                                   "--error=" + job.workDir + "/job.err"};
    words.insert(words.end(), allocation.begin(), allocation.end());
    appendTaskResources(s, job, words);
    words.insert(words.end(), s.extraArgs.begin(), s.extraArgs.end());
    words.push_back("--wrap=" + joinShellWords(srun));
    return words;
  }
  srun.insert(srun.end(), allocation.begin(), allocation.end());
  appendTaskResources(s, job, srun);
  srun.insert(srun.end(), s.extraArgs.begin(), s.extraArgs.end());
  srun.insert(srun.end(), task.begin(), task.end());
  return srun;
}

std::vector<std::string> mpirunArgv(const HostsSpec& hosts, const LauncherJob& job) {
  std::string hostList;
  for (const auto& h : hosts.hosts) {
    if (!hostList.empty()) hostList.push_back(',');
    hostList += h.host + ":" + std::to_string(h.gpus);
  }
  // --tag-output: every chunk of a rank's output carries "[job,rank]<stdout>:", which is what
  // tells the ranks apart (mpirun interleaves their output in arbitrary chunks).
  std::vector<std::string> words{"mpirun", "-np", std::to_string(job.ranks), "--host", hostList, "--tag-output"};
  words.insert(words.end(), hosts.mpirun.extraArgs.begin(), hosts.mpirun.extraArgs.end());
  const auto task = taskArgv(Launcher::Mpirun, job);
  words.insert(words.end(), task.begin(), task.end());
  return words;
}

std::string launcherCommand(const HostsSpec& hosts, const LauncherJob& job, int graceSeconds) {
  const std::string mode = hosts.launcher == Launcher::Slurm ? hosts.slurm.submit : "mpirun";
  const std::vector<std::string> launcher =
      hosts.launcher == Launcher::Slurm ? slurmArgv(hosts.slurm, job) : mpirunArgv(hosts, job);
  // $1 work dir, $2 srun|sbatch|mpirun, $3 job name, $4 grace seconds, then the launcher's
  // argv: nothing from the caller is parsed as shell code. The channel's stdin is kept as fd
  // 3 for the watcher (a background list gets /dev/null as stdin, POSIX XCU 2.9.3); the
  // watcher's output goes to /dev/null so it never holds the channel open.
  const std::string script =
      "cd -- \"$1\" || exit 126; mode=$2; name=$3; grace=$4; shift 4; exec 3<&0; "
      "if [ \"$mode\" = sbatch ]; then : >>job.out; : >>job.err; fi; "
      "\"$@\" </dev/null 3<&- & p=$!; "
      "if [ \"$mode\" = sbatch ]; then "
      "tail -c +1 -F -s 0.5 --pid=\"$p\" job.out 2>/dev/null 3<&- & t1=$!; "
      "tail -c +1 -F -s 0.5 --pid=\"$p\" job.err 2>/dev/null >&2 3<&- & t2=$!; fi; "
      "{ cat <&3 >/dev/null 2>&1; "
      "if [ \"$mode\" != mpirun ]; then scancel --name=\"$name\" --user=\"$(id -un)\"; fi; "
      "kill -TERM \"$p\"; sleep \"$grace\"; kill -KILL \"$p\"; } </dev/null >/dev/null 2>&1 & w=$!; "
      "exec 3<&-; wait \"$p\"; s=$?; "
      "if [ \"$mode\" = sbatch ]; then wait \"$t1\"; wait \"$t2\"; fi; "
      "kill \"$w\" 2>/dev/null; exit \"$s\"";
  std::vector<std::string> words{"sh",        "-c", script,      "pipestudio-launcher",
                                 job.workDir, mode, job.jobName, std::to_string(graceSeconds)};
  words.insert(words.end(), launcher.begin(), launcher.end());
  return joinShellWords(words);
}

std::string squeueCommand(const std::string& jobName) {
  return joinShellWords({"squeue", "-h", "--states=all", "--name=" + jobName, "-o", "%i|%T|%r|%N"});
}

std::optional<SlurmJobState> parseSqueue(const std::string& out) {
  std::optional<SlurmJobState> job;
  std::size_t start = 0;
  while (start < out.size()) {
    auto end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(start, end - start);
    start = end + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    const auto a = line.find('|');
    const auto b = a == std::string::npos ? a : line.find('|', a + 1);
    if (b == std::string::npos || a == 0) continue;
    const auto c = line.find('|', b + 1);
    SlurmJobState s{line.substr(0, a), line.substr(a + 1, b - a - 1),
                    line.substr(b + 1, c == std::string::npos ? std::string::npos : c - b - 1),
                    c == std::string::npos ? std::string() : line.substr(c + 1)};
    if (s.state.empty()) continue;
    job = std::move(s);
  }
  return job;
}

std::string slurmStateText(const SlurmJobState& job) {
  if (job.reason.empty() || job.reason == "None" || job.reason == "(null)") return job.state;
  return job.state + " (" + job.reason + ")";
}

bool slurmStateIsFinal(const std::string& state) {
  for (const char* s : {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                        "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}) {
    if (state.rfind(s, 0) == 0) return true;  // "CANCELLED by 0"
  }
  return false;
}

bool slurmReasonIsPermanent(const std::string& reason) {
  // squeue's %r can carry details after the code ("ReqNodeNotAvail, UnavailableNodes:…").
  const std::string code = reason.substr(0, reason.find_first_of(", "));
  for (const char* r :
       {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount", "InvalidQOS",
        "DependencyNeverSatisfied", "AccountNotAllowed", "QOSNotAllowed"}) {
    if (code == r) return true;
  }
  // Per-job limits of a QoS or an association (QOSMaxCpuPerJobLimit, AssocMaxNodesPerJobLimit,
  // QOSMaxGRESPerJob, …): the job itself is too large, waiting cannot help.
  const bool limit = code.rfind("QOSMax", 0) == 0 || code.rfind("AssocMax", 0) == 0;
  return limit && code.find("PerJob") != std::string::npos;
}

}  // namespace pipestudio::remote
