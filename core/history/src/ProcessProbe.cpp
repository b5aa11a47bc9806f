#include "ProcessProbe.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>
#include <iterator>
#include <sstream>

#include "Impl.hpp"

namespace pipestudio::history {

namespace {

// Field 3 of /proc/PID/stat: 'Z' for a zombie (killed but not yet reaped: it writes no more).
char processState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '?';
}

}  // namespace

std::string processStartToken(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  // After "pid (comm) " the next field is field 3 (state); start time is field 22.
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
  }
  return field;
}

bool writerAlive(const std::string& host, std::int64_t pid, const std::string& token) {
  if (host != hostName()) return true;  // another machine's process: cannot tell, leave it
  if (pid <= 0 || pid > INT_MAX) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  if (processState(static_cast<pid_t>(pid)) == 'Z') return false;
  if (!token.empty()) {
    const std::string now = processStartToken(static_cast<pid_t>(pid));
    if (!now.empty() && now != token) return false;  // pid reused by another process
  }
  return true;
}

}  // namespace pipestudio::history
