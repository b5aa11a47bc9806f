#include <gtest/gtest.h>
#include <sqlite3.h>

#include <memory>

#include "TestSupport.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

// Events a stream of `frames` stores: op end frames and activities.
std::int64_t storedEvents(const std::vector<trace::Frame>& frames) {
  std::int64_t n = 0;
  for (const auto& f : frames) {
    if (const auto* o = std::get_if<trace::OpRange>(&f)) n += o->begin ? 0 : 1;
    if (std::holds_alternative<trace::Activity>(f)) ++n;
  }
  return n;
}
}  // namespace

TEST(StreamIngest, CompleteStreamStoresEveryRecord) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_TRUE(store);
  const auto frames = executorFrames(smallPlan(), {.iterations = 3});
  auto run = store->ingestStream(trace::encodeStream(frames));
  ASSERT_THAT(run, HasValue());
  auto s = store->runSummary(*run);
  EXPECT_EQ(s->status, RunStatus::Complete);
  EXPECT_EQ(s->events, storedEvents(frames));
  EXPECT_EQ(s->error, "");
  EXPECT_EQ(queryInt(*store, "SELECT COUNT(*) FROM memory_samples"), 3);
  EXPECT_EQ(queryInt(*store, "SELECT COUNT(*) FROM steps"), 3);
  EXPECT_EQ(queryInt(*store, "SELECT COUNT(*) FROM ranks WHERE host = 'testhost' AND device_name = 'cpu'"), 1);
  auto ops = store->loadEvents(*run, EventCategory::Op);
  ASSERT_TRUE(ops);
  EXPECT_EQ(ops->size(), smallPlan().ops.size() * 3);
  const auto& first = ops->front();
  EXPECT_EQ(first.name, "F");
  EXPECT_EQ(first.kind, static_cast<int>(OpKind::F));
  EXPECT_EQ(first.device, 0);
  EXPECT_EQ(first.iteration, 0);
  EXPECT_EQ(first.durationNs, 1'000'000);
  auto nccl = store->loadEvents(*run, EventCategory::Nccl);
  ASSERT_TRUE(nccl);
  ASSERT_FALSE(nccl->empty());
  EXPECT_EQ(nccl->front().name, "ncclDevKernel_SendRecv");
  EXPECT_EQ(nccl->front().bytes, 4096);
}

TEST(StreamIngest, TruncatedStreamsKeepEveryCompleteFrameAndAreIncomplete) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_TRUE(store);
  const auto frames = executorFrames(smallPlan(), {.iterations = 1});
  const std::string bytes = trace::encodeStream(frames);
  // Cut at every 7th byte (every offset is covered by tests/trace; this checks the store side).
  for (std::size_t cut = 0; cut < bytes.size(); cut += 7) {
    const auto decoded = trace::decodeAll(std::string_view(bytes).substr(0, cut));
    auto run = store->ingestStream(std::string_view(bytes).substr(0, cut));
    ASSERT_THAT(run, HasValue());
    auto s = store->runSummary(*run);
    EXPECT_EQ(s->status, RunStatus::Incomplete) << "cut " << cut;
    EXPECT_EQ(s->events, storedEvents(decoded.frames)) << "cut " << cut;
    EXPECT_FALSE(s->error.empty());
  }
}

TEST(StreamIngest, CorruptStreamReportsTheByteOffset) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_TRUE(store);
  const auto frames = executorFrames(smallPlan(), {.iterations = 1});
  std::string bytes = trace::encodeStream(frames);
  std::string prefix;
  trace::encodeStreamStart(prefix);
  for (std::size_t i = 0; i < 5; ++i) trace::encodeFrame(frames[i], prefix);
  bytes[prefix.size()] = 99;  // frame 5's type byte
  const std::string file = dir.file("corrupt.pstrace");
  writeFile(file, bytes);
  auto result = store->importStreamFile(file);
  ASSERT_THAT(result, HasValue());
  ASSERT_TRUE(result->firstError);
  EXPECT_NE(result->firstError->find("byte " + std::to_string(prefix.size())), std::string::npos)
      << *result->firstError;
  EXPECT_NE(result->firstError->find(file), std::string::npos);
  auto s = store->runSummary(result->runId);
  EXPECT_EQ(s->status, RunStatus::Incomplete);
  EXPECT_EQ(s->events, storedEvents({frames.begin(), frames.begin() + 5}));
  EXPECT_EQ(s->sourcePath, file);
}

