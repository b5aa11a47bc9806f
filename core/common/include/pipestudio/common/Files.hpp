#pragma once
/// \file Reading input files and writing output files the way every command must: inputs are
/// regular files (a FIFO nobody writes to must not hang a loader), outputs never replace a
/// device node, a FIFO or a symlink with a regular file.

#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipestudio/common/Expected.hpp"

namespace pipestudio {

/// Reads a whole regular file of at most `maxBytes`. A FIFO, device, socket or directory is
/// refused by what it is (opened non-blocking, checked with fstat, so nothing hangs).
Expected<std::string> readRegularFile(const std::string& path, std::size_t maxBytes);

/// Whether `path` names an existing regular file (following symlinks), without opening it: for
/// readers that stream a file themselves (trace imports).
Status checkRegularFile(const std::string& path);

/// What `head` (the first bytes of a file) is when it is text in an encoding other than UTF-8:
/// "UTF-16 (little-endian) text", "UTF-32 (big-endian) text", "… without a byte order mark";
/// nullopt when it may be UTF-8. Readers that stream a file check its first bytes with it.
std::optional<std::string> wideTextEncoding(std::string_view head);

/// Checks `text` (read from `path`) is UTF-8: a UTF-8 byte order mark is removed, UTF-16 and
/// UTF-32 text (with or without a BOM) is refused by name.
Status requireUtf8(std::string& text, const std::string& path);

/// readRegularFile + requireUtf8: the text files users hand us (JSON, CSV).
Expected<std::string> readTextFile(const std::string& path, std::size_t maxBytes);

/// Writes an output file through `write` (which returns false on a failure of its own, having
/// left a message in `error`), choosing how by what `path` is:
/// - a regular file or a new name: written to a temporary file beside it, then renamed over it
///   (readers never see half a file);
/// - a symlink: the same at the file it points to (the link stays a link);
/// - a character device, a FIFO, a socket or /dev/stdout (/dev/fd/N, /proc/self/fd/N):
///   written directly, never replaced;
/// - a directory or an empty path: refused.
Status writeOutputFile(const std::string& path, const std::function<bool(std::ostream&, std::string& error)>& write);

/// writeOutputFile of a string.
Status writeOutputFile(const std::string& path, std::string_view content);

/// Several output files that belong together (a configuration and the schedule it names): each
/// is written in full to its temporary file before any replaces its target, so a failure (a full
/// disk) leaves none of them behind and every target as it was.
Status writeOutputFiles(const std::vector<std::pair<std::string, std::string_view>>& files);

// While a temporary file is written, SIGINT, SIGTERM and SIGHUP remove it before they end the
// process (where the program left their default action in place): an interrupted write leaves
// neither a half file nor a `FILE.tmp-PID` beside it.

}  // namespace pipestudio
