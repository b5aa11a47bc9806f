#pragma once
// Private: the libssh handles behind SshSession, shared with the deploy code that opens
// rank channels on the same connection.

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <chrono>
#include <optional>
#include <string>

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
  // Keepalive (SshSession::keepAlive): when the last probe went out, and why the session was
  // given up (empty while it is alive).
  std::chrono::steady_clock::time_point lastProbe{};
  std::string lostReason;

  ~Impl();
  /// "host:port: what: libssh's reason"
  std::string error(const std::string& what) const;
  std::string sftpError(const std::string& what) const;
  Status openSftp();
};

}  // namespace pipestudio::remote
