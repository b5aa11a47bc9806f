#include "pipestudio/remote/SshSession.hpp"

#include <fcntl.h>
#include <libssh/server.h>  // ssh_send_keepalive (a client may send it too)
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "SessionImpl.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/remote/Sha256.hpp"
#include "pipestudio/remote/ShellQuote.hpp"

namespace pipestudio::remote {
namespace {

constexpr std::size_t kMaxCommandOutputBytes = std::size_t{16} << 20;

// "server_alive_interval_s 5 x server_alive_count_max 3", as the hosts file names the settings.
std::string keepaliveText(const KeepaliveSettings& k) {
  std::array<char, 32> interval{};
  std::snprintf(interval.data(), interval.size(), "%g", k.intervalMs / 1000.0);
  return std::string("server_alive_interval_s ") + interval.data() + " x server_alive_count_max " +
         std::to_string(k.countMax);
}

std::string localUserName() {
  if (const passwd* pw = getpwuid(geteuid()); pw != nullptr && pw->pw_name != nullptr) return pw->pw_name;
  if (const char* u = std::getenv("USER")) return u;
  return "root";
}

std::string localHome() {
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return h;
  if (const passwd* pw = getpwuid(geteuid()); pw != nullptr && pw->pw_dir != nullptr) return pw->pw_dir;
  return "/";
}

std::string expandLocalTilde(const std::string& path) {
  if (path == "~") return localHome();
  if (path.rfind("~/", 0) == 0) return localHome() + path.substr(1);
  return path;
}

// "SHA256:base64" as ssh-keygen -l prints it.
std::string fingerprintOf(ssh_key key) {
  unsigned char* hash = nullptr;
  std::size_t hashLen = 0;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hashLen) != SSH_OK) return "SHA256:?";
  char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hashLen);
  ssh_clean_pubkey_hash(&hash);
  std::string out = text != nullptr ? text : "SHA256:?";
  ssh_string_free_char(text);
  return out;
}

// The name known_hosts files use for a host: "host" on port 22, "[host]:port" otherwise.
std::string knownHostsName(const HostEntry& h) {
  return h.port == 22 ? h.host : "[" + h.host + "]:" + std::to_string(h.port);
}

// Fingerprints of the keys known_hosts holds for this host (for the "changed" message).
std::vector<std::string> storedFingerprints(const std::string& file, const HostEntry& h) {
  std::vector<std::string> out;
  std::ifstream in(file);
  std::string line;
  const std::string name = knownHostsName(h);
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ssh_knownhosts_entry* entry = nullptr;
    if (ssh_known_hosts_parse_line(name.c_str(), line.c_str(), &entry) == SSH_OK && entry != nullptr) {
      if (entry->publickey != nullptr) {
        out.push_back(std::string(ssh_key_type_to_char(ssh_key_type(entry->publickey))) + " " +
                      fingerprintOf(entry->publickey));
      }
    }
    ssh_knownhosts_entry_free(entry);
  }
  return out;
}

// libssh asks for key passphrases through this (ssh_auth_callback); we ask the user once
// per session and keep the answer only until authentication is over.
int authCallback(const char* /*prompt*/, char* buf, std::size_t len, int /*echo*/, int /*verify*/, void* userdata) {
  auto* impl = static_cast<SshSession::Impl*>(userdata);
  if (!impl->passphraseAsked) {
    impl->passphraseAsked = true;
    if (impl->callbacks.passphrase) {
      const SessionLiveness::Pause userTime(*impl->liveness);
      impl->passphrase = impl->callbacks.passphrase("Passphrase for the SSH key used to log in to " + impl->hostPort);
    }
  }
  if (!impl->passphrase || impl->passphrase->size() + 1 > len) return -1;
  std::memcpy(buf, impl->passphrase->c_str(), impl->passphrase->size() + 1);
  return 0;
}

