// Schedule CSV round trip through the planner: export → import (re-simulated with the plan's
// model and cluster) gives the same order and the same metrics; `custom` plans from CSV.
#include <gtest/gtest.h>

#include "PlannerFixtures.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Export.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

ModelSpec unevenModel() {
  ModelSpec m = test::equalLayers(8, 1.0, 1.0, 1.0, 1 << 20, 1 << 18, 1 << 16);
  for (std::size_t i = 0; i < m.components[0].layers.size(); ++i) {
    Layer& l = m.components[0].layers[i];
    l.forwardMs = 0.6 + 0.1 * static_cast<double>(i);
    l.backwardInputMs = 0.9 + 0.05 * static_cast<double>(i % 3);
    l.backwardWeightMs = 0.4 + 0.1 * static_cast<double>(i % 2);
  }
  return m;
}

void expectSameOrder(const Plan& a, const Plan& b) {
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (int d = 0; d < a.config.devices; ++d) {
    std::vector<const Op*> x, y;
    for (const Op& op : a.ops) {
      if (op.device == d) x.push_back(&op);
    }
    for (const Op& op : b.ops) {
      if (op.device == d) y.push_back(&op);
    }
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i]->virtualStage, y[i]->virtualStage);
      EXPECT_EQ(x[i]->kind, y[i]->kind);
      EXPECT_EQ(x[i]->microbatch, y[i]->microbatch);
    }
  }
}

void expectSameMetrics(const Plan& a, const Plan& b) {
  EXPECT_DOUBLE_EQ(a.metrics.makespanMs, b.metrics.makespanMs);
  EXPECT_DOUBLE_EQ(a.metrics.bubbleRatio, b.metrics.bubbleRatio);
  ASSERT_EQ(a.metrics.devices.size(), b.metrics.devices.size());
  for (std::size_t d = 0; d < a.metrics.devices.size(); ++d) {
    EXPECT_DOUBLE_EQ(a.metrics.devices[d].busyMs, b.metrics.devices[d].busyMs);
    EXPECT_EQ(a.metrics.devices[d].peakMemoryBytes, b.metrics.devices[d].peakMemoryBytes);
  }
}

struct RoundTripCase {
  const char* schedule;
  int devices;
  int microbatches;
  int chunks;
};

class CsvRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(CsvRoundTrip, ExportImportKeepsOrderAndMetrics) {
  const RoundTripCase c = GetParam();
  const PlanRequest request =
      test::request(unevenModel(), test::freeCluster(4, 25.0, 5.0), c.schedule, c.devices, c.microbatches, c.chunks);
  auto plan = makePlan(request);
  ASSERT_THAT(plan, HasValue());
  auto csv = scheduleCsv(*plan);
  ASSERT_THAT(csv, HasValue());

  auto imported = importScheduleCsv(*plan, *csv, "rt.csv");
  ASSERT_THAT(imported, HasValue());
  EXPECT_EQ(imported->config.schedule, "custom");
  expectSameOrder(*plan, *imported);
  expectSameMetrics(*plan, *imported);

  // The same CSV as a `custom` plan from scratch: placement inferred from the rows.
  auto custom = makeCustomPlan(request, *csv, "rt.csv");
  ASSERT_THAT(custom, HasValue());
  expectSameOrder(*plan, *custom);
  expectSameMetrics(*plan, *custom);
  auto again = scheduleCsv(*custom);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *csv);
}

INSTANTIATE_TEST_SUITE_P(Schedules, CsvRoundTrip,
                         ::testing::Values(RoundTripCase{"1f1b", 4, 8, 1}, RoundTripCase{"zb-h1", 4, 8, 1},
                                           RoundTripCase{"interleaved-1f1b", 2, 4, 2}, RoundTripCase{"zb-v", 4, 8, 2},
                                           RoundTripCase{"zb-auto", 4, 8, 1}, RoundTripCase{"gpipe", 2, 3, 1}),
                         [](const ::testing::TestParamInfo<RoundTripCase>& caseInfo) {
                           std::string n = caseInfo.param.schedule;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

TEST(CsvImport, HandEditedOrderIsResimulated) {
  const PlanRequest request = test::request(unevenModel(), test::freeCluster(2), "1f1b", 2, 2, 1);
  auto plan = makePlan(request);
  ASSERT_THAT(plan, HasValue());
  // GPipe order instead of 1F1B: both forwards first.
  auto edited = importScheduleCsv(*plan, "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n");
  ASSERT_THAT(edited, HasValue());
  EXPECT_GE(edited->metrics.makespanMs, plan->metrics.makespanMs);
  EXPECT_GT(edited->metrics.devices[1].peakActivationBytes, plan->metrics.devices[1].peakActivationBytes);
}

TEST(CsvImport, DeadlockingOrderIsAnError) {
  const PlanRequest request = test::request(unevenModel(), test::freeCluster(2), "1f1b", 2, 2, 1);
  auto plan = makePlan(request);
  ASSERT_THAT(plan, HasValue());
  // Device 0 waits for B0's gradient before it has sent F1... and device 1 runs F1 first.
  auto bad = importScheduleCsv(*plan, "0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n", "dl.csv");
  EXPECT_THAT(bad, HasError("dl.csv"));
}

TEST(CsvImport, BadCsvNamesLineAndColumn) {
  const PlanRequest request = test::request(unevenModel(), test::freeCluster(2), "1f1b", 2, 2, 1);
  auto plan = makePlan(request);
  ASSERT_TRUE(plan);
  auto bad = importScheduleCsv(*plan, "0F0,0F1,0B0,0B1\n1F0,1Q0,1F1,1B1\n", "e.csv");
  EXPECT_THAT(bad, HasError("e.csv:2:5:"));
  auto custom = makeCustomPlan(request, "0F0,0F1,0B0,0B1,0B1\n1F0,1B0,1F1,1B1\n", "c.csv");
  EXPECT_THAT(custom, HasError("c.csv:1:17: '0B1': duplicated op"));
}

TEST(CsvImport, CustomWithoutCsvExplainsItself) {
  auto plan = makePlan(test::request(unevenModel(), test::freeCluster(2), "custom", 2, 2, 1));
  EXPECT_THAT(plan, HasError("--csv"));
}

}  // namespace
}  // namespace pipestudio
