#pragma once
// Whether the process that was writing a run still is (crash recovery, issue 6). Private to
// core/history.

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace pipestudio::history {

/// What identifies a process beyond its pid, which the kernel reuses: this boot's id
/// (/proc/sys/kernel/random/boot_id) and the process's start time in clock ticks since boot
/// (field 22 of /proc/PID/stat), as "BOOT_ID/TICKS". Empty where /proc is unavailable.
std::string processStartToken(pid_t pid);

/// Whether the writer (host, pid, start token) may still be running: false only when it is
/// known to be gone (this host, and no such process, a zombie, the pid reused, or the machine
/// rebooted since). Tokens of older builds (ticks without a boot id) compare by ticks.
bool writerAlive(const std::string& host, std::int64_t pid, const std::string& token);

/// Why a run left `running` by a writer that is gone is incomplete (stored by recovery, shown
/// by read-only listings before any recovery ran).
std::string interruptedRunMessage(const std::string& host, std::int64_t pid);

}  // namespace pipestudio::history
