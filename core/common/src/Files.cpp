#include "pipestudio/common/Files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "pipestudio/common/FdStream.hpp"
#include "pipestudio/common/Text.hpp"

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
  if (auto st = requireUtf8(*text, path); !st) return st.error();
  return text;
}

Status writeOutputFile(const std::string& path, const std::function<bool(std::ostream&, std::string&)>& write) {
  if (path.empty()) return Error{"empty output file name (expected a path)"};
  if (namesOpenDescriptor(path)) return writeDirect(path, path, true, write);
  auto resolved = followLinks(path);
  if (!resolved) return resolved.error();
  const std::string& target = *resolved;
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Error{path + ": is a directory (expected a file name)"};
    // Device nodes, FIFOs and sockets are written to, never replaced (one run replaced a
    // machine's /dev/full with a regular file).
    if (!S_ISREG(st.st_mode)) return writeDirect(path, target, false, write);
  } else if (errno != ENOENT) {
    return Error{path + ": " + errnoText(errno)};
  }
  const fs::path parent = fs::path(target).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return Error{path + ": directory " + parent.string() + " does not exist"};
  }
  // Beside the target (same file system, so the rename is atomic), unique to this process.
  const std::string tmp = target + ".tmp-" + std::to_string(::getpid());
  if (auto st2 = writeDirect(path, tmp, false, write); !st2) {
    fs::remove(tmp, ec);
    return st2;
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return Error{path + ": cannot replace file: " + ec.message()};
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
