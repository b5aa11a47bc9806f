#include "Liveness.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>

namespace pipestudio::remote {
namespace {

// How often the watcher looks at an armed phase: a tenth of the limit, between 50 and 500 ms.
std::chrono::milliseconds pollInterval(std::int64_t limitMs) {
  return std::chrono::milliseconds(std::clamp<std::int64_t>(limitMs / 10, 50, 500));
}

}  // namespace

SessionLiveness::SessionLiveness(std::string hostPort) : m_hostPort(std::move(hostPort)) {}

SessionLiveness::~SessionLiveness() {
  {
    const std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void SessionLiveness::watch(int fd) {
  {
    const std::lock_guard lock(m_mutex);
    m_fd = fd;
  }
  if (!m_thread.joinable()) m_thread = std::thread([this] { run(); });
}

void SessionLiveness::setLimit(std::int64_t limitMs, std::string limitText) {
  const std::lock_guard lock(m_mutex);
  m_limitMs = std::max<std::int64_t>(1, limitMs);
  m_limitText = std::move(limitText);
}

void SessionLiveness::arm(std::string what, int depth) {
  const std::lock_guard lock(m_mutex);
  m_phase = std::move(what);
  m_depth = depth;
  m_armedAt = Clock::now();
}

SessionLiveness::Phase::Phase(SessionLiveness& liveness, std::string what) : m_liveness(liveness) {
  {
    const std::lock_guard lock(liveness.m_mutex);
    m_previous = liveness.m_phase;
    m_previousDepth = liveness.m_depth;
  }
  liveness.arm(std::move(what), m_previousDepth + 1);
  liveness.m_wake.notify_all();
}

SessionLiveness::Phase::~Phase() {
  const std::lock_guard lock(m_liveness.m_mutex);
  m_liveness.m_phase = m_previous;
  m_liveness.m_depth = m_previousDepth;
}

SessionLiveness::Pause::Pause(SessionLiveness& liveness) : m_liveness(liveness) {
  const std::lock_guard lock(liveness.m_mutex);
  m_depth = liveness.m_depth;
  liveness.m_depth = 0;
}

SessionLiveness::Pause::~Pause() {
  const std::lock_guard lock(m_liveness.m_mutex);
  m_liveness.m_depth = m_depth;
  m_liveness.m_armedAt = Clock::now();  // the user's time is not the server's silence
}

std::string SessionLiveness::lostReason() const {
  const std::lock_guard lock(m_mutex);
  return m_lostReason;
}

void SessionLiveness::giveUp(const std::string& reason) {
  const std::lock_guard lock(m_mutex);
  if (m_lostReason.empty()) m_lostReason = reason;
  // Every libssh call on this connection, blocked now or made later, fails at once instead of
  // waiting for a server that does not answer.
  if (m_fd >= 0) ::shutdown(m_fd, SHUT_RDWR);
}

std::string SessionLiveness::explain(const std::string& fallback) const {
  std::string lost = lostReason();
  return lost.empty() ? fallback : lost;
}

std::int64_t SessionLiveness::silenceMs() const {
  int fd = -1;
  {
    const std::lock_guard lock(m_mutex);
    fd = m_fd;
  }
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (fd < 0 || ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  return static_cast<std::int64_t>(info.tcpi_last_data_recv);
}

void SessionLiveness::run() {
  std::unique_lock lock(m_mutex);
  while (!m_stop) {
    m_wake.wait_for(lock, pollInterval(m_limitMs));
    if (m_stop) break;
    if (m_depth == 0 || !m_lostReason.empty() || m_fd < 0) continue;
    const std::int64_t limitMs = m_limitMs;
    const auto armedMs = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - m_armedAt).count();
    lock.unlock();
    const std::int64_t tcpSilentMs = silenceMs();
    lock.lock();
    // Silence since the phase began: what arrived before it (or the idle time between phases)
    // does not count against the server.
    const std::int64_t silentMs = std::min<std::int64_t>(tcpSilentMs, armedMs);
    if (m_depth == 0 || silentMs <= limitMs || !m_lostReason.empty()) continue;
    m_lostReason = m_hostPort + ": connection lost: no answer for " + std::to_string(silentMs / 1000) + " s while " +
                   m_phase + " (" + m_limitText + ")";
    ::shutdown(m_fd, SHUT_RDWR);
  }
}

}  // namespace pipestudio::remote
