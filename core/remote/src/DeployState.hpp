#pragma once
// Private: everything one Deployment::run() owns, shared by the direct-SSH path (Deploy.cpp)
// and the Slurm / mpirun path (LauncherDeploy.cpp).

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipestudio/remote/Deploy.hpp"
#include "pipestudio/remote/LaunchCommand.hpp"

namespace pipestudio::remote {

using Clock = std::chrono::steady_clock;
inline constexpr std::size_t kStderrTailBytes = std::size_t{64} * 1024;

/// The last lines of a log, for one-paragraph messages.
std::string lastLines(const std::string& text, int lines);
/// Keeps at most kStderrTailBytes of `tail` after appending `text`.
void appendTail(std::string& tail, std::string_view text);

/// Where each session's executor, plan and working directory are on its host.
struct RemotePaths {
  std::vector<std::string> executor;
  std::vector<std::string> plan;
  std::vector<std::string> dir;
};

// Sessions are declared before ranks so that channels are freed before the sessions they
// belong to.
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
    bool streaming = false;  // bytes of its stream have arrived
    std::string ncclIdHex;
  };

  Deployment& owner;
  std::mutex mutex;  // serialises sink and progress calls, and the fields below
  std::vector<std::unique_ptr<SshSession>> sessions;
  std::vector<Rank> ranks;
  std::string stopReason;  // why everything is being stopped (a rank failed, the sink failed)
  int firstFailedRank = -1;
  std::atomic<bool> stopAll{false};
  JobProgress job;
  std::string launcherTail;

  explicit State(Deployment& d) : owner(d) {}

  const DeployRequest& request() const { return owner.m_request; }
  bool cancelled() const { return owner.m_cancel.load(); }
  KeepaliveSettings keepalive() const;

  // With `mutex` held:
  void report(Rank& r, bool force);
  void setState(Rank& r, RankState s, std::string message);
  void reportJob();
  /// Stream bytes of a rank, in order: to the sink, through the decoder, into its progress.
  void ingestStream(Rank& r, std::string_view bytes);
  /// stderr bytes of a rank.
  void ingestLog(Rank& r, std::string_view bytes);
  /// The rank's executor ended with `status` (-1: none): Finished, Failed or Cancelled.
  void rankEnded(Rank& r, int status);

  void stop(const std::string& reason);

  // The phases of Deployment::run (Deploy.cpp), in order:
  /// Progress of every rank of one session (takes `mutex`).
  void setSessionState(std::size_t session, RankState s, const std::string& message);
  /// Connects to every used host (session i: usedHosts[i]) and uploads executor and plan.
  Status connectAndUpload(const std::vector<std::size_t>& usedHosts, RemotePaths& remote);
  /// Direct SSH: starts every rank (rank 0 first when the others need its NCCL id) and
  /// streams until all ended. Returns why the launch failed (empty when every rank started).
  std::string launchDirect(const RemotePaths& remote, int world);
  /// The result once every rank ended.
  DeployResult outcome(const std::string& launchError) const;
  /// Direct SSH: reads what arrived for one rank; true when anything did.
  bool pump(Rank& r);
  /// Direct SSH: polls every rank of one session until all have ended (one thread each).
  void serve(std::size_t session);

  /// launcher slurm|mpirun: runs the job from session 0 and streams every rank until it
  /// ended. Returns why the job could not run (empty when it ran).
  std::string runLauncher(const std::string& remoteDir, const std::string& remoteExecutor,
                          const std::string& remotePlan);
  /// One started launcher job, phase by phase (LauncherDeploy.cpp).
  struct LauncherRun;
};

}  // namespace pipestudio::remote
