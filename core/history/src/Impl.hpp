#pragma once
// The store's private state, shared by the store, the ingest paths and the comparisons.

#include <sqlite3.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "Sqlite.hpp"
#include "pipestudio/history/HistoryStore.hpp"

namespace pipestudio::history {

/// Per-device running aggregates of a run, kept while ingesting and written to run_metrics
/// at every commit (so a killed ingest leaves metrics that match its committed events).
struct DeviceAggregate {
  std::int64_t firstNs = INT64_MAX;
  std::int64_t lastNs = INT64_MIN;
  std::int64_t opBusyNs = 0;
  std::int64_t events = 0;
};

/// Ingest state of one run on this connection.
struct RunState {
  std::int64_t nextSeq = 0;
  std::int64_t nextMemorySeq = 0;
  std::int64_t committedEvents = 0;
  std::int64_t pendingEvents = 0;
  bool originKnown = false;
  std::int64_t originNs = 0;               ///< absolute time that stored times are relative to
  std::map<int, DeviceAggregate> devices;  ///< key -1: the whole run
  bool dirty = false;
};

/// An event about to be stored; strings are views valid until insertEvent returns. Ids are
/// held as read (64 bits), so eventRowProblem sees what a trace said before anything narrows it.
struct EventRow {
  EventCategory category = EventCategory::Op;
  std::int64_t device = -1;
  std::int64_t stream = 0;
  std::string_view name;
  std::int64_t startNs = 0;
  std::int64_t durationNs = 0;
  std::int64_t virtualStage = -1;
  std::int64_t microbatch = -1;
  std::int64_t iteration = -1;
  std::int64_t kind = -1;
  std::int64_t bytes = 0;
  std::int64_t correlationId = 0;
  std::string_view argsJson;
};

/// Why `row` cannot be stored, or nullopt: the one check every reader (stream, Chrome/Kineto,
/// nsys) applies before insert. Ids must fit a plan (device < kMaxPlanDevices, virtual stage <
/// kMaxPlanVirtualStages, microbatch < kMaxPlanMicrobatches; -1 for none), so that what reads a
/// run back (history show, export --run, compare) sizes its tables from bounded numbers; times
/// are within ±kMaxTraceTimeNs and durations non-negative, so no sum of two overflows.
/// "device 4294967297 is out of range (expected -1..999999)".
std::optional<std::string> eventRowProblem(const EventRow& row);

/// a + b and a − b, or nullopt when the result does not fit 64 bits: times from foreign
/// clocks (a rank's base time, a session start) are added and subtracted through these.
std::optional<std::int64_t> checkedAdd(std::int64_t a, std::int64_t b);
std::optional<std::int64_t> checkedSub(std::int64_t a, std::int64_t b);

/// Hash for heterogeneous lookup: the name cache is probed with the event's string_view, so
/// the per-event hit path neither copies nor allocates (C++20 transparent unordered lookup).
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

/// An event bound for the events table, held until its multi-row INSERT is executed. Plain
/// integers only; args text lives in Impl::bufferedArgs.
struct BufferedEvent {
  std::int64_t id = 0;  ///< run_id << 32 | seq
  std::int64_t nameId = 0;
  std::int64_t stream = 0;
  std::int64_t startNs = 0;
  std::int64_t durationNs = 0;
  std::int64_t bytes = 0;
  std::int64_t correlationId = 0;
  std::int32_t category = 0;
  std::int32_t device = -1;
  std::int32_t virtualStage = -1;
  std::int32_t microbatch = -1;
  std::int32_t iteration = -1;
  std::int32_t kind = -1;
  std::uint32_t argsOffset = 0;
  std::uint32_t argsBytes = 0;
  bool isOp = false;
  bool hasArgs = false;
};

/// Rows per multi-row INSERT into events. One statement execution per row was most of the
/// ingest profile (statement setup, cursor open and a B-tree descent from the root each
/// time); a multi-row VALUES list keeps one cursor on the table's last leaf, so appending is
/// O(1) per row and the per-statement cost is shared by the block's rows. 128 rows of 14
/// parameters fit SQLite's default parameter limit since 3.32 (32766); older libraries
/// (limit 999) get smaller blocks (Impl::eventBlockRows).
inline constexpr int kEventInsertRows = 128;
inline constexpr int kEventColumns = 14;  ///< bound per row, id included
/// Bytes of names the writer keeps cached (Impl::nameIds).
inline constexpr std::size_t kNameCacheBytes = std::size_t{64} << 20;

/// The id of a run's seq-th event: run_id << 32 | seq (Schema.cpp: a run's events are one
/// primary-key range, RUN_EVENT_RANGE).
constexpr std::int64_t eventId(RunId run, std::int64_t seq) { return (run << 32) | seq; }
/// SQL condition on events.id selecting the events of run ?1 (the range eventId spans). A
/// macro so that it joins the string literals of a statement: "... WHERE e." RUN_EVENT_RANGE.
#define RUN_EVENT_RANGE "id BETWEEN (?1 << 32) AND (?1 << 32) + 4294967295"

inline std::string withPath(const std::string& path, const std::string& message) { return path + ": " + message; }

struct HistoryStore::Impl {
  detail::Connection db;  ///< first: closed after every statement below is finalised
  std::string path;
  int version = 0;
  bool readOnly = false;
  int batchRows = 20000;
  /// The open write batch (begin() to commit()): many inserts share one transaction.
  std::optional<detail::Transaction> batch;
  int pendingRows = 0;
  std::chrono::steady_clock::time_point transactionStart;

