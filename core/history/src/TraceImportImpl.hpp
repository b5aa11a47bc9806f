#pragma once
// Shared by the trace importers (ChromeImport.cpp for Kineto JSON, NsysImport.cpp for Nsight
// Systems SQLite) and the orchestration in TraceImport.cpp: the op-name matcher, what a first
// read of a file found out (scan), and what the second read needs to store it (FileContext).

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "Impl.hpp"
#include "pipestudio/history/TraceImport.hpp"

namespace pipestudio::history::detail {

/// What an annotation names: a compute op (kind is an OpKind) or a pipelining action that is
/// not one (communication, FSDP, gradient reduction: `action` holds its PyTorch name).
struct OpName {
  int stage = -1;
  int microbatch = -1;
  std::string kindText;  ///< as written: F, I, W, B, BW, SEND_F, …
};

/// A compiled op pattern (PCRE2) with its named groups. Not thread-safe (one match data).
class OpMatcher {
 public:
  static Expected<std::unique_ptr<OpMatcher>> compile(const std::string& pattern);
  ~OpMatcher();
  OpMatcher(const OpMatcher&) = delete;
  OpMatcher& operator=(const OpMatcher&) = delete;
  /// The default pattern is anchored on "PP:": other names are rejected without running it.
  std::optional<OpName> match(std::string_view name) const;

 private:
  OpMatcher() = default;
  void* m_code = nullptr;
  void* m_data = nullptr;
  std::uint32_t m_stage = 0, m_kind = 0, m_microbatch = 0;
  bool m_ppPrefix = false;
};

/// Compute kinds of a kind text in a dialect; nullopt for non-compute actions.
std::optional<OpKind> computeKind(std::string_view kindText, bool legacy);
/// "F" for SEND_F/RECV_F, "B" for SEND_B/RECV_B, else empty.
bool isCommAction(std::string_view kindText);

/// The first read of one file.
struct ScanResult {
  TraceFormat format = TraceFormat::ChromeJson;
  std::optional<std::int64_t> rank;        ///< Kineto distributedInfo.rank
  std::int64_t baseNs = 0;                 ///< added to the file's times to make them absolute
  std::optional<std::int64_t> firstAbsNs;  ///< earliest range start, absolute
  bool gpuAnnotations = false;             ///< matched op names on GPU annotation lanes (Kineto)
  std::set<int> stages;                    ///< stages of matched op names
  std::set<std::string> kindTexts;         ///< kinds of matched op names
  std::int64_t events = 0;
  std::string gpuName;
  /// Plain JSON cut short after events were read (not gzip): the well-formed part is imported
  /// and the run marked incomplete, as importChromeTrace does.
  std::optional<std::string> truncated;
};

/// How the second read stores one file.
struct FileContext {
  std::string path;
  int fileIndex = 0;
  std::int64_t baseNs = 0;
  std::optional<int> device;       ///< the device lane of this file's rank (all its GPU-side events)
  bool useGpuAnnotations = false;  ///< op ranges from GPU annotation lanes only (else host ranges)
  bool legacy = false;             ///< B = input gradient, BW = full backward
  bool recordSteps = true;         ///< ProfilerStep#N / step ranges into the steps table
  bool allowTruncated = false;     ///< the scan found a plain JSON file cut short after its events
  const OpMatcher* matcher = nullptr;
  const std::vector<int>* stageDevice = nullptr;  ///< plan placement; null without a plan
  const Plan* plan = nullptr;                     ///< the plan the run executed (OTel spans follow its order)
  /// Device of an annotated stage: the plan's placement, else this file's device.
  int opDevice(int stage) const {
    if (stageDevice && stage >= 0 && stage < static_cast<int>(stageDevice->size())) {
      return (*stageDevice)[static_cast<std::size_t>(stage)];
    }
    return device.value_or(-1);
  }
};

struct IngestCounts {
  std::int64_t stored = 0;
  std::int64_t skipped = 0;
  std::optional<std::string> firstError;
  std::optional<std::string> incomplete;  ///< why the file ended early (the run is then incomplete)
};

Expected<ScanResult> scanChromeFile(const std::string& path, const OpMatcher& matcher);
Expected<IngestCounts> ingestChromeFile(HistoryStore::Impl& im, RunId run, RunState& state, const FileContext& ctx);

/// A foreign SQLite file (an Nsight Systems export) opened so that nothing in it is trusted:
/// read-only; views, triggers and schema-defined functions off (an export holds tables; a view
/// could loop forever); every value at most kMaxTraceStringBytes (SQLITE_LIMIT_LENGTH); every
/// step of a statement stopped by a progress handler once it runs past `budget`.
class ForeignDb {
 public:
  static Expected<std::unique_ptr<ForeignDb>> open(
      const std::string& path, std::chrono::milliseconds budget = std::chrono::seconds(kForeignStatementBudgetS));
  ~ForeignDb();
  ForeignDb(const ForeignDb&) = delete;
  ForeignDb& operator=(const ForeignDb&) = delete;

  sqlite3* get() const { return m_db; }
  const std::string& path() const { return m_path; }
  /// sqlite3_step with the time budget armed.
  int step(sqlite3_stmt* st);
  /// Why the last statement failed: the budget, a value past the length limit, a damaged
  /// file, or SQLite's message.
  std::string error() const;

 private:
  ForeignDb() = default;
  static int onProgress(void* self);
  sqlite3* m_db = nullptr;
  std::string m_path;
  std::chrono::milliseconds m_budget{0};
  std::chrono::steady_clock::time_point m_deadline;
  bool m_timedOut = false;
};

/// Megatron-LM's OpenTelemetry spans (OtelImport.cpp): whether a JSON file's first bytes are
/// OTLP/JSON or a Jaeger export, and its two reads.
bool looksLikeOtel(std::string_view head);
Expected<ScanResult> scanOtelFile(const std::string& path);
Expected<IngestCounts> ingestOtelFile(HistoryStore::Impl& im, RunId run, RunState& state, const FileContext& ctx);

Expected<ScanResult> scanNsysFile(const std::string& path, const OpMatcher& matcher);
Expected<IngestCounts> ingestNsysFile(HistoryStore::Impl& im, RunId run, RunState& state, const FileContext& ctx);

/// A reader over a plain or gzip file (zlib's transparent mode) for JsonFileReader; errors
/// (truncated or corrupt gzip) are reported by name.
class GzipSource {
 public:
  static Expected<std::unique_ptr<GzipSource>> open(const std::string& path);
  ~GzipSource();
  long read(char* out, std::size_t size);
  /// "" when the source ended cleanly.
  std::string error() const;

 private:
  GzipSource() = default;
  void* m_file = nullptr;
  std::string m_path;
  std::string m_error;
};

}  // namespace pipestudio::history::detail
