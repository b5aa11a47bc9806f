// FSDP inside the pipeline (issue 28 item 3): PyTorch's UNSHARD / RESHARD / REDUCE_GRAD cells
// import as the gathers and reduces they are (one ZeRO-3 gather per UNSHARD…RESHARD window, one
// gradient reduce-scatter per stage), the compute_comms export places them where PyTorch's
// runtime lowering does, and the runtime's own rules refuse what it would refuse.
//
// Fixtures (tests/data/pytorch): fsdp_interleaved_2rank_4mb.csv is our compute-only export of
// the ZeRO-3 plan below (interleaved 1F1B, 2 devices × 4 chunks, 4 microbatches);
// fsdp_interleaved_2rank_4mb_comms.csv is what PyTorch's _add_unshard_reshard, _add_reduce_grad
// and _add_send_recv make of it (bench/pytorch/lower_csv.py on a local copy of PyTorch's
// schedules.py). With four stages per device and at most three unsharded at once, stages are
// resharded and unsharded again: several windows per stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/MustPlan.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

using test::mustPlan;

std::string readFixture(const std::string& name) {
  std::ifstream in(std::string(PIPESTUDIO_TEST_DATA) + "/pytorch/" + name, std::ios::binary);
  EXPECT_TRUE(in) << name;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Llama-3-8B, ZeRO-3 over 16 data-parallel ranks, each on an H100 node of its own (a flat ring
// at the NIC's rate): a pass does not hide its gather (ZeroPpTest's setting).
PlanRequest zeroRequest(const std::string& schedule, int zero = 3) {
  PlanRequest r = test::bundledRequest("llama3-8b", "h100-8x8-ib");
  r.cluster.nodes.assign(64, NodeSpec{"node", 1, std::nullopt, std::nullopt});
  r.cluster.nvlinkDomain = 0;
  r.config.schedule = schedule;
  r.config.devices = 2;
  r.config.microbatches = 4;
  r.config.chunksPerDevice = 4;
  // The split the fixtures were exported with (balanced's most even split then; balanced now
  // also weighs the splits of smaller memory limits), given so the order under test stays put.
  r.config.partition = "layout";
  r.config.layout = "Et*4|t*5|t*4|t*4|t*4|t*5|t*4|t*2L";
  r.config.parallel.data = 16;
  r.config.parallel.zeroStage = zero;
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  return r;
}

Plan importedWindows(const std::string& csv, int zero = 3) {
  return mustPlan(makeCustomPlan(zeroRequest("custom", zero), csv, "fsdp_comms.csv"));
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(FsdpActions, ComputeCommsExportPlacesThemWherePyTorchsRuntimeDoes) {
  const Plan plan = mustPlan(makePlan(zeroRequest("interleaved-1f1b")));
  auto computeOnly = scheduleCsv(plan, CsvFormat::ComputeOnly);
  ASSERT_THAT(computeOnly, HasValue());
  EXPECT_EQ(*computeOnly, readFixture("fsdp_interleaved_2rank_4mb.csv"));
  auto comms = scheduleCsv(plan, CsvFormat::ComputeComms);
  ASSERT_THAT(comms, HasValue());
  EXPECT_EQ(*comms, readFixture("fsdp_interleaved_2rank_4mb_comms.csv"));
}

TEST(FsdpActions, ImportedWindowsGatherOncePerWindowAndReduceOncePerStage) {
  const std::string csv = readFixture("fsdp_interleaved_2rank_4mb_comms.csv");
  const Plan plan = importedWindows(csv);
  ASSERT_EQ(static_cast<int>(plan.fsdpActions.size()),
            count(csv, "UNSHARD") + count(csv, "RESHARD") + count(csv, "REDUCE_GRAD"));
  EXPECT_TRUE(plan.config.fsdpWindows);
  EXPECT_GT(count(csv, "UNSHARD"), static_cast<int>(plan.virtualStages.size()));  // stages gathered again

  // Each pass's duration: the full per-pass cost, less the gather for every pass of a window
  // but its first F, B or BW, less the reduce-scatter for every W or BW but each stage's last.
  const std::vector<StageCosts> costs = CostedModel(plan).stages(plan.virtualStages);
  std::map<int, int> lastW;  // stage → index of its last W or BW in plan.ops
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const OpKind k = plan.ops[i].kind;
    if (k == OpKind::W || k == OpKind::BW) lastW[plan.ops[i].virtualStage] = static_cast<int>(i);
  }
  std::map<int, std::vector<const FsdpAction*>> actions;
  for (const FsdpAction& a : plan.fsdpActions) actions[a.device].push_back(&a);
  std::map<int, int> pass, next;
  std::map<int, bool> open, paid;
  int saved = 0;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    const int s = op.virtualStage;
    for (auto& k = next[op.device]; k < static_cast<int>(actions[op.device].size()) &&
                                    actions[op.device][static_cast<std::size_t>(k)]->beforePass <= pass[op.device];
         ++k) {
      const FsdpAction& a = *actions[op.device][static_cast<std::size_t>(k)];
      if (a.kind == FsdpActionKind::Unshard) {
        open[a.virtualStage] = true;
        paid[a.virtualStage] = false;
      }
      if (a.kind == FsdpActionKind::Reshard) open[a.virtualStage] = false;
    }
    ++pass[op.device];
    const StageCosts& c = costs[static_cast<std::size_t>(s)];
    double expected = op.kind == OpKind::F   ? c.forwardMs
                      : op.kind == OpKind::B ? c.backwardInputMs
                      : op.kind == OpKind::W ? c.backwardWeightMs
                                             : c.backwardInputMs + c.backwardWeightMs;
    ASSERT_TRUE(open[s]) << "op " << i << " outside a window of stage " << s;
    if (op.kind != OpKind::W) {
      if (paid[s]) {
        expected -= op.kind == OpKind::F ? c.zeroGatherForwardMs : c.zeroGatherBackwardMs;
        ++saved;
      }
      paid[s] = true;
    }
    if ((op.kind == OpKind::W || op.kind == OpKind::BW) && lastW[s] != static_cast<int>(i)) {
      expected -= c.zeroScatterWeightMs;
    }
    EXPECT_NEAR(op.durationMs(), expected, 1e-9 * std::max(1.0, expected)) << "op " << i;
  }
  EXPECT_GT(saved, 0);
  EXPECT_GT(costs.front().zeroGatherForwardMs, 0.0);  // the data-parallel ranks span nodes

  // The same order without its FSDP cells gathers for every pass (and is slower).
  auto computeOnly = makeCustomPlan(zeroRequest("custom"), readFixture("fsdp_interleaved_2rank_4mb.csv"), "c.csv");
  ASSERT_THAT(computeOnly, HasValue());
  EXPECT_TRUE(computeOnly->fsdpActions.empty());
  EXPECT_GT(computeOnly->metrics.makespanMs, plan.metrics.makespanMs);
}

TEST(FsdpActions, RoundTripThroughThePlanDocumentAndTheExport) {
  const std::string csv = readFixture("fsdp_interleaved_2rank_4mb_comms.csv");
  const Plan plan = importedWindows(csv);
  auto again = scheduleCsv(plan, CsvFormat::ComputeComms);
  ASSERT_THAT(again, HasValue());
  EXPECT_EQ(*again, csv);

  std::stringstream doc;
  ASSERT_TRUE(writePlanJson(doc, plan));
  EXPECT_NE(doc.str().find("\"fsdp_actions\""), std::string::npos);
  auto parsed = parseJson(doc.str(), "plan.json");
  ASSERT_THAT(parsed, HasValue());
  JsonReader reader(*parsed);
  auto loaded = readPlan(reader, reader.root());
  ASSERT_TRUE(reader.ok() && loaded) << reader.toError().message;
  EXPECT_EQ(loaded->fsdpActions, plan.fsdpActions);
  EXPECT_TRUE(loaded->config.fsdpWindows);
  auto timed = resimulate(*loaded);
  ASSERT_THAT(timed, HasValue());
  EXPECT_NEAR(timed->metrics.makespanMs, plan.metrics.makespanMs, 1e-9 * plan.metrics.makespanMs);

  // An action on a stage of another device, or past the device's passes, is refused.
  Plan bad = plan;
  bad.fsdpActions.front().device = 1 - bad.fsdpActions.front().device;
  EXPECT_THAT(validatePlanStructure(bad), HasError("/fsdp_actions/0/virtual_stage"));
  bad = plan;
  bad.fsdpActions.back().beforePass = 1000;
  EXPECT_THAT(validatePlanStructure(bad), HasError("before_pass"));
}

// The fixture with one cell edited: `from` (the first match on `row`) replaced by `to`.
std::string edited(const std::string& csv, int row, const std::string& from, const std::string& to) {
  std::size_t lineStart = 0;
  for (int r = 0; r < row; ++r) lineStart = csv.find('\n', lineStart) + 1;
  const std::size_t at = csv.find(from, lineStart);
  EXPECT_NE(at, std::string::npos) << from;
  std::string out = csv;
  return at == std::string::npos ? out : out.replace(at, from.size(), to);
}

std::string refusal(const std::string& csv) {
  auto plan = makeCustomPlan(zeroRequest("custom"), csv, "fsdp_comms.csv");
  EXPECT_FALSE(plan.hasValue());
  return plan ? std::string() : plan.message();
}

TEST(FsdpActions, RuntimeRulesRefuseWhatPyTorchWouldRefuse) {
  const std::string csv = readFixture("fsdp_interleaved_2rank_4mb_comms.csv");
  // Rank 0 starts with 0UNSHARD,2UNSHARD,4UNSHARD,0F0 (the three stages it computes next).
  ASSERT_EQ(csv.rfind("0UNSHARD,2UNSHARD,4UNSHARD,0F0,", 0), 0u) << csv.substr(0, 80);
  const std::string noUnshard = edited(csv, 0, "0UNSHARD,", "");
  EXPECT_NE(refusal(noUnshard).find("'0F0' runs while the parameters of stage 0 are sharded"), std::string::npos)
      << refusal(noUnshard);
  const std::string twice = edited(csv, 0, "0UNSHARD,", "0UNSHARD,0UNSHARD,");
  EXPECT_NE(refusal(twice).find("stage 0 is already unsharded"), std::string::npos) << refusal(twice);
  const std::string early = edited(csv, 0, "2UNSHARD,", "2UNSHARD,2RESHARD,2UNSHARD,");
  EXPECT_NE(refusal(early).find("no pass of stage 2 since its UNSHARD"), std::string::npos) << refusal(early);
  const std::string noReduce = edited(csv, 1, "1REDUCE_GRAD,", "");
  EXPECT_NE(refusal(noReduce).find("stage 1 has no REDUCE_GRAD"), std::string::npos) << refusal(noReduce);
  // Messages carry the file, line and column.
  EXPECT_EQ(refusal(noUnshard).rfind("fsdp_comms.csv:1:", 0), 0u) << refusal(noUnshard);
  // Without ZeRO-3 no stage is an FSDP module: PyTorch's runtime skips these actions, so do we.
  EXPECT_TRUE(makeCustomPlan(zeroRequest("custom", 0), noUnshard, "fsdp_comms.csv").hasValue());
}

}  // namespace
}  // namespace pipestudio
