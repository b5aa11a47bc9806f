#include "pipestudio/remote/Deploy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "pipestudio/remote/LaunchCommand.hpp"
#include "pipestudio/remote/ShellQuote.hpp"

namespace pipestudio::remote {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kStderrTailBytes = 64 * 1024;
constexpr auto kProgressInterval = std::chrono::milliseconds(100);

std::string baseName(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string toHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
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

// The last lines of a log, for one-paragraph messages.
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

}  // namespace

std::string_view rankStateName(RankState s) {
  switch (s) {
    case RankState::Connecting: return "connecting";
    case RankState::Connected: return "connected";
    case RankState::Uploading: return "uploading";
    case RankState::Starting: return "starting";
    case RankState::Running: return "running";
    case RankState::Finished: return "finished";
    case RankState::Failed: return "failed";
    case RankState::Lost: return "lost";
    case RankState::Cancelled: return "cancelled";
  }
  return "?";
}

std::string_view deployOutcomeName(DeployOutcome o) {
  switch (o) {
    case DeployOutcome::Complete: return "complete";
    case DeployOutcome::Failed: return "failed";
    case DeployOutcome::Incomplete: return "incomplete";
  }
  return "?";
}

// Everything one run() owns. Sessions are declared before ranks so that channels are freed
// before the sessions they belong to.
struct Deployment::State {
  struct Rank {
    RankPlacement placement;
    std::size_t session = 0;  // index into sessions
    std::unique_ptr<RemoteProcess> process;
    trace::StreamDecoder decoder;
    RankResult result;
    RankProgress progress;
    Clock::time_point lastReport{};
    bool ended = false;
    bool stdinClosed = false;
    std::string ncclIdHex;
  };

  Deployment& owner;
  std::mutex mutex;  // serialises sink and progress calls, and the fields below
  std::vector<std::unique_ptr<SshSession>> sessions;
  std::vector<Rank> ranks;
  std::string stopReason;  // why everything is being stopped (a rank failed, the sink failed)
  std::atomic<bool> stopAll{false};

  explicit State(Deployment& d) : owner(d) {}

  void report(Rank& r, bool force) {  // called with `mutex` held
    const auto now = Clock::now();
    if (!force && now - r.lastReport < kProgressInterval) return;
    r.lastReport = now;
    r.progress.events = r.result.events;
    if (owner.m_callbacks.progress) owner.m_callbacks.progress(r.progress);
  }

  void setState(Rank& r, RankState s, std::string message) {  // with `mutex` held
    r.progress.state = s;
    r.result.state = s;
    r.progress.message = std::move(message);
    report(r, true);
  }

  void stop(const std::string& reason) {
    std::lock_guard lock(mutex);
    if (stopReason.empty()) stopReason = reason;
    stopAll = true;
  }

