// Property tests over many random configurations for every schedule: every op exactly once,
// dependencies hold, no overlap on a device, metrics consistent with the ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "PlannerFixtures.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

ModelSpec randomModel(std::mt19937& rng, int layers) {
  std::uniform_real_distribution<double> ms(0.2, 3.0);
  std::uniform_int_distribution<std::int64_t> bytes(100, 5000);
  ModelSpec m = test::equalLayers(layers, 1, 1, 1);
  for (auto& l : m.components[0].layers) {
    l.forwardMs = ms(rng);
    l.backwardInputMs = ms(rng);
    l.backwardWeightMs = ms(rng);
    l.activationBytes = bytes(rng);
    l.weightGradBytes = *l.activationBytes / 3;
    l.outputBytes = bytes(rng) * 1000;
  }
  return m;
}

void checkPlan(const Plan& plan, const ScheduleGenerator& g, const std::string& what) {
  const int p = plan.config.devices;
  const int m = plan.config.microbatches;
  const auto nStages = plan.virtualStages.size();
  const int pipelines = g.pipelines();
  // Every op exactly once: for each microbatch, its pipeline's stages each have F and B
  // (+W when split), or BW.
  std::map<std::tuple<int, int, int>, const Op*> byKey;
  for (const Op& op : plan.ops) {
    const auto key = std::make_tuple(op.virtualStage, static_cast<int>(op.kind), op.microbatch);
    ASSERT_EQ(byKey.count(key), 0U) << what << ": duplicate op";
    byKey[key] = &op;
    ASSERT_EQ(plan.stage(op.virtualStage).device, op.device) << what;
  }
  const std::size_t perMb = (g.splitsBackward() ? 3U : 2U) * nStages / static_cast<std::size_t>(pipelines);
  ASSERT_EQ(plan.ops.size(), perMb * static_cast<std::size_t>(m)) << what;
  // Every microbatch passes through exactly one pipeline.
  for (int mb = 0; mb < m; ++mb) {
    int seen = -1;
    for (const auto& vs : plan.virtualStages) {
      if (byKey.count({vs.id, static_cast<int>(OpKind::F), mb})) {
        if (seen < 0) seen = vs.pipeline;
        ASSERT_EQ(seen, vs.pipeline) << what << ": microbatch " << mb << " in two pipelines";
      }
    }
  }
  // Dependencies hold.
  const OpKind back = g.splitsBackward() ? OpKind::B : OpKind::BW;
  for (const Op& op : plan.ops) {
    const VirtualStage& vs = plan.stage(op.virtualStage);
    auto find = [&](int stage, OpKind k) { return byKey.at({stage, static_cast<int>(k), op.microbatch}); };
    const bool firstOfPipeline = vs.id == 0 || plan.stage(vs.id - 1).pipeline != vs.pipeline;
    const bool lastOfPipeline =
        static_cast<std::size_t>(vs.id) + 1 == nStages || plan.stage(vs.id + 1).pipeline != vs.pipeline;
    if (op.kind == OpKind::F && !firstOfPipeline) {
      EXPECT_GE(op.startMs + 1e-9, find(vs.id - 1, OpKind::F)->endMs) << what;
    }
    if (op.kind == back) {
      EXPECT_GE(op.startMs + 1e-9, find(vs.id, OpKind::F)->endMs) << what;
      if (!lastOfPipeline) {
        EXPECT_GE(op.startMs + 1e-9, find(vs.id + 1, back)->endMs) << what;
      }
    }
    if (op.kind == OpKind::W) {
      EXPECT_GE(op.startMs + 1e-9, find(vs.id, OpKind::B)->endMs) << what;
    }
  }
  // No overlap on a device; plan order is execution order.
  std::vector<double> lastEnd(static_cast<std::size_t>(p), -1);
  std::vector<double> busy(static_cast<std::size_t>(p), 0);
  double first = 1e300, last = -1e300;
  for (const Op& op : plan.ops) {
    auto& e = lastEnd[static_cast<std::size_t>(op.device)];
    EXPECT_GE(op.startMs + 1e-9, e) << what << ": overlap on device " << op.device;
    EXPECT_GE(op.endMs, op.startMs);
    e = op.endMs;
    busy[static_cast<std::size_t>(op.device)] += op.endMs - op.startMs;
    first = std::min(first, op.startMs);
    last = std::max(last, op.endMs);
  }
  // Metrics consistent with the ops.
  EXPECT_NEAR(plan.metrics.makespanMs, last - first, 1e-6) << what;
  double total = 0;
  for (int d = 0; d < p; ++d) {
    EXPECT_NEAR(plan.metrics.devices[static_cast<std::size_t>(d)].busyMs, busy[static_cast<std::size_t>(d)], 1e-6);
    EXPECT_LE(plan.metrics.devices[static_cast<std::size_t>(d)].busyMs,
              plan.metrics.devices[static_cast<std::size_t>(d)].spanMs + 1e-6);
    total += busy[static_cast<std::size_t>(d)];
  }
  EXPECT_NEAR(plan.metrics.bubbleRatio, 1.0 - total / (p * plan.metrics.makespanMs), 1e-9) << what;
  // Communication: every comm lies between its producer's end and the consumer's start.
  for (const Comm& c : plan.comms) EXPECT_GE(c.endMs, c.startMs);
}

