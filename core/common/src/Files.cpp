#include "pipestudio/common/Files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

#include "pipestudio/common/FdStream.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio {
namespace {

namespace fs = std::filesystem;

std::string kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

std::string errnoText(int err) { return std::strerror(err); }

// Follows symlinks one at a time (relative targets resolve against the link's directory), so
// a dangling link still names the file to create. Gives up after 40 hops (ELOOP).
Expected<std::string> followLinks(const std::string& path) {
  fs::path p = path;
  for (int hop = 0; hop < 40; ++hop) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p.string();
    std::error_code ec;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) return Error{path + ": cannot read symlink " + p.string() + ": " + ec.message()};
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return Error{path + ": too many levels of symbolic links"};
}

// /dev/stdout and friends name an already open descriptor: write to it, never rename.
bool namesOpenDescriptor(std::string_view path) {
  return path == "/dev/stdout" || path == "/dev/stderr" || path.rfind("/dev/fd/", 0) == 0 ||
         path.rfind("/proc/self/fd/", 0) == 0;
}

Status writeDirect(const std::string& shown, const std::string& path, bool append,
                   const std::function<bool(std::ostream&, std::string&)>& write) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0666);
  if (fd < 0) return Error{shown + ": cannot open for writing: " + errnoText(errno)};
  // The stream keeps the errno of its first failed write: a full disk is named, even when the
  // writer only sees the stream go bad.
  FdOStream out(fd);
  std::string error;
  const bool wrote = write(out, error);
  const bool flushed = out.buffer().flush();
  const int closed = ::close(fd) == 0 ? 0 : errno;
  if (!out.buffer().errorText().empty()) return Error{shown + ": write error: " + out.buffer().errorText()};
  if (!wrote) return Error{shown + ": " + (error.empty() ? "the output could not be produced" : error)};
  if (!flushed || !out) return Error{shown + ": write error"};
  if (closed != 0) return Error{shown + ": write error: " + errnoText(closed)};
  return {};
}

}  // namespace

Expected<std::string> readRegularFile(const std::string& path, std::size_t maxBytes) {
  if (path.empty()) return Error{"empty file name (expected a path)"};
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Error{path + ": cannot open: no such file (expected an existing file)"};
    return Error{path + ": cannot open: " + errnoText(err)};
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error{path + ": cannot stat: " + errnoText(err)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path + ": is " + kindOf(st.st_mode) + " (expected a regular file)"};
  }
  if (static_cast<std::uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    return Error{path + ":1:1: file is " + std::to_string(st.st_size) + " bytes (expected at most " +
                 std::to_string(maxBytes) + ")"};
  }
  // A regular file never blocks; clear O_NONBLOCK anyway so reads behave plainly.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t have = 0;
  for (;;) {
    if (have == text.size()) {
      // The file may have grown since fstat; read on in steps, still under the limit.
      if (text.size() >= maxBytes) {
        char probe = 0;
        const ssize_t more = ::read(fd, &probe, 1);
        if (more > 0) {
          ::close(fd);
          return Error{path + ":1:1: file grew past " + std::to_string(maxBytes) + " bytes while read"};
        }
        break;
      }
      text.resize(std::min(maxBytes, text.size() + 65536));
    }
    const ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Error{path + ": read error: " + errnoText(err)};
    }
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(have);
  return text;
}

Status checkRegularFile(const std::string& path) {
  if (path.empty()) return Error{"empty file name (expected a path)"};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return Error{path + ": cannot open: no such file (expected an existing file)"};
    return Error{path + ": cannot open: " + errnoText(err)};
  }
  if (!S_ISREG(st.st_mode)) return Error{path + ": is " + kindOf(st.st_mode) + " (expected a regular file)"};
  return {};
}

