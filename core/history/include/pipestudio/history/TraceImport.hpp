#pragma once
/// \file Importing profiles of real training runs into the history (issue 15): PyTorch
/// profiler (Kineto) JSON, also gzipped, one file per rank; Nsight Systems SQLite exports
/// (`nsys export --type sqlite`); Megatron-LM's OpenTelemetry spans (OTLP/JSON or Jaeger JSON,
/// issue 46: microbatch spans matched to the plan's ops in its order); our own trace stream. Several files make one
/// run, one rank each, put on one time axis by their absolute clocks (Kineto `baseTimeNanoseconds`, nsys
/// `TARGET_INFO_SESSION_START_TIME`). Ranges named like torch.distributed.pipelining's
/// `PP:<action>` annotations (or a user pattern) become measured ops keyed by (virtual stage,
/// kind, microbatch), so the run lines up op by op with a plan.
///
/// All files are read once before anything is written: a file that cannot be read (truncated
/// gzip, not a trace, missing tables) is an error naming it, and the history is left as it was.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::history {

/// Bounds every trace reader applies (README, "Input limits"); past them a file is refused with
/// the number, or an event skipped and named, before anything is allocated for it.
/// One JSON string or object key (Chrome/Kineto, plain or inflated from gzip), one text value
/// of an nsys export: reading stops at the limit.
inline constexpr std::size_t kMaxTraceStringBytes = std::size_t{1} << 20;
/// Stored times and durations, ns: ±2^61 (73 years), so no sum or difference of two overflows.
inline constexpr std::int64_t kMaxTraceTimeNs = std::int64_t{1} << 61;
/// A file's clock base (Kineto baseTimeNanoseconds, nsys TARGET_INFO_SESSION_START_TIME):
/// nanoseconds since the Unix epoch, 0..2^62 (the year 2116).
inline constexpr std::int64_t kMaxTraceClockBaseNs = std::int64_t{1} << 62;
/// Each statement on a foreign SQLite file (an nsys export) runs for at most this long.
inline constexpr int kForeignStatementBudgetS = 120;

enum class TraceFormat { Stream, ChromeJson, NsysSqlite, OtelJson };
/// By content: the stream magic, SQLite's header, gzip, or JSON text (OpenTelemetry spans when it
/// begins with OTLP/JSON's `resourceSpans` or a Jaeger export's `data` of `traceID`s: OtelImport.cpp);
/// anything else (UTF-16 text, a text file named .sqlite, binary data) is refused saying what it is.
Expected<TraceFormat> detectTraceFormat(const std::string& file);

/// The default op pattern: torch.distributed.pipelining's profiler names, `PP:<stage><type>[<mb>]`.
inline constexpr const char* kPipeliningOpPattern =
    "^PP:(?<stage>\\d+)(?<kind>SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD|BW|F|I|W|B)(?<microbatch>\\d*)";

/// Checks a user op pattern: a valid PCRE2 regular expression with the named groups `stage`,
/// `kind` and `microbatch`. The message names the offset of a syntax error.
Status checkOpPattern(const std::string& pattern);

struct TraceImportOptions {
  RunInfo info;
  /// The plan the run executed: its placement maps an annotated stage to its device, and
  /// matched ops are counted against its ops. Also stored as the run's plan when info.planId
  /// names it.
  const Plan* plan = nullptr;
  /// Regular expression (PCRE2) with named groups stage, kind, microbatch; empty: the default
  /// `PP:` grammar. Kinds: F, I (input gradient), W, B (full backward; input gradient in traces
  /// of PyTorch ≈2.5, recognised by their BW), BW, and the communication actions.
  std::string opPattern;
};

struct TraceImportResult {
  RunId runId = 0;
  std::int64_t events = 0;
  std::int64_t skipped = 0;
  std::int64_t measuredOps = 0;           ///< op ranges stored (compute actions)
  std::int64_t matchedOps = 0;            ///< of those, ranges whose (device, stage, kind, microbatch) is a plan op
  std::optional<std::string> firstError;  ///< first skipped event: "FILE: where: what"
  std::vector<std::string> notes;         ///< per file: its format and the device its rank became
};

/// Imports `files` as one run (one rank per file). A single PipeStudio stream file goes through
/// importStreamFile. Errors leave no run behind.
Expected<TraceImportResult> importTraces(HistoryStore& store, const std::vector<std::string>& files,
                                         const TraceImportOptions& options);

}  // namespace pipestudio::history
