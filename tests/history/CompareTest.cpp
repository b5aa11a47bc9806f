#include <gtest/gtest.h>

#include "TestSupport.hpp"
#include "pipestudio/history/Compare.hpp"
#include "pipestudio/history/TraceImport.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

RunId ingest(HistoryStore& store, const StreamOptions& o, std::optional<PlanId> plan) {
  RunInfo info;
  info.planId = plan;
  auto run = store.ingestStream(trace::encodeStream(executorFrames(smallPlan(), o)), info);
  EXPECT_THAT(run, HasValue());
  return *run;
}

const NameComparison* row(const RunComparison& c, const std::string& name) {
  for (const auto& r : c.byName) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

}  // namespace

class CompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = HistoryStore::open(m_dir.file("h.sqlite"));
    ASSERT_THAT(s, HasValue());
    m_store.emplace(std::move(*s));
    auto p = m_store->addPlan(smallPlan());
    ASSERT_TRUE(p);
    m_plan = *p;
  }
  HistoryStore& store() { return *m_store; }
  TempDir m_dir;
  std::optional<HistoryStore> m_store;
  PlanId m_plan = 0;
};

TEST_F(CompareTest, RunVersusRunByNameDeviceAndStep) {
  const RunId a = ingest(store(), {.iterations = 2}, m_plan);
  const RunId b = ingest(store(), {.iterations = 2, .slowdown = 1.5}, m_plan);
  auto c = compareRuns(store(), a, b);
  ASSERT_THAT(c, HasValue());
  const auto* f = row(*c, "F");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(f->aMs, 8.0, 1e-9);  // 4 F ops × 2 iterations × 1 ms
  EXPECT_NEAR(f->bMs, 12.0, 1e-9);
  EXPECT_NEAR(f->deltaMs, 4.0, 1e-9);
  EXPECT_EQ(f->aCount, 8);
  EXPECT_EQ(f->bCount, 8);
  const auto* nccl = row(*c, "ncclDevKernel_SendRecv");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->aCount, 8);  // F into stage 1 and B into stage 0, 2 microbatches, 2 iterations
  ASSERT_EQ(c->byDevice.size(), 2u);
  EXPECT_NEAR(c->byDevice[0].aBusyMs, 12.0, 1e-9);
  EXPECT_NEAR(c->byDevice[0].bBusyMs, 18.0, 1e-9);
  // Device 1: ops 1..7 ms per iteration, iterations 10 ms apart (makespan 8 + 2): idle 2×(1+... )
  EXPECT_NEAR(c->byDevice[1].aIdleMs, 4.0, 1e-9);  // span 1..17 = 16, busy 12
  EXPECT_EQ(c->stepA.count, 2);
  EXPECT_NEAR(c->stepA.meanMs, 10.0, 1e-9);
  EXPECT_NEAR(c->stepB.meanMs, 14.0, 1e-9);

  const Json j = comparisonToJson(*c);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "by_device", "by_name", "step"}));
  for (const auto& r : j["by_name"]) {
    std::vector<std::string> k;
    for (auto it = r.begin(); it != r.end(); ++it) k.push_back(it.key());
    EXPECT_EQ(k, (std::vector<std::string>{"a_count", "a_ms", "b_count", "b_ms", "delta_ms", "name"}));
  }
  for (const auto& r : j["by_device"]) {
    std::vector<std::string> k;
    for (auto it = r.begin(); it != r.end(); ++it) k.push_back(it.key());
    EXPECT_EQ(k, (std::vector<std::string>{"a_busy_ms", "a_idle_ms", "b_busy_ms", "b_idle_ms", "device"}));
  }
  EXPECT_EQ(j["a"]["id"], a);
  EXPECT_EQ(j["step"]["a"]["count"], 2);
  EXPECT_NEAR(j["step"]["delta_mean_ms"].get<double>(), 4.0, 1e-9);
  EXPECT_NE(comparisonTable(*c).find("ncclDevKernel_SendRecv"), std::string::npos);

  EXPECT_FALSE(compareRuns(store(), a, 999));
}

