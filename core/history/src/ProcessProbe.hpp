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

/// Room a writer keeps on the history's file system for a run's last word. A disk that fills
/// mid-run (issue 14) must still take the run's final status: SQLite needs a few pages of WAL for
/// that UPDATE, and whatever filled the disk (the run's events, the ranks' output beside it)
/// may have taken the space the dropped last batch gave back. beginRun sets aside this many
/// bytes in a file beside the database (reserveRunSpace), finishRun frees them just before it
/// marks the run (releaseRunSpace), and recovery frees those of writers that are gone.
inline constexpr std::int64_t kRunReserveBytes = std::int64_t{256} << 10;

/// The reserve file of run `run` written by process `pid` on this host: "<db>-reserve-PID-RUN",
/// beside the database file itself (a symlinked path's target).
std::string runReservePath(const std::string& dbPath, std::int64_t pid, std::int64_t run);
/// Creates it, allocated (posix_fallocate): best effort, nothing is left behind when the file
/// system has no room or no support for it (the run goes on without a reserve).
void reserveRunSpace(const std::string& dbPath, std::int64_t run);
/// Removes this process's reserve of `run` (or, with `pid`, a gone writer's); absent is fine.
void releaseRunSpace(const std::string& dbPath, std::int64_t run, std::int64_t pid = 0);

}  // namespace pipestudio::history