TEST(ScheduleProperties, RandomConfigurationsEverySchedule) {
  std::mt19937 rng(12345);
  int planned = 0;
  for (const ScheduleGenerator* g : scheduleGenerators()) {
    const std::string name(g->name());
    if (name == "zb-auto" || name == "custom") continue;  // covered by their own tests
    for (int trial = 0; trial < 25; ++trial) {
      int p = std::uniform_int_distribution<int>(1, 6)(rng);
      if (name == "dualpipe") p = 2 * std::uniform_int_distribution<int>(1, 3)(rng);
      int chunks = g->defaultChunksPerDevice();
      if (name == "interleaved-1f1b") chunks = std::uniform_int_distribution<int>(1, 3)(rng);
      // V shapes also with two Vs per device (four chunks) in a third of the trials.
      if ((name == "zb-v" || name == "v-half" || name == "v-min") && trial % 3 == 0) chunks = 4;
      int m = std::uniform_int_distribution<int>(1, 4)(rng) * p + std::uniform_int_distribution<int>(0, 3)(rng);
      if (name == "interleaved-1f1b") m = p * std::uniform_int_distribution<int>(1, 4)(rng);
      if (g->pipelines() == 2 || name == "dualpipe") m += m % 2;
      const int layers = p * chunks * std::uniform_int_distribution<int>(1, 2)(rng) + (trial % 3);
      // Some trials on two nodes with slow links, so transfers and link contention matter.
      const ClusterSpec cluster = test::slowCluster(p, trial % 2 == 1);
      PlanRequest r = test::request(randomModel(rng, layers), cluster, name, p, m, chunks);
      const std::string what =
          name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(chunks);
      if (!g->validate({p, m, chunks})) continue;
      // Several chunks per device and a layer count they do not divide: uniform refuses
      // (issue 3, unequal chunks); balanced plans it.
      const int chunksPerPipeline = chunks / g->pipelines();
      if (chunksPerPipeline > 1 && layers % (p * chunksPerPipeline) != 0) {
        auto refused = makePlan(r);
        ASSERT_FALSE(refused.hasValue()) << what;
        EXPECT_THAT(refused, HasError("needs chunks of equal size")) << what;
        r.config.partition = "balanced";
      }
      auto plan = makePlan(r);
      ASSERT_THAT(plan, HasValue()) << what;
      checkPlan(*plan, *g, what);
      ++planned;
    }
  }
  EXPECT_GT(planned, 150);
}

TEST(ScheduleProperties, ResimulateReproducesThePlan) {
  for (const char* name : {"1f1b", "zb-v", "dualpipe"}) {
    const auto r = test::request(test::equalLayers(8, 1, 1.5, 0.5), test::freeCluster(4, 10, 5), name, 4, 8,
                                 findScheduleGenerator(name)->defaultChunksPerDevice());
    auto plan = makePlan(r);
    ASSERT_THAT(plan, HasValue());
    auto again = resimulate(*plan);
    ASSERT_THAT(again, HasValue());
    ASSERT_EQ(again->ops.size(), plan->ops.size());
    for (std::size_t i = 0; i < plan->ops.size(); ++i) EXPECT_DOUBLE_EQ(again->ops[i].startMs, plan->ops[i].startMs);
    EXPECT_DOUBLE_EQ(again->metrics.makespanMs, plan->metrics.makespanMs);
  }
}

TEST(ScheduleProperties, LinkTransfersSerialise) {
  // Two devices, slow link: transfers on the link never overlap.
  const auto r = test::request(test::equalLayers(2, 0.1, 0.1, 0.1, 1000, 400, 100'000'000),
                               test::freeCluster(2, 1.0, 0), "gpipe", 2, 6, 1);
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  std::vector<const Comm*> forward;
  for (const Comm& c : plan->comms) {
    if (c.fromDevice == 0) forward.push_back(&c);
  }
  ASSERT_EQ(forward.size(), 6U);
  for (std::size_t i = 1; i < forward.size(); ++i) {
    EXPECT_GE(forward[i]->startMs + 1e-9, forward[i - 1]->endMs);
    EXPECT_NEAR(forward[i]->endMs - forward[i]->startMs, 100.0, 1e-9);  // 1e8 bytes at 1 GB/s
  }
}

}  // namespace
}  // namespace pipestudio
