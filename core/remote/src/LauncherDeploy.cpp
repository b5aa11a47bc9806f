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

// What every rank of the job runs: the executor on the uploaded plan, in the run's directory.
LauncherJob launcherJob(const DeployRequest& req, std::size_t ranks, const std::string& remoteDir,
                        const std::string& remoteExecutor, const std::string& remotePlan) {
  const std::string runName = req.runId.empty() ? std::string("run") : req.runId;
  LauncherJob spec;
  spec.workDir = remoteDir + "/runs/" + runName;
  spec.jobName = "pipestudio-" + runName;
  spec.ranks = static_cast<int>(ranks);
  spec.cpusPerRank = req.backend == Backend::Cpu ? req.devices : 0;  // the CPU backend runs a thread per device
  spec.gpus = req.backend != Backend::Cpu;
  spec.executor = remoteExecutor;
  spec.executorArgs = {"--plan", remotePlan, "--backend", std::string(name(req.backend))};
  if (req.iterations > 0)
    spec.executorArgs.insert(spec.executorArgs.end(), {"--iterations", std::to_string(req.iterations)});
  if (!req.runId.empty()) spec.executorArgs.insert(spec.executorArgs.end(), {"--run-id", req.runId});
  spec.executorArgs.insert(spec.executorArgs.end(), req.executorArgs.begin(), req.executorArgs.end());
  spec.environment = req.environment;
  if (req.backend == Backend::Cuda && ranks > 1) {
    spec.ncclRendezvous = spec.workDir + "/nccl-id";
    spec.ncclTimeoutS = std::max(1, req.ncclIdTimeoutMs / 1000);
  }
  return spec;
}

}  // namespace

// One started launcher job: its merged output split per rank, Slurm's view of it, and why it
// stopped. The phases of runLauncher, in order: stream, awaitFinalState, endRanks, outcome.
struct Deployment::State::LauncherRun {
  LauncherRun(State& state, const LauncherJob& jobSpec, RemoteProcess& process)
      : s(state),
        req(state.request()),
        hosts(req.hosts),
        slurm(hosts.launcher == Launcher::Slurm),
        session(*state.sessions[0]),
        spec(jobSpec),
        launcher(process),
        output(slurm ? LauncherOutput::Tags::None : LauncherOutput::Tags::OpenMpi) {}

  // Launcher output items to their ranks; text of no rank to the launcher's log.
  void handle(std::vector<LauncherOutput::Item> items) {
    std::lock_guard lock(s.mutex);
    for (auto& item : items) handleItem(item);
  }

  void handleItem(LauncherOutput::Item& item) {
    Rank* r = inRange(s.ranks, item.rank) ? &s.ranks[static_cast<std::size_t>(item.rank)] : nullptr;
    using Kind = LauncherOutput::Item::Kind;
    if (item.kind == Kind::Text && r == nullptr) {
      appendTail(s.launcherTail, item.bytes);
      s.owner.m_sink.onLauncherLog(item.bytes);
      return;
    }
    if (r == nullptr || item.kind == Kind::Malformed) {
      const std::string what = item.kind == Kind::Malformed
                                   ? item.bytes
                                   : "a line for rank " + std::to_string(item.rank) + " of a job with " +
                                         std::to_string(s.ranks.size()) + " rank(s)";
      if (problem.empty()) problem = "malformed output from " + std::string(name(hosts.launcher)) + ": " + what;
      if (r != nullptr && r->result.streamProblem.empty()) r->result.streamProblem = problem;
      return;
    }
    if (r->ended) return;
    switch (item.kind) {
      case Kind::Stream:
        if (!r->streaming) s.setState(*r, RankState::Running, "running");
        s.ingestStream(*r, item.bytes);
        break;
      case Kind::Log:
      case Kind::Text:
        s.ingestLog(*r, item.bytes);
        break;
      case Kind::Exit:
        if (stopping) r->stdinClosed = true;
        s.rankEnded(*r, item.status);
        break;
      case Kind::Malformed:
        break;
    }
  }

