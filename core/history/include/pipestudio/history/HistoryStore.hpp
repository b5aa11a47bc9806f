#pragma once
/// \file The run history (docs/architecture.md, issue 6): one SQLite file (WAL) holding plans, runs,
/// devices, planned ops, measured events, memory samples and step times.
///
/// Threading: a HistoryStore is one SQLite connection and is not thread-safe. Each thread (the
/// GUI, an ingest worker) opens its own store on the same file; WAL lets readers run while one
/// writer ingests. Nothing here throws; errors come back as Expected/Status with a message.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/trace/Stream.hpp"

struct sqlite3;

namespace pipestudio::history {

using RunId = std::int64_t;
using PlanId = std::int64_t;

/// Schema version this build writes (PRAGMA user_version). Older files are migrated forward
/// on open; newer ones are refused and left untouched.
inline constexpr int kSchemaVersion = 3;

enum class RunStatus { Running, Complete, Incomplete, Failed };
std::string_view runStatusName(RunStatus status);
std::optional<RunStatus> runStatusFromName(std::string_view name);

/// What a measured event is. Stored as a small integer (FORMAT of the `events.category` column).
enum class EventCategory : std::uint8_t {
  Op = 0,      ///< an op range F/B/W/… of the plan (executor op ranges, our Chrome export)
  Kernel = 1,  ///< a GPU compute kernel
  Memcpy = 2,
  Memset = 3,
  Nccl = 4,     ///< communication kernel (NCCL send/recv/all-reduce…)
  Runtime = 5,  ///< host-side CUDA runtime/driver call (cudaLaunchKernel…)
  Cpu = 6,      ///< any other host range (cpu_op, python_function, user annotation)
};
inline constexpr int kEventCategoryCount = 7;
std::string_view eventCategoryName(EventCategory category);

/// Who/where/what of a run; every field optional.
struct RunInfo {
  std::string name{};        ///< user-visible label (rename later with renameRun)
  std::string source{};      ///< "stream", "chrome", "run", "deploy"
  std::string sourcePath{};  ///< imported file, or the plan file the run executed
  std::optional<PlanId> planId{};
  std::string user{};
  std::string host{};
  std::string backend{};  ///< cpu | cuda | cuda-single | pytorch …
  std::string gpu{};      ///< device name
  std::string executorVersion{};
};

/// One row of `history list`, `history show`.
struct RunSummary {
  RunId id = 0;
  std::string name;
  RunStatus status = RunStatus::Running;
  std::int64_t createdUnixMs = 0;  ///< wall clock when the run record was created
  std::int64_t events = 0;         ///< measured events stored
  std::optional<PlanId> planId;
  std::string source;
  std::string sourcePath;
  std::string user;
  std::string host;
  std::string backend;
  std::string gpu;
  std::string executorVersion;
  std::string notes;
  std::string error;  ///< why the run failed / is incomplete
  int devices = 0;    ///< distinct devices with events
  int iterations = 0;
  double durationMs = 0;  ///< last event end − first event start
};

/// One measured event as stored (times in ns from the run's time origin).
struct MeasuredEvent {
  EventCategory category = EventCategory::Op;
  std::int32_t device = -1;  ///< -1: host / unknown
  std::int64_t stream = 0;   ///< CUDA stream or Chrome tid
  std::string name;          ///< kernel name; for ops the kind name ("F", "B", …)
  std::int64_t startNs = 0;
  std::int64_t durationNs = 0;
  // Op ranges only (otherwise -1):
  std::int32_t virtualStage = -1;
  std::int32_t microbatch = -1;
  std::int32_t iteration = -1;
  std::int32_t kind = -1;  ///< OpKind as an integer
  std::int64_t bytes = 0;
  std::int64_t correlationId = 0;
  std::string argsJson;  ///< Chrome `args`, compact JSON ("" when none)
};

struct OpenOptions {
  bool readOnly = false;
  /// Creating a database: make its missing folders (the default location's), or refuse a path
  /// whose folder does not exist (one the user typed: a typo must not become a new folder).
  bool createDirectories = true;
  /// Tests only: migrate to this version instead of kSchemaVersion (must be ≤ it).
  int targetSchemaVersion = kSchemaVersion;
  /// Mark runs left `running` by a dead writer process `incomplete` (read-write opens only).
  bool recoverInterruptedRuns = true;
  /// How long to wait for another connection's lock (creation, migration, a write batch):
  /// concurrent writers wait for each other rather than fail.
  int busyTimeoutMs = 30000;
};

/// Result of importing a trace file.
struct ImportResult {
  RunId runId = 0;
  std::int64_t events = 0;                ///< stored
  std::int64_t skipped = 0;               ///< malformed events not stored
  std::optional<std::string> firstError;  ///< "FILE: byte N: what" of the first problem
};

/// $XDG_DATA_HOME/pipestudio/history.sqlite, else ~/.local/share/pipestudio/history.sqlite ($HOME,
/// else the user's home directory from the password database); empty when there is none (never
/// a path relative to the working directory).
std::string defaultHistoryPath();

class StreamIngest;
struct RunState;
struct EventRow;

class HistoryStore {
 public:
  /// Opens (creating parent directories and the file when needed) and migrates `path`.
  /// Refuses, without modifying the file, a database whose schema is newer than this build.
  static Expected<HistoryStore> open(const std::string& path, const OpenOptions& options = {});