TEST_F(CompareTest, RunVersusItsPlan) {
  const RunId exact = ingest(store(), {.iterations = 2}, m_plan);
  auto c = compareRunToPlan(store(), exact);
  ASSERT_THAT(c, HasValue());
  EXPECT_EQ(c->iterations, 2);
  EXPECT_EQ(c->ops.size(), smallPlan().ops.size());
  EXPECT_EQ(c->unmatchedPlanned, 0);
  EXPECT_EQ(c->unmatchedMeasured, 0);
  for (const auto& d : c->ops) {
    EXPECT_NEAR(d.startDriftMs, 0.0, 1e-9);
    EXPECT_NEAR(d.durationDeltaMs, 0.0, 1e-9);
    EXPECT_EQ(d.iterations, 2);
  }
  ASSERT_EQ(c->devices.size(), 2u);
  for (const auto& d : c->devices) EXPECT_NEAR(d.measuredBubbleMs, d.plannedBubbleMs, 1e-9);

  const RunId slow = ingest(store(), {.iterations = 1, .slowdown = 2.0}, m_plan);
  auto s = compareRunToPlan(store(), slow, std::nullopt, 3);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->mostDrifted.size(), 3u);
  // The last op of device 0 (W mb1, planned 7..8) drifts most: starts at 14, lasts 2.
  EXPECT_EQ(s->mostDrifted[0].device, 0);
  EXPECT_EQ(s->mostDrifted[0].kind, OpKind::W);
  EXPECT_EQ(s->mostDrifted[0].microbatch, 1);
  EXPECT_NEAR(s->mostDrifted[0].startDriftMs, 7.0, 1e-9);
  EXPECT_NEAR(s->mostDrifted[0].durationDeltaMs, 1.0, 1e-9);
  const Json j = planComparisonToJson(*s);
  EXPECT_EQ(j["most_drifted"].size(), 3u);
  EXPECT_EQ(j["plan"], m_plan);

  const RunId unlinked = ingest(store(), {}, std::nullopt);
  auto none = compareRunToPlan(store(), unlinked);
  EXPECT_THAT(none, HasError("not linked"));
  EXPECT_TRUE(compareRunToPlan(store(), unlinked, m_plan));
}

TEST_F(CompareTest, IdleBreakdownWithPlan) {
  const RunId run = ingest(store(), {.iterations = 1}, m_plan);
  auto idle = idleBreakdown(store(), run);
  ASSERT_THAT(idle, HasValue());
  ASSERT_EQ(idle->size(), 2u);
  const auto& d0 = (*idle)[0];
  // Device 0 waits 2..3 and 5..6 for device 1's B; 0.1 ms of each is NCCL; the plan has the
  // same gaps, so the rest is the schedule's own bubble.
  EXPECT_NEAR(d0.windowMs, 8.0, 1e-9);
  EXPECT_NEAR(d0.busyMs, 6.0, 1e-9);
  EXPECT_NEAR(d0.communicationMs, 0.2, 1e-9);
  EXPECT_NEAR(d0.bubbleMs, 1.8, 1e-9);
  EXPECT_NEAR(d0.dependencyWaitMs, 0.0, 1e-9);
  EXPECT_NEAR(d0.hostWaitMs, 0.0, 1e-9);
  const auto& d1 = (*idle)[1];
  // Device 1: fill 0..1 (0.1 ms of it NCCL) and drain 7..8.
  EXPECT_NEAR(d1.communicationMs, 0.1, 1e-9);
  EXPECT_NEAR(d1.bubbleMs, 1.9, 1e-9);
  for (const auto& r : *idle) {
    EXPECT_NEAR(r.idleMs, r.windowMs - r.busyMs, 1e-9);
    EXPECT_NEAR(r.idleMs, r.communicationMs + r.dependencyWaitMs + r.hostWaitMs + r.bubbleMs, 1e-9);
  }
  // Unlinked, the same waits count as dependency waits.
  const RunId bare = ingest(store(), {.iterations = 1}, std::nullopt);
  auto b = idleBreakdown(store(), bare);
  ASSERT_TRUE(b);
  EXPECT_NEAR((*b)[0].dependencyWaitMs, 1.8, 1e-9);
  EXPECT_NEAR((*b)[0].bubbleMs, 0.0, 1e-9);
}

