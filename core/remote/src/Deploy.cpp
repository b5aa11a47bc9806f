#include "pipestudio/remote/Deploy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <thread>

#include "DeployState.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/remote/LaunchCommand.hpp"
#include "pipestudio/remote/ShellQuote.hpp"

namespace pipestudio::remote {
namespace {

constexpr auto kProgressInterval = std::chrono::milliseconds(100);

std::string baseName(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string toHex(std::string_view bytes) {
  static constexpr std::string_view kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

bool validEnvironmentEntry(const std::string& e) {
  const auto eq = e.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  for (std::size_t i = 0; i < eq; ++i) {
    const char c = e[i];
    const bool ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string exitText(int status) {
  if (status == -1) return "ended without an exit status";
  return "exit status " + std::to_string(status) +
         (status > 128 ? " (signal " + std::to_string(status - 128) + ")" : "");
}

}  // namespace

std::string lastLines(const std::string& text, int lines) {
  std::size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) --end;
  std::size_t pos = end;
  for (int i = 0; i < lines && pos > 0; ++i) {
    const auto nl = text.rfind('\n', pos - 1);
    pos = nl == std::string::npos ? 0 : nl;
    if (nl == std::string::npos) break;
  }
  std::string out = text.substr(pos, end - pos);
  if (!out.empty() && out[0] == '\n') out.erase(0, 1);
  return out;
}

void appendTail(std::string& tail, std::string_view text) {
  tail.append(text);
  if (tail.size() > kStderrTailBytes) tail.erase(0, tail.size() - kStderrTailBytes);
}

std::string_view rankStateName(RankState s) {
  switch (s) {
    case RankState::Connecting:
      return "connecting";
    case RankState::Connected:
      return "connected";
    case RankState::Queued:
      return "queued";
    case RankState::Uploading:
      return "uploading";
    case RankState::Starting:
      return "starting";
    case RankState::Running:
      return "running";
    case RankState::Finished:
      return "finished";
    case RankState::Failed:
      return "failed";
    case RankState::Lost:
      return "lost";
    case RankState::Cancelled:
      return "cancelled";
  }
  return "?";
}

std::string JobProgress::text() const {
  std::string out = launcher + " job";
  if (!jobId.empty()) out += " " + jobId;
  if (state.empty()) return out + ": submitted";
  out += ": " + state;
  if (!reason.empty() && reason != "None") out += " (" + reason + ")";
  if (!nodes.empty() && (state == "RUNNING" || state == "COMPLETING")) out += " on " + nodes;
  return out;
}

// --- State: shared by both paths -----------------------------------------------------------

KeepaliveSettings Deployment::State::keepalive() const {
  const HostsSpec& h = request().hosts;
  return KeepaliveSettings{h.serverAliveIntervalS * 1000, h.serverAliveCountMax};
}

void Deployment::State::report(Rank& r, bool force) {
  const auto now = Clock::now();
  if (!force && now - r.lastReport < kProgressInterval) return;
  r.lastReport = now;
  r.progress.events = r.result.events;
  if (owner.m_callbacks.progress) owner.m_callbacks.progress(r.progress);
}

void Deployment::State::setState(Rank& r, RankState s, std::string message) {
  r.progress.state = s;
  r.result.state = s;
  r.progress.message = std::move(message);
  report(r, true);
}

void Deployment::State::reportJob() {
  if (owner.m_callbacks.job) owner.m_callbacks.job(job);
}

void Deployment::State::ingestStream(Rank& r, std::string_view bytes) {
  r.streaming = true;
  if (auto st = owner.m_sink.onStreamBytes(r.placement.rank, bytes); !st) {
    if (stopReason.empty()) {
      stopReason = "storing the trace of rank " + std::to_string(r.placement.rank) + " failed: " + st.message();
    }
    stopAll = true;
  }
  r.decoder.feed(bytes);
  while (auto frame = r.decoder.next()) {
    ++r.result.events;
    if (const auto* op = std::get_if<trace::OpRange>(&*frame); op != nullptr && !op->begin) {
      r.progress.iteration = std::max(r.progress.iteration, op->iteration + 1);
    } else if (const auto* e = std::get_if<trace::ErrorReport>(&*frame)) {
      if (!r.result.errorFrames.empty()) r.result.errorFrames += "; ";
      r.result.errorFrames += e->message;
    } else if (const auto* s = std::get_if<trace::Summary>(&*frame)) {
      r.result.summarySeen = true;
      r.result.summaryOk = s->ok;
      r.progress.iteration = std::max(r.progress.iteration, s->iterations);
    } else if (const auto* id = std::get_if<trace::NcclId>(&*frame)) {
      r.ncclIdHex = toHex(id->bytes);
    } else if (const auto* h = std::get_if<trace::Header>(&*frame); h != nullptr && r.progress.hostPort.empty()) {
      // Launcher jobs: the scheduler chose the node; the rank's header names it.
      r.progress.hostPort = h->host;
      r.result.hostPort = h->host;
    }
    owner.m_sink.onFrame(r.placement.rank, *frame);
  }
  if (r.decoder.error()) r.result.streamProblem = *r.decoder.error();
  report(r, false);
}

void Deployment::State::ingestLog(Rank& r, std::string_view bytes) {
  appendTail(r.result.stderrTail, bytes);
  owner.m_sink.onLog(r.placement.rank, bytes);
}

void Deployment::State::rankEnded(Rank& r, int status) {
  r.ended = true;
  r.result.exitStatus = status;
  if (r.decoder.pendingBytes() > 0 && r.result.streamProblem.empty()) {
    r.result.streamProblem = "stream truncated: " + std::to_string(r.decoder.pendingBytes()) + " trailing bytes";
  }
  const bool killed = status == 128 + 15 || status == 128 + 9;
  if ((r.stdinClosed || cancelled()) && status != 0) {
    setState(r, RankState::Cancelled, "stopped");
  } else if (status == 0 && r.result.errorFrames.empty()) {
    setState(r, RankState::Finished, "exit status 0");
  } else if (firstFailedRank >= 0 && killed) {
    // The launcher (or we) stopped it because another rank failed first.
    setState(r, RankState::Cancelled, "stopped after rank " + std::to_string(firstFailedRank) + " failed");
  } else {
    setState(r, RankState::Failed, exitText(status));
    if (firstFailedRank < 0) firstFailedRank = r.placement.rank;
    if (stopReason.empty()) stopReason = "rank " + std::to_string(r.placement.rank) + " failed";
    stopAll = true;  // the other ranks would wait for it forever
  }
}

void Deployment::State::stop(const std::string& reason) {
  std::lock_guard lock(mutex);
  if (stopReason.empty()) stopReason = reason;
  stopAll = true;
}

bool Deployment::State::pump(Rank& r) {
  std::string out;
  std::string err;
  const Status polled = r.process->poll(out, err);
  bool activity = !out.empty() || !err.empty();
  {
    std::lock_guard lock(mutex);
    if (!out.empty()) ingestStream(r, out);
    if (!err.empty()) ingestLog(r, err);
    if (!polled) {
      r.ended = true;
      setState(r, RankState::Lost, polled.message());
      return true;
    }
  }
  if (r.process->ended()) {
    const int status = r.process->exitStatus();
    std::lock_guard lock(mutex);
    rankEnded(r, status);
    activity = true;
  }
  return activity;
}

void Deployment::State::serve(std::size_t session) {
  const int cancelGraceMs = request().cancelGraceMs;
  std::optional<Clock::time_point> giveUpAt;
  for (;;) {
    bool allEnded = true;
    bool activity = false;
    for (auto& r : ranks) {
      if (r.session != session || r.ended) continue;
      activity = pump(r) || activity;
      allEnded = allEnded && r.ended;
    }
    if (allEnded) return;
    if (auto alive = sessions[session]->keepAlive(keepalive()); !alive) {
      std::lock_guard lock(mutex);
      for (auto& r : ranks) {
        if (r.session == session && !r.ended) {
          r.ended = true;
          setState(r, RankState::Lost, alive.message());
        }
      }
      return;
    }
    if (cancelled() || stopAll) {
      if (!giveUpAt) {
        giveUpAt = Clock::now() + std::chrono::milliseconds(cancelGraceMs);
        for (auto& r : ranks) {
          if (r.session == session && !r.ended && !r.stdinClosed) {
            r.stdinClosed = true;
            r.process->closeStdin();
          }
        }
      } else if (Clock::now() > *giveUpAt) {
        std::lock_guard lock(mutex);
        for (auto& r : ranks) {
          if (r.session == session && !r.ended) {
            r.ended = true;
            setState(r, RankState::Cancelled, "did not stop within " + std::to_string(cancelGraceMs) + " ms");
          }
        }
        return;
      }
    }
    if (!activity) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// --- Deployment ------------------------------------------------------------------------------

Deployment::Deployment(DeployRequest request, DeployCallbacks callbacks, TraceSink& sink)
    : m_request(std::move(request)), m_callbacks(std::move(callbacks)), m_sink(sink) {}
Deployment::~Deployment() = default;

void Deployment::cancel() { m_cancel = true; }

// --- connect, upload -------------------------------------------------------------------------

void Deployment::State::setSessionState(std::size_t session, RankState s, const std::string& message) {
  std::lock_guard lock(mutex);
  for (auto& r : ranks) {
    if (r.session == session) setState(r, s, message);
  }
}

Status Deployment::State::connectAndUpload(const std::vector<std::size_t>& usedHosts, RemotePaths& remote) {
  remote.executor.assign(usedHosts.size(), {});
  remote.plan.assign(usedHosts.size(), {});
  remote.dir.assign(usedHosts.size(), {});
  for (std::size_t s = 0; s < usedHosts.size(); ++s) {
    if (cancelled()) return Error{"deploy cancelled before any rank started"};
    const HostEntry& host = request().hosts.hosts[usedHosts[s]];
    setSessionState(s, RankState::Connecting, "connecting");
    auto session = SshSession::connect(host, owner.m_callbacks.session, request().connectTimeoutMs);
    if (!session) {
      setSessionState(s, RankState::Failed, session.message());
      return session.error();
    }
    sessions.push_back(std::move(*session));
    sessions.back()->setKeepalive(keepalive());  // every later phase notices a host that froze
    setSessionState(s, RankState::Connected, "host key " + sessions[s]->fingerprint());
  }
  for (std::size_t s = 0; s < usedHosts.size(); ++s) {
    if (cancelled()) return Error{"deploy cancelled before any rank started"};
    SshSession& session = *sessions[s];
    const HostEntry& host = request().hosts.hosts[usedHosts[s]];
    setSessionState(s, RankState::Uploading, "uploading to " + host.remoteDir);
    PS_ASSIGN_OR_RETURN(auto dir, session.resolvePath(host.remoteDir));
    remote.dir[s] = dir;
    PS_RETURN_IF_ERROR(session.makeDirectories(dir + "/plans"));
    remote.executor[s] = dir + "/pipestudio-exec";
    remote.plan[s] = dir + "/plans/" + baseName(request().planPath);
    PS_ASSIGN_OR_RETURN(auto upExec, session.upload(request().executorPath, remote.executor[s], 0755));
    PS_ASSIGN_OR_RETURN(auto upPlan, session.upload(request().planPath, remote.plan[s], 0644));
    setSessionState(s, RankState::Uploading,
                    std::string("executor ") + (upExec == UploadAction::Skipped ? "up to date" : "uploaded") +
                        ", plan " + (upPlan == UploadAction::Skipped ? "up to date" : "uploaded"));
  }
  if (cancelled()) return Error{"deploy cancelled before any rank started"};
  return {};
}

// --- launch (direct SSH) ---------------------------------------------------------------------

std::string Deployment::State::launchDirect(const RemotePaths& remote, int world) {
  std::string launchError;
  auto fullArgv = [&](const Rank& r, const std::string& ncclIdHex) {
    ExecutorArgs a;
    a.executor = remote.executor[r.session];
    a.plan = remote.plan[r.session];
    a.rank = r.placement.rank;
    a.world = world;
    a.backend = request().backend;
    a.iterations = request().iterations;
    a.ncclIdHex = ncclIdHex;
    a.localDevice = request().backend == Backend::Cuda ? r.placement.localDevice : -1;
    std::vector<std::string> argv = executorArgv(a);
    if (!request().runId.empty()) argv.insert(argv.end(), {"--run-id", request().runId});
    argv.insert(argv.end(), request().executorArgs.begin(), request().executorArgs.end());
    if (!request().environment.empty()) {
      if (argv.front() != "env") argv.insert(argv.begin(), "env");
      argv.insert(argv.begin() + 1, request().environment.begin(), request().environment.end());
    }
    return argv;
  };
  auto startRank = [&](Rank& r, const std::string& ncclIdHex) -> Status {
    {
      std::lock_guard lock(mutex);
      setState(r, RankState::Starting, "starting on " + r.result.hostPort);
    }
    auto p = sessions[r.session]->start(watchdogCommand(remote.dir[r.session], fullArgv(r, ncclIdHex)));
    std::lock_guard lock(mutex);
    if (!p) {
      setState(r, RankState::Failed, p.message());
      r.ended = true;
      return p.error();
    }
    r.process = std::move(*p);
    setState(r, RankState::Running, "running");
    return Status{};
  };
  // cuda with several ranks: rank 0 creates the NCCL unique id and reports it on its stream
  // (executor/README.md); the others start once it is known.
  const bool needsNcclId = request().backend == Backend::Cuda && world > 1;
  if (auto s = startRank(ranks[0], ""); !s) launchError = s.message();
  std::string ncclId;
  if (launchError.empty() && needsNcclId) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(request().ncclIdTimeoutMs);
    auto& r0 = ranks[0];
    while (r0.ncclIdHex.empty() && !r0.ended && !cancelled() && Clock::now() < deadline) {
      if (auto alive = sessions[r0.session]->keepAlive(keepalive()); !alive) {
        std::lock_guard lock(mutex);
        r0.ended = true;
        setState(r0, RankState::Lost, alive.message());
        break;
      }
      if (!pump(r0)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ncclId = r0.ncclIdHex;
    if (ncclId.empty() && !cancelled()) {
      launchError = r0.result.state == RankState::Lost ? r0.progress.message
                    : r0.ended ? "rank 0 on " + r0.result.hostPort + " ended before reporting its NCCL id"
                               : "rank 0 on " + r0.result.hostPort + " did not report its NCCL id within " +
                                     std::to_string(request().ncclIdTimeoutMs) + " ms";
    }
  }
  for (std::size_t i = 1; i < ranks.size() && launchError.empty() && !cancelled(); ++i) {
    if (auto s = startRank(ranks[i], ncclId); !s) launchError = s.message();
  }
  if (!launchError.empty()) stop(launchError);
  for (auto& r : ranks) {  // never started: nothing to wait for
    if (!r.process && !r.ended) {
      std::lock_guard lock(mutex);
      r.ended = true;
      setState(r, RankState::Cancelled, "not started");
    }
  }
  // Stream until every rank ended.
  std::vector<std::thread> workers;
  for (std::size_t s = 1; s < sessions.size(); ++s) workers.emplace_back([this, s] { serve(s); });
  serve(0);
  for (auto& t : workers) t.join();
  return launchError;
}

// --- how it ended ----------------------------------------------------------------------------

DeployResult Deployment::State::outcome(const std::string& launchError) const {
  DeployResult result;
  result.cancelled = cancelled();
  result.job = job;
  result.launcherLogTail = launcherTail;
  for (auto& r : ranks) result.ranks.push_back(r.result);
  std::string lostMsg;
  std::string failMsg;
  bool allComplete = true;
  auto failureOf = [&](const Rank& r) {
    std::string msg = "rank " + std::to_string(r.result.rank) +
                      (r.result.hostPort.empty() ? std::string() : " on " + r.result.hostPort) + " failed (" +
                      r.progress.message + ")";
    if (!r.result.errorFrames.empty()) msg += ": " + r.result.errorFrames;
    const std::string tail = lastLines(r.result.stderrTail, 20);
    if (!tail.empty()) msg += "\nstderr:\n" + tail;
    return msg;
  };
  for (const auto& r : ranks) {
    if (r.result.state == RankState::Lost && lostMsg.empty()) {
      lostMsg = "rank " + std::to_string(r.result.rank) +
                (r.result.hostPort.empty() ? std::string() : " on " + r.result.hostPort) + ": " + r.progress.message;
    }
    if (r.result.state == RankState::Failed && failMsg.empty()) failMsg = failureOf(r);
    allComplete = allComplete && r.result.state == RankState::Finished && r.result.summarySeen && r.result.summaryOk;
  }
  // The rank that failed first explains the others (a launcher stops them after it).
  if (inRange(ranks, firstFailedRank)) {
    failMsg = failureOf(ranks[static_cast<std::size_t>(firstFailedRank)]);
  }
  std::uint64_t events = 0;
  for (const auto& r : ranks) events += r.result.events;
  if (!lostMsg.empty()) {
    result.outcome = DeployOutcome::Incomplete;
    result.connectionLost = true;
    result.message = "connection lost: " + lostMsg + "; " + std::to_string(events) +
                     " events received are kept. Deploy again to reconnect once the host answers.";
  } else if (!launchError.empty()) {
    result.outcome = DeployOutcome::Failed;
    result.message = launchError;
  } else if (!failMsg.empty()) {
    result.outcome = DeployOutcome::Failed;
    result.message = failMsg;
  } else if (cancelled()) {
    result.outcome = DeployOutcome::Incomplete;
    result.message = "cancelled; " + std::to_string(events) + " events received are kept";
  } else if (!stopReason.empty()) {
    result.outcome = DeployOutcome::Failed;
    result.message = stopReason;
  } else if (allComplete) {
    result.outcome = DeployOutcome::Complete;
    result.message = std::to_string(ranks.size()) + " rank(s) finished, " + std::to_string(events) + " events";
  } else {
    result.outcome = DeployOutcome::Incomplete;
    result.message = "a rank ended without a complete trace stream";
    for (const auto& r : ranks) {
      if (!r.result.streamProblem.empty())
        result.message += " (rank " + std::to_string(r.result.rank) + ": " + r.result.streamProblem + ")";
    }
  }
  if (!job.launcher.empty() && !job.state.empty()) result.message += " [" + job.text() + "]";
  return result;
}

Expected<DeployResult> Deployment::run() {
  const DeployRequest& req = m_request;
  // --- the request ---------------------------------------------------------------------
  if (req.hosts.hosts.empty()) return Error{"hosts: no hosts (expected at least one)"};
  if (::access(req.executorPath.c_str(), R_OK) != 0) {
    return Error{req.executorPath + ": executor not found (build pipestudio-exec or pass its path)"};
  }
  if (::access(req.planPath.c_str(), R_OK) != 0) return Error{req.planPath + ": cannot read the plan"};
  for (const char c : req.runId) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
      return Error{"run id '" + req.runId + "' (expected letters, digits, '-' and '_')"};
    }
  }
  for (const auto& e : req.environment) {
    if (!validEnvironmentEntry(e)) return Error{"environment entry '" + e + "' (expected NAME=value)"};
  }
  if (req.devices < 1) return Error{"plan: " + std::to_string(req.devices) + " devices (expected at least 1)"};
  const bool launcher = req.hosts.launcher != Launcher::Ssh;
  const int world = ranksFor(req.backend, req.devices);
  std::vector<RankPlacement> placements;
  if (req.hosts.launcher == Launcher::Slurm) {
    // Slurm places the ranks; the hosts file names only the login node.
    for (int r = 0; r < world; ++r) placements.push_back(RankPlacement{r, 0, -1});
  } else {
    PS_ASSIGN_OR_RETURN(auto placed, placeRanks(req.hosts, world));
    placements = std::move(placed);
  }

  State st(*this);
  // Which hosts take part (in order) and the rank rows for progress.
  std::vector<std::size_t> usedHosts;
  for (const auto& p : placements) {
    if (launcher) break;
    if (std::find(usedHosts.begin(), usedHosts.end(), p.hostIndex) == usedHosts.end()) usedHosts.push_back(p.hostIndex);
  }
  if (launcher) usedHosts.push_back(0);  // the launcher runs on the first host (the login node)
  st.ranks.resize(placements.size());
  for (std::size_t i = 0; i < placements.size(); ++i) {
    auto& r = st.ranks[i];
    r.placement = placements[i];
    const auto& h = req.hosts.hosts[r.placement.hostIndex];
    r.session = launcher
                    ? 0
                    : static_cast<std::size_t>(std::find(usedHosts.begin(), usedHosts.end(), r.placement.hostIndex) -
                                               usedHosts.begin());
    r.result.rank = r.placement.rank;
    // Slurm: the node is known once the rank's header arrives.
    if (req.hosts.launcher != Launcher::Slurm) r.result.hostPort = h.host + ":" + std::to_string(h.port);
    r.progress.rank = r.placement.rank;
    r.progress.hostPort = r.result.hostPort;
    r.progress.iterations = req.iterations;
  }
  RemotePaths remote;
  PS_RETURN_IF_ERROR(st.connectAndUpload(usedHosts, remote));
  if (m_cancel) return Error{"deploy cancelled before any rank started"};

  // --- launch --------------------------------------------------------------------------
  PS_RETURN_IF_ERROR(m_sink.onStart(static_cast<int>(st.ranks.size())));
  const std::string launchError =
      launcher ? st.runLauncher(remote.dir[0], remote.executor[0], remote.plan[0]) : st.launchDirect(remote, world);
  return st.outcome(launchError);
}

Expected<ConnectionReport> testConnection(const HostEntry& host, const SessionCallbacks& callbacks,
                                          int connectTimeoutMs) {
  PS_ASSIGN_OR_RETURN(auto session, SshSession::connect(host, callbacks, connectTimeoutMs));
  ConnectionReport report{session->hostPort(), session->fingerprint(), ""};
  if (auto r = session->run("uname -sm", 15000); r && r->exitStatus == 0) {
    report.system = r->out;
    while (!report.system.empty() && (report.system.back() == '\n' || report.system.back() == '\r'))
      report.system.pop_back();
  }
  return report;
}

}  // namespace pipestudio::remote