TEST(StreamIngest, FailedRunsAndErrorFrames) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_TRUE(store);
  auto notOk = store->ingestStream(trace::encodeStream(executorFrames(smallPlan(), {.summaryOk = false})));
  ASSERT_TRUE(notOk);
  EXPECT_EQ(store->runSummary(*notOk)->status, RunStatus::Failed);

  auto frames = executorFrames(smallPlan(), {.withSummary = false});
  frames.emplace_back(trace::ErrorReport{1, "CUDA error: an illegal memory access was encountered"});
  auto crashed = store->ingestStream(trace::encodeStream(frames));
  ASSERT_TRUE(crashed);
  auto s = store->runSummary(*crashed);
  EXPECT_EQ(s->status, RunStatus::Failed);
  EXPECT_NE(s->error.find("rank 1: CUDA error"), std::string::npos) << s->error;
  EXPECT_EQ(queryInt(*store, "SELECT COUNT(*) FROM run_errors WHERE run_id = " + std::to_string(*crashed)), 1);

  auto stopped = store->ingestStream(trace::encodeStream(executorFrames(smallPlan(), {.withSummary = false})));
  ASSERT_TRUE(stopped);
  EXPECT_EQ(store->runSummary(*stopped)->status, RunStatus::Incomplete);
  EXPECT_NE(store->runSummary(*stopped)->error.find("without a summary"), std::string::npos);
}

TEST(StreamIngest, SeveralRanksFeedOneRunOnAlignedClocks) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_TRUE(store);
  auto run = store->beginRun({.name = "two ranks", .source = "deploy"});
  ASSERT_TRUE(run);
  // Rank 1 started its clock 3 ms after rank 0: its timestamps shift by +3 ms on the run clock.
  const auto r0 = executorFrames(smallPlan(), {.iterations = 1, .rank = 0, .withKernels = false});
  auto r1 = executorFrames(
      smallPlan(),
      {.iterations = 1, .rank = 1, .withKernels = false, .wallClockNs = 1'700'000'000'000'000'000 + 3'000'000});
  StreamIngest a(*store, *run);
  StreamIngest b(*store, *run);
  const std::string sa = trace::encodeStream(r0), sb = trace::encodeStream(r1);
  // Interleave chunks as a deployer reading two channels would.
  for (std::size_t off = 0; off < std::max(sa.size(), sb.size()); off += 13) {
    if (off < sa.size()) {
      ASSERT_TRUE(a.feed(std::string_view(sa).substr(off, 13)));
    }
    if (off < sb.size()) {
      ASSERT_TRUE(b.feed(std::string_view(sb).substr(off, 13)));
    }
  }
  EXPECT_EQ(a.suggestedStatus(), RunStatus::Complete);
  EXPECT_EQ(b.suggestedStatus(), RunStatus::Complete);
  auto finished = store->finishRun(*run, RunStatus::Complete);
  ASSERT_THAT(finished, HasValue());
  EXPECT_EQ(queryInt(*store, "SELECT COUNT(*) FROM ranks WHERE run_id = " + std::to_string(*run)), 2);
  auto events = store->loadEvents(*run, EventCategory::Op);
  ASSERT_TRUE(events);
  EXPECT_EQ(events->size(), 2 * smallPlan().ops.size());
  std::int64_t minStart = INT64_MAX, maxStart = INT64_MIN;
  for (const auto& e : *events) {
    minStart = std::min(minStart, e.startNs);
    maxStart = std::max(maxStart, e.startNs);
  }
  EXPECT_EQ(minStart, 0);
  EXPECT_EQ(maxStart, 3'000'000 + 7'000'000);  // rank 1's last op (7 ms) shifted by 3 ms
  EXPECT_EQ(store->runSummary(*run)->name, "two ranks");
}

