// ZeroPP (issue 20; Tang et al. 2024, "Adaptive Blockwise Task-interleaved Pipeline
// Parallelism"): blocks of `unit` microbatches per chunk, backward split with the weight passes
// filling the waits, and under ZeRO-3 one parameter gather per block instead of one per pass.
// Checked against breadth-first (one block of all microbatches) and 1F1B in the paper's shape.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

#include "PlannerFixtures.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

// Runs of forwards of one stage in a device's order (a run is what one gather serves).
int forwardRuns(const Plan& plan) {
  int runs = 0;
  for (const auto& lane : planLanes(plan)) {
    int lastStage = -1;
    bool lastWasF = false;
    for (const OrderedOp& o : lane) {
      if (o.kind == OpKind::F) {
        if (!lastWasF || o.virtualStage != lastStage) ++runs;
        lastStage = o.virtualStage;
        lastWasF = true;
      } else if (o.kind == OpKind::B || o.kind == OpKind::BW) {
        lastWasF = false;
      }
    }
  }
  return runs;
}

// A GPT-style model on H100 nodes with a slow data-parallel link, trained with ZeRO-3 (data
// parallel 8 per pipeline rank): the regime ZeroPP was built for.
PlanRequest zeroRequest(const std::string& schedule, int p, int m, int chunks, int unit = 0) {
  PlanRequest r = test::bundledRequest("gpt3-1.3b", "h100-4x8-ib");
  r.config.schedule = schedule;
  r.config.devices = p;
  r.config.microbatches = m;
  r.config.chunksPerDevice = chunks;
  r.config.partition = "balanced";
  r.config.parallel.data = 8;
  r.config.parallel.zeroStage = 3;
  r.config.parallel.gradReduceInFp32 = true;  // FSDP with an fp32 reduce dtype, as the paper trains
  r.config.unitMicrobatches = unit;
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  return r;
}

TEST(ZeroPp, RegisteredWithItsUnitAndBlocksOfThatSize) {
  ASSERT_NE(findScheduleGenerator("zeropp"), nullptr);
  ASSERT_NE(findScheduleGenerator("breadth-first"), nullptr);
  const int p = 4, m = 16, v = 2;
  for (int unit : {1, 2, 4, 8}) {
    auto plan = makePlan(zeroRequest("zeropp", p, m, v, unit));
    ASSERT_THAT(plan, HasValue());
    EXPECT_EQ(plan->config.unitMicrobatches, unit);
    // Every device runs its forwards in runs of `unit` of one chunk, at most (block structure).
    EXPECT_GE(forwardRuns(*plan), p * v * m / unit) << unit;
    for (const auto& lane : planLanes(*plan)) {
      int run = 0, lastStage = -1;
      for (const OrderedOp& o : lane) {
        if (o.kind != OpKind::F) continue;
        run = o.virtualStage == lastStage ? run + 1 : 1;
        lastStage = o.virtualStage;
        EXPECT_LE(run, unit);
      }
    }
  }
  // The default unit is the device count.
  auto plan = makePlan(zeroRequest("zeropp", p, m, v));
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->config.unitMicrobatches, p);
  // A unit beyond the microbatches is refused with the numbers.
  auto refused = makePlan(zeroRequest("zeropp", p, m, v, m + 1));
  EXPECT_THAT(refused, HasError("--unit 17"));
}

// The paper's comparison in shape: Llama-3-8B, 4 pipeline stages, ZeRO-3 over 16 data-parallel
// ranks (each in a node of its own, so a gather is not hidden under one pass). ZeroPP is faster than 1F1B,
// ZB-H1 and interleaved 1F1B, which gather for every pass; breadth-first gathers least but
// holds every microbatch's activations and does not fit the GPUs; ZeroPP does. A larger unit
// gathers less and holds more.
PlanRequest llamaRequest(const std::string& schedule, int chunks, int unit = 0) {
  PlanRequest r = zeroRequest(schedule, 4, 32, chunks, unit);
  const PlanRequest llama = test::bundledRequest("llama3-8b", "h100-8x8-ib");
  r.model = llama.model;
  r.cluster = llama.cluster;
  // One GPU per node: each data-parallel rank crosses on its own NIC, a flat ring at the NIC's
  // rate (as the ranks of a TP 8 layout do). With 8 ranks of a group in a node NCCL's rings
  // would leave it through all eight NICs at once and a gather would hide under one pass.
  r.cluster.nodes.assign(64, NodeSpec{"node", 1, std::nullopt, std::nullopt});
  r.cluster.nvlinkDomain = 0;
  r.config.parallel.data = 16;
  r.config.memoryLimitBytes.reset();  // the GPUs' own memory
  return r;
}

