// Impossible requests and broken orders: clear messages, no crash, no hang.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "PlannerFixtures.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

std::string errorOf(const PlanRequest& r) {
  auto plan = makePlan(r);
  EXPECT_FALSE(plan.hasValue());
  return plan ? std::string() : plan.message();
}

TEST(BadRequest, MessagesSayWhatTheScheduleNeeds) {
  const auto model = test::equalLayers(8, 1, 1, 1);
  const auto cluster = test::freeCluster(8);
  struct Case {
    const char* schedule;
    int devices, microbatches, chunks;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"dualpipe", 3, 6, 2, "even number of devices"},
           {"dualpipe", 4, 2, 2, "at least 4 microbatches"},
           {"zb-h2", 4, 3, 1, "at least 4 microbatches"},
           {"interleaved-1f1b", 4, 3, 2, "at least 4 microbatches"},
           {"zb-v", 4, 8, 3, "even number of chunks"},
           {"v-half", 4, 8, 1, "v-half needs an even number of chunks"},
           {"v-min", 4, 8, 3, "v-min needs an even number of chunks"},
           {"bitpipe", 4, 8, 2, "multiple of four chunks"},
           {"1f1b", 4, 8, 2, "one chunk per device"},
           {"interleaved-1f1b", 4, 8, 3, "cannot divide 8 trainable layers"},  // over 4 devices × 3 chunks
           {"nope", 4, 8, 1, "unknown schedule 'nope'"},
           {"1f1b", 16, 8, 1, "exceeds the 8 GPUs"},
       }) {
    EXPECT_NE(errorOf(test::request(model, cluster, c.schedule, c.devices, c.microbatches, c.chunks)).find(c.says),
              std::string::npos)
        << c.schedule << " p=" << c.devices << " m=" << c.microbatches << " v=" << c.chunks;
  }
  auto part = test::request(model, cluster, "1f1b", 4, 8, 1);
  part.config.partition = "bogus";
  EXPECT_NE(errorOf(part).find("partition 'bogus' is not available"), std::string::npos);
}

