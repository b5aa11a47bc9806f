#include <gtest/gtest.h>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"

using namespace pipestudio;

namespace {
Plan tinyPlan() {
  Plan p;
  p.config.schedule = "custom";
  p.config.devices = 2;
  p.config.microbatches = 1;
  p.model.name = "tiny";
  Component c{"backbone", true, {}, {}};
  for (int i = 0; i < 2; ++i) {
    Layer l;
    l.name = "l" + std::to_string(i);
    l.forwardMs = 1;
    l.backwardInputMs = 1;
    l.backwardWeightMs = 1;
    l.activationBytes = 100;
    l.weightGradBytes = 40;
    l.parameterBytes = 2000;
    c.layers.push_back(l);
  }
  p.model.components.push_back(c);
  p.cluster.name = "c";
  p.cluster.gpu = GpuSpec{"g", 100, 80, 0.5};
  p.cluster.nodes.push_back(NodeSpec{"n", 2, std::nullopt, std::nullopt});
  p.cluster.intraNode = LinkSpec{100, 0};
  p.cluster.interNode = LinkSpec{10, 0};
  p.virtualStages = {{0, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 1, 1, 0}};
  p.ops = {{0, 0, OpKind::F, 0, 0, 1, 0}, {1, 1, OpKind::F, 0, 1, 2, 0}, {1, 1, OpKind::B, 0, 2, 3, 0},
           {1, 1, OpKind::W, 0, 3, 4, 0}, {0, 0, OpKind::B, 0, 3, 4, 0}, {0, 0, OpKind::W, 0, 4, 5, 0}};
  p.metrics = computeMetrics(p);
  return p;
}

TEST(PlanKinds, TransfersNameWhatTheyCarry) {
  EXPECT_EQ(commPayloadName(OpKind::F), "activation");
  EXPECT_EQ(commPayloadName(OpKind::B), "gradient");
  EXPECT_EQ(commPayloadName(OpKind::BW), "gradient");
  EXPECT_EQ(commPayloadName(OpKind::N), "frozen output");
  EXPECT_EQ(commPayloadName(OpKind::S), "vocabulary");
  EXPECT_EQ(commPayloadName(OpKind::T), "vocabulary");
}

}  // namespace

TEST(Plan, MetricsFollowDesignDefinitions) {
  const Plan p = tinyPlan();
  EXPECT_DOUBLE_EQ(p.metrics.makespanMs, 5);
  EXPECT_DOUBLE_EQ(p.metrics.devices[0].busyMs, 3);
  EXPECT_DOUBLE_EQ(p.metrics.devices[0].spanMs, 5);
  EXPECT_DOUBLE_EQ(p.metrics.bubbleRatio, 1 - 6.0 / 10.0);
  // 1000 trainable params × 18 bytes + peak activation 100.
  EXPECT_EQ(p.metrics.devices[0].peakMemoryBytes, 18000 + 100);
  EXPECT_EQ(p.metrics.devices[0].peakActivationBytes, 100);
}

TEST(Plan, MemoryReleasesInTwoStepsForSplitBackward) {
  const MemoryTimeline t = memoryTimeline(tinyPlan());
  // device 0: +100 at 0, −60 at B end (4), −40 at W end (5).
  ASSERT_EQ(t.devices[0].size(), 3u);
  EXPECT_EQ(t.devices[0][1].bytes - t.staticBytes[0], 40);
  EXPECT_EQ(t.devices[0][2].bytes - t.staticBytes[0], 0);
}

TEST(Plan, JsonRoundTrip) {
  const Plan p = tinyPlan();
  const std::string path = testing::TempDir() + "/tiny.plan.json";
  ASSERT_TRUE(savePlan(path, p));
  auto loaded = loadPlan(path);
  ASSERT_TRUE(loaded) << loaded.message();
  EXPECT_EQ(loaded->ops.size(), p.ops.size());
  EXPECT_EQ(loaded->virtualStages.size(), 2u);
  EXPECT_DOUBLE_EQ(loaded->metrics.makespanMs, p.metrics.makespanMs);
  EXPECT_EQ(loaded->model.components[0].layers[1].name, "l1");
}