  detail::Statement insertEvent;  ///< one row (the tail of a batch)
  int eventBlockRows = kEventInsertRows;
  detail::Statement insertEventBlock;  ///< eventBlockRows rows
  /// eventBlockRows rows without the id column: SQLite gives each the table's largest rowid
  /// plus one and appends without a B-tree search ("ROWIDs and the INTEGER PRIMARY KEY"), used
  /// only when exactly those ids are the ones wanted.
  detail::Statement appendEventBlock;
  detail::Statement maxEventId;
  /// The events table's largest id within the open transaction (-1: empty); unknown until
  /// read, and forgotten by begin(): another connection may write between our transactions.
  std::optional<std::int64_t> lastEventId;
  /// Events accepted by insert() and not yet in the events table. Always written before the
  /// transaction commits (commit() flushes first), so crash safety is that of the
  /// transaction: a committed event is stored, an uncommitted one never was.
  std::vector<BufferedEvent> bufferedEvents;
  std::string bufferedArgs;
  detail::Statement insertName;
  detail::Statement insertMemory;
  detail::Statement insertStep;
  detail::Statement upsertMetric;
  detail::Statement updateRunEvents;
  /// Name → id of the names interned so far; cleared when its names pass kNameCacheBytes, so a
  /// trace of many long distinct names costs database rows, not memory.
  std::unordered_map<std::string, std::int64_t, NameHash, std::equal_to<>> nameIds;
  std::size_t nameIdsBytes = 0;
  std::unordered_map<RunId, RunState> runs;

  ~Impl();
  Status prepareWriteStatements();
  Status begin();
  Status commit();
  /// Commits when the batch is full or has been open for more than a quarter second (live
  /// streams: readers see progress even when events trickle in).
  Status maybeCommit();
  /// Commits when the open transaction is older than a quarter second, whatever its size:
  /// called after each chunk of a live stream so a trickling run becomes visible promptly.
  Status commitIfStale();
  Expected<RunState*> runState(RunId run);
  Expected<std::int64_t> nameId(std::string_view name);
  /// Stores one event. Readers first skip (and count) rows eventRowProblem refuses; a row that
  /// gets here anyway is refused with an error rather than narrowed.
  Status insert(RunId run, RunState& state, const EventRow& row);
  /// Writes the buffered events into the events table (inside the open transaction).
  Status flushEvents();
  Status writeRunProgress(RunId run, RunState& state);
};

std::string hostName();
std::int64_t nowUnixMs();

/// Stores a Kineto "ProfilerStep#N" range (`rangeName`) of `durationNs` as step N of `run`, in
/// the open transaction; false when the name carries no step number (nothing is stored).
Expected<bool> storeProfilerStep(HistoryStore::Impl& im, RunId run, const std::string& rangeName,
                                 std::int64_t durationNs);

}  // namespace pipestudio::history
