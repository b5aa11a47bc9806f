// launcher slurm|mpirun (issue 17): one job started from the first host's session; every rank
// runs `pipestudio-exec --task`, whose launcher lines come back merged on the job's output
// and are split per rank here while the job runs. Slurm's view of the job (squeue) is polled
// while it is pending or running; cancel and a lost session stop it through the watcher of
// launcherCommand() (scancel).
#include <thread>

#include "DeployState.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/remote/LauncherOutput.hpp"
#include "pipestudio/remote/ShellQuote.hpp"

namespace pipestudio::remote {
namespace {

constexpr int kLauncherGraceSeconds = 3;
constexpr int kSqueueTimeoutMs = 15000;
// While the job runs its state matters less (the streams say more): ask squeue less often.
constexpr auto kRunningPollInterval = std::chrono::seconds(5);
// After the launcher ended: how long Slurm may take to move the job to its final state.
constexpr auto kFinalStateWait = std::chrono::seconds(5);

std::string explainPermanentReason(const std::string& reason) {
  const std::string code = reason.substr(0, reason.find_first_of(", "));
  if (code == "PartitionConfig") {
    return "the request (tasks, CPUs, GPUs or memory per node) exceeds what the partition's nodes have";
  }
  if (code == "PartitionNodeLimit") return "the number of nodes is outside the partition's limits";
  if (code == "PartitionTimeLimit") return "the time limit exceeds the partition's";
  if (code == "BadConstraints") return "the constraints or GPU request cannot be met by any node";
  if (code == "InvalidAccount" || code == "AccountNotAllowed") return "the account is not valid for this partition";
  if (code == "InvalidQOS" || code == "QOSNotAllowed") return "the QoS is not valid for this partition or account";
  if (code == "DependencyNeverSatisfied") return "a dependency can never be satisfied";
  return "the job exceeds a per-job limit of its QoS or account";
}

// Final states in which Slurm, not a rank, ended the job.
std::string explainEndState(const std::string& state, const std::string& timeLimit) {
  if (state == "TIMEOUT") {
    return "the job reached its time limit" + (timeLimit.empty() ? std::string() : " (time " + timeLimit + ")") +
           " and Slurm stopped its ranks";
  }
  if (state == "NODE_FAIL") return "a node of the job failed";
  if (state == "OUT_OF_MEMORY") return "a node ran out of memory";
  if (state == "PREEMPTED") return "the job was preempted by another job";
  if (state == "BOOT_FAIL") return "a node failed to boot";
  if (state == "DEADLINE") return "the job missed its deadline";
  return {};
}

}  // namespace

std::string Deployment::State::runLauncher(const std::string& remoteDir, const std::string& remoteExecutor,
                                           const std::string& remotePlan) {
  const DeployRequest& req = request();
  const HostsSpec& hosts = req.hosts;
  const bool slurm = hosts.launcher == Launcher::Slurm;
  SshSession& session = *sessions[0];
  const std::string runName = req.runId.empty() ? std::string("run") : req.runId;

  LauncherJob spec;
  spec.workDir = remoteDir + "/runs/" + runName;
  spec.jobName = "pipestudio-" + runName;
  spec.ranks = static_cast<int>(ranks.size());
  spec.cpusPerRank = req.backend == Backend::Cpu ? req.devices : 0;  // the CPU backend runs a thread per device
  spec.gpus = req.backend != Backend::Cpu;
  spec.executor = remoteExecutor;
  spec.executorArgs = {"--plan", remotePlan, "--backend", std::string(name(req.backend))};
  if (req.iterations > 0)
    spec.executorArgs.insert(spec.executorArgs.end(), {"--iterations", std::to_string(req.iterations)});
  if (!req.runId.empty()) spec.executorArgs.insert(spec.executorArgs.end(), {"--run-id", req.runId});
  spec.executorArgs.insert(spec.executorArgs.end(), req.executorArgs.begin(), req.executorArgs.end());
  spec.environment = req.environment;
  if (req.backend == Backend::Cuda && ranks.size() > 1) {
    spec.ncclRendezvous = spec.workDir + "/nccl-id";
    spec.ncclTimeoutS = std::max(1, req.ncclIdTimeoutMs / 1000);
  }
  if (auto mk = session.makeDirectories(spec.workDir); !mk) return mk.message();

  {
    std::lock_guard lock(mutex);
    if (slurm) job.launcher = name(Launcher::Slurm);
    for (auto& r : ranks) {
      setState(r, slurm ? RankState::Queued : RankState::Starting,
               slurm ? "submitted to slurm (" + hosts.slurm.submit + ")" : "starting under mpirun");
    }
    if (slurm) reportJob();
  }
  auto p = session.start(launcherCommand(hosts, spec, kLauncherGraceSeconds));
  if (!p) return p.message();
  RemoteProcess& launcher = **p;

  LauncherOutput output(slurm ? LauncherOutput::Tags::None : LauncherOutput::Tags::OpenMpi);
  std::string problem;      // malformed launcher lines (the first one)
  std::string launchError;  // why the job could not run
  bool lost = false;
  bool stopping = false;  // stdin closed: the watcher cancels the job
  std::optional<Clock::time_point> giveUpAt;
  std::optional<Clock::time_point> failedAt;
  Clock::time_point nextPoll = Clock::now();

  auto rankOf = [&](int rank) -> Rank* {
    return inRange(ranks, rank) ? &ranks[static_cast<std::size_t>(rank)] : nullptr;
  };
  auto handle = [&](std::vector<LauncherOutput::Item> items) {
    std::lock_guard lock(mutex);
    for (auto& item : items) {
      Rank* r = rankOf(item.rank);
      using Kind = LauncherOutput::Item::Kind;
      if (item.kind == Kind::Text && r == nullptr) {
        appendTail(launcherTail, item.bytes);
        owner.m_sink.onLauncherLog(item.bytes);
        continue;
      }
      if (r == nullptr || item.kind == Kind::Malformed) {
        const std::string what = item.kind == Kind::Malformed
                                     ? item.bytes
                                     : "a line for rank " + std::to_string(item.rank) + " of a job with " +
                                           std::to_string(ranks.size()) + " rank(s)";
        if (problem.empty()) problem = "malformed output from " + std::string(name(hosts.launcher)) + ": " + what;
        if (r != nullptr && r->result.streamProblem.empty()) r->result.streamProblem = problem;
        continue;
      }
      if (r->ended) continue;
      switch (item.kind) {
        case Kind::Stream:
          if (!r->streaming) setState(*r, RankState::Running, "running");
          ingestStream(*r, item.bytes);
          break;
        case Kind::Log:
        case Kind::Text:
          ingestLog(*r, item.bytes);
          break;
        case Kind::Exit:
          if (stopping) r->stdinClosed = true;
          rankEnded(*r, item.status);
          break;
        case Kind::Malformed:
          break;
      }
    }
  };

  // squeue: the job's state, shown while it waits; a reason that never clears ends the wait.
  bool runningSeen = false;
  auto pollJob = [&](bool final) {
    auto q = session.run(squeueCommand(spec.jobName), kSqueueTimeoutMs);
    if (!q || q->exitStatus != 0) return;
    auto s = parseSqueue(q->out);
    if (!s) return;
    std::lock_guard lock(mutex);
    const std::string reason = s->reason == "None" ? std::string() : s->reason;
    const bool changed =
        s->jobId != job.jobId || s->state != job.state || reason != job.reason || s->nodes != job.nodes;
    job.jobId = s->jobId;
    job.state = s->state;
    job.reason = reason;
    job.nodes = s->nodes;
    if (changed) reportJob();
    if (s->state == "PENDING") {
      for (auto& r : ranks) {
        if (!r.ended && !r.streaming) setState(r, RankState::Queued, slurmStateText(*s));
      }
      if (slurmReasonIsPermanent(s->reason) && !final && launchError.empty()) {
        launchError = "slurm job " + s->jobId + " cannot be scheduled: " + slurmStateText(*s) + ": " +
                      explainPermanentReason(s->reason) + ". Asked for " + std::to_string(spec.ranks) + " task(s)" +
                      (spec.cpusPerRank > 0 ? " of " + std::to_string(spec.cpusPerRank) + " CPU(s)" : std::string()) +
                      (hosts.slurm.partition.empty() ? std::string() : " in partition " + hosts.slurm.partition) +
                      (hosts.slurm.extraArgs.empty() ? std::string()
                                                     : " with extra_args " + joinShellWords(hosts.slurm.extraArgs)) +
                      "; the job was cancelled.";
      }
    } else if (s->state == "RUNNING" && !runningSeen) {
      runningSeen = true;
      for (auto& r : ranks) {
        if (!r.ended && !r.streaming) setState(r, RankState::Starting, "job running on " + s->nodes);
      }
    }
  };

  std::string out;
  std::string err;
  for (;;) {
    out.clear();
    err.clear();
    const Status polled = launcher.poll(out, err);
    if (!out.empty()) output.feed(out, false);
    if (!err.empty()) output.feed(err, true);
    handle(output.take());
    if (!polled) {
      lost = true;
      std::lock_guard lock(mutex);
      for (auto& r : ranks) {
        if (!r.ended) {
          r.ended = true;
          setState(r, RankState::Lost, polled.message());
        }
      }
      break;
    }
    if (launcher.ended()) break;
    if (auto alive = session.keepAlive(keepalive()); !alive) continue;  // the next poll reports it
    // squeue runs on the same connection and would block on a server that stopped answering.
    const bool answering = session.silenceMs() < keepalive().intervalMs;
    if (slurm && Clock::now() >= nextPoll && !stopping && answering) {
      pollJob(false);
      nextPoll = Clock::now() + (runningSeen ? std::chrono::milliseconds(kRunningPollInterval)
                                             : std::chrono::milliseconds(req.jobPollMs));
    }
    if (stopAll && !failedAt) failedAt = Clock::now();
    // Stop the job: cancelled, unschedulable, or a rank failed and the launcher did not end
    // the others within the grace time (srun --kill-on-bad-exit and mpirun normally do).
    const bool stopNow = cancelled() || !launchError.empty() ||
                         (failedAt && Clock::now() - *failedAt > std::chrono::milliseconds(req.cancelGraceMs));
    if (stopNow && !stopping) {
      stopping = true;
      launcher.closeStdin();
      giveUpAt =
          Clock::now() + std::chrono::milliseconds(req.cancelGraceMs) + std::chrono::seconds(kLauncherGraceSeconds);
    }
    if (giveUpAt && Clock::now() > *giveUpAt) break;
    if (out.empty() && err.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  output.finish();
  handle(output.take());

  const int launcherStatus = lost ? -1 : launcher.exitStatus();
  if (slurm && !lost) {
    // The job's final state (COMPLETED, FAILED, TIMEOUT, CANCELLED, …) once Slurm has it.
    const auto until = Clock::now() + kFinalStateWait;
    do {
      pollJob(true);
      if (slurmStateIsFinal(job.state)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    } while (Clock::now() < until);
  }
  std::lock_guard lock(mutex);
  const std::string jobText = slurm ? job.text() : "mpirun";
  for (auto& r : ranks) {
    if (r.ended) continue;
    r.ended = true;
    if (!launchError.empty()) {
      setState(r, RankState::Failed, "not started: " + slurmStateText({job.jobId, job.state, job.reason, job.nodes}));
    } else if (cancelled()) {
      setState(r, RankState::Cancelled, slurm ? "job cancelled (scancel)" : "stopped");
    } else if (firstFailedRank >= 0) {
      setState(r, RankState::Cancelled, "stopped after rank " + std::to_string(firstFailedRank) + " failed");
    } else {
      // No exit line from this rank: the scheduler or the launcher ended it (TIMEOUT, node
      // failure, a task that never started), or its relay could not run.
      r.result.exitStatus = launcherStatus;
      setState(r, RankState::Failed,
               "ended without reporting an exit status; " + jobText + ", launcher " +
                   (launcherStatus == -1 ? std::string("gave no exit status")
                                         : "exit status " + std::to_string(launcherStatus)));
      if (firstFailedRank < 0) firstFailedRank = r.placement.rank;
      const std::string tail = lastLines(launcherTail, 20);
      if (!tail.empty()) appendTail(r.result.stderrTail, tail + "\n");
    }
  }
  // Slurm ended the job for a reason of its own: that, not the ranks it stopped, is the story.
  if (launchError.empty() && !cancelled()) {
    if (const std::string why = explainEndState(job.state, hosts.slurm.time); slurm && !why.empty()) {
      launchError = job.text() + ": " + why;
      const std::string tail = lastLines(launcherTail, 10);
      if (!tail.empty()) launchError += "\nslurm:\n" + tail;
      return launchError;
    }
  }
  if (launchError.empty() && !problem.empty() && stopReason.empty()) stopReason = problem;
  if (!launchError.empty()) {
    const std::string tail = lastLines(launcherTail, 10);
    if (!tail.empty()) launchError += "\n" + std::string(name(hosts.launcher)) + ":\n" + tail;
  }
  return launchError;
}

}  // namespace pipestudio::remote