std::optional<std::string> wideTextEncoding(std::string_view head) {
  using namespace std::string_view_literals;
  auto starts = [&](std::string_view prefix) { return head.substr(0, prefix.size()) == prefix; };
  if (starts("\x00\x00\xFE\xFF"sv)) return "UTF-32 (big-endian) text";
  if (starts("\xFF\xFE\x00\x00"sv)) return "UTF-32 (little-endian) text";
  if (starts("\xFE\xFF"sv)) return "UTF-16 (big-endian) text";
  if (starts("\xFF\xFE"sv)) return "UTF-16 (little-endian) text";
  // Without a BOM, ASCII text in UTF-16 has a NUL in every other byte of its first characters.
  if (head.size() >= 4) {
    const bool le = head[0] != '\0' && head[1] == '\0' && head[2] != '\0' && head[3] == '\0';
    const bool be = head[0] == '\0' && head[1] != '\0' && head[2] == '\0' && head[3] != '\0';
    if (le) return "UTF-16 (little-endian) text without a byte order mark";
    if (be) return "UTF-16 (big-endian) text without a byte order mark";
  }
  return std::nullopt;
}

Status requireUtf8(std::string& text, const std::string& path) {
  if (auto encoding = wideTextEncoding(text)) return Error{path + ":1:1: is " + *encoding + " (expected UTF-8)"};
  if (std::string_view(text).starts_with("\xEF\xBB\xBF")) {
    text.erase(0, 3);  // a UTF-8 byte order mark carries no meaning: skip it
  }
  return {};
}

Expected<std::string> readTextFile(const std::string& path, std::size_t maxBytes) {
  auto text = readRegularFile(path, maxBytes);
  if (!text) return text;
  PS_RETURN_IF_ERROR(requireUtf8(*text, path));
  return text;
}

namespace {

// Where an output goes: written directly (a device, FIFO, socket, descriptor), or through a
// temporary file beside the target that is renamed over it.
struct OutputTarget {
  std::string shown;   // the path as the user gave it
  std::string target;  // symlinks followed
  bool direct = false;
  bool append = false;
};

Expected<OutputTarget> resolveOutput(const std::string& path) {
  if (path.empty()) return Error{"empty output file name (expected a path)"};
  if (namesOpenDescriptor(path)) return OutputTarget{path, path, true, true};
  PS_ASSIGN_OR_RETURN(auto resolved, followLinks(path));
  OutputTarget out{path, resolved, false, false};
  struct stat st {};
  if (::stat(out.target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Error{path + ": is a directory (expected a file name)"};
    // Device nodes, FIFOs and sockets are written to, never replaced (one run replaced a
    // machine's /dev/full with a regular file).
    out.direct = !S_ISREG(st.st_mode);
    return out;
  }
  if (errno != ENOENT) return Error{path + ": " + errnoText(errno)};
  const fs::path parent = fs::path(out.target).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return Error{path + ": directory " + parent.string() + " does not exist"};
  }
  return out;
}

// --- temporary files a signal must not leave behind ---
// The temporary files being written now, in slots a signal handler can read: a fixed array,
// each slot's path complete before its flag is set (release), read after the flag (acquire).
constexpr std::size_t kTempSlots = 32;
constexpr std::size_t kTempPathBytes = 4096;
struct TempSlot {
  std::atomic<bool> used{false};
  std::array<char, kTempPathBytes> path{};
};
std::array<TempSlot, kTempSlots> g_tempSlots;
constexpr std::array<int, 3> kCleanupSignals{SIGINT, SIGTERM, SIGHUP};

extern "C" void removeTempFilesAndDie(int sig) {
  // Async-signal-safe only: unlink, sigaction, raise.
  for (TempSlot& slot : g_tempSlots) {
    if (slot.used.load(std::memory_order_acquire)) ::unlink(slot.path.data());
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // ends the process as the signal would have, now that nothing is left behind
}

// Installs removeTempFilesAndDie for the signals that end a process where nothing else handles
// them (the default action): a program with its own handler (the CLI's `run`) keeps it.
void armSignalCleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const int sig : kCleanupSignals) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = removeTempFilesAndDie;
      sigemptyset(&sa.sa_mask);
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

// A temporary file registered for removal on a fatal signal while it lives.
class TempFile {
 public:
  explicit TempFile(std::string path) : m_path(std::move(path)) {
    armSignalCleanup();
    if (m_path.size() >= kTempPathBytes) return;  // not removable by the handler; still removed on return
    for (TempSlot& slot : g_tempSlots) {
      if (!slot.used.load(std::memory_order_relaxed) && claim(slot)) {
        m_slot = &slot;
        return;
      }
    }
  }
  ~TempFile() {
    if (!m_kept) {
      std::error_code ec;
      fs::remove(m_path, ec);
    }
    release();
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return m_path; }
  /// Renames it over `target`; from then on it is no longer ours to remove.
  Status renameTo(const std::string& shown, const std::string& target) {
    std::error_code ec;
    fs::rename(m_path, target, ec);
    if (ec) return Error{shown + ": cannot replace file: " + ec.message()};
    m_kept = true;
    release();
    return {};
  }