  HistoryStore(HistoryStore&&) noexcept;
  HistoryStore& operator=(HistoryStore&&) noexcept;
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;
  ~HistoryStore();

  const std::string& path() const;
  int schemaVersion() const;
  /// Runs PRAGMA integrity_check; "ok" or SQLite's report.
  Expected<std::string> integrityCheck();
  /// Marks `running` runs whose writer process is gone `incomplete` (done by open()).
  Expected<int> recoverInterruptedRuns();

  // Plans -------------------------------------------------------------------------------
  /// Stores the plan document (planToJson) and its ops (planned_ops rows).
  Expected<PlanId> addPlan(const Plan& plan, std::string_view name = {});
  Expected<Plan> loadPlan(PlanId id);
  Status linkRunToPlan(RunId run, PlanId plan);

  // Runs --------------------------------------------------------------------------------
  Expected<std::vector<RunSummary>> listRuns();
  Expected<RunSummary> runSummary(RunId id);
  Status renameRun(RunId id, std::string_view name);
  Status annotateRun(RunId id, std::string_view notes);
  /// Deletes a run with its devices, events, memory samples and steps.
  Status deleteRun(RunId id);

  /// Measured events of a run, ordered by (device, start). `category` filters when given.
  Expected<std::vector<MeasuredEvent>> loadEvents(RunId id, std::optional<EventCategory> category = std::nullopt);
  /// Step times (ms) recorded for a run (executor summary or ProfilerStep# ranges).
  Expected<std::vector<double>> stepTimesMs(RunId id);
  /// The run's measured op ranges as a Plan the timeline can draw: ops in ms from the run's
  /// first event, per device in start order, metrics computed from the measured times; model,
  /// cluster and virtual stages are copied from the linked plan when there is one.
  /// `iteration` >= 0 keeps one iteration (times from its first op), -1 keeps all.
  Expected<Plan> runAsPlan(RunId id, int iteration = -1);

  // Ingest ------------------------------------------------------------------------------
  /// Creates a run in status `running`, owned by this process (for crash recovery).
  Expected<RunId> beginRun(const RunInfo& info);
  /// Sets the final status (and an optional message) and commits pending events.
  Status finishRun(RunId id, RunStatus status, std::string_view error = {});