TEST(ZeroPp, BeatsOneFOneBAndFitsWhereBreadthFirstDoesNot) {
  auto zeropp = makePlan(llamaRequest("zeropp", 2));
  ASSERT_THAT(zeropp, HasValue());
  for (const auto& [schedule, chunks] :
       {std::pair{"1f1b", 1}, std::pair{"zb-h1", 1}, std::pair{"interleaved-1f1b", 2}}) {
    auto other = makePlan(llamaRequest(schedule, chunks));
    ASSERT_THAT(other, HasValue());
    EXPECT_LT(zeropp->metrics.makespanMs, 0.9 * other->metrics.makespanMs) << schedule;
  }
  auto bfs = makePlan(llamaRequest("breadth-first", 2));
  EXPECT_THAT(bfs, HasError("does not fit in memory"));
  PlanRequest unlimited = llamaRequest("breadth-first", 2);
  unlimited.config.memoryLimitBytes = std::int64_t{1} << 50;
  auto bfsAnyway = makePlan(unlimited);
  ASSERT_THAT(bfsAnyway, HasValue());
  EXPECT_GT(test::worstPeak(*bfsAnyway), 2 * test::worstPeak(*zeropp));
  // The unit trades gathers for memory.
  PlanRequest small = llamaRequest("zeropp", 2, 2);
  small.config.memoryLimitBytes = std::int64_t{1} << 50;
  PlanRequest large = llamaRequest("zeropp", 2, 8);
  large.config.memoryLimitBytes = std::int64_t{1} << 50;
  auto u2 = makePlan(small);
  auto u8 = makePlan(large);
  ASSERT_THAT(u2, HasValue());
  ASSERT_THAT(u8, HasValue());
  EXPECT_LT(test::worstPeak(*u2), test::worstPeak(*zeropp));
  EXPECT_LT(test::worstPeak(*zeropp), test::worstPeak(*u8));
  EXPECT_GT(u2->metrics.makespanMs, zeropp->metrics.makespanMs);
  EXPECT_GT(zeropp->metrics.makespanMs, u8->metrics.makespanMs);
  // Without ZeRO-3 the blocks gather nothing: no saving is modelled.
  PlanRequest noZero = llamaRequest("zeropp", 2);
  noZero.config.parallel.zeroStage = 1;
  noZero.config.memoryLimitBytes = std::int64_t{1} << 50;
  auto plain = makePlan(noZero);
  ASSERT_THAT(plain, HasValue());
  for (const StageCosts& c : stageCosts(*plain)) {
    EXPECT_EQ(c.zeroGatherForwardMs, 0);
    EXPECT_EQ(c.zeroScatterWeightMs, 0);
  }
}

// The unit travels in the plan file and re-simulates to the same times.
TEST(ZeroPp, UnitRoundTripsThroughThePlanFile) {
  auto plan = makePlan(zeroRequest("zeropp", 4, 16, 2, 2));
  ASSERT_THAT(plan, HasValue());
  const auto dir = std::filesystem::temp_directory_path() / ("ps-zeropp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "zeropp.plan.json").string();
  ASSERT_TRUE(savePlan(path, *plan));
  auto back = loadPlan(path);
  std::filesystem::remove_all(dir);
  ASSERT_THAT(back, HasValue());
  EXPECT_EQ(back->config.unitMicrobatches, 2);
  auto again = resimulate(*back);
  ASSERT_THAT(again, HasValue());
  EXPECT_NEAR(again->metrics.makespanMs, plan->metrics.makespanMs, 1e-6 * plan->metrics.makespanMs);
}

}  // namespace
}  // namespace pipestudio
