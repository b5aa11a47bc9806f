#include <gtest/gtest.h>

#include <set>

#include "pipestudio/executor/Executor.hpp"
#include "pipestudio/executor/Program.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/ListScheduledPlan.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

using exec::compileProgram;

TEST(Program, CompilesEverySchedule) {
  for (const std::string s : {"1f1b", "zb-h1", "zb-v", "fill"}) {
    const Plan plan = test::makeTestPlan(s, 4, 8);
    auto program = compileProgram(plan);
    ASSERT_THAT(program, HasValue()) << s;
    EXPECT_EQ(program->devices, 4);
    EXPECT_EQ(program->stepCount, static_cast<std::int64_t>(plan.ops.size()));
    EXPECT_GT(program->transferCount, 0);
    // Every transfer crosses devices and appears once as a send and once as a receive.
    std::set<std::pair<int, int>> sends, receives;
    for (const auto& dp : program->perDevice) {
      for (const auto& step : dp.steps) {
        for (const auto& t : step.sends) {
          EXPECT_NE(t.fromDevice, t.toDevice);
          EXPECT_TRUE(sends.insert({t.producerOp, t.consumerOp}).second);
        }
        for (const auto& t : step.receives) EXPECT_TRUE(receives.insert({t.producerOp, t.consumerOp}).second);
      }
      // Frozen outputs for the next iteration are received at the end of this one.
      for (const auto& t : dp.endReceives) EXPECT_TRUE(receives.insert({t.producerOp, t.consumerOp}).second);
    }
    EXPECT_EQ(sends, receives) << s;
  }
}

TEST(Program, PeakActivationsFollowTheConvention) {
  // 1F1B on 4 devices: device 0 holds p = 4 microbatches of activations at its peak.
  const Plan plan = test::makeTestPlan("1f1b", 4, 8);
  auto program = compileProgram(plan);
  ASSERT_TRUE(program.hasValue());
  EXPECT_EQ(program->perDevice[0].peakActivationBytes, 4 * (1 << 20));
  EXPECT_EQ(program->perDevice[3].peakActivationBytes, 1 << 20);
  EXPECT_GT(program->perDevice[0].staticBytes, 0);
}

TEST(Program, RefusesBackwardBeforeForward) {
  Plan plan = test::makeTestPlan("1f1b", 2, 2);
  // Move device 1's first BW in front of its first F.
  std::size_t f = 0, b = 0;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    if (plan.ops[i].device != 1) continue;
    if (plan.ops[i].kind == OpKind::F && plan.ops[i].microbatch == 0) f = i;
    if (plan.ops[i].kind == OpKind::BW && plan.ops[i].microbatch == 0) b = i;
  }
  std::swap(plan.ops[f], plan.ops[b]);
  auto program = compileProgram(plan);
  EXPECT_THAT(program, HasError("/ops/"));
  EXPECT_THAT(program, HasError("runs before"));
}

TEST(Program, RefusesOrdersThatDeadlock) {
  Plan plan = test::makeTestPlan("1f1b", 2, 2);
  // Device 0: F0 BW0 F1 BW1; device 1: F0 F1 BW1 BW0. Device 0's BW0 waits for device 1's
  // BW0, which comes after device 1's F1, which waits for device 0's F1, behind BW0: a cycle.
  auto find = [&](int device, OpKind kind, int mb) {
    return *std::find_if(plan.ops.begin(), plan.ops.end(),
                         [&](const Op& op) { return op.device == device && op.kind == kind && op.microbatch == mb; });
  };
  plan.ops = {find(0, OpKind::F, 0), find(0, OpKind::BW, 0), find(0, OpKind::F, 1),  find(0, OpKind::BW, 1),
              find(1, OpKind::F, 0), find(1, OpKind::F, 1),  find(1, OpKind::BW, 1), find(1, OpKind::BW, 0)};
  auto program = compileProgram(plan);
  EXPECT_THAT(program, HasError("cycle"));
  EXPECT_THAT(program, HasError("device 0"));
}