Status verifyHostKey(SshSession::Impl& impl, const HostEntry& host, const std::string& knownHostsFile,
                     const SessionCallbacks& callbacks) {
  ssh_key serverKey = nullptr;
  if (ssh_get_server_publickey(impl.session, &serverKey) != SSH_OK) {
    return Error{impl.error("cannot read the server's host key")};
  }
  impl.fingerprint = fingerprintOf(serverKey);
  const std::string keyType = ssh_key_type_to_char(ssh_key_type(serverKey));
  ssh_key_free(serverKey);

  switch (ssh_session_is_known_server(impl.session)) {
    case SSH_KNOWN_HOSTS_OK:
      return Status{};
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER: {
      std::string stored;
      for (const auto& f : storedFingerprints(knownHostsFile, host)) stored += (stored.empty() ? "" : ", ") + f;
      if (stored.empty()) stored = "(see the file)";
      return Error{impl.hostPort + ": the host key has CHANGED, refusing to connect (possible man-in-the-middle). " +
                   knownHostsFile + " has " + stored + "; the server offered " + keyType + " " + impl.fingerprint +
                   ". If the host was reinstalled, remove the old entry (ssh-keygen -R '" + knownHostsName(host) +
                   "' -f " + knownHostsFile + ") and connect again."};
    }
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN: {
      const HostKeyPrompt prompt{impl.hostPort, keyType, impl.fingerprint, knownHostsFile};
      const HostKeyDecision d = callbacks.unknownHostKey ? callbacks.unknownHostKey(prompt) : HostKeyDecision::Reject;
      if (d == HostKeyDecision::Reject) {
        return Error{impl.hostPort + ": unknown host key " + keyType + " " + impl.fingerprint + " (not in " +
                     knownHostsFile +
                     "); refused. Check the fingerprint and accept it (GUI) or pass "
                     "--accept-new-host-keys (CLI)."};
      }
      if (d == HostKeyDecision::AcceptAndSave && ssh_session_update_known_hosts(impl.session) != SSH_OK) {
        return Error{impl.error("cannot add the host key to " + knownHostsFile)};
      }
      return Status{};
    }
    case SSH_KNOWN_HOSTS_ERROR:
    default:
      return Error{impl.error("cannot check the host key against " + knownHostsFile)};
  }
}

Status authenticate(SshSession::Impl& impl, const HostEntry& host, const std::string& user) {
  const std::string who = "user '" + user + "' at " + impl.hostPort;
  if (!host.identityFile.empty()) {
    const std::string path = expandLocalTilde(host.identityFile);
    if (::access(path.c_str(), R_OK) != 0) {
      return Error{impl.hostPort + ": identity file " + path + " cannot be read: " + std::strerror(errno)};
    }
    // Offer the public half first where it exists: no passphrase prompt for a key the
    // server would refuse anyway.
    ssh_key pub = nullptr;
    if (ssh_pki_import_pubkey_file((path + ".pub").c_str(), &pub) == SSH_OK) {
      const int offered = ssh_userauth_try_publickey(impl.session, nullptr, pub);
      ssh_key_free(pub);
      if (offered == SSH_AUTH_DENIED) {
        return Error{impl.hostPort + ": authentication failed for " + who + ": the server does not accept the key " +
                     path};
      }
      if (offered == SSH_AUTH_ERROR) return Error{impl.error("authentication error for " + who)};
    }
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, &authCallback, &impl, &key) != SSH_OK) {
      return Error{impl.hostPort + ": cannot load identity file " + path +
                   (impl.passphraseAsked ? " (wrong or no passphrase given)" : " (not a private key?)")};
    }
    const int rc = ssh_userauth_publickey(impl.session, nullptr, key);
    ssh_key_free(key);
    if (rc == SSH_AUTH_SUCCESS) return Status{};
    if (rc == SSH_AUTH_ERROR) return Error{impl.error("authentication error for " + who)};
    return Error{impl.hostPort + ": authentication failed for " + who + " with identity file " + path};
  }
  if (const char* sock = std::getenv("SSH_AUTH_SOCK"); sock != nullptr && *sock != '\0') {
    if (ssh_userauth_agent(impl.session, nullptr) == SSH_AUTH_SUCCESS) return Status{};
  }
  const int rc = ssh_userauth_publickey_auto(impl.session, nullptr, nullptr);
  if (rc == SSH_AUTH_SUCCESS) return Status{};
  if (rc == SSH_AUTH_ERROR) return Error{impl.error("authentication error for " + who)};
  return Error{impl.hostPort + ": authentication failed for " + who +
               " (tried ssh-agent and the default keys in ~/.ssh; set identity_file in the hosts file)"};
}

}  // namespace

SshSession::Impl::~Impl() {
  liveness.reset();  // the watcher stops before the socket it watches is closed
  if (sftp != nullptr) sftp_free(sftp);
  if (session != nullptr) {
    if (ssh_is_connected(session) != 0) ssh_disconnect(session);
    ssh_free(session);
  }
}

