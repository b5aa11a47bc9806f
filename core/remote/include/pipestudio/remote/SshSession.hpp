#pragma once
/// \file One authenticated SSH connection to one host (libssh 0.10): strict known_hosts
/// checking, agent or identity-file authentication, commands, SFTP upload with checksum
/// skip (docs/clusters-and-deploy.md). Qt-free; every message names host:port.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/model/Hosts.hpp"

namespace pipestudio::remote {

/// What the user is shown on first contact with a host.
struct HostKeyPrompt {
  std::string hostPort;           ///< "node1:22"
  std::string keyType;            ///< "ssh-ed25519"
  std::string fingerprintSha256;  ///< "SHA256:…" (as ssh-keygen -l prints it)
  std::string knownHostsFile;     ///< where an accepted key is saved
};

enum class HostKeyDecision {
  Reject,         ///< do not connect
  AcceptOnce,     ///< connect, do not remember the key
  AcceptAndSave,  ///< connect and append the key to knownHostsFile
};

/// Decisions the library cannot take alone. Both may be empty: an unknown host is then
/// refused and an encrypted key cannot be used. They are called on the thread that connects.
struct SessionCallbacks {
  std::function<HostKeyDecision(const HostKeyPrompt&)> unknownHostKey;
  /// Asked at most once per session for an encrypted identity file; `prompt` names the key
  /// and the host. nullopt = the user declined. The passphrase is never stored.
  std::function<std::optional<std::string>(const std::string& prompt)> passphrase;
};

struct CommandResult {
  int exitStatus = -1;  ///< -1 when the remote side sent none (killed, connection lost)
  std::string out;
  std::string err;
};

enum class UploadAction { Uploaded, Skipped };

/// OpenSSH's ServerAliveInterval / ServerAliveCountMax for SshSession::keepAlive().
struct KeepaliveSettings {
  int intervalMs = 5000;
  int countMax = 3;
};

class SessionLiveness;

/// A command running on an exec channel, read without blocking. Owned by the thread that
/// polls it; the SshSession it came from must outlive it and must not be used by another
/// thread at the same time (libssh sessions are not thread-safe).
class RemoteProcess {
 public:
  ~RemoteProcess();
  RemoteProcess(const RemoteProcess&) = delete;
  RemoteProcess& operator=(const RemoteProcess&) = delete;

  /// Appends whatever has arrived on stdout / stderr, never blocks. Error (naming the host)
  /// when the connection is lost.
  Status poll(std::string& out, std::string& err);
  /// The remote side sent EOF and nothing is left to read.
  bool ended() const;
  /// After ended(): the exit status, or -1 when the remote side sent none. Under
  /// watchdogCommand() a rank killed by signal n reports 128 + n (sh's convention).
  int exitStatus();
  /// Sends EOF on the process's stdin: under watchdogCommand() the rank is stopped.
  void closeStdin();

 private:
  friend class SshSession;
  RemoteProcess(void* channel, std::string hostPort, SessionLiveness* liveness)
      : m_channel(channel), m_hostPort(std::move(hostPort)), m_liveness(liveness) {}
  void* m_channel;  // ssh_channel, kept opaque so libssh stays out of this header
  std::string m_hostPort;
  SessionLiveness* m_liveness;  // the session's: why it was given up, and the watch over blocking calls
  bool m_stdinClosed = false;
};

class SshSession {
 public:
  /// Connects, verifies the host key and authenticates. `connectTimeoutMs` bounds the TCP
  /// connect, the key exchange and authentication (the user's answers to the callbacks apart).
  /// From then on every call that waits for the server (commands, SFTP, channels, exit statuses)
  /// gives up when nothing arrives for the keepalive's interval × count (setKeepalive; 5 s × 3
  /// by default), naming what it was doing: a frozen host is noticed in every phase.
  static Expected<std::unique_ptr<SshSession>> connect(const HostEntry& host, const SessionCallbacks& callbacks,
                                                       int connectTimeoutMs = 10000);
  ~SshSession();
  SshSession(const SshSession&) = delete;
  SshSession& operator=(const SshSession&) = delete;

  const std::string& hostPort() const;
  /// The server's host key fingerprint (SHA256:…) seen at connect.
  const std::string& fingerprint() const;

  /// Runs `command` through the remote user's shell, collects stdout/stderr (each capped at
  /// 16 MiB), gives up after `timeoutMs`.
  Expected<CommandResult> run(const std::string& command, int timeoutMs = 60000);

  /// Starts `command` on a new exec channel and returns at once; stdin stays open until
  /// RemoteProcess::closeStdin() or the session ends (the watchdog's trigger).
  Expected<std::unique_ptr<RemoteProcess>> start(const std::string& command);

  /// `~` and `~/x` resolved against the remote home directory (SFTP realpath), other paths
  /// unchanged.
  Expected<std::string> resolvePath(const std::string& path);
  /// mkdir -p over SFTP.
  Status makeDirectories(const std::string& absolutePath);
  /// Lower-case hex SHA-256 of a remote file (`sha256sum` over an exec channel); nullopt
  /// when the file is missing or sha256sum is unavailable.
  std::optional<std::string> remoteSha256(const std::string& absolutePath);
  /// Uploads `localPath` to `remotePath` unless the remote checksum already matches; writes
  /// to a temporary name and renames (a running executor keeps its file), sets `mode`, and
  /// verifies the checksum afterwards where sha256sum exists.
  Expected<UploadAction> upload(const std::string& localPath, const std::string& remotePath, int mode);

  /// OpenSSH's ServerAliveInterval / ServerAliveCountMax for every blocking call of the session.
  void setKeepalive(const KeepaliveSettings& settings);

  /// Call every poll round while processes run: sends a keepalive@openssh.com request
  /// (which a live server must answer, RFC 4254 §4) once `intervalMs` passed since the last,
  /// without blocking, and reports the connection lost when nothing at all has arrived from
  /// the server for intervalMs × countMax (the kernel's time since data was last received,
  /// TCP_INFO). A silent partition — a dead switch, a frozen node — is noticed in seconds,
  /// not at TCP's timeout of many minutes. After an error the connection is shut down: every
  /// later call on this session and on its processes fails at once, naming the reason.
  Status keepAlive(const KeepaliveSettings& settings);
  /// Milliseconds since anything arrived from the server (0 when unknown): callers skip
  /// blocking requests while the server is not answering, so keepAlive() keeps its pace.
  std::int64_t silenceMs() const;

  struct Impl;
  Impl& impl() { return *m_impl; }

 private:
  explicit SshSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace pipestudio::remote
