#include <fstream>

#include "Impl.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/history/TraceImport.hpp"

namespace pipestudio::history {

using detail::Statement;

namespace {

EventCategory categoryOf(trace::Activity::Kind kind) {
  switch (kind) {
    case trace::Activity::Kind::Kernel:
      return EventCategory::Kernel;
    case trace::Activity::Kind::Memcpy:
      return EventCategory::Memcpy;
    case trace::Activity::Kind::Memset:
      return EventCategory::Memset;
    case trace::Activity::Kind::Nccl:
      return EventCategory::Nccl;
  }
  return EventCategory::Kernel;
}

Status execBound(HistoryStore::Impl& im, Statement& st) {
  const int rc = st.step();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Error{im.path + ": " + detail::lastError(im.db)};
  return {};
}

// Prepares `sql`, binds `values` to ?1, ?2, … in order and runs it.
template <typename... Values>
Status execWith(HistoryStore::Impl& im, std::string_view sql, const Values&... values) {
  Statement st(im.db, sql, nullptr);
  int i = 0;
  (st.bind(++i, values), ...);
  return execBound(im, st);
}

// Runs one of the store's kept statements, bound by the caller, and resets it for the next row.
Status stepKept(HistoryStore::Impl& im, Statement& st) {
  const int rc = st.step();
  st.reset();
  if (rc != SQLITE_DONE) return Error{im.path + ": " + detail::lastError(im.db)};
  return {};
}

// The rank's header in `ranks`; the run's host, backend and GPU from the first rank that names them.
Status storeHeader(HistoryStore::Impl& im, RunId run, const trace::Header& h) {
  PS_RETURN_IF_ERROR(im.begin());
  if (auto st = execWith(im,
                         "INSERT OR REPLACE INTO ranks(run_id, rank, world, host, backend, device_name, "
                         "clock_origin_ns, wall_clock_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                         run, h.rank, h.world, h.host, h.backend, h.deviceName, h.clockOriginNs, h.wallClockNs);
      !st) {
    return st;
  }
  return execWith(im,
                  "UPDATE runs SET host = CASE WHEN host = '' THEN ?2 ELSE host END, "
                  "backend = CASE WHEN backend = '' THEN ?3 ELSE backend END, "
                  "gpu = CASE WHEN gpu = '' THEN ?4 ELSE gpu END WHERE id = ?1",
                  run, h.host, h.backend, h.deviceName);
}

Status storeMemorySample(HistoryStore::Impl& im, RunId run, RunState& state, std::int64_t timeNs,
                         const trace::MemorySample& m) {
  PS_RETURN_IF_ERROR(im.begin());
  Statement& s = im.insertMemory;
  s.bind(1, run);
  s.bind(2, state.nextMemorySeq++);
  s.bind(3, m.device);
  s.bind(4, timeNs);
  s.bind(5, m.bytesInUse);
  s.bind(6, m.bytesReserved);
  PS_RETURN_IF_ERROR(stepKept(im, s));
  ++im.pendingRows;
  return im.maybeCommit();
}

Status storeError(HistoryStore::Impl& im, RunId run, const trace::ErrorReport& e) {
  PS_RETURN_IF_ERROR(im.begin());
  return execWith(im,
                  "INSERT INTO run_errors(run_id, seq, rank, message) VALUES(?1, "
                  "(SELECT IFNULL(MAX(seq) + 1, 0) FROM run_errors WHERE run_id = ?1), ?2, ?3)",
                  run, e.rank, e.message);
}

// The measured step times and the run's iterations and dropped records.
Status storeSummary(HistoryStore::Impl& im, RunId run, const trace::Summary& summary) {
  PS_RETURN_IF_ERROR(im.begin());
  for (std::size_t i = 0; i < summary.iterationMs.size(); ++i) {
    Statement& step = im.insertStep;
    step.bind(1, run);
    step.bind(2, static_cast<std::int64_t>(i));
    step.bind(3, summary.iterationMs[i]);
    PS_RETURN_IF_ERROR(stepKept(im, step));
  }
  return execWith(im,
                  "UPDATE runs SET iterations = MAX(iterations, ?2), "
                  "dropped_records = dropped_records + ?3 WHERE id = ?1",
                  run, summary.iterations, static_cast<std::int64_t>(summary.droppedRecords));
}

}  // namespace

StreamIngest::StreamIngest(HistoryStore& store, RunId run) : m_store(&store), m_run(run) {}

Status StreamIngest::feed(std::string_view bytes) {
  // At most 1 MiB at a time: the decoder copies what it is fed into its buffer, and a whole
  // in-memory stream (ingestStream) would otherwise be copied at once, page faults included;
  // this way the buffer stays small and in cache.
  constexpr std::size_t kSliceBytes = 1 << 20;
  do {
    const std::string_view slice = bytes.substr(0, kSliceBytes);
    bytes.remove_prefix(slice.size());
    m_decoder.feed(slice);
    while (m_decoder.next(m_frame)) {
      PS_RETURN_IF_ERROR(store(m_frame));
    }
  } while (!bytes.empty() && !m_decoder.error());
  return m_store->m_impl->commitIfStale();
}

Status StreamIngest::flush() { return m_store->m_impl->commit(); }

bool StreamIngest::endedCleanly() const {
  return !m_decoder.error() && m_decoder.pendingBytes() == 0 && m_summary.has_value();
}

RunStatus StreamIngest::suggestedStatus() const {
  if (m_decoder.error() || m_decoder.pendingBytes() > 0 || !m_summary) {
    return m_errors.empty() ? RunStatus::Incomplete : RunStatus::Failed;
  }
  return m_summary->ok && m_errors.empty() ? RunStatus::Complete : RunStatus::Failed;
}

std::string StreamIngest::problem() const {
  if (m_decoder.error()) return *m_decoder.error();
  if (!m_errors.empty()) return m_errors.front();
  if (m_decoder.pendingBytes() > 0) {
    return "trace stream: truncated after byte " + std::to_string(m_decoder.consumedBytes()) + " (" +
           std::to_string(m_decoder.pendingBytes()) + " bytes of an incomplete frame)";
  }
  if (!m_header) return "trace stream: no header received";
  if (!m_summary) return "trace stream: ended without a summary (the executor stopped early)";
  if (!m_summary->ok) return "executor reported failure";
  if (m_firstSkip) return std::to_string(m_skipped) + " event(s) skipped, first: " + *m_firstSkip;
  return {};
}

void StreamIngest::skip(const std::string& what) {
  ++m_skipped;
  if (!m_firstSkip) m_firstSkip = "trace stream: byte " + std::to_string(m_decoder.consumedBytes()) + ": " + what;
}

std::int64_t StreamIngest::rankBaseNs() const {
  if (!m_header) return 0;
  return m_header->wallClockNs != 0 ? m_header->wallClockNs : m_header->clockOriginNs;
}

std::optional<std::int64_t> StreamIngest::toRunClock(const RunState& state, std::int64_t ns) const {
  // Each rank timestamps relative to its own origin; its wall clock at that origin places it
  // on the run's (to NTP accuracy). Every step is checked: a hostile header or frame can put
  // any 64-bit value in each of these.
  const auto shift = checkedSub(rankBaseNs(), state.originNs);
  return shift ? checkedAdd(ns, *shift) : std::nullopt;
}

Status StreamIngest::storeEvent(RunState& state, EventRow& row, std::int64_t startNs, std::int64_t endNs) {
  const auto start = toRunClock(state, startNs);
  const auto duration = checkedSub(endNs, startNs);
  if (!start || !duration) {
    skip(std::string(eventCategoryName(row.category)) + " \"" + excerpt(row.name) + "\": times " +
         std::to_string(startNs) + ".." + std::to_string(endNs) + " ns do not fit 64 bits on the run's clock");
    return {};
  }
  row.startNs = *start;
  row.durationNs = *duration;
  if (auto problem = eventRowProblem(row)) {
    skip(std::string(eventCategoryName(row.category)) + " \"" + excerpt(row.name) + "\": " + *problem);
    return {};
  }
  auto& im = *m_store->m_impl;
  PS_RETURN_IF_ERROR(im.insert(m_run, state, row));
  ++m_events;
  return {};
}

Status StreamIngest::store(trace::Frame& frame) {
  HistoryStore::Impl& im = *m_store->m_impl;
  PS_ASSIGN_OR_RETURN(auto stateOr, im.runState(m_run));
  RunState& state = *stateOr;

  if (auto* h = std::get_if<trace::Header>(&frame)) {
    m_header = std::move(*h);
    if (!state.originKnown) {
      state.originKnown = true;
      state.originNs = rankBaseNs();
      state.dirty = true;
    }
    return storeHeader(im, m_run, *m_header);
  }
  if (auto* o = std::get_if<trace::OpRange>(&frame)) {
    if (o->begin) return {};  // live progress only; the end frame carries both times
    EventRow row;
    row.category = EventCategory::Op;
    row.device = o->device;
    row.name = opKindName(o->kind);
    row.virtualStage = o->virtualStage;
    row.microbatch = o->microbatch;
    row.iteration = o->iteration;
    row.kind = static_cast<int>(o->kind);
    return storeEvent(state, row, o->startNs, o->endNs);
  }
  if (auto* a = std::get_if<trace::Activity>(&frame)) {
    EventRow row;
    row.category = categoryOf(a->kind);
    row.device = a->device;
    row.stream = a->stream;
    row.name = a->name;
    row.bytes = static_cast<std::int64_t>(std::min<std::uint64_t>(a->bytes, INT64_MAX));
    row.correlationId = static_cast<std::int64_t>(a->correlationId);
    return storeEvent(state, row, a->startNs, a->endNs);
  }
  if (auto* m = std::get_if<trace::MemorySample>(&frame)) {
    const auto timeNs = toRunClock(state, m->timeNs);
    if (!timeNs || *timeNs < -kMaxTraceTimeNs || *timeNs > kMaxTraceTimeNs || m->device < -1 ||
        m->device >= kMaxPlanDevices) {
      skip("memory sample of device " + std::to_string(m->device) + " at " + std::to_string(m->timeNs) +
           " ns is out of range");
      return {};
    }
    return storeMemorySample(im, m_run, state, *timeNs, *m);
  }
  if (auto* e = std::get_if<trace::ErrorReport>(&frame)) {
    m_errors.push_back("rank " + std::to_string(e->rank) + ": " + e->message);
    return storeError(im, m_run, *e);
  }
  if (auto* s = std::get_if<trace::Summary>(&frame)) {
    m_summary = std::move(*s);
    return storeSummary(im, m_run, *m_summary);
  }
  return {};  // NcclId: bootstrap only, nothing to keep
}

Expected<RunId> HistoryStore::ingestStream(std::string_view bytes, RunInfo info) {
  if (info.source.empty()) info.source = "stream";
  PS_ASSIGN_OR_RETURN(auto run, beginRun(info));
  StreamIngest ingest(*this, run);
  if (auto st = ingest.feed(bytes); !st) {
    (void)finishRun(run, RunStatus::Incomplete, st.message());
    return st.error();
  }
  PS_RETURN_IF_ERROR(finishRun(run, ingest.suggestedStatus(), ingest.problem()));
  return run;
}

Expected<ImportResult> HistoryStore::importStreamFile(const std::string& file, RunInfo info) {
  PS_RETURN_IF_ERROR(checkRegularFile(file));  // a FIFO would block the open
  std::ifstream in(file, std::ios::binary);
  if (!in) return Error{file + ": cannot open"};
  if (info.source.empty()) info.source = "stream";
  if (info.sourcePath.empty()) info.sourcePath = file;
  PS_ASSIGN_OR_RETURN(auto run, beginRun(info));
  StreamIngest ingest(*this, run);
  std::string chunk(1 << 20, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));  // a read error sets badbit
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n == 0) break;
    if (auto st = ingest.feed(std::string_view(chunk.data(), n)); !st) {
      (void)finishRun(run, RunStatus::Incomplete, st.message());
      return st.error();
    }
  }
  if (in.bad()) {
    const std::string message = file + ": read error (the run keeps what was read before it)";
    (void)ingest.flush();
    (void)finishRun(run, RunStatus::Incomplete, message);
    return Error{message};
  }
  if (auto st = ingest.flush(); !st) {
    (void)finishRun(run, RunStatus::Incomplete, st.message());
    return st.error();
  }
  std::string problem = ingest.problem();
  if (!problem.empty() && problem.rfind("trace stream", 0) == 0) problem = file + ": " + problem;
  // A file that never got past its header (just the magic, cut in the header, a corrupt
  // header), or whose broken stream gave no event, holds no run: the import fails and leaves
  // nothing behind. A live run (StreamIngest) keeps such a run, marked incomplete.
  if (!ingest.header() || (ingest.eventsStored() == 0 && !ingest.endedCleanly())) {
    (void)deleteRun(run);
    const std::string why = problem.empty() ? file + ": trace stream: no header frame" : problem;
    return Error{why + (ingest.header() ? " (no event could be read; nothing imported)"
                                        : " (the stream has no complete header; nothing imported)")};
  }
  PS_RETURN_IF_ERROR(finishRun(run, ingest.suggestedStatus(), problem));
  ImportResult result;
  result.runId = run;
  result.events = ingest.eventsStored();
  result.skipped = ingest.skipped();
  if (!problem.empty()) result.firstError = problem;
  return result;
}

}  // namespace pipestudio::history
