#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "SyntheticPlan.hpp"
#include "pipestudio/viz/TimelineData.hpp"

namespace pipestudio::viz {
namespace {

using testing::syntheticPlan;

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
    const Lane& l = data.lanes()[static_cast<std::size_t>(lane)];
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
  EXPECT_DOUBLE_EQ(plan->ops[static_cast<std::size_t>(path.back())].endMs, last);
  for (std::size_t i = 1; i < path.size(); ++i) {
    EXPECT_LE(plan->ops[static_cast<std::size_t>(path[i - 1])].endMs,
              plan->ops[static_cast<std::size_t>(path[i])].startMs + 1e-9);
  }
  // The chain of B on device 0 contains every F of that microbatch and the later B's.
  int b00 = -1;
  for (std::size_t i = 0; i < plan->ops.size(); ++i) {
    if (plan->ops[i].kind == OpKind::B && plan->ops[i].microbatch == 3 && plan->ops[i].device == 2)
      b00 = static_cast<int>(i);
  }
  const auto chain = data.dependencyChain(b00);
  int forwards = 0;
  for (int op : chain) forwards += plan->ops[static_cast<std::size_t>(op)].kind == OpKind::F ? 1 : 0;
  EXPECT_EQ(forwards, 4);
  EXPECT_NE(data.describe({ItemRef::Kind::Op, b00}).find("waiting for"), std::string::npos);
}

TEST(TimelineData, HostilePlansDoNotCrash) {
  Plan plan = syntheticPlan(2, 2);
  plan.ops[0].virtualStage = 99;  // out of range stage
  plan.ops[1].device = -1;        // negative device is skipped
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
