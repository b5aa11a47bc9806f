#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "pipestudio/viz/TimelineData.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/SyntheticPlan.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio::viz {
namespace {

using test::syntheticPlan;

TEST(TimelineData, LanesAreSortedAndBlocksBoundTheirIntervals) {
  auto plan = std::make_shared<const Plan>(syntheticPlan(4, 600));
  TimelineData data(plan);
  ASSERT_EQ(data.deviceCount(), 4);
  ASSERT_EQ(data.lanes().size(), 8u);  // compute + transfer lane per device
  std::size_t items = 0;
  for (const Lane& lane : data.lanes()) {
    items += lane.size();
    EXPECT_TRUE(std::is_sorted(lane.startMs.begin(), lane.startMs.end()));
    ASSERT_EQ(lane.blocks.size(), (lane.size() + TimelineData::kBlockSize - 1) / TimelineData::kBlockSize);
    for (std::size_t k = 0; k < lane.size(); ++k) {
      const LaneBlock& block = lane.blocks[k / TimelineData::kBlockSize];
      EXPECT_LE(block.minStartMs, lane.startMs[k]);
      EXPECT_GE(block.maxEndMs, lane.endMs[k]);
      EXPECT_LE(lane.endMs[k] - lane.startMs[k], lane.maxDurationMs + 1e-12);
    }
  }
  EXPECT_EQ(items, plan->ops.size() + plan->comms.size());
  EXPECT_DOUBLE_EQ(data.beginMs(), 0.0);
  double end = 0;
  for (const Op& op : plan->ops) end = std::max(end, op.endMs);
  EXPECT_GE(data.endMs(), end);
}

TEST(TimelineData, FirstVisibleStepsBackByTheLongestDuration) {
  // One long op starting before the window must still be found by the cull.
  Plan plan = syntheticPlan(1, 3, false);
  plan.ops[0].endMs = plan.ops[0].startMs + 10.0;  // F0 now spans [0, 10]
  for (std::size_t i = 1; i < plan.ops.size(); ++i) {
    plan.ops[i].startMs += 10.0;
    plan.ops[i].endMs += 10.0;
  }
  TimelineData data(std::make_shared<const Plan>(plan));
  const Lane& lane = data.lanes()[0];
  EXPECT_EQ(lane.firstVisible(5.0), 0u);
  const ItemRef hit = data.hitTest(5.0, lane.valueLo + 0.01);
  ASSERT_TRUE(hit.valid());
  EXPECT_EQ(hit.index, 0);
}

TEST(TimelineData, HitTestFindsEveryOpAtItsMiddle) {
  auto plan = std::make_shared<const Plan>(syntheticPlan(4, 32));
  TimelineData data(plan);
  for (std::size_t i = 0; i < plan->ops.size(); ++i) {
    const Op& op = plan->ops[i];
    const int lane = data.laneOf({ItemRef::Kind::Op, static_cast<std::int32_t>(i)});
    ASSERT_GE(lane, 0);
    const Lane& l = data.lane(lane);
    const ItemRef hit = data.hitTest(0.5 * (op.startMs + op.endMs), 0.5 * (l.valueLo + l.valueHi));
    ASSERT_EQ(hit.kind, ItemRef::Kind::Op) << "op " << i;
    EXPECT_EQ(hit.index, static_cast<int>(i));
  }
  // Outside any lane (between devices) and before time 0 nothing is hit.
  EXPECT_FALSE(data.hitTest(1.0, 0.99).valid());
  EXPECT_FALSE(data.hitTest(-5.0, 0.5).valid());
  EXPECT_FALSE(data.hitTest(1.0, -1.0).valid());
  EXPECT_FALSE(data.hitTest(1.0, 99.0).valid());
}

TEST(TimelineData, WaitReasonAndCriticalPath) {
  auto plan = std::make_shared<const Plan>(syntheticPlan(4, 8, false));
  TimelineData data(plan);
  // F of microbatch 0 on device 1 waited for F of microbatch 0 on device 0.
  int f01 = -1;
  int f00 = -1;
  for (std::size_t i = 0; i < plan->ops.size(); ++i) {
    const Op& op = plan->ops[i];
    if (op.kind == OpKind::F && op.microbatch == 0 && op.device == 1) f01 = static_cast<int>(i);
    if (op.kind == OpKind::F && op.microbatch == 0 && op.device == 0) f00 = static_cast<int>(i);
  }
  ASSERT_GE(f01, 0);
  const WaitReason why = data.waitReason(f01);
  EXPECT_EQ(why.waitedFor.index, f00);
  EXPECT_FALSE(why.sameDevice);
  EXPECT_FALSE(data.waitReason(f00).waitedFor.valid());

  const std::vector<int> path = data.criticalPath();
  ASSERT_GE(path.size(), 2u);
  EXPECT_EQ(path.front(), f00);
  double last = 0;
  for (const Op& op : plan->ops) last = std::max(last, op.endMs);
  EXPECT_DOUBLE_EQ(plan->op(path.back()).endMs, last);
  for (std::size_t i = 1; i < path.size(); ++i) {
    EXPECT_LE(plan->op(path[i - 1]).endMs, plan->op(path[i]).startMs + 1e-9);
  }
  // The chain of B on device 0 contains every F of that microbatch and the later B's.
  int b00 = -1;
  for (std::size_t i = 0; i < plan->ops.size(); ++i) {
    if (plan->ops[i].kind == OpKind::B && plan->ops[i].microbatch == 3 && plan->ops[i].device == 2)
      b00 = static_cast<int>(i);
  }
  const auto chain = data.dependencyChain(b00);
  int forwards = 0;
  for (int op : chain) forwards += plan->op(op).kind == OpKind::F ? 1 : 0;
  EXPECT_EQ(forwards, 4);
  EXPECT_NE(data.describe({ItemRef::Kind::Op, b00}).find("waiting for"), std::string::npos);
}

TEST(TimelineData, HostilePlansDoNotCrash) {
  Plan plan = syntheticPlan(2, 2);
  plan.ops[0].virtualStage = 99;            // out of range stage
  plan.ops[1].device = -1;                  // negative device is skipped
  plan.ops[2].endMs = plan.ops[2].startMs;  // zero duration
  plan.comms.push_back({-1, 0, 0, OpKind::F, 0, 0, 1, 0});
  TimelineData data(std::make_shared<const Plan>(plan));
  EXPECT_FALSE(data.describe({ItemRef::Kind::Op, 0}).empty());
  (void)data.criticalPath();
  (void)data.dependencyChain(0);
  TimelineData empty(std::make_shared<const Plan>(Plan{}));
  EXPECT_TRUE(empty.criticalPath().empty());
  EXPECT_FALSE(empty.hitTest(0, 0).valid());
}

}  // namespace
}  // namespace pipestudio::viz

