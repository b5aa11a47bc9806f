#pragma once
// Private: the libssh handles behind SshSession, shared with the deploy code that opens
// rank channels on the same connection.

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>

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

  ~Impl();
  /// "host:port: what: libssh's reason"
  std::string error(const std::string& what) const;
  std::string sftpError(const std::string& what) const;
  Status openSftp();
};

}  // namespace pipestudio::remote
