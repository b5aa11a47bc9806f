#pragma once
// Standard output of pipestudio-cli. main() points std::cout at a checked buffer on fd 1 for
// the whole command and, once the command is done, flushes it: a write that failed (a full
// disk, /dev/full, a closed descriptor) turns into exit status 1 and a message with the
// system's reason — for every command and every output, text or --json, in one place.
#include <iostream>
#include <string>

#include "pipestudio/common/FdStream.hpp"

namespace pipestudio::cli {

/// Keeps the three standard descriptors from being reused: one that is closed gets /dev/null,
/// read-only for stdout, so writes to it still fail (EBADF) instead of landing in the next
/// file the command opens.
void guardStandardDescriptors();

/// What a failed stdout loses beyond the text, said in the message ("the run is recorded as
/// run 7"): set by commands whose output is the only place an id appears.
void noteOutputCarries(std::string what);

class CheckedStdout {
 public:
  CheckedStdout();
  ~CheckedStdout();
  CheckedStdout(const CheckedStdout&) = delete;
  CheckedStdout& operator=(const CheckedStdout&) = delete;

  /// Flushes stdout; returns `exitCode`, or 1 with the reason on stderr when a write failed.
  int finish(int exitCode);

 private:
  FdStreamBuf m_buffer;
  std::streambuf* m_previous = nullptr;
};

}  // namespace pipestudio::cli
