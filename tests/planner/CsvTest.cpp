// Schedule CSV (torch.distributed.pipelining compute-only format): export, parse, hostile input,
// and the import round trip through the simulator.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pipestudio/planner/Export.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/PlanBuilder.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

// Two devices, one stage each, two microbatches, split backward (ZB-H1-like order).
Plan smallPlan() {
  return test::PlanBuilder("zb-h1", 2, 2)
      .backbone(2)
      .stagePerDevice()
      .order(0, "F0 F1 B0 W0 B1 W1")
      .order(1, ".  F0 B0 F1 B1 W0 W1")
      .build();
}

CsvScheduleShape shapeOf(const Plan& plan) {
  return {plan.config.devices, plan.config.microbatches, plan.virtualStages};
}

std::string errorOf(std::string_view csv, const CsvScheduleShape& shape) {
  auto parsed = parseScheduleCsv(csv, shape, "s.csv");
  EXPECT_FALSE(parsed.hasValue()) << csv;
  return parsed ? std::string() : parsed.message();
}

TEST(ScheduleCsv, ExportsOneRowPerDeviceInTorchActionSyntax) {
  auto csv = scheduleCsv(smallPlan());
  ASSERT_THAT(csv, HasValue());
  EXPECT_EQ(*csv, "0F0,0F1,0I0,0W0,0I1,0W1\r\n1F0,1I0,1F1,1I1,1W0,1W1\r\n");
}

TEST(ScheduleCsv, FusedBackwardIsTorchB) {
  Plan plan = smallPlan();
  for (Op& op : plan.ops) {
    if (op.kind == OpKind::B) op.kind = OpKind::BW;
  }
  std::erase_if(plan.ops, [](const Op& op) { return op.kind == OpKind::W; });
  auto csv = scheduleCsv(plan);
  ASSERT_TRUE(csv);
  EXPECT_EQ(*csv, "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n");
  auto parsed = parseScheduleCsv(*csv, shapeOf(plan));
  ASSERT_THAT(parsed, HasValue());
  EXPECT_EQ(parsed->devices[1][1].kind, OpKind::BW);
}

TEST(ScheduleCsv, ParseGivesBackTheSameOrder) {
  const Plan plan = smallPlan();
  auto csv = scheduleCsv(plan);
  ASSERT_TRUE(csv);
  auto parsed = parseScheduleCsv(*csv, shapeOf(plan));
  ASSERT_THAT(parsed, HasValue());
  ASSERT_EQ(parsed->devices.size(), 2u);
  std::size_t i = 0;
  for (int d = 0; d < 2; ++d) {
    for (const OrderedOp& o : parsed->devices[static_cast<std::size_t>(d)]) {
      const Op& op = plan.ops[i++];
      EXPECT_EQ(op.device, d);
      EXPECT_EQ(o.virtualStage, op.virtualStage);
      EXPECT_EQ(o.kind, op.kind);
      EXPECT_EQ(o.microbatch, op.microbatch);
    }
  }
  EXPECT_EQ(i, plan.ops.size());
}

TEST(ScheduleCsv, ToleratesIdleStepsQuotesSpacesAndLf) {
  const Plan plan = smallPlan();
  const std::string csv = "0F0,,0F1, 0I0 ,\"0W0\",0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n\n";
  auto parsed = parseScheduleCsv(csv, shapeOf(plan));
  ASSERT_THAT(parsed, HasValue());
  EXPECT_EQ(parsed->devices[0].size(), 6u);
  EXPECT_EQ(parsed->devices[0][3].kind, OpKind::W);
}

TEST(ScheduleCsv, InfersPlacementWithoutAPlan) {
  CsvScheduleShape shape{2, 1, {}};
  auto parsed = parseScheduleCsv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n", shape);
  ASSERT_THAT(parsed, HasValue());
  ASSERT_EQ(parsed->virtualStages.size(), 4u);
  EXPECT_EQ(parsed->virtualStages[3].device, 0);
  EXPECT_EQ(parsed->virtualStages[3].chunk, 1);
  EXPECT_EQ(parsed->virtualStages[2].device, 1);
}

TEST(ScheduleCsvHostile, UnknownActionNamesLineAndColumn) {
  const auto shape = shapeOf(smallPlan());
  const std::string e = errorOf("0F0,0F1,0X0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n", shape);
  EXPECT_NE(e.find("s.csv:1:9:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown action type 'X'"), std::string::npos) << e;
}

