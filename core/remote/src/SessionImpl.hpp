#pragma once
// Private: the libssh handles behind SshSession, shared with the deploy code that opens
// rank channels on the same connection.

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "Liveness.hpp"
#include "pipestudio/remote/SshSession.hpp"

namespace pipestudio::remote {

struct SshSession::Impl {
  ssh_session session = nullptr;
  sftp_session sftp = nullptr;
  std::string hostPort;
  std::string fingerprint;
  SessionCallbacks callbacks;
  // Asked once per session (issue 8); cleared when authentication is over.
  std::optional<std::string> passphrase;
  bool passphraseAsked = false;
  ssh_callbacks_struct sshCallbacks{};
  // Whether the server answers, in every phase (Liveness.hpp); made at connect, stopped before
  // the socket is closed.
  std::unique_ptr<SessionLiveness> liveness;
  KeepaliveSettings keepalive;
  // Keepalive probes (SshSession::keepAlive, and long commands): when the last went out, and
  // since when probes have gone out without a pause.
  std::chrono::steady_clock::time_point lastProbe{};
  std::chrono::steady_clock::time_point probingSince{};

  ~Impl();
  /// "host:port: what: libssh's reason", or why the session was given up when it was.
  std::string error(const std::string& what) const;
  std::string sftpError(const std::string& what) const;
  Status openSftp();
  /// Sends a keepalive request once the interval has passed since the last (never blocks): a
  /// live server answers it, so a long silent command does not look like a frozen host.
  void probe();
};

}  // namespace pipestudio::remote