std::string SshSession::Impl::error(const std::string& what) const {
  const char* reason = session != nullptr ? ssh_get_error(session) : "";
  const std::string text =
      hostPort + ": " + what + (reason != nullptr && *reason != '\0' ? std::string(": ") + reason : "");
  return liveness ? liveness->explain(text) : text;
}

void SshSession::Impl::probe() {
  const auto now = std::chrono::steady_clock::now();
  if (now - lastProbe < std::chrono::milliseconds(keepalive.intervalMs)) return;
  // Probing (re)starts after a pause: silence before it is not the server's.
  if (now - lastProbe > 2 * std::chrono::milliseconds(keepalive.intervalMs)) probingSince = now;
  lastProbe = now;
  // Non-blocking, so a silent server cannot stall the caller. libssh keeps one global request in
  // flight: the first call collects the previous answer, the second sends the next probe once
  // that answer is in.
  ssh_set_blocking(session, 0);
  ssh_send_keepalive(session);
  ssh_send_keepalive(session);
  ssh_set_blocking(session, 1);
}

std::string SshSession::Impl::sftpError(const std::string& what) const {
  const int code = sftp != nullptr ? sftp_get_error(sftp) : 0;
  static const std::array<const char*, 9> kNames = {
      "ok",          "end of file",   "no such file",    "permission denied",    "failure",
      "bad message", "no connection", "connection lost", "operation unsupported"};
  const std::string reason = code >= 0 && code < static_cast<int>(kNames.size())
                                 ? kNames[static_cast<std::size_t>(code)]
                                 : "SFTP error " + std::to_string(code);
  return liveness->explain(hostPort + ": " + what + ": " + reason);
}

Status SshSession::Impl::openSftp() {
  if (sftp != nullptr) return Status{};
  sftp = sftp_new(session);
  if (sftp == nullptr) return Error{error("cannot start SFTP")};
  if (sftp_init(sftp) != SSH_OK) {
    sftp_free(sftp);
    sftp = nullptr;
    return Error{error("cannot start SFTP (is the sftp subsystem enabled in sshd_config?)")};
  }
  return Status{};
}

SshSession::SshSession(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
SshSession::~SshSession() = default;

const std::string& SshSession::hostPort() const { return m_impl->hostPort; }
const std::string& SshSession::fingerprint() const { return m_impl->fingerprint; }

Expected<std::unique_ptr<SshSession>> SshSession::connect(const HostEntry& host, const SessionCallbacks& callbacks,
                                                          int connectTimeoutMs) {
  auto impl = std::make_unique<Impl>();
  impl->hostPort = host.host + ":" + std::to_string(host.port);
  impl->liveness = std::make_unique<SessionLiveness>(impl->hostPort);
  impl->callbacks = callbacks;
  if (host.host.empty()) return Error{"hosts: empty host name"};
  impl->session = ssh_new();
  if (impl->session == nullptr) return Error{impl->hostPort + ": cannot create an SSH session"};
  ssh_session s = impl->session;

  const std::string user = host.user.empty() ? localUserName() : host.user;
  const std::string knownHosts =
      expandLocalTilde(host.knownHostsFile.empty() ? "~/.ssh/known_hosts" : host.knownHostsFile);
  const auto port = static_cast<unsigned int>(host.port);
  const long timeoutSec = std::max(1, connectTimeoutMs / 1000);
  bool processConfig = false;  // ~/.ssh/config must not silently override the hosts file
  if (ssh_options_set(s, SSH_OPTIONS_HOST, host.host.c_str()) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_PORT, &port) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_USER, user.c_str()) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, knownHosts.c_str()) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &timeoutSec) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &processConfig) != SSH_OK) {
    return Error{impl->error("invalid SSH options")};
  }
  ssh_callbacks_init(&impl->sshCallbacks);
  impl->sshCallbacks.userdata = impl.get();
  impl->sshCallbacks.auth_function = &authCallback;
  ssh_set_callbacks(s, &impl->sshCallbacks);

  // ssh_connect bounds the TCP connect and the key exchange by SSH_OPTIONS_TIMEOUT; the
  // watcher bounds authentication (whose libssh calls wait without a timeout) by the same.
  if (ssh_connect(s) != SSH_OK) return Error{impl->error("cannot connect")};
  impl->liveness->watch(ssh_get_fd(s));
  impl->liveness->setLimit(std::int64_t{timeoutSec} * 1000, "connect timeout " + std::to_string(timeoutSec) + " s");
  if (auto st = verifyHostKey(*impl, host, knownHosts, callbacks); !st) {
    return st.error();
  }
  Status auth;
  {
    const SessionLiveness::Phase phase(*impl->liveness, "authenticating as user '" + user + "'");
    auth = authenticate(*impl, host, user);
  }
  impl->passphrase.reset();  // never kept beyond authentication
  if (!auth) return Error{impl->liveness->explain(auth.message())};
  auto session = std::unique_ptr<SshSession>(new SshSession(std::move(impl)));
  session->setKeepalive(KeepaliveSettings{});
  return session;
}