namespace pipestudio::viz {
namespace {

int findOp(const Plan& plan, OpKind kind, int device, int microbatch) {
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (op.kind == kind && op.device == device && op.microbatch == microbatch) return static_cast<int>(i);
  }
  return -1;
}

TEST(TimelineData, SuccessorsMirrorPredecessors) {
  auto plan = std::make_shared<const Plan>(syntheticPlan(4, 6));
  TimelineData data(plan);
  for (int op = 0; op < static_cast<int>(plan->ops.size()); ++op) {
    for (int pred : data.dataPredecessors(op)) {
      const auto succ = data.dataSuccessors(pred);
      EXPECT_NE(std::find(succ.begin(), succ.end(), op), succ.end()) << pred << " → " << op;
    }
  }
  // F flows down the pipeline; the last stage's F feeds its own B; B flows back up; W after B.
  EXPECT_EQ(data.dataSuccessors(findOp(*plan, OpKind::F, 0, 2)), std::vector<int>{findOp(*plan, OpKind::F, 1, 2)});
  EXPECT_EQ(data.dataSuccessors(findOp(*plan, OpKind::F, 3, 2)), std::vector<int>{findOp(*plan, OpKind::B, 3, 2)});
  const auto fromB = data.dataSuccessors(findOp(*plan, OpKind::B, 2, 1));
  EXPECT_EQ(fromB.size(), 2u);  // B on device 1 and the W on device 2
  EXPECT_NE(std::find(fromB.begin(), fromB.end(), findOp(*plan, OpKind::W, 2, 1)), fromB.end());
  EXPECT_NE(std::find(fromB.begin(), fromB.end(), findOp(*plan, OpKind::B, 1, 1)), fromB.end());
  const int f = findOp(*plan, OpKind::F, 1, 3);
  ASSERT_GE(data.devicePredecessor(f), 0);
  EXPECT_EQ(data.deviceSuccessor(data.devicePredecessor(f)), f);
}

TEST(TimelineData, SlackIsTheTotalFloatToTheIterationEnd) {
  // Two devices, one microbatch, no transfers (hand-timed by syntheticPlan):
  //   GPU 0: F [0,1]            B [3,4] W [4,4.5]
  //   GPU 1:       F [1,2] B [2,3] W [3,3.5]
  // Everything but GPU 1's W lies on the chain to 4.5 ms; that W could end 1 ms later.
  auto plan = std::make_shared<const Plan>(syntheticPlan(2, 1, false));
  TimelineData data(plan);
  ASSERT_DOUBLE_EQ(data.endMs(), 4.5);
  EXPECT_DOUBLE_EQ(data.slackMs(findOp(*plan, OpKind::W, 1, 0)), 1.0);
  for (OpKind kind : {OpKind::F, OpKind::B}) {
    for (int d = 0; d < 2; ++d) EXPECT_DOUBLE_EQ(data.slackMs(findOp(*plan, kind, d, 0)), 0.0) << d;
  }
  EXPECT_DOUBLE_EQ(data.slackMs(findOp(*plan, OpKind::W, 0, 0)), 0.0);
  // On a larger plan every op of the critical path has no slack, and something has some.
  auto big = std::make_shared<const Plan>(syntheticPlan(4, 16));
  TimelineData bigData(big);
  for (int op : bigData.criticalPath()) EXPECT_NEAR(bigData.slackMs(op), 0.0, 1e-9) << op;
  double most = 0;
  for (int op = 0; op < static_cast<int>(big->ops.size()); ++op) most = std::max(most, bigData.slackMs(op));
  EXPECT_GT(most, 0.5);
  // A transfer after the last op that feeds nothing in this iteration (a frozen hand-off to the
  // next one) lengthens the drawn span but gives the critical path no slack.
  Plan trailing = syntheticPlan(4, 16);
  const auto last = std::max_element(trailing.ops.begin(), trailing.ops.end(),
                                     [](const Op& a, const Op& b) { return a.endMs < b.endMs; });
  Comm handOff;
  handOff.kind = OpKind::N;
  handOff.microbatch = last->microbatch;
  handOff.virtualStage = last->virtualStage;
  handOff.fromDevice = last->device;
  handOff.toDevice = (last->device + 1) % 4;
  handOff.startMs = last->endMs;
  handOff.endMs = last->endMs + 0.25;
  trailing.comms.push_back(handOff);
  TimelineData trailingData(std::make_shared<const Plan>(trailing));
  EXPECT_GT(trailingData.endMs(), last->endMs);
  for (int op : trailingData.criticalPath()) EXPECT_NEAR(trailingData.slackMs(op), 0.0, 1e-9) << op;
}

TEST(TimelineData, QueriesFindOpsByKindMicrobatchStageAndDevice) {
  auto plan = std::make_shared<const Plan>(syntheticPlan(4, 8));
  TimelineData data(plan);
  auto run = [&](const char* text) {
    auto query = parseOpQuery(text);
    EXPECT_THAT(query, HasValue()) << text;
    return query ? data.findOps(*query) : std::vector<int>{};
  };
  EXPECT_EQ(run("mb 7").size(), 4u * 3u);  // F, B, W on each of 4 devices
  EXPECT_EQ(run("W").size(), 4u * 8u);
  EXPECT_EQ(run("w mb7").size(), 4u);
  EXPECT_EQ(run("vs 2").size(), 8u * 3u);
  EXPECT_EQ(run("F B mb 4-7 gpu 0").size(), 8u);  // (F or B) × mb 4..7 on GPU 0
  EXPECT_EQ(run("mb=3, gpu:1, chunk 0").size(), 3u);
  EXPECT_EQ(run("").size(), plan->ops.size());
  for (int op : run("B gpu 2")) {
    EXPECT_EQ(plan->op(op).kind, OpKind::B);
    EXPECT_EQ(plan->op(op).device, 2);
  }
  for (const char* bad : {"xyz", "mb", "mb x", "mb 7-3", "gpu -1", "devices 3"}) {
    auto query = parseOpQuery(bad);
    ASSERT_FALSE(query) << bad;
    EXPECT_THAT(query, HasError("expected"));
  }
}

TEST(TimelineData, RangeMeasurementCountsBusyAndIdlePerDevice) {
  auto plan = std::make_shared<const Plan>(syntheticPlan(2, 1, false));  // timed as above
  TimelineData data(plan);
  const RangeMeasurement whole = data.measure(0, 4.5);
  ASSERT_EQ(whole.devices.size(), 2);
  EXPECT_DOUBLE_EQ(whole.durationMs(), 4.5);
  EXPECT_DOUBLE_EQ(whole.devices[0].busyMs, 2.5);
  EXPECT_DOUBLE_EQ(whole.devices[0].idleMs, 2.0);
  EXPECT_DOUBLE_EQ(whole.devices[1].busyMs, 2.5);
  EXPECT_DOUBLE_EQ(whole.idleMs(), 4.0);
  // A window cuts ops at its edges (and may be given backwards).
  const RangeMeasurement part = data.measure(3.25, 0.5);
  EXPECT_DOUBLE_EQ(part.fromMs, 0.5);
  EXPECT_DOUBLE_EQ(part.devices[0].busyMs, 0.5 + 0.25);
  EXPECT_DOUBLE_EQ(part.devices[0].idleMs, 2.75 - 0.75);
  EXPECT_DOUBLE_EQ(part.devices[1].busyMs, 1.0 + 1.0 + 0.25);
  EXPECT_DOUBLE_EQ(part.devices[1].idleMs, 0.5);
}

TEST(TimelineData, LanesAreNamed) {
  auto plan = std::make_shared<const Plan>(syntheticPlan(3, 2));
  TimelineData data(plan);
  EXPECT_EQ(data.laneName(0), "GPU 0");
  EXPECT_EQ(data.laneName(1), "GPU 0 transfers");
  EXPECT_EQ(data.laneName(4), "GPU 2");
  EXPECT_EQ(data.laneName(99), "");
  Plan two = syntheticPlan(2, 2);
  two.virtualStages[1].pipeline = 1;  // a second pipeline gets its own lane
  TimelineData bidirectional(std::make_shared<const Plan>(two));
  EXPECT_EQ(bidirectional.laneName(0), "GPU 0 · pipeline 0");
  EXPECT_EQ(bidirectional.laneName(1), "GPU 0 · pipeline 1");
  EXPECT_EQ(bidirectional.laneName(2), "GPU 0 transfers");
  // Measured costs carry no collectives.
  EXPECT_DOUBLE_EQ(data.collectiveShare(0).collectiveMs, 0.0);
}

}  // namespace
}  // namespace pipestudio::viz
