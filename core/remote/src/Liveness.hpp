#pragma once
// Private: whether the SSH server still answers, in every phase of a session. libssh 0.10's
// blocking calls (authentication, opening a channel, every SFTP request, an exit status) wait
// without a timeout, and TCP keeps a connection to a frozen host open for many minutes (its
// kernel acknowledges every segment). So a watcher thread looks at the socket while such a call
// runs: when nothing at all has arrived from the server for the limit (TCP_INFO's time since
// data was last received, counted from when the call began), it shuts the socket down, the call
// returns with an error, and every later call on the session fails at once with the reason.
//
//     const SessionLiveness::Phase phase(liveness, "uploading /srv/ps/pipestudio-exec");
//     if (sftp_write(...) < 0) return Error{liveness.explain(im.sftpError("upload failed"))};
//
// Only the watcher thread and the syscalls getsockopt/shutdown touch the socket concurrently
// with libssh; libssh itself stays on the session's one thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace pipestudio::remote {

class SessionLiveness {
 public:
  using Clock = std::chrono::steady_clock;

  explicit SessionLiveness(std::string hostPort);
  ~SessionLiveness();
  SessionLiveness(const SessionLiveness&) = delete;
  SessionLiveness& operator=(const SessionLiveness&) = delete;

  /// The connected socket to watch, and how long a blocking call may hear nothing (the
  /// keepalive's interval × count; the connect timeout while authenticating), with the
  /// settings' names for the message.
  void watch(int fd);
  void setLimit(std::int64_t limitMs, std::string limitText);

  /// A blocking call in progress: the watcher gives up on the server while one is armed. Phases
  /// nest (an upload runs a checksum command); the innermost names the message.
  class Phase {
   public:
    Phase(SessionLiveness& liveness, std::string what);
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

   private:
    SessionLiveness& m_liveness;
    std::string m_previous;
    int m_previousDepth = 0;
  };
  /// A pause inside a phase while the user is asked something (a key's passphrase).
  class Pause {
   public:
    explicit Pause(SessionLiveness& liveness);
    ~Pause();
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    SessionLiveness& m_liveness;
    int m_depth = 0;
  };

  /// Why the session was given up ("host:port: connection lost: …"), empty while it is alive.
  std::string lostReason() const;
  /// Gives the session up: records `reason` (the first one stays) and shuts the socket down.
  void giveUp(const std::string& reason);
  /// `fallback` (libssh's message), or the reason the session was given up when it was.
  std::string explain(const std::string& fallback) const;
  /// Milliseconds since anything arrived from the server (0 when unknown).
  std::int64_t silenceMs() const;

 private:
  void run();
  void arm(std::string what, int depth);

  const std::string m_hostPort;
  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  int m_fd = -1;
  std::int64_t m_limitMs = 15000;
  std::string m_limitText = "server_alive_interval_s 5 x server_alive_count_max 3";
  int m_depth = 0;  // phases armed
  std::string m_phase;
  Clock::time_point m_armedAt{};
  std::string m_lostReason;
  bool m_stop = false;
  std::thread m_thread;
};

}  // namespace pipestudio::remote
