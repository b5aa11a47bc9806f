#include "ProcessProbe.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <filesystem>
#include <sstream>

#include "Impl.hpp"
#include "pipestudio/common/Files.hpp"

namespace pipestudio::history {

namespace {

// A /proc file's text, empty when it cannot be read. Read with read(2), not an istreambuf_iterator:
// a process that exits while its /proc/PID/stat is read fails the read with ESRCH, which
// std::filebuf::underflow throws as an exception no iterator catches (an import that checked a
// writer just as it ended died with "basic_filebuf::underflow error reading the file").
std::string readProcFile(const std::string& path) {
  auto text = readRegularFile(path, std::size_t{1} << 16);
  return text ? std::move(*text) : std::string();
}

// Field 3 of /proc/PID/stat: 'Z' for a zombie (killed but not yet reaped: it writes no more).
char processState(pid_t pid) {
  const std::string text = readProcFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '?';
}

// Field 22 of /proc/PID/stat: the start time in clock ticks since boot.
std::string startTicks(pid_t pid) {
  const std::string text = readProcFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  // After "pid (comm) " the next field is field 3 (state); start time is field 22.
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
  }
  return field;
}

const std::string& bootId() {
  static const std::string id = [] {
    std::string text = readProcFile("/proc/sys/kernel/random/boot_id");
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }();
  return id;
}

}  // namespace

std::string processStartToken(pid_t pid) {
  const std::string ticks = startTicks(pid);
  if (ticks.empty()) return {};
  return bootId().empty() ? ticks : bootId() + "/" + ticks;
}

bool writerAlive(const std::string& host, std::int64_t pid, const std::string& token) {
  if (host != hostName()) return true;  // another machine's process: cannot tell, leave it
  if (pid <= 0 || pid > INT_MAX) return false;
  const auto slash = token.find('/');
  // A token from another boot: that process ended with the boot, whatever runs under its pid.
  if (slash != std::string::npos && !bootId().empty() && token.substr(0, slash) != bootId()) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  if (processState(static_cast<pid_t>(pid)) == 'Z') return false;
  if (!token.empty()) {
    const std::string ticks = startTicks(static_cast<pid_t>(pid));
    const std::string recorded = slash == std::string::npos ? token : token.substr(slash + 1);
    if (!ticks.empty() && ticks != recorded) return false;  // pid reused by another process
  }
  return true;
}

std::string runReservePath(const std::string& dbPath, std::int64_t pid, std::int64_t run) {
  // Beside the file SQLite writes: through a symlinked path that is the link's target, which
  // may be on another file system than the link.
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::weakly_canonical(dbPath, ec);
  return (ec ? dbPath : real.string()) + "-reserve-" + std::to_string(pid) + "-" + std::to_string(run);
}

void reserveRunSpace(const std::string& dbPath, std::int64_t run) {
  if (dbPath.empty() || dbPath == ":memory:") return;
  const std::string path = runReservePath(dbPath, getpid(), run);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const bool allocated = ::posix_fallocate(fd, 0, static_cast<off_t>(kRunReserveBytes)) == 0;
  ::close(fd);
  if (!allocated) ::unlink(path.c_str());
}

void releaseRunSpace(const std::string& dbPath, std::int64_t run, std::int64_t pid) {
  if (dbPath.empty() || dbPath == ":memory:") return;
  ::unlink(runReservePath(dbPath, pid > 0 ? pid : getpid(), run).c_str());
}

std::string interruptedRunMessage(const std::string& host, std::int64_t pid) {
  return "ingest interrupted: writer process " + std::to_string(pid) + " on " + host +
         " ended before finishing the run";
}

}  // namespace pipestudio::history