TEST(StreamIngest, LargeStreamInSmallBatches) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_TRUE(store);
  store->setBatchRows(997);
  auto run = store->ingestStream(largeStream(20000, 4));
  ASSERT_THAT(run, HasValue());
  auto s = store->runSummary(*run);
  EXPECT_EQ(s->events, 20000);
  EXPECT_EQ(s->devices, 4);
  EXPECT_EQ(s->status, RunStatus::Complete);
  EXPECT_EQ(*store->integrityCheck(), "ok");
}

// Three runs ingested at once, in interleaved chunks and small transactions: events reach
// the table in blocks whose ids are, or are not, right after the table's last row (the ingest
// appends without a search only in the first case). Every event must land under its own run
// with seqs in arrival order: event k of each stream is seq k, on device k % 4, with
// correlation id k (kernels) or an op kind (every tenth event).
TEST(StreamIngest, InterleavedRunsKeepTheirOwnEventsInOrder) {
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_TRUE(store);
  store->setBatchRows(333);  // many transactions: each starts with the table's end unknown
  constexpr std::int64_t kEvents = 20000;
  const std::string stream = largeStream(kEvents, 4);
  std::vector<RunId> runs;
  std::vector<std::unique_ptr<StreamIngest>> ingests;
  std::vector<std::size_t> pos(3, 0);
  for (const char* name : {"a", "b", "c"}) {
    auto run = store->beginRun({.name = name, .source = "stream"});
    ASSERT_THAT(run, HasValue());
    runs.push_back(*run);
    ingests.push_back(std::make_unique<StreamIngest>(*store, *run));
  }
  // Run a gets ahead first (its blocks append while the others have no events). Then runs
  // and chunk sizes follow a fixed pseudo-random sequence: blocks mix the runs in every
  // order (a block's last row is not always its largest id; the largest may belong to a run
  // not in it) and each run gets stretches long enough to fill whole blocks alone.
  const Status head = ingests[0]->feed(std::string_view(stream).substr(0, 50'000));
  ASSERT_THAT(head, HasValue());
  pos[0] = 50'000;
  std::uint64_t lcg = 12345;
  const auto next = [&lcg](std::uint64_t bound) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::size_t>((lcg >> 33) % bound);
  };
  while (pos[0] < stream.size() || pos[1] < stream.size() || pos[2] < stream.size()) {
    const std::size_t r = next(3);
    const std::string_view chunk = std::string_view(stream).substr(std::min(pos[r], stream.size()), 1 + next(40000));
    const Status fed = ingests[r]->feed(chunk);
    ASSERT_THAT(fed, HasValue());
    pos[r] += chunk.size();
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {
    ASSERT_TRUE(store->finishRun(runs[r], ingests[r]->suggestedStatus(), ingests[r]->problem()));
  }
  for (RunId run : runs) {
    sqlite3_stmt* st = nullptr;
    const std::string sql =
        "SELECT seq, device, category, correlation, kind FROM run_events WHERE run_id = " + std::to_string(run) +
        " ORDER BY seq";
    ASSERT_EQ(sqlite3_prepare_v2(store->connection(), sql.c_str(), -1, &st, nullptr), SQLITE_OK);
    std::int64_t k = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
      ASSERT_EQ(sqlite3_column_int64(st, 0), k) << "run " << run;
      EXPECT_EQ(sqlite3_column_int64(st, 1), k % 4) << "run " << run << " seq " << k;
      if (k % 10 == 0) {
        EXPECT_EQ(sqlite3_column_int(st, 2), static_cast<int>(EventCategory::Op)) << "seq " << k;
        EXPECT_EQ(sqlite3_column_type(st, 4), SQLITE_INTEGER) << "seq " << k;
      } else {
        EXPECT_EQ(sqlite3_column_int64(st, 3), k) << "run " << run << " seq " << k;
      }
      ++k;
    }
    sqlite3_finalize(st);
    EXPECT_EQ(k, kEvents) << "run " << run;
    EXPECT_EQ(store->runSummary(run)->events, kEvents);
    EXPECT_EQ(store->runSummary(run)->status, RunStatus::Complete);
  }
  EXPECT_EQ(*store->integrityCheck(), "ok");
}