  /// Imports a Chrome trace JSON file (ours, PyTorch profiler/Kineto, Perfetto) with a
  /// streamed SAX parse; malformed events are skipped and counted. The run is `complete`
  /// when the whole file parsed, else `incomplete` with the first error.
  Expected<ImportResult> importChromeTrace(const std::string& file, RunInfo info = {});
  /// Imports a whole binary trace stream file (one or several concatenated rank streams are
  /// not supported: one stream per file). Status follows StreamIngest::suggestedStatus().
  Expected<ImportResult> importStreamFile(const std::string& file, RunInfo info = {});
  /// Ingests a complete in-memory stream into a new run (tests, small files).
  Expected<RunId> ingestStream(std::string_view bytes, RunInfo info = {});

  /// Rows buffered in the open write transaction are committed once this many accumulate
  /// (or when finishRun/flush is called). Readers see events batch by batch.
  void setBatchRows(int rows);
  /// Commits the open write transaction, if any.
  Status flush();

  /// The raw connection (for tests and for migrations); owned by the store.
  sqlite3* connection() const;

  /// Opaque state (src/Impl.hpp), shared with the ingest and compare code of this module.
  struct Impl;
  /// This module's importers (src/TraceImport.cpp) write through the store's state.
  Impl& impl() { return *m_impl; }

 private:
  friend class StreamIngest;
  explicit HistoryStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

/// Live ingest of one rank's binary trace stream into a run while it arrives (the executor's
/// `run` command reads its child's stdout, the SSH deployer each remote rank's channel).
/// Several StreamIngest objects may feed the same run (one per rank) on the same store.
///
///   auto run = store.beginRun(info);
///   StreamIngest rank0(store, *run);
///   while (read chunk) rank0.feed(chunk);        // decodes, inserts; commits per batch
///   store.finishRun(*run, rank0.suggestedStatus(), rank0.problem());
class StreamIngest {
 public:
  StreamIngest(HistoryStore& store, RunId run);
  /// Decodes and stores every complete frame in `bytes`. Returns an error only for a
  /// database failure; stream corruption is remembered (problem()) and later bytes ignored.
  Status feed(std::string_view bytes);
  /// Commits what has been fed (call at EOF of the stream).
  Status flush();

  RunId runId() const { return m_run; }
  std::int64_t eventsStored() const { return m_events; }
  const std::optional<trace::Header>& header() const { return m_header; }
  bool summarySeen() const { return m_summary.has_value(); }
  /// The stream ended as streams end: with its summary, nothing cut short or corrupt.
  bool endedCleanly() const;
  /// complete: a summary with ok; failed: a summary with !ok or an error frame;
  /// incomplete: no summary (the stream stopped early), a truncated tail, or corruption.
  RunStatus suggestedStatus() const;
  /// Decoder error, truncation, the executor's first error message or the first event skipped
  /// ("" when none).
  std::string problem() const;
  /// Events not stored because their ids or times are out of range (eventRowProblem), with
  /// the first of them ("trace stream: byte N: …").
  std::int64_t skipped() const { return m_skipped; }
  const std::optional<std::string>& firstSkip() const { return m_firstSkip; }

 private:
  Status store(trace::Frame& frame);
  Status storeEvent(RunState& state, EventRow& row, std::int64_t startNs, std::int64_t endNs);
  void skip(const std::string& what);
  std::int64_t rankBaseNs() const;
  /// A time on this rank's clock on the run's, or nullopt when that does not fit 64 bits.
  std::optional<std::int64_t> toRunClock(const RunState& state, std::int64_t ns) const;

  HistoryStore* m_store;
  RunId m_run;
  trace::StreamDecoder m_decoder;
  trace::Frame m_frame;  ///< decoded into in place, so its strings keep their capacity
  std::optional<trace::Header> m_header;
  std::optional<trace::Summary> m_summary;
  std::vector<std::string> m_errors;
  std::int64_t m_events = 0;
  std::int64_t m_skipped = 0;
  std::optional<std::string> m_firstSkip;
};

}  // namespace pipestudio::history
