#pragma once
/// \file One rank's trace stream and log as text lines, for cluster launchers (srun, mpirun)
/// that merge the stdout of every task into one (FORMAT.md, "Launcher lines").
/// `pipestudio-exec --task` writes them on the rank's side; the deployer reads them back.
///
///   @PS1 <rank> s <base64>    trace stream bytes of the rank, in order
///   @PS1 <rank> e <base64>    stderr bytes of the rank's executor, in order
///   @PS1 <rank> x <status>    the executor ended: its exit status, 128 + n for signal n
///
/// Every line is at most kMaxTaskLineBytes long, newline included: srun forwards a task's
/// output in messages of 1024 bytes and keeps a line whole only when it fits in one.
/// Qt-, SQLite- and libssh-free (linked by the executor).

#include <cstddef>
#include <string>
#include <string_view>

namespace pipestudio::trace {

inline constexpr std::string_view kTaskLinePrefix = "@PS1 ";
/// Raw bytes carried by one line: 600 bytes are 800 base64 characters.
inline constexpr std::size_t kTaskLineChunkBytes = 600;
inline constexpr std::size_t kMaxTaskLineBytes = 1000;

enum class TaskLineKind : char { Stream = 's', Log = 'e', Exit = 'x' };

/// Appends the lines that carry `bytes` (kind Stream or Log) to `out`; nothing for no bytes.
void appendTaskLines(int rank, TaskLineKind kind, std::string_view bytes, std::string& out);
/// Appends the line that reports the executor's end.
void appendTaskExit(int rank, int status, std::string& out);

struct TaskLine {
  int rank = 0;
  TaskLineKind kind = TaskLineKind::Stream;
  std::string bytes;  ///< Stream, Log: the decoded bytes
  int status = 0;     ///< Exit
};

enum class TaskLineParse {
  NotATaskLine,  ///< launcher text (srun's own messages, a shell error): no prefix
  Ok,
  Malformed,  ///< has the prefix but not the form above (`why` says what is wrong)
};

/// Parses one line without its newline; a trailing '\r' (a launcher that gives its tasks a
/// pseudo-terminal) is ignored.
TaskLineParse parseTaskLine(std::string_view line, TaskLine& out, std::string* why = nullptr);

/// RFC 4648 §4 base64 with padding.
std::string base64Encode(std::string_view bytes);
/// Decodes `text` into `out`; false on a character outside the alphabet or a bad length.
bool base64Decode(std::string_view text, std::string& out);

}  // namespace pipestudio::trace
