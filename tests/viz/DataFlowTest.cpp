// The timeline's "waited for" and critical path name the producers the simulator waited for
// (issue 18 item 1), on the ControlNet and cascaded plans (diffusionpipe, frozen fill) where a
// rule other than plan/Dependencies.hpp's stageNeighbours names a different producer. The
// simulator's choice is read from what it recorded: an op that starts after its device went
// idle starts when a transfer to it ends, and that transfer names the producing stage.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/viz/TimelineData.hpp"
#include "support/BundledPlans.hpp"

namespace pipestudio::viz {
namespace {

constexpr double kEps = 1e-6;

std::shared_ptr<const Plan> diffusionPlan(const std::string& model, const std::string& fill) {
  return std::make_shared<const Plan>(test::diffusionPlan(model, fill));
}

// Whether the simulator delivered `from`'s output to `to` by a transfer ending at `to`'s start.
bool simulatorFed(const Plan& plan, const Op& from, const Op& to) {
  for (const Comm& c : plan.comms) {
    if (c.fromDevice == from.device && c.toDevice == to.device && c.microbatch == to.microbatch &&
        c.virtualStage == from.virtualStage && std::abs(c.endMs - to.startMs) < kEps) {
      return true;
    }
  }
  return false;
}

class DataFlow : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(DataFlow, WaitedForIsTheSimulatorsProducer) {
  const auto& [model, fill] = GetParam();
  const auto plan = diffusionPlan(model, fill);
  ASSERT_FALSE(plan->ops.empty());
  TimelineData data(plan);
  int waits = 0;
  for (std::size_t i = 0; i < plan->ops.size(); ++i) {
    const Op& op = plan->ops[i];
    const int prev = data.devicePredecessor(static_cast<int>(i));
    const double freeMs = prev >= 0 ? plan->op(prev).endMs : 0.0;
    if (op.startMs <= freeMs + kEps) continue;  // bound by its device, not by data
    const WaitReason why = data.waitReason(static_cast<int>(i));
    ASSERT_TRUE(why.waitedFor.valid()) << "op " << i;
    const Op& from = plan->op(why.waitedFor.index);
    EXPECT_FALSE(why.sameDevice) << "op " << i;
    EXPECT_TRUE(simulatorFed(*plan, from, op))
        << "op " << i << " (" << opKindName(op.kind) << " vs " << op.virtualStage << " mb " << op.microbatch
        << ") waited for " << opKindName(from.kind) << " vs " << from.virtualStage << " on device " << from.device;
    ++waits;
  }
  EXPECT_GT(waits, 0);
}

TEST_P(DataFlow, CriticalPathFollowsTheSimulatorsProducers) {
  const auto& [model, fill] = GetParam();
  const auto plan = diffusionPlan(model, fill);
  ASSERT_FALSE(plan->ops.empty());
  TimelineData data(plan);
  const std::vector<int> path = data.criticalPath();
  ASSERT_GE(path.size(), 2u);
  for (std::size_t k = 1; k < path.size(); ++k) {
    const Op& from = plan->op(path[k - 1]);
    const Op& to = plan->op(path[k]);
    if (data.devicePredecessor(path[k]) == path[k - 1]) {
      EXPECT_NEAR(to.startMs, from.endMs, kEps);  // a device-bound step: back to back
      continue;
    }
    EXPECT_TRUE(simulatorFed(*plan, from, to)) << "step " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Diffusion, DataFlow, test::diffusionDataFlowCases(), test::diffusionCaseName);

}  // namespace
}  // namespace pipestudio::viz