void SshSession::setKeepalive(const KeepaliveSettings& settings) {
  m_impl->keepalive = settings;
  m_impl->liveness->setLimit(std::int64_t{settings.intervalMs} * std::max(1, settings.countMax),
                             keepaliveText(settings));
}

Expected<CommandResult> SshSession::run(const std::string& command, int timeoutMs) {
  Impl& im = *m_impl;
  const std::string program = command.substr(0, command.find(' '));
  const SessionLiveness::Phase phase(*im.liveness, "running " + program + " on the host");
  ssh_channel ch = ssh_channel_new(im.session);
  if (ch == nullptr) return Error{im.error("cannot open a channel")};
  struct Closer {
    ssh_channel c;
    ~Closer() {
      ssh_channel_close(c);
      ssh_channel_free(c);
    }
  } closer{ch};
  if (ssh_channel_open_session(ch) != SSH_OK) return Error{im.error("cannot open a session channel")};
  if (ssh_channel_request_exec(ch, command.c_str()) != SSH_OK) return Error{im.error("cannot run a remote command")};
  ssh_channel_send_eof(ch);

  CommandResult result;
  std::array<char, 16384> buf{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    bool gotAny = false;
    for (int isStderr = 0; isStderr < 2; ++isStderr) {
      const int n = ssh_channel_read_nonblocking(ch, buf.data(), static_cast<std::uint32_t>(buf.size()), isStderr);
      if (n == SSH_ERROR) return Error{im.error("lost the connection while running a remote command")};
      if (n > 0) {
        gotAny = true;
        std::string& dst = isStderr != 0 ? result.err : result.out;
        if (dst.size() < kMaxCommandOutputBytes) dst.append(buf.data(), static_cast<std::size_t>(n));
      }
    }
    if (!gotAny && (ssh_channel_is_eof(ch) != 0 || ssh_channel_is_closed(ch) != 0)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return Error{im.hostPort + ": remote command timed out after " + std::to_string(timeoutMs) + " ms"};
    }
    im.probe();  // a command that prints nothing for a while (a checksum) is not a frozen host
    if (!gotAny) ssh_channel_poll_timeout(ch, 50, 0);
  }
  result.exitStatus = ssh_channel_get_exit_status(ch);
  if (auto lost = im.liveness->lostReason(); !lost.empty()) return Error{lost};
  return result;
}

Expected<std::unique_ptr<RemoteProcess>> SshSession::start(const std::string& command) {
  Impl& im = *m_impl;
  const SessionLiveness::Phase phase(*im.liveness, "starting a remote command");
  ssh_channel ch = ssh_channel_new(im.session);
  if (ch == nullptr) return Error{im.error("cannot open a channel")};
  if (ssh_channel_open_session(ch) != SSH_OK || ssh_channel_request_exec(ch, command.c_str()) != SSH_OK) {
    Error e{im.error("cannot start a remote command")};
    ssh_channel_free(ch);
    return e;
  }
  return std::unique_ptr<RemoteProcess>(new RemoteProcess(ch, im.hostPort, im.liveness.get()));
}

std::int64_t SshSession::silenceMs() const { return m_impl->liveness->silenceMs(); }

Status SshSession::keepAlive(const KeepaliveSettings& settings) {
  Impl& im = *m_impl;
  if (auto lost = im.liveness->lostReason(); !lost.empty()) return Error{lost};
  const socket_t fd = ssh_get_fd(im.session);
  if (fd == SSH_INVALID_SOCKET || ssh_is_connected(im.session) == 0) return Error{im.error("connection lost")};
  if (settings.intervalMs != im.keepalive.intervalMs || settings.countMax != im.keepalive.countMax) {
    setKeepalive(settings);
  }
  im.probe();
  // Nothing at all from the server since probing began (TCP_INFO; 0 where the socket is not
  // TCP: nothing to measure).
  const auto probingMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - im.probingSince).count();
  const std::int64_t silent = std::min<std::int64_t>(silenceMs(), probingMs);
  const std::int64_t limitMs = std::int64_t{settings.intervalMs} * settings.countMax;
  if (silent > limitMs) {
    const std::string reason = im.hostPort + ": connection lost: no answer to keepalive for " +
                               std::to_string(silent / 1000) + " s (" + keepaliveText(settings) + ")";
    im.liveness->giveUp(reason);
    return Error{im.liveness->lostReason()};
  }
  return Status{};
}