  // squeue: the job's state, shown while it waits; a reason that never clears ends the wait.
  void pollJob(bool final) {
    auto q = session.run(squeueCommand(spec.jobName), kSqueueTimeoutMs);
    if (!q || q->exitStatus != 0) return;
    auto sq = parseSqueue(q->out);
    if (!sq) return;
    std::lock_guard lock(s.mutex);
    JobProgress& job = s.job;
    const std::string reason = sq->reason == "None" ? std::string() : sq->reason;
    const bool changed =
        sq->jobId != job.jobId || sq->state != job.state || reason != job.reason || sq->nodes != job.nodes;
    job.jobId = sq->jobId;
    job.state = sq->state;
    job.reason = reason;
    job.nodes = sq->nodes;
    if (changed) s.reportJob();
    if (sq->state == "PENDING") {
      for (auto& r : s.ranks) {
        if (!r.ended && !r.streaming) s.setState(r, RankState::Queued, slurmStateText(*sq));
      }
      if (slurmReasonIsPermanent(sq->reason) && !final && launchError.empty()) launchError = unschedulable(*sq);
    } else if (sq->state == "RUNNING" && !runningSeen) {
      runningSeen = true;
      for (auto& r : s.ranks) {
        if (!r.ended && !r.streaming) s.setState(r, RankState::Starting, "job running on " + sq->nodes);
      }
    }
  }

  std::string unschedulable(const SlurmJobState& sq) const {
    return "slurm job " + sq.jobId + " cannot be scheduled: " + slurmStateText(sq) + ": " +
           explainPermanentReason(sq.reason) + ". Asked for " + std::to_string(spec.ranks) + " task(s)" +
           (spec.cpusPerRank > 0 ? " of " + std::to_string(spec.cpusPerRank) + " CPU(s)" : std::string()) +
           (hosts.slurm.partition.empty() ? std::string() : " in partition " + hosts.slurm.partition) +
           (hosts.slurm.extraArgs.empty() ? std::string()
                                          : " with extra_args " + joinShellWords(hosts.slurm.extraArgs)) +
           "; the job was cancelled.";
  }

  // Reads the launcher until it ended, was lost, or was stopped and gave up.
  void stream() {
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
        std::lock_guard lock(s.mutex);
        for (auto& r : s.ranks) {
          if (!r.ended) {
            r.ended = true;
            s.setState(r, RankState::Lost, polled.message());
          }
        }
        break;
      }
      if (launcher.ended()) break;
      if (auto alive = session.keepAlive(s.keepalive()); !alive) continue;  // the next poll reports it
      // squeue runs on the same connection and would block on a server that stopped answering.
      const bool answering = session.silenceMs() < s.keepalive().intervalMs;
      if (slurm && Clock::now() >= nextPoll && !stopping && answering) {
        pollJob(false);
        nextPoll = Clock::now() + (runningSeen ? std::chrono::milliseconds(kRunningPollInterval)
                                               : std::chrono::milliseconds(req.jobPollMs));
      }
      if (s.stopAll && !failedAt) failedAt = Clock::now();
      stopIfDue();
      if (giveUpAt && Clock::now() > *giveUpAt) break;
      if (out.empty() && err.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    output.finish();
    handle(output.take());
  }

  // Stop the job: cancelled, unschedulable, or a rank failed and the launcher did not end the
  // others within the grace time (srun --kill-on-bad-exit and mpirun normally do).
  void stopIfDue() {
    const bool stopNow = s.cancelled() || !launchError.empty() ||
                         (failedAt && Clock::now() - *failedAt > std::chrono::milliseconds(req.cancelGraceMs));
    if (!stopNow || stopping) return;
    stopping = true;
    launcher.closeStdin();
    giveUpAt =
        Clock::now() + std::chrono::milliseconds(req.cancelGraceMs) + std::chrono::seconds(kLauncherGraceSeconds);
  }