 private:
  bool claim(TempSlot& slot) {
    // The path is written before the flag is published; a slot is claimed by one thread at once.
    static std::mutex claiming;
    const std::lock_guard lock(claiming);
    if (slot.used.load(std::memory_order_relaxed)) return false;
    std::copy(m_path.begin(), m_path.end(), slot.path.begin());
    slot.path[m_path.size()] = '\0';
    slot.used.store(true, std::memory_order_release);
    return true;
  }
  void release() {
    if (m_slot) m_slot->used.store(false, std::memory_order_release);
    m_slot = nullptr;
  }
  std::string m_path;
  TempSlot* m_slot = nullptr;
  bool m_kept = false;
};

// Beside the target (same file system, so the rename is atomic), unique to this process and call.
std::string tempPathFor(const std::string& target) {
  static std::atomic<unsigned> counter{0};
  const unsigned n = counter.fetch_add(1);
  return target + ".tmp-" + std::to_string(::getpid()) + (n == 0 ? std::string() : "-" + std::to_string(n));
}

}  // namespace

Status writeOutputFile(const std::string& path, const std::function<bool(std::ostream&, std::string&)>& write) {
  PS_ASSIGN_OR_RETURN(auto out, resolveOutput(path));
  if (out.direct) return writeDirect(out.shown, out.target, out.append, write);
  TempFile tmp(tempPathFor(out.target));
  PS_RETURN_IF_ERROR(writeDirect(path, tmp.path(), false, write));
  return tmp.renameTo(path, out.target);
}

Status writeOutputFiles(const std::vector<std::pair<std::string, std::string_view>>& files) {
  std::vector<OutputTarget> targets;
  for (const auto& [path, content] : files) {
    PS_ASSIGN_OR_RETURN(auto out, resolveOutput(path));
    targets.push_back(std::move(out));
  }
  const auto writeText = [](std::string_view content) {
    return [content](std::ostream& out, std::string&) {
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
      return static_cast<bool>(out);
    };
  };
  // Every file is written before any replaces its target: a failure (a full disk) leaves none.
  std::vector<std::unique_ptr<TempFile>> temps(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (targets[i].direct) continue;
    temps[i] = std::make_unique<TempFile>(tempPathFor(targets[i].target));
    PS_RETURN_IF_ERROR(writeDirect(targets[i].shown, temps[i]->path(), false, writeText(files[i].second)));
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (!targets[i].direct) continue;
    if (auto st = writeDirect(targets[i].shown, targets[i].target, targets[i].append, writeText(files[i].second));
        !st) {
      return st;
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (temps[i]) {
      PS_RETURN_IF_ERROR(temps[i]->renameTo(targets[i].shown, targets[i].target));
    }
  }
  return {};
}

Status writeOutputFile(const std::string& path, std::string_view content) {
  return writeOutputFile(path, [content](std::ostream& out, std::string&) {
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    return static_cast<bool>(out);
  });
}

}  // namespace pipestudio