// compute_comms cells are checked and give no op (issue 28); a malformed one names its cell.
TEST(ScheduleCsvHostile, CommunicationActionsGiveNoOp) {
  auto parsed = parseScheduleCsv("0UNSHARD,0F0,0SEND_F0,0B0,0REDUCE_GRAD,0RESHARD\n", {1, 1, {}}, "s.csv");
  ASSERT_THAT(parsed, HasValue());
  EXPECT_EQ(parsed->devices.front().size(), 2U);
  const std::string e = errorOf("0F0,0UNSHARD3,0B0\n", {1, 1, {}});
  EXPECT_NE(e.find("s.csv:1:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("no microbatch"), std::string::npos) << e;
}

// A missing op, an op twice, a stage on another device: the message names the cell and what is wrong.
TEST(ScheduleCsvHostile, BadOrdersNameTheCell) {
  struct Case {
    const char* csv;
    const char* where;
    const char* what;
  };
  for (const Case& c : std::vector<Case>{
           {"0F0,0F1,0I0,0W0,0I1\n1F0,1I0,1F1,1I1,1W0,1W1\n", "s.csv:1:", "missing op 0W1"},
           {"0F0,0F1,0I0,0W0,0I1,0W1,0F1\n1F0,1I0,1F1,1I1,1W0,1W1\n",
            "s.csv:1:25:", "duplicated op (first at line 1, column 5)"},
           {"0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,0F1,1I1,1W0,1W1\n",
            "s.csv:2:9:", "stage 0 is placed on device 0, not on device 1"},
       }) {
    const std::string e = errorOf(c.csv, shapeOf(smallPlan()));
    EXPECT_NE(e.find(c.where), std::string::npos) << e;
    EXPECT_NE(e.find(c.what), std::string::npos) << e;
  }
}

TEST(ScheduleCsvHostile, StageAndMicrobatchOutOfRange) {
  const auto shape = shapeOf(smallPlan());
  EXPECT_NE(errorOf("0F0,0F1,7I0\n", shape).find("stage 7 does not exist (expected 0..1)"), std::string::npos);
  EXPECT_NE(errorOf("0F0,0F9,0I0\n", shape).find("microbatch 9 out of range (expected 0..1)"), std::string::npos);
  EXPECT_NE(errorOf("0F99999999999\n", shape).find("too large"), std::string::npos);
  EXPECT_NE(errorOf("0F\n", shape).find("missing microbatch"), std::string::npos);
  EXPECT_NE(errorOf("F0\n", shape).find("expected an action"), std::string::npos);
  EXPECT_NE(errorOf("0F0x\n", shape).find("unexpected characters"), std::string::npos);
}

TEST(ScheduleCsvHostile, TooManyRows) {
  const std::string e = errorOf("0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n2F0\n", shapeOf(smallPlan()));
  EXPECT_NE(e.find("s.csv:3:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("3 rank row(s) but the plan has 2 devices"), std::string::npos) << e;
}

// PyTorch lets a stage mix full B with split I/W (issue 28), one form per microbatch.
TEST(ScheduleCsvHostile, MixingFusedAndSplitBackward) {
  EXPECT_TRUE(parseScheduleCsv("0F0,0F1,0B0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n", shapeOf(smallPlan())).hasValue());
  const std::string e = errorOf("0F0,0F1,0B0,0I0,0B1\n1F0,1I0,1F1,1I1,1W0,1W1\n", shapeOf(smallPlan()));
  EXPECT_NE(e.find("both a full backward (B) and a split one"), std::string::npos) << e;
}

TEST(ScheduleCsvHostile, EmptyAndGarbageInput) {
  const auto shape = shapeOf(smallPlan());
  // An empty file is named as such (issue 27), not as its missing ops.
  EXPECT_NE(errorOf("", shape).find("has no actions (the file is empty or blank"), std::string::npos);
  EXPECT_FALSE(parseScheduleCsv(std::string("\0\xff\xfe,,\"", 6), shape).hasValue());
  EXPECT_FALSE(parseScheduleCsv("\"0F0", shape).hasValue());
  // Many problems: the report is bounded.
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "zz,";
  const std::string e = errorOf(many, shape);
  EXPECT_NE(e.find("further problems not shown"), std::string::npos);
  EXPECT_LT(e.size(), 4000u);
}

TEST(ScheduleCsvHostile, ExportRefusesOpsTorchCannotExpress) {
  Plan plan = smallPlan();
  plan.ops.push_back({0, 0, OpKind::N, 0, 10, 11, 0});
  auto csv = scheduleCsv(plan);
  EXPECT_THAT(csv, HasError("/ops/12"));
}

TEST(ScheduleCsvHostile, MissingFileIsAnError) {
  auto r = loadScheduleCsv("/nonexistent/dir/s.csv", shapeOf(smallPlan()));
  EXPECT_THAT(r, HasError("/nonexistent/dir/s.csv"));
}

TEST(ScheduleCsv, WriteAndLoadFile) {
  const Plan plan = smallPlan();
  const auto path = std::filesystem::temp_directory_path() / "pipestudio-csv-test.csv";
  ASSERT_TRUE(writeScheduleCsv(path.string(), plan));
  auto parsed = loadScheduleCsv(path.string(), shapeOf(plan));
  ASSERT_THAT(parsed, HasValue());
  EXPECT_EQ(parsed->devices[0].size(), 6u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace pipestudio