// Issue 3: "chunks that do not divide the layers" — uniform refuses unequal chunks for
// schedules with several chunks per device and says what the schedule needs.
TEST(BadRequest, UniformRefusesChunksThatDoNotDivideTheLayers) {
  const auto cluster = test::freeCluster(8);
  const auto gptLike = test::equalLayers(26, 1, 1, 1);  // GPT-3 1.3B: 24 blocks + embedding + head
  const std::string msg = errorOf(test::request(gptLike, cluster, "zb-v", 4, 8, 2));
  EXPECT_NE(msg.find("zb-v needs chunks of equal size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("26 layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8 virtual stages (4 devices × 2 chunks)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("multiple of 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--partition balanced"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--partition dp"), std::string::npos) << msg;
  const std::string interleaved =
      errorOf(test::request(test::equalLayers(12, 1, 1, 1), cluster, "interleaved-1f1b", 4, 8, 2));
  EXPECT_NE(interleaved.find("interleaved-1f1b needs chunks of equal size"), std::string::npos) << interleaved;
  EXPECT_NE(errorOf(test::request(test::equalLayers(20, 1, 1, 1), cluster, "bitpipe", 4, 8, 4)).find("multiple of 8"),
            std::string::npos);

  // What keeps working: one chunk per device (near-even split), divisible counts, and the
  // partitioners that balance unequal chunks.
  for (const auto& [schedule, layers, chunks] : {std::tuple<std::string, int, int>{"1f1b", 26, 1},
                                                 {"zb-h1", 26, 1},
                                                 {"dualpipe", 26, 2},
                                                 {"zb-v", 24, 2},
                                                 {"interleaved-1f1b", 16, 2},
                                                 {"bitpipe", 32, 4}}) {
    auto plan = makePlan(test::request(test::equalLayers(layers, 1, 1, 1), cluster, schedule, 4, 8, chunks));
    EXPECT_THAT(plan, HasValue()) << schedule;
  }
  auto balanced = test::request(gptLike, cluster, "zb-v", 4, 8, 2);
  balanced.config.partition = "balanced";
  auto plan = makePlan(balanced);
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->virtualStages.size(), 8u);
}

// A layer without a finite duration (API callers can build one; the loaders refuse it)
// is reported by the simulator instead of stalling its event order.
TEST(BadRequest, NonFiniteDurationIsReported) {
  auto model = test::equalLayers(4, 1, 1, 1);
  model.components[0].layers[2].forwardMs = std::numeric_limits<double>::infinity();
  const std::string msg = errorOf(test::request(model, test::freeCluster(4), "1f1b", 4, 8, 1));
  EXPECT_NE(msg.find("has no finite duration"), std::string::npos) << msg;
}

TEST(BadRequest, MemoryLimitBelowOneMicrobatchAndInfeasiblePlans) {
  auto r = test::request(test::equalLayers(4, 1, 1, 1, 1'000'000'000), test::freeCluster(4), "gpipe", 4, 8, 1);
  r.config.memoryLimitBytes = 100'000'000;
  EXPECT_NE(errorOf(r).find("is below what one microbatch needs on device 0"), std::string::npos);
  // One microbatch fits (1 GB + static), eight in flight (GPipe) do not.
  r.config.memoryLimitBytes = 3'000'000'000;
  const std::string msg = errorOf(r);
  EXPECT_NE(msg.find("does not fit in memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device 0: peak"), std::string::npos) << msg;
  // The same limit is fine for 1F1B on the last device but not the first: still infeasible.
  r.config.schedule = "1f1b";
  r.config.memoryLimitBytes = 9'000'000'000;
  auto ok = makePlan(r);
  EXPECT_THAT(ok, HasValue());
}

TEST(Deadlock, PlantedCycleIsReported) {
  // Device 0 wants B of microbatch 0 before sending F of microbatch 1; device 1 wants F of
  // microbatch 1 before running B of microbatch 0: a cycle, reported instead of hanging.
  const auto model = test::equalLayers(2, 1, 1, 1);
  PlanRequest r = test::request(model, test::freeCluster(2), "1f1b", 2, 2, 1);
  ScheduleSkeleton s;
  for (int d = 0; d < 2; ++d) {
    VirtualStage vs;
    vs.id = d;
    vs.device = d;
    vs.component = 0;
    vs.firstLayer = d;
    vs.lastLayer = d;
    s.virtualStages.push_back(vs);
  }
  auto op = [](int stage, OpKind k, int mb) {
    OrderedOp o;
    o.virtualStage = stage;
    o.kind = k;
    o.microbatch = mb;
    return o;
  };
  s.devices = {{op(0, OpKind::F, 0), op(0, OpKind::BW, 0), op(0, OpKind::F, 1), op(0, OpKind::BW, 1)},
               {op(1, OpKind::F, 1), op(1, OpKind::F, 0), op(1, OpKind::BW, 0), op(1, OpKind::BW, 1)}};
  auto plan = simulate(r, s);
  ASSERT_FALSE(plan.hasValue());
  const std::string& msg = plan.message();
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device 0 waits at BW(stage 0, microbatch 0) for BW(stage 1, microbatch 0) on device 1"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("device 1 waits at F(stage 1, microbatch 1) for F(stage 0, microbatch 1) on device 0"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("cycle: device 0 → 1 → 0"), std::string::npos) << msg;

  // Self-wait: W before its B on one device.
  s.devices = {{op(0, OpKind::F, 0), op(0, OpKind::F, 1), op(0, OpKind::BW, 0), op(0, OpKind::BW, 1)},
               {op(1, OpKind::F, 0), op(1, OpKind::BW, 0), op(1, OpKind::F, 1), op(1, OpKind::BW, 1)}};
  EXPECT_TRUE(simulate(r, s).hasValue());
  // Missing and duplicated ops.
  auto broken = s;
  broken.devices[1].pop_back();
  auto missing = simulate(r, broken);
  EXPECT_THAT(missing, HasError("needs BW(stage 1, microbatch 1), which no device runs"));
  broken = s;
  broken.devices[0].push_back(op(0, OpKind::F, 1));
  auto dup = simulate(r, broken);
  EXPECT_THAT(dup, HasError("appears twice"));
  broken = s;
  broken.devices[0][0] = op(1, OpKind::F, 0);
  auto wrong = simulate(r, broken);
  EXPECT_THAT(wrong, HasError("belongs to device 1"));
}

}  // namespace
}  // namespace pipestudio