  // Reads what arrived for one rank; true when anything did.
  bool pump(Rank& r) {
    std::string out;
    std::string err;
    const Status polled = r.process->poll(out, err);
    bool activity = !out.empty() || !err.empty();
    {
      std::lock_guard lock(mutex);
      if (!out.empty()) {
        if (auto st = owner.m_sink.onStreamBytes(r.placement.rank, out); !st) {
          if (stopReason.empty()) stopReason = "storing the trace of rank " + std::to_string(r.placement.rank) +
                                               " failed: " + st.message();
          stopAll = true;
        }
        r.decoder.feed(out);
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
          }
          owner.m_sink.onFrame(r.placement.rank, *frame);
        }
        if (r.decoder.error()) r.result.streamProblem = *r.decoder.error();
        report(r, false);
      }
      if (!err.empty()) {
        r.result.stderrTail += err;
        if (r.result.stderrTail.size() > kStderrTailBytes) {
          r.result.stderrTail.erase(0, r.result.stderrTail.size() - kStderrTailBytes);
        }
        owner.m_sink.onLog(r.placement.rank, err);
      }
      if (!polled) {
        r.ended = true;
        setState(r, RankState::Lost, polled.message());
        return true;
      }
    }
    if (r.process->ended()) {
      const int status = r.process->exitStatus();
      std::lock_guard lock(mutex);
      r.ended = true;
      r.result.exitStatus = status;
      if (r.decoder.pendingBytes() > 0 && r.result.streamProblem.empty()) {
        r.result.streamProblem = "stream truncated: " + std::to_string(r.decoder.pendingBytes()) + " trailing bytes";
      }
      if (r.stdinClosed && status != 0) {
        setState(r, RankState::Cancelled, "stopped");
      } else if (status == 0 && r.result.errorFrames.empty()) {
        setState(r, RankState::Finished, "exit status 0");
      } else {
        const std::string why = status == -1 ? "ended without an exit status"
                                             : "exit status " + std::to_string(status) +
                                                   (status > 128 ? " (signal " + std::to_string(status - 128) + ")" : "");
        setState(r, RankState::Failed, why);
        if (stopReason.empty()) stopReason = "rank " + std::to_string(r.placement.rank) + " failed";
        stopAll = true;  // the other ranks would wait for it forever
      }
      activity = true;
    }
    return activity;
  }

  // Polls every rank of one session until all have ended (one worker thread per session).
  void serve(std::size_t session, int cancelGraceMs) {
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
      if (owner.m_cancel || stopAll) {
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
};

Deployment::Deployment(DeployRequest request, DeployCallbacks callbacks, TraceSink& sink)
    : m_request(std::move(request)), m_callbacks(std::move(callbacks)), m_sink(sink) {}
Deployment::~Deployment() = default;

void Deployment::cancel() { m_cancel = true; }

Expected<DeployResult> Deployment::run() {
  const DeployRequest& req = m_request;
  // --- the request ---------------------------------------------------------------------
  if (req.backend != "cuda" && req.backend != "cuda-single" && req.backend != "cpu") {
    return Error{"backend '" + req.backend + "' (expected cuda, cuda-single or cpu)"};
  }
  if (req.hosts.hosts.empty()) return Error{"hosts: no hosts (expected at least one)"};
  if (req.hosts.launcher != "ssh" && req.hosts.launcher != "slurm" && req.hosts.launcher != "mpirun") {
    return Error{"hosts: launcher '" + req.hosts.launcher + "' (expected ssh, slurm or mpirun)"};
  }
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
  const bool launcher = req.hosts.launcher != "ssh";
  const int world = ranksForBackend(req.backend, req.devices);
  auto placements = placeRanks(req.hosts, world);
  if (!placements) return placements.error();

  State st(*this);
  // Which hosts take part (in order) and the rank rows for progress.
  std::vector<std::size_t> usedHosts;
  for (const auto& p : *placements) {
    if (launcher) break;
    if (std::find(usedHosts.begin(), usedHosts.end(), p.hostIndex) == usedHosts.end()) usedHosts.push_back(p.hostIndex);
  }
  if (launcher) usedHosts.push_back(0);  // the launcher runs on the first host (the login node)
  st.ranks.resize(placements->size());
  for (std::size_t i = 0; i < placements->size(); ++i) {
    auto& r = st.ranks[i];
    r.placement = (*placements)[i];
    const auto& h = req.hosts.hosts[r.placement.hostIndex];
    r.session = launcher ? 0 : static_cast<std::size_t>(
                                   std::find(usedHosts.begin(), usedHosts.end(), r.placement.hostIndex) - usedHosts.begin());
    r.result.rank = r.placement.rank;
    r.result.hostPort = h.host + ":" + std::to_string(h.port);
    r.progress.rank = r.placement.rank;
    r.progress.hostPort = r.result.hostPort;
    r.progress.iterations = req.iterations;
  }
  auto forRanksOf = [&](std::size_t session, RankState s, const std::string& message) {
    std::lock_guard lock(st.mutex);
    for (auto& r : st.ranks) {
      if (r.session == session) st.setState(r, s, message);
    }
  };
  auto cancelledError = [] { return Error{"deploy cancelled before any rank started"}; };

  // --- connect, upload -----------------------------------------------------------------
  std::vector<std::string> remoteExecutor(usedHosts.size());
  std::vector<std::string> remotePlan(usedHosts.size());
  std::vector<std::string> remoteDir(usedHosts.size());
  for (std::size_t s = 0; s < usedHosts.size(); ++s) {
    if (m_cancel) return cancelledError();
    const HostEntry& host = req.hosts.hosts[usedHosts[s]];
    forRanksOf(s, RankState::Connecting, "connecting");
    auto session = SshSession::connect(host, m_callbacks.session, req.connectTimeoutMs);
    if (!session) {
      forRanksOf(s, RankState::Failed, session.message());
      return session.error();
    }
    st.sessions.push_back(std::move(*session));
    forRanksOf(s, RankState::Connected, "host key " + st.sessions[s]->fingerprint());
  }
  for (std::size_t s = 0; s < usedHosts.size(); ++s) {
    if (m_cancel) return cancelledError();
    SshSession& session = *st.sessions[s];
    const HostEntry& host = req.hosts.hosts[usedHosts[s]];
    forRanksOf(s, RankState::Uploading, "uploading to " + host.remoteDir);
    auto dir = session.resolvePath(host.remoteDir);
    if (!dir) return dir.error();
    remoteDir[s] = *dir;
    if (auto mk = session.makeDirectories(*dir + "/plans"); !mk) return mk.error();
    remoteExecutor[s] = *dir + "/pipestudio-exec";
    remotePlan[s] = *dir + "/plans/" + baseName(req.planPath);
    auto upExec = session.upload(req.executorPath, remoteExecutor[s], 0755);
    if (!upExec) return upExec.error();
    auto upPlan = session.upload(req.planPath, remotePlan[s], 0644);
    if (!upPlan) return upPlan.error();
    forRanksOf(s, RankState::Uploading,
               std::string("executor ") + (*upExec == UploadAction::Skipped ? "up to date" : "uploaded") + ", plan " +
                   (*upPlan == UploadAction::Skipped ? "up to date" : "uploaded"));
  }
  if (m_cancel) return cancelledError();

  // --- launch --------------------------------------------------------------------------
  auto argsFor = [&](const State::Rank& r) {
    ExecutorArgs a;
    a.executor = remoteExecutor[r.session];
    a.plan = remotePlan[r.session];
    a.rank = r.placement.rank;
    a.world = world;
    a.backend = req.backend;
    a.iterations = req.iterations;
    a.localDevice = req.backend == "cuda" ? r.placement.localDevice : -1;
    return a;
  };
  auto fullArgv = [&](const ExecutorArgs& a) {
    std::vector<std::string> argv = executorArgv(a);
    if (!req.runId.empty()) argv.insert(argv.end(), {"--run-id", req.runId});
    argv.insert(argv.end(), req.executorArgs.begin(), req.executorArgs.end());
    if (!req.environment.empty()) {
      if (argv.front() != "env") argv.insert(argv.begin(), "env");
      argv.insert(argv.begin() + 1, req.environment.begin(), req.environment.end());
    }
    return argv;
  };
  if (auto started = m_sink.onStart(static_cast<int>(st.ranks.size())); !started) return started.error();

  DeployResult result;
  auto startRank = [&](State::Rank& r, const std::string& ncclIdHex) -> Status {
    ExecutorArgs a = argsFor(r);
    a.ncclIdHex = ncclIdHex;
    {
      std::lock_guard lock(st.mutex);
      st.setState(r, RankState::Starting, "starting on " + r.result.hostPort);
    }
    auto p = st.sessions[r.session]->start(watchdogCommand(remoteDir[r.session], fullArgv(a)));
    std::lock_guard lock(st.mutex);
    if (!p) {
      st.setState(r, RankState::Failed, p.message());
      r.ended = true;
      return p.error();
    }
    r.process = std::move(*p);
    st.setState(r, RankState::Running, "running");
    return Status{};
  };

  std::string launchError;
  if (launcher) {
    // One command on the login node starts every rank; the ranks write per-rank files that
    // are collected when the launcher ends (see LaunchCommand.hpp).
    const std::string workDir = remoteDir[0] + "/runs/" + (req.runId.empty() ? std::string("run") : req.runId);
    if (auto mk = st.sessions[0]->makeDirectories(workDir); !mk) return mk.error();
    ExecutorArgs a = argsFor(st.ranks[0]);
    const std::string line =
        req.hosts.launcher == "slurm" ? slurmCommand(req.hosts, workDir, a) : mpirunCommand(req.hosts, workDir, a);
    auto p = st.sessions[0]->start(watchdogCommand(workDir, {"sh", "-c", line}));
    if (!p) return p.error();
    forRanksOf(0, RankState::Running, "running under " + req.hosts.launcher);
    std::string out;
    std::string err;
    bool lost = false;
    std::optional<Clock::time_point> giveUpAt;
    while (!(*p)->ended()) {
      if (auto polled = (*p)->poll(out, err); !polled) {
        launchError = polled.message();
        lost = true;
        break;
      }
      if (m_cancel && !giveUpAt) {
        (*p)->closeStdin();
        giveUpAt = Clock::now() + std::chrono::milliseconds(req.cancelGraceMs);
      }
      if (giveUpAt && Clock::now() > *giveUpAt) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const int launcherStatus = lost ? -1 : (*p)->exitStatus();
    for (auto& r : st.ranks) {
      const std::string file = workDir + "/rank-" + std::to_string(r.placement.rank);
      if (!lost) {
        if (auto trace = st.sessions[0]->run("cat -- " + shellQuote(file + ".trace")); trace && trace->exitStatus == 0) {
          // Hand the collected stream over exactly as if it had been streamed.
          std::lock_guard lock(st.mutex);
          if (auto s = m_sink.onStreamBytes(r.placement.rank, trace->out); !s) launchError = s.message();
          r.decoder.feed(trace->out);
          while (auto frame = r.decoder.next()) {
            ++r.result.events;
            if (const auto* e = std::get_if<trace::ErrorReport>(&*frame)) r.result.errorFrames += e->message;
            if (const auto* s = std::get_if<trace::Summary>(&*frame)) {
              r.result.summarySeen = true;
              r.result.summaryOk = s->ok;
            }
            m_sink.onFrame(r.placement.rank, *frame);
          }
        }
        if (auto log = st.sessions[0]->run("cat -- " + shellQuote(file + ".log")); log && log->exitStatus == 0) {
          r.result.stderrTail = log->out.size() > kStderrTailBytes ? log->out.substr(log->out.size() - kStderrTailBytes)
                                                                   : log->out;
          std::lock_guard lock(st.mutex);
          m_sink.onLog(r.placement.rank, log->out);
        }
      }
      r.result.exitStatus = launcherStatus;
      std::lock_guard lock(st.mutex);
      st.setState(r,
                  lost ? RankState::Lost
                  : m_cancel ? RankState::Cancelled
                  : (launcherStatus == 0 && r.result.summaryOk) ? RankState::Finished
                                                                : RankState::Failed,
                  lost ? launchError : req.hosts.launcher + " exit status " + std::to_string(launcherStatus));
      r.ended = true;
    }
    if (!err.empty() && !st.ranks.empty()) st.ranks[0].result.stderrTail = err + st.ranks[0].result.stderrTail;
  } else {
    // cuda with several ranks: rank 0 creates the NCCL unique id and reports it on its stream
    // (DESIGN.md §4); the others start once it is known.
    const bool needsNcclId = req.backend == "cuda" && world > 1;
    if (auto s = startRank(st.ranks[0], ""); !s) launchError = s.message();
    std::string ncclId;
    if (launchError.empty() && needsNcclId) {
      const auto deadline = Clock::now() + std::chrono::milliseconds(req.ncclIdTimeoutMs);
      auto& r0 = st.ranks[0];
      while (r0.ncclIdHex.empty() && !r0.ended && !m_cancel && Clock::now() < deadline) {
        if (!st.pump(r0)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ncclId = r0.ncclIdHex;
      if (ncclId.empty() && !m_cancel) {
        launchError = r0.ended ? "rank 0 on " + r0.result.hostPort + " ended before reporting its NCCL id"
                               : "rank 0 on " + r0.result.hostPort + " did not report its NCCL id within " +
                                     std::to_string(req.ncclIdTimeoutMs) + " ms";
      }
    }
    for (std::size_t i = 1; i < st.ranks.size() && launchError.empty() && !m_cancel; ++i) {
      if (auto s = startRank(st.ranks[i], ncclId); !s) launchError = s.message();
    }
    if (!launchError.empty()) st.stop(launchError);
    for (auto& r : st.ranks) {  // never started: nothing to wait for
      if (!r.process && !r.ended) {
        std::lock_guard lock(st.mutex);
        r.ended = true;
        st.setState(r, RankState::Cancelled, "not started");
      }
    }
    // --- stream until every rank ended ---------------------------------------------------
    std::vector<std::thread> workers;
    for (std::size_t s = 1; s < st.sessions.size(); ++s) workers.emplace_back([&st, s, this] { st.serve(s, m_request.cancelGraceMs); });
    st.serve(0, req.cancelGraceMs);
    for (auto& t : workers) t.join();
  }

  // --- how it ended ----------------------------------------------------------------------
  result.cancelled = m_cancel;
  for (auto& r : st.ranks) result.ranks.push_back(r.result);
  std::string lostMsg;
  std::string failMsg;
  bool allComplete = true;
  for (const auto& r : st.ranks) {
    if (r.result.state == RankState::Lost && lostMsg.empty()) {
      lostMsg = "rank " + std::to_string(r.result.rank) + " on " + r.result.hostPort + ": " + r.progress.message;
    }
    if (r.result.state == RankState::Failed && failMsg.empty()) {
      failMsg = "rank " + std::to_string(r.result.rank) + " on " + r.result.hostPort + " failed (" + r.progress.message + ")";
      if (!r.result.errorFrames.empty()) failMsg += ": " + r.result.errorFrames;
      const std::string tail = lastLines(r.result.stderrTail, 20);
      if (!tail.empty()) failMsg += "\nstderr:\n" + tail;
    }
    allComplete = allComplete && r.result.state == RankState::Finished && r.result.summarySeen && r.result.summaryOk;
  }
  std::uint64_t events = 0;
  for (const auto& r : st.ranks) events += r.result.events;
  if (!lostMsg.empty()) {
    result.outcome = DeployOutcome::Incomplete;
    result.message = "connection lost: " + lostMsg + "; " + std::to_string(events) + " events received are kept";
  } else if (!failMsg.empty() || !launchError.empty()) {
    result.outcome = DeployOutcome::Failed;
    result.message = !failMsg.empty() ? failMsg : launchError;
  } else if (m_cancel) {
    result.outcome = DeployOutcome::Incomplete;
    result.message = "cancelled; " + std::to_string(events) + " events received are kept";
  } else if (!st.stopReason.empty()) {
    result.outcome = DeployOutcome::Failed;
    result.message = st.stopReason;
  } else if (allComplete) {
    result.outcome = DeployOutcome::Complete;
    result.message = std::to_string(st.ranks.size()) + " rank(s) finished, " + std::to_string(events) + " events";
  } else {
    result.outcome = DeployOutcome::Incomplete;
    result.message = "a rank ended without a complete trace stream";
    for (const auto& r : st.ranks) {
      if (!r.result.streamProblem.empty()) result.message += " (rank " + std::to_string(r.result.rank) + ": " + r.result.streamProblem + ")";
    }
  }
  return result;
}

Expected<ConnectionReport> testConnection(const HostEntry& host, const SessionCallbacks& callbacks, int connectTimeoutMs) {
  auto session = SshSession::connect(host, callbacks, connectTimeoutMs);
  if (!session) return session.error();
  ConnectionReport report{(*session)->hostPort(), (*session)->fingerprint(), ""};
  if (auto r = (*session)->run("uname -sm", 15000); r && r->exitStatus == 0) {
    report.system = r->out;
    while (!report.system.empty() && (report.system.back() == '\n' || report.system.back() == '\r')) report.system.pop_back();
  }
  return report;
}

}  // namespace pipestudio::remote