TEST(Program, RefusesMissingProducersAndFrozenBackward) {
  Plan plan = test::makeTestPlan("1f1b", 2, 2);
  // Drop device 0's F of microbatch 1 (its B and device 1's F need it).
  plan.ops.erase(std::find_if(plan.ops.begin(), plan.ops.end(), [](const Op& op) {
    return op.device == 0 && op.kind == OpKind::F && op.microbatch == 1;
  }));
  auto missing = compileProgram(plan);
  EXPECT_THAT(missing, HasError("microbatch 1"));

  Plan fill = test::makeTestPlan("fill", 2, 2);
  for (Op& op : fill.ops) {
    if (op.kind == OpKind::N) {
      op.kind = OpKind::B;
      break;
    }
  }
  auto frozen = compileProgram(fill);
  EXPECT_THAT(frozen, HasError("frozen"));
}

TEST(Program, RefusesInconsistentStages) {
  Plan plan = test::makeTestPlan("1f1b", 2, 2);
  plan.virtualStages[1].device = 0;  // ops of stage 1 still say device 1
  auto program = compileProgram(plan);
  EXPECT_THAT(program, HasError("/ops/"));

  Plan range = test::makeTestPlan("1f1b", 2, 2);
  range.virtualStages[1].lastLayer = 99;
  auto bad = compileProgram(range);
  EXPECT_THAT(bad, HasError("/virtual_stages/1"));

  Plan empty = test::makeTestPlan("1f1b", 2, 2);
  empty.ops.clear();
  EXPECT_FALSE(compileProgram(empty).hasValue());
}

TEST(ExecArgs, ParsesOptionsAndRefusesBadOnes) {
  auto ok = exec::parseExecArgs({"--plan", "p.json", "--backend", "cuda", "--rank", "1", "--world", "4", "--iterations",
                                 "3", "--max-op-ms", "2", "--device-memory", "8GiB"});
  ASSERT_THAT(ok, HasValue());
  EXPECT_EQ(ok->rank, 1);
  EXPECT_EQ(ok->world, 4);
  EXPECT_EQ(ok->iterations, 3);
  EXPECT_EQ(*ok->maxOpMs, 2.0);
  EXPECT_EQ(*ok->deviceMemoryBytes, std::int64_t{8} << 30);
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--backend", "cpu"},
                                              {"--plan", "p", "--backend", "tpu"},
                                              {"--plan", "p", "--iterations", "0"},
                                              {"--plan", "p", "--iterations", "x"},
                                              {"--plan", "p", "--rank", "2", "--world", "2"},
                                              {"--plan"},
                                              {"--plan", "p", "--bogus", "1"},
                                              {"--plan", "p", "--time-scale", "-1"},
                                              {"--plan", "p", "--device-memory", "lots"}}) {
    EXPECT_FALSE(exec::parseExecArgs(bad).hasValue());
  }
}

TEST(ExecArgs, TakesRankAndWorldFromLaunchers) {
  ::setenv("SLURM_PROCID", "2", 1);
  ::setenv("SLURM_NTASKS", "4", 1);
  auto o = exec::parseExecArgs({"--plan", "p.json", "--backend", "cuda"});
  ::unsetenv("SLURM_PROCID");
  ::unsetenv("SLURM_NTASKS");
  ASSERT_THAT(o, HasValue());
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->world, 4);
}

TEST(Fault, ParsesTheHookAndRefusesGarbage) {
  auto f = exec::parseFault("crash:rank=1:after_ops=5");
  ASSERT_TRUE(f.hasValue());
  EXPECT_EQ(f->mode, exec::FaultSpec::Mode::Crash);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->afterOps, 5);
  EXPECT_EQ(exec::parseFault("")->mode, exec::FaultSpec::Mode::None);
  for (const char* bad : {"explode:rank=1", "hang:rank=x", "hang:after_ops=0", "die:color=red", "hang:rank=-1"}) {
    EXPECT_FALSE(exec::parseFault(bad).hasValue()) << bad;
  }
}

}  // namespace
}  // namespace pipestudio