RemoteProcess::~RemoteProcess() {
  auto ch = static_cast<ssh_channel>(m_channel);
  if (ssh_channel_is_open(ch) != 0) ssh_channel_close(ch);
  ssh_channel_free(ch);
}

Status RemoteProcess::poll(std::string& out, std::string& err) {
  if (auto lost = m_liveness->lostReason(); !lost.empty()) return Error{lost};
  auto ch = static_cast<ssh_channel>(m_channel);
  std::array<char, 65536> buf{};
  for (int isStderr = 0; isStderr < 2; ++isStderr) {
    std::string& dst = isStderr != 0 ? err : out;
    for (;;) {
      const int n = ssh_channel_read_nonblocking(ch, buf.data(), static_cast<std::uint32_t>(buf.size()), isStderr);
      if (n == SSH_ERROR) {
        const char* reason = ssh_get_error(ssh_channel_get_session(ch));
        return Error{m_liveness->explain(m_hostPort + ": connection lost" +
                                         (reason != nullptr && *reason ? std::string(": ") + reason : ""))};
      }
      if (n <= 0) break;
      dst.append(buf.data(), static_cast<std::size_t>(n));
    }
  }
  // A dropped connection also makes the channel look closed: check the session first.
  if (ssh_is_connected(ssh_channel_get_session(ch)) == 0) {
    const char* reason = ssh_get_error(ssh_channel_get_session(ch));
    return Error{m_liveness->explain(m_hostPort + ": connection lost" +
                                     (reason != nullptr && *reason ? std::string(": ") + reason : ""))};
  }
  return Status{};
}

bool RemoteProcess::ended() const {
  auto ch = static_cast<ssh_channel>(m_channel);
  if (ssh_channel_poll(ch, 0) > 0 || ssh_channel_poll(ch, 1) > 0) return false;
  return ssh_channel_is_eof(ch) != 0 || ssh_channel_is_closed(ch) != 0;
}

int RemoteProcess::exitStatus() {
  auto ch = static_cast<ssh_channel>(m_channel);
  if (ssh_is_connected(ssh_channel_get_session(ch)) == 0 || !m_liveness->lostReason().empty()) return -1;
  // libssh waits for the status without a timeout: the session's watch bounds the wait.
  const SessionLiveness::Phase phase(*m_liveness, "waiting for a remote command's exit status");
  const int status = ssh_channel_get_exit_status(ch);
  return m_liveness->lostReason().empty() ? status : -1;
}

void RemoteProcess::closeStdin() {
  if (m_stdinClosed) return;
  m_stdinClosed = true;
  auto ch = static_cast<ssh_channel>(m_channel);
  const SessionLiveness::Phase phase(*m_liveness, "closing a remote command's input");
  if (ssh_channel_is_open(ch) != 0) ssh_channel_send_eof(ch);
}

Expected<std::string> SshSession::resolvePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  const SessionLiveness::Phase phase(*m_impl->liveness, "finding the remote home directory");
  PS_RETURN_IF_ERROR(m_impl->openSftp());
  char* home = sftp_canonicalize_path(m_impl->sftp, ".");
  if (home == nullptr) return Error{m_impl->sftpError("cannot find the remote home directory")};
  std::string h = home;
  ssh_string_free_char(home);
  if (path.empty() || path == "~") return h;
  std::string rest = path.rfind("~/", 0) == 0 ? path.substr(2) : path;
  return h == "/" ? "/" + rest : h + "/" + rest;
}

