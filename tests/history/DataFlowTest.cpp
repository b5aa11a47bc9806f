// The idle breakdown's producers are the simulator's (issue 18 item 1): a run recorded from a
// simulated ControlNet or cascaded plan (diffusionpipe, frozen fill), with the simulator's
// transfers as NCCL ranges on both ends, has no idle time left unexplained: every gap before
// an op is its producers' work, the transfer, or the schedule's own bubble. A producer chosen
// by another rule (s → s+1 in pipeline order) ends earlier than the one the simulator waited
// for, and the rest of the gap would show up as host wait.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "TestSupport.hpp"
#include "pipestudio/history/Compare.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio::history {
namespace {

using test::diffusionPlan;

// The plan run once as planned: op ranges at planned times, every simulated transfer as an
// NCCL range on its sending and its receiving device.
std::string recordedStream(const Plan& plan) {
  std::vector<trace::Frame> frames;
  trace::Header h;
  h.runId = "data-flow";
  h.world = plan.config.devices;
  h.host = "testhost";
  h.backend = "cpu";
  frames.emplace_back(h);
  auto ns = [](double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); };
  for (const Comm& c : plan.comms) {
    for (int device : {c.fromDevice, c.toDevice}) {
      frames.emplace_back(trace::Activity{trace::Activity::Kind::Nccl, device, 1, ns(c.startMs), ns(c.endMs),
                                          static_cast<std::uint64_t>(c.bytes), 0, "ncclDevKernel_SendRecv"});
    }
  }
  for (const Op& op : plan.ops) {
    frames.emplace_back(
        trace::OpRange{true, op.device, op.virtualStage, op.kind, op.microbatch, 0, ns(op.startMs), ns(op.startMs)});
    frames.emplace_back(
        trace::OpRange{false, op.device, op.virtualStage, op.kind, op.microbatch, 0, ns(op.startMs), ns(op.endMs)});
  }
  return trace::encodeStream(frames);
}

class DataFlow : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(DataFlow, IdleBreakdownWaitsForTheSimulatorsProducers) {
  const auto& [model, fill] = GetParam();
  const Plan plan = diffusionPlan(model, fill);
  ASSERT_FALSE(plan.ops.empty());
  ASSERT_FALSE(plan.comms.empty());
  testing::TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_THAT(store, HasValue());
  auto planId = store->addPlan(plan);
  ASSERT_THAT(planId, HasValue());
  auto run = store->ingestStream(recordedStream(plan));
  ASSERT_THAT(run, HasValue());
  ASSERT_TRUE(store->linkRunToPlan(*run, *planId));
  auto idle = idleBreakdown(*store, *run);
  ASSERT_THAT(idle, HasValue());
  ASSERT_EQ(idle->size(), static_cast<std::size_t>(plan.config.devices));
  double bubble = 0;
  for (const IdleBreakdown& row : *idle) {
    SCOPED_TRACE("device " + std::to_string(row.device));
    // Rounding to whole nanoseconds: well under a microsecond per device.
    EXPECT_NEAR(row.hostWaitMs, 0.0, 1e-3);
    EXPECT_NEAR(row.dependencyWaitMs, 0.0, 1e-3);
    EXPECT_NEAR(row.idleMs, row.communicationMs + row.bubbleMs, 1e-3);
    bubble += row.bubbleMs;
  }
  EXPECT_GT(bubble, 0.0);
}

// Directly: every op that started after its device went idle started when a transfer from
// one of its producers arrived (the simulator's binding producer, as its recorded transfer
// names it), and every producer named ran on another device before the op started or on the
// op's own device before it.
TEST_P(DataFlow, ProducersAreTheSimulatorsProducers) {
  const auto& [model, fill] = GetParam();
  const Plan plan = diffusionPlan(model, fill);
  ASSERT_FALSE(plan.ops.empty());
  const OpProducers producers(&plan, static_cast<int>(plan.virtualStages.size()) - 1);
  std::map<OpProducers::StageOp, std::vector<const Op*>> byName;
  for (const Op& op : plan.ops) byName[{op.virtualStage, op.kind, op.microbatch}].push_back(&op);
  std::map<int, double> deviceFreeMs;
  constexpr double kEps = 1e-6;
  int waits = 0;
  for (const Op& op : plan.ops) {
    SCOPED_TRACE(std::string(opKindName(op.kind)) + " vs " + std::to_string(op.virtualStage) + " mb " +
                 std::to_string(op.microbatch) + " on device " + std::to_string(op.device));
    const auto names = producers.of(op.virtualStage, op.kind, op.microbatch);
    for (const auto& name : names) {
      for (const Op* p : byName[name]) EXPECT_LE(p->endMs, op.startMs + kEps);
    }
    const double freeMs = deviceFreeMs.count(op.device) ? deviceFreeMs[op.device] : 0.0;
    deviceFreeMs[op.device] = op.endMs;
    if (op.startMs <= freeMs + kEps) continue;  // bound by its device
    bool fed = false;
    for (const Comm& c : plan.comms) {
      if (c.toDevice != op.device || c.microbatch != op.microbatch || std::abs(c.endMs - op.startMs) > kEps) continue;
      for (const auto& name : names) {
        for (const Op* p : byName[name]) fed = fed || (p->virtualStage == c.virtualStage && p->device == c.fromDevice);
      }
    }
    EXPECT_TRUE(fed) << "no named producer is the one whose transfer released it";
    ++waits;
  }
  EXPECT_GT(waits, 0);
}

INSTANTIATE_TEST_SUITE_P(Diffusion, DataFlow, test::diffusionDataFlowCases(), test::diffusionCaseName);

}  // namespace
}  // namespace pipestudio::history