  // The job's final state (COMPLETED, FAILED, TIMEOUT, CANCELLED, …) once Slurm has it.
  void awaitFinalState() {
    if (!slurm || lost) return;
    const auto until = Clock::now() + kFinalStateWait;
    do {
      pollJob(true);
      if (slurmStateIsFinal(s.job.state)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    } while (Clock::now() < until);
  }

  // Ranks that sent no exit line, with why they ended. With s.mutex held.
  void endRanks(int launcherStatus) {
    const JobProgress& job = s.job;
    const std::string jobText = slurm ? job.text() : "mpirun";
    for (auto& r : s.ranks) {
      if (r.ended) continue;
      r.ended = true;
      if (!launchError.empty()) {
        s.setState(r, RankState::Failed,
                   "not started: " + slurmStateText({job.jobId, job.state, job.reason, job.nodes}));
      } else if (s.cancelled()) {
        s.setState(r, RankState::Cancelled, slurm ? "job cancelled (scancel)" : "stopped");
      } else if (s.firstFailedRank >= 0) {
        s.setState(r, RankState::Cancelled, "stopped after rank " + std::to_string(s.firstFailedRank) + " failed");
      } else {
        // No exit line from this rank: the scheduler or the launcher ended it (TIMEOUT, node
        // failure, a task that never started), or its relay could not run.
        r.result.exitStatus = launcherStatus;
        s.setState(r, RankState::Failed,
                   "ended without reporting an exit status; " + jobText + ", launcher " +
                       (launcherStatus == -1 ? std::string("gave no exit status")
                                             : "exit status " + std::to_string(launcherStatus)));
        if (s.firstFailedRank < 0) s.firstFailedRank = r.placement.rank;
        const std::string tail = lastLines(s.launcherTail, 20);
        if (!tail.empty()) appendTail(r.result.stderrTail, tail + "\n");
      }
    }
  }

  // Why the job could not run (empty when it ran). With s.mutex held.
  std::string outcome() {
    // Slurm ended the job for a reason of its own: that, not the ranks it stopped, is the story.
    if (launchError.empty() && !s.cancelled()) {
      if (const std::string why = explainEndState(s.job.state, hosts.slurm.time); slurm && !why.empty()) {
        launchError = s.job.text() + ": " + why;
        const std::string tail = lastLines(s.launcherTail, 10);
        if (!tail.empty()) launchError += "\nslurm:\n" + tail;
        return launchError;
      }
    }
    if (launchError.empty() && !problem.empty() && s.stopReason.empty()) s.stopReason = problem;
    if (!launchError.empty()) {
      const std::string tail = lastLines(s.launcherTail, 10);
      if (!tail.empty()) launchError += "\n" + std::string(name(hosts.launcher)) + ":\n" + tail;
    }
    return launchError;
  }

  State& s;
  const DeployRequest& req;
  const HostsSpec& hosts;
  const bool slurm;
  SshSession& session;
  const LauncherJob& spec;
  RemoteProcess& launcher;
  LauncherOutput output;
  std::string problem;      // malformed launcher lines (the first one)
  std::string launchError;  // why the job could not run
  bool lost = false;
  bool stopping = false;  // stdin closed: the watcher cancels the job
  bool runningSeen = false;
  std::optional<Clock::time_point> giveUpAt;
  std::optional<Clock::time_point> failedAt;
  Clock::time_point nextPoll = Clock::now();
};

std::string Deployment::State::runLauncher(const std::string& remoteDir, const std::string& remoteExecutor,
                                           const std::string& remotePlan) {
  const DeployRequest& req = request();
  const HostsSpec& hosts = req.hosts;
  const bool slurm = hosts.launcher == Launcher::Slurm;
  SshSession& session = *sessions[0];
  const LauncherJob spec = launcherJob(req, ranks.size(), remoteDir, remoteExecutor, remotePlan);
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
  LauncherRun run(*this, spec, **p);
  run.stream();
  const int launcherStatus = run.lost ? -1 : run.launcher.exitStatus();
  run.awaitFinalState();
  std::lock_guard lock(mutex);
  run.endRanks(launcherStatus);
  return run.outcome();
}

}  // namespace pipestudio::remote