Status SshSession::makeDirectories(const std::string& absolutePath) {
  const SessionLiveness::Phase phase(*m_impl->liveness, "creating " + absolutePath);
  PS_RETURN_IF_ERROR(m_impl->openSftp());
  std::string prefix;
  std::size_t pos = 0;
  while (pos < absolutePath.size()) {
    const std::size_t next = absolutePath.find('/', pos + 1);
    prefix = absolutePath.substr(0, next);
    pos = next == std::string::npos ? absolutePath.size() : next;
    if (prefix.empty() || prefix == "/") continue;
    sftp_attributes a = sftp_stat(m_impl->sftp, prefix.c_str());
    if (a != nullptr) {
      const bool isDir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
      sftp_attributes_free(a);
      if (!isDir) return Error{m_impl->hostPort + ": " + prefix + " exists and is not a directory"};
      continue;
    }
    if (sftp_mkdir(m_impl->sftp, prefix.c_str(), 0755) != SSH_OK &&
        sftp_get_error(m_impl->sftp) != SSH_FX_FILE_ALREADY_EXISTS) {
      return Error{m_impl->sftpError("cannot create directory " + prefix)};
    }
  }
  return Status{};
}

std::optional<std::string> SshSession::remoteSha256(const std::string& absolutePath) {
  auto r = run("sha256sum -- " + shellQuote(absolutePath) + " 2>/dev/null", 120000);
  if (!r || r->exitStatus != 0 || r->out.size() < 64) return std::nullopt;
  std::string hex = r->out.substr(0, 64);
  for (const char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  return hex;
}

Expected<UploadAction> SshSession::upload(const std::string& localPath, const std::string& remotePath, int mode) {
  Impl& im = *m_impl;
  PS_ASSIGN_OR_RETURN(auto localSha, sha256File(localPath));
  // Armed after the local checksum (the host has nothing to answer while it is computed).
  const SessionLiveness::Phase phase(*im.liveness, "uploading " + localPath + " to " + remotePath);
  PS_RETURN_IF_ERROR(im.openSftp());
  if (remoteSha256(remotePath) == localSha) {
    if (sftp_chmod(im.sftp, remotePath.c_str(), static_cast<mode_t>(mode)) != SSH_OK) {
      return Error{im.sftpError("cannot set the mode of " + remotePath)};
    }
    return UploadAction::Skipped;
  }

  std::ifstream in(localPath, std::ios::binary);
  if (!in) return Error{localPath + ": cannot open for reading"};
  const std::string tmp = remotePath + ".part";
  sftp_file f = sftp_open(im.sftp, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, static_cast<mode_t>(mode));
  if (f == nullptr) return Error{im.sftpError("cannot create " + tmp)};
  std::array<char, 32768> buf{};
  std::uint64_t sent = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    std::size_t off = 0;
    while (off < got) {
      const ssize_t w = sftp_write(f, buf.data() + off, got - off);
      if (w <= 0) {
        sftp_close(f);
        std::string what = "upload of ";
        what.append(localPath).append(" to ").append(tmp).append(" failed after ");
        what.append(std::to_string(sent)).append(" bytes");
        return Error{im.sftpError(what)};
      }
      off += static_cast<std::size_t>(w);
      sent += static_cast<std::uint64_t>(w);
    }
  }
  if (in.bad()) {  // istream::read turns a read error into badbit: never upload a short file
    sftp_close(f);
    sftp_unlink(im.sftp, tmp.c_str());
    return Error{localPath + ": read error after " + std::to_string(sent) + " bytes"};
  }
  if (sftp_close(f) != SSH_OK) return Error{im.sftpError("upload of " + tmp + " did not complete")};
  if (sftp_chmod(im.sftp, tmp.c_str(), static_cast<mode_t>(mode)) != SSH_OK) {
    return Error{im.sftpError("cannot set the mode of " + tmp)};
  }
  // Replace by rename, so an executor still running from the old file keeps its inode.
  sftp_unlink(im.sftp, remotePath.c_str());
  if (sftp_rename(im.sftp, tmp.c_str(), remotePath.c_str()) != SSH_OK) {
    return Error{im.sftpError("cannot rename " + tmp + " to " + remotePath)};
  }
  // Verify: the checksum where sha256sum exists, the size otherwise.
  if (auto remoteSha = remoteSha256(remotePath)) {
    if (*remoteSha != localSha) {
      return Error{im.hostPort + ": " + remotePath + " has SHA-256 " + *remoteSha + " after upload (expected " +
                   localSha + ")"};
    }
  } else {
    sftp_attributes a = sftp_stat(im.sftp, remotePath.c_str());
    const std::uint64_t size = a != nullptr ? a->size : 0;
    if (a != nullptr) sftp_attributes_free(a);
    if (a == nullptr || size != sent) {
      return Error{im.hostPort + ": " + remotePath + " has " + std::to_string(size) + " bytes after upload (expected " +
                   std::to_string(sent) + ")"};
    }
  }
  return UploadAction::Uploaded;
}

}  // namespace pipestudio::remote