TEST_F(CompareTest, IdleBreakdownSeparatesHostWait) {
  // device 0: F(s0) 0..1, then B(s0) 3.5..4.5; device 1: F(s1) 1..2, B(s1) 2..3.
  // B(s0) needs B(s1), ready at 3: device 0 waits 1..3 on device 1, then 0.5 ms on the host.
  std::vector<trace::Frame> frames;
  trace::Header h;
  h.wallClockNs = 1;
  frames.emplace_back(h);
  auto op = [&frames](int device, int stage, OpKind kind, double startMs, double endMs) {
    frames.emplace_back(trace::OpRange{false, device, stage, kind, 0, 0, static_cast<std::int64_t>(startMs * 1e6),
                                       static_cast<std::int64_t>(endMs * 1e6)});
  };
  op(0, 0, OpKind::F, 0, 1);
  op(1, 1, OpKind::F, 1, 2);
  op(1, 1, OpKind::B, 2, 3);
  op(0, 0, OpKind::B, 3.5, 4.5);
  frames.emplace_back(trace::Summary{1, 0, 0, true, {4.5}});
  auto run = store().ingestStream(trace::encodeStream(frames));
  ASSERT_TRUE(run);
  auto idle = idleBreakdown(store(), *run);
  ASSERT_TRUE(idle);
  ASSERT_EQ(idle->size(), 2u);
  EXPECT_NEAR((*idle)[0].dependencyWaitMs, 2.0, 1e-9);
  EXPECT_NEAR((*idle)[0].hostWaitMs, 0.5, 1e-9);
  EXPECT_NEAR((*idle)[0].bubbleMs, 0.0, 1e-9);
  EXPECT_NEAR((*idle)[1].bubbleMs, 2.5, 1e-9);  // fill 0..1, drain 3..4.5
  const Json j = idleBreakdownToJson(*idle);
  EXPECT_EQ(j[0]["host_wait_ms"].get<double>(), (*idle)[0].hostWaitMs);
}

TEST(StepStats, Statistics) {
  const StepStats s = stepStats({4, 1, 3, 2});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.meanMs, 2.5);
  EXPECT_DOUBLE_EQ(s.medianMs, 2.5);
  EXPECT_DOUBLE_EQ(s.minMs, 1);
  EXPECT_DOUBLE_EQ(s.maxMs, 4);
  EXPECT_NEAR(s.stddevMs, 1.2909944, 1e-6);
  EXPECT_EQ(stepStats({}).count, 0);
}

// Issue 28 item 8 / issue 29 item 3: a plain PyTorch profiler trace (no PP: annotations) keeps
// its ProfilerStep#N ranges on the host thread. Two ranks of HolisticTraceAnalysis' sampled
// trace (tests/data/trace/hta, two steps each): the comparison with a plan counts two
// iterations and reports busy time per iteration, not the whole capture as one.
TEST_F(CompareTest, PlainProfilerTracesHaveAnIterationPerProfilerStep) {
  const std::string dir = std::string(PIPESTUDIO_TEST_DATA) + "/trace/hta/";
  TraceImportOptions o;
  const Plan plan = smallPlan();
  o.plan = &plan;
  o.info.planId = m_plan;
  auto r = importTraces(store(), {dir + "rank0.json.gz", dir + "rank1.json.gz"}, o);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->measuredOps, 0);
  auto c = compareRunToPlan(store(), r->runId);
  ASSERT_THAT(c, HasValue());
  EXPECT_EQ(c->iterations, 2);
  ASSERT_GE(c->devices.size(), 2u);
  // Each rank's GPU was busy for hundreds of ms per step (HTA: 548 and 580 ms over both steps).
  for (int d = 0; d < 2; ++d) {
    const DeviceBubble& b = c->devices[static_cast<std::size_t>(d)];
    EXPECT_GT(b.measuredBusyMs, 200.0) << "device " << d;
    EXPECT_LT(b.measuredBusyMs, 400.0) << "device " << d;
    EXPECT_GT(b.measuredBubbleMs, 0.0) << "device " << d;
  }
  EXPECT_NE(planComparisonTable(*c).find("(2 iteration(s)"), std::string::npos) << planComparisonTable(*c);
}
