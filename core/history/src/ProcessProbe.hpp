#pragma once
// Whether the process that was writing a run still is (crash recovery, issue 6). Private to
// core/history.

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace pipestudio::history {

/// Field 22 of /proc/PID/stat (start time in clock ticks since boot): with the pid it
/// identifies a process even after its pid is reused. Empty where /proc is unavailable.
std::string processStartToken(pid_t pid);

/// Whether the writer (host, pid, start token) may still be running: false only when it is
/// known to be gone (this host, and no such process, a zombie, or the pid reused).
bool writerAlive(const std::string& host, std::int64_t pid, const std::string& token);

}  // namespace pipestudio::history
