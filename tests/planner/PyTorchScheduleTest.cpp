// PyTorch's schedule language and schedules (issue 28): dualpipe-v never loses to PyTorch's
// ScheduleDualPipeV at unit costs, OVERLAP_F_B pairs and stages mixing full B with split I/W
// import and export, interleaved-1f1b runs every m ≥ p at Megatron-LM's bubble, PyTorch's
// schedule names resolve to ours, and interleaved-zb matches PyTorch's InterleavedZeroBubble
// within 1F1B-I's memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "PlannerFixtures.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/MustPlan.hpp"

namespace pipestudio::test {
namespace {

// Unit costs: every virtual stage one layer, F = I = W = 1 ms (full backward 2), free transfers,
// each activation held until its W (1000 bytes a chunk).
PlanRequest unitRequest(const std::string& schedule, int p, int m, int chunks) {
  return request(equalLayers(p * chunks, 1, 1, 1, 1000, 1000), freeCluster(p), schedule, p, m, chunks);
}

std::string readFixture(const std::string& name) {
  std::ifstream in(std::string(PIPESTUDIO_TEST_DATA) + "/pytorch/" + name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// PyTorch's own order for a plan's placement, timed by our simulator (ops back to back).
Plan timedOrder(const Plan& plan, std::vector<std::vector<OrderedOp>> order) {
  ScheduleSkeleton skeleton;
  skeleton.virtualStages = plan.virtualStages;
  skeleton.devices = std::move(order);
  Plan shell = plan;
  shell.ops.clear();
  shell.comms.clear();
  auto timed = simulateSkeleton(shell, skeleton);
  EXPECT_THAT(timed, HasValue());
  return timed ? *timed : Plan{};
}

ScheduleInput inputOf(const Plan& plan) {
  ScheduleInput in;
  in.shape = {plan.config.devices, plan.config.microbatches, plan.config.chunksPerDevice};
  in.virtualStages = plan.virtualStages;
  in.stages.assign(plan.virtualStages.size(), StageEstimate{1, 1, 1, 1000, 1000, 0});
  return in;
}

// Item 1: at unit costs on 4 ranks PyTorch's ScheduleDualPipeV takes 51, 63 and 99 steps for
// m = 8, 10, 16 (its order run one op after the other; overlapping its pairs hides nothing when
// there is no collective); ours never more, at no more activation memory than PyTorch's order.
TEST(PyTorchSchedules, DualPipeVNeverLosesToPyTorchsAtUnitCosts) {
  const int p = 4;
  for (const auto& [m, torchSteps] : {std::pair{8, 51.0}, std::pair{10, 63.0}, std::pair{16, 99.0}}) {
    const Plan ours = mustPlan(unitRequest("dualpipe-v", p, m, 2));
    EXPECT_LE(ours.metrics.makespanMs, torchSteps + 1e-9) << "m=" << m;
    auto torchOrder = schedules::torchDualPipeVOrder(inputOf(ours));
    ASSERT_TRUE(torchOrder.has_value()) << "m=" << m;
    const Plan theirs = timedOrder(ours, std::move(*torchOrder));
    EXPECT_NEAR(theirs.metrics.makespanMs, torchSteps, 1e-9) << "m=" << m;
    EXPECT_LE(worstPeak(ours), worstPeak(theirs)) << "m=" << m;
    // PyTorch's order as a CSV, imported: its OVERLAP_F_B pairs run as runtime.py runs them, F
    // then B each when its own input is there, in PyTorch's step count; timed as overlapped
    // pairs (--overlap-f-b), a pair waits for both inputs and takes longer.
    Plan paired = theirs;
    paired.config.overlapForwardBackward = true;
    auto csv = scheduleCsv(paired, CsvFormat::ComputeOnly);
    ASSERT_THAT(csv, HasValue());
    ASSERT_NE(csv->find("OVERLAP_F_B"), std::string::npos);
    PlanRequest custom = unitRequest("custom", p, m, 2);
    auto imported = makeCustomPlan(custom, *csv, "dualpipev.csv");
    ASSERT_THAT(imported, HasValue());
    EXPECT_NEAR(imported->metrics.makespanMs, torchSteps, 1e-9) << "m=" << m;
    custom.config.overlapForwardBackward = true;
    auto overlapped = makeCustomPlan(custom, *csv, "dualpipev.csv");
    ASSERT_THAT(overlapped, HasValue());
    EXPECT_GE(overlapped->metrics.makespanMs, torchSteps) << "m=" << m;
    // Slower than our own zb-v no more.
    EXPECT_LE(ours.metrics.makespanMs, mustPlan(unitRequest("zb-v", p, m, 2)).metrics.makespanMs + 1e-9);
  }
}

// Item 2: an order in PyTorch's compute-only format with an overlapped pair and stages that mix
// full B with split I/W (our fixture) imports as one plan and exports to the same text. Its pair
// runs as PyTorch's runtime runs OVERLAP_F_B (F, then B, each when its own input is there), or
// overlapped when the plan asks (--overlap-f-b: a custom function registered for OVERLAP_F_B).
TEST(PyTorchSchedules, OverlapPairsAndMixedBackwardsRoundTrip) {
  const std::string csv = readFixture("overlap_mixed_2rank_2mb.csv");
  ASSERT_FALSE(csv.empty());
  PlanRequest r = unitRequest("custom", 2, 2, 2);
  auto runtime = makeCustomPlan(r, csv, "overlap.csv");
  ASSERT_THAT(runtime, HasValue());
  EXPECT_FALSE(runtime->config.overlapForwardBackward);
  r.config.overlapForwardBackward = true;
  auto plan = makeCustomPlan(r, csv, "overlap.csv");
  ASSERT_THAT(plan, HasValue());
  EXPECT_TRUE(plan->config.overlapForwardBackward);
  // Stage 3 (device 0): a full backward for microbatch 0, split for microbatch 1.
  int fused = 0, split = 0;
  for (const Op& op : plan->ops) {
    if (op.virtualStage != 3) continue;
    fused += op.kind == OpKind::BW ? 1 : 0;
    split += op.kind == OpKind::B ? 1 : 0;
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(split, 1);
  // The pair starts together: 3F1 and 0B0 run as one group.
  const Op* f = nullptr;
  const Op* b = nullptr;
  for (const Op& op : plan->ops) {
    if (op.virtualStage == 3 && op.kind == OpKind::F && op.microbatch == 1) f = &op;
    if (op.virtualStage == 0 && op.kind == OpKind::BW && op.microbatch == 0) b = &op;
  }
  ASSERT_TRUE(f && b);
  EXPECT_NEAR(f->endMs, b->startMs, 1e-9);
  auto back = scheduleCsv(*plan, CsvFormat::ComputeOnly);
  ASSERT_THAT(back, HasValue());
  EXPECT_EQ(*back, csv);
  // compute_comms: the pair stays one action, its members' sends follow it.
  auto comms = scheduleCsv(*plan, CsvFormat::ComputeComms);
  ASSERT_THAT(comms, HasValue());
  EXPECT_NE(comms->find("(3F1;0B0)OVERLAP_F_B"), std::string::npos);
  EXPECT_NE(comms->find("UNSHARD"), std::string::npos);
  EXPECT_NE(comms->find("0REDUCE_GRAD"), std::string::npos);
}

// Item 2/3: compute_comms cells import (transfers and FSDP actions give no op), a malformed pair
// names the expected form.
TEST(PyTorchSchedules, ComputeCommsCellsImport) {
  const PlanRequest r = unitRequest("custom", 2, 1, 1);
  const std::string csv =
      "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD,0RESHARD\n"
      "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD,1RESHARD\n";
  auto plan = makeCustomPlan(r, csv, "comms.csv");
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->ops.size(), 4U);
  auto bad = makeCustomPlan(r, "(0F0;0B0;0F1)OVERLAP_F_B\n1F0,1B0\n", "bad.csv");
  EXPECT_THAT(bad, HasError("bad.csv:1:1"));
  EXPECT_THAT(bad, HasError("exactly two"));
}

// Item 6: a CSV with a row per rank of another pipeline size is refused with both numbers.
TEST(PyTorchSchedules, RowCountOtherThanDevicesIsRefused) {
  const PlanRequest r = unitRequest("custom", 4, 2, 1);
  auto plan = makeCustomPlan(r, "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n", "two.csv");
  EXPECT_THAT(plan, HasError("2 rank row(s)"));
  EXPECT_THAT(plan, HasError("4 devices"));
}

// Item 7: a legacy-dialect file read as current says so and names the flag.
TEST(PyTorchSchedules, LegacyFileReadAsCurrentNamesTheFlag) {
  const PlanRequest r = unitRequest("custom", 2, 2, 1);
  auto plan = makeCustomPlan(r, "0F0,0F1,0B0,0W0,0B1,0W1\n1F0,1B0,1F1,1W0,1B1,1W1\n", "legacy.csv");
  EXPECT_THAT(plan, HasError("--csv-dialect legacy"));
  auto bw = makeCustomPlan(r, "0F0,0F1,0BW0,0BW1\n1F0,1BW0,1F1,1BW1\n", "bw.csv");
  EXPECT_THAT(bw, HasError("--csv-dialect legacy"));
}

// Item 5: Megatron-LM's interleaved 1F1B for every m ≥ p: with equal stages its makespan is the
// busiest device's work plus (p−1)(F+B) of one chunk, 3mv + 3(p−1) at unit costs, whether or not
// p divides m (PyTorch's Interleaved1F1B takes 69 steps for p = 4, m = 10).
TEST(PyTorchSchedules, InterleavedRunsEveryMicrobatchCountAtMegatronsBubble) {
  for (int p : {2, 4, 8}) {
    for (int m = p; m <= 2 * p + 3; ++m) {
      const Plan plan = mustPlan(unitRequest("interleaved-1f1b", p, m, 2));
      EXPECT_NEAR(plan.metrics.makespanMs, 3.0 * m * 2 + 3.0 * (p - 1), 1e-9) << "p=" << p << " m=" << m;
    }
  }
  EXPECT_FALSE(makePlan(unitRequest("interleaved-1f1b", 4, 3, 2)).hasValue());
}

// Item 4: PyTorch's names (get_schedule_class, any case) plan as ours.
TEST(PyTorchSchedules, PyTorchNamesAreAliases) {
  EXPECT_EQ(scheduleForAlias("DualPipeV"), "dualpipe-v");
  EXPECT_EQ(scheduleForAlias("zbvzerobubble"), "zb-v");
  EXPECT_EQ(scheduleForAlias("LoopedBFS"), "breadth-first");
  EXPECT_EQ(scheduleForAlias("InterleavedZeroBubble"), "interleaved-zb");
  EXPECT_FALSE(scheduleForAlias("zb-v").has_value());
  for (const auto& [name, chunks] : {std::pair{"GPipe", 1}, std::pair{"1F1B", 1}, std::pair{"Interleaved1F1B", 2},
                                     std::pair{"ZBVZeroBubble", 2}, std::pair{"DualPipeV", 2}}) {
    const Plan plan = mustPlan(unitRequest(name, 4, 8, chunks));
    EXPECT_EQ(plan.config.schedule, std::string(*scheduleForAlias(name))) << name;
  }
}

// Item 4: interleaved-zb never loses to PyTorch's InterleavedZeroBubble at unit costs and keeps
// 1F1B-I's peak activation.
TEST(PyTorchSchedules, InterleavedZeroBubbleMatchesPyTorchsWithinOneFOneBIMemory) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 2 * p + 2, 4 * p}) {
      const Plan ours = mustPlan(unitRequest("interleaved-zb", p, m, 2));
      const Plan interleaved = mustPlan(unitRequest("interleaved-1f1b", p, m, 2));
      EXPECT_LE(worstPeak(ours), worstPeak(interleaved)) << "p=" << p << " m=" << m;
      auto torchOrder = schedules::torchInterleavedZeroBubbleOrder(inputOf(ours));
      ASSERT_TRUE(torchOrder.has_value()) << "p=" << p << " m=" << m;
      const Plan theirs = timedOrder(ours, std::move(*torchOrder));
      EXPECT_LE(ours.metrics.makespanMs, theirs.metrics.makespanMs + 1e-9) << "p=" << p << " m=" << m;
      EXPECT_LT(ours.metrics.makespanMs, interleaved.metrics.makespanMs) << "p=" << p << " m=" << m;
    }
  }
}

}  // namespace
}  // namespace pipestudio::test
