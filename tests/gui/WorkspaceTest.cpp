#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "WindowFixtures.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/SolverNames.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "pipestudio/workspace/Workspace.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio::gui {
namespace {

const std::string kDefault = std::string(PIPESTUDIO_RESOURCES) + "/workspaces/default.pipestudio";

std::string tempPath(const std::string& name) {
  const auto dir = std::filesystem::path(PIPESTUDIO_BINARY_DIR) / "test-output" / "gui";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void writeText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(Workspace, BundledDefaultLoadsAndRoundTrips) {
  auto ws = loadWorkspace(kDefault, solverNames());
  ASSERT_THAT(ws, HasValue());
  EXPECT_FALSE(ws->model.components.empty());
  EXPECT_GE(ws->solver.devices, 1);
  const std::string path = tempPath("roundtrip.pipestudio");
  ASSERT_TRUE(saveWorkspace(path, *ws));
  auto again = loadWorkspace(path, solverNames());
  ASSERT_THAT(again, HasValue());
  EXPECT_EQ(workspaceToJson(*again), workspaceToJson(*ws));
}

TEST(Workspace, WorkspaceWithPlanRoundTrips) {
  auto ws = loadWorkspace(kDefault, solverNames());
  ASSERT_THAT(ws, HasValue());
  auto plan = makePlan(PlanRequest{ws->model, ws->cluster, ws->solver});
  ASSERT_THAT(plan, HasValue());
  ws->plan = *plan;
  const std::string path = tempPath("with-plan.pipestudio");
  ASSERT_TRUE(saveWorkspace(path, *ws));
  auto doc = openDocument(path, solverNames());
  ASSERT_THAT(doc, HasValue());
  ASSERT_EQ(doc->kind, DocumentKind::Workspace);
  ASSERT_TRUE(doc->workspace->plan.has_value());
  EXPECT_EQ(doc->workspace->plan->ops.size(), plan->ops.size());
}

// Issue 26's expert and context settings are plan-config keys a workspace writes: it reads them
// back (it used to refuse them as unknown fields, so a saved MoE workspace did not open); so is
// Seq1F1B's split (it used to be dropped).
TEST(Workspace, ExpertAndContextSettingsSurviveSaveAndLoad) {
  auto ws = loadWorkspace(kDefault, solverNames());
  ASSERT_THAT(ws, HasValue());
  Parallelism& par = ws->solver.parallel;
  par.expertTensor = 1;
  par.moeCapacityFactor = 1.25;
  par.moeA2aOverlap = true;
  par.moeSharedExpertOverlap = true;
  par.moeFlexDispatcher = true;
  par.moeFlexBackend = FlexBackend::HybridEp;
  par.moeCommSms = 24;
  par.cpCommType = CpCommType::A2aP2p;
  par.attentionBackend = AttentionBackend::Flash;
  ws->solver.seqSplits = 2;
  ws->solver.seqSplit = "even";
  const std::string path = tempPath("moe-settings.pipestudio");
  ASSERT_TRUE(saveWorkspace(path, *ws));
  auto again = loadWorkspace(path, solverNames());
  ASSERT_THAT(again, HasValue());
  const Parallelism& back = again->solver.parallel;
  EXPECT_EQ(back.expertTensor, 1);
  EXPECT_EQ(back.moeCapacityFactor, std::optional<double>(1.25));
  EXPECT_TRUE(back.moeA2aOverlap);
  EXPECT_TRUE(back.moeSharedExpertOverlap);
  EXPECT_TRUE(back.moeFlexDispatcher);
  EXPECT_EQ(back.moeFlexBackend, FlexBackend::HybridEp);
  EXPECT_EQ(back.moeCommSms, 24);
  EXPECT_EQ(back.cpCommType, CpCommType::A2aP2p);
  EXPECT_EQ(back.attentionBackend, AttentionBackend::Flash);
  EXPECT_EQ(again->solver.seqSplits, 2);
  EXPECT_EQ(again->solver.seqSplit, "even");
  EXPECT_EQ(workspaceToJson(*again), workspaceToJson(*ws));
  // A misspelt key is still refused, with the field named.
  auto json = workspaceToJson(*ws);
  json["solver"]["cp_comm"] = "a2a";
  writeText(path, json.dump());
  auto bad = loadWorkspace(path, solverNames());
  EXPECT_THAT(bad, HasError("cp_comm"));
}

TEST(Workspace, BadInputSaysWhereAndWhat) {
  const std::string path = tempPath("bad.pipestudio");
  writeText(path, R"({"schema": "pipestudio.workspace/1", "model": {}, "solver": {"schedule": "1f1b", "devices": 0}})");
  auto ws = loadWorkspace(path, solverNames());
  EXPECT_THAT(ws, HasError(path));
  EXPECT_THAT(ws, HasError("cluster"));
  EXPECT_THAT(ws, HasError("/solver/devices"));

  writeText(path, "{ not json");
  EXPECT_FALSE(openDocument(path, solverNames()));
  writeText(path, R"({"schema": "pipestudio.hosts/1", "hosts": []})");
  auto hosts = openDocument(path, solverNames());
  EXPECT_THAT(hosts, HasError("cannot be opened"));
  EXPECT_FALSE(openDocument(tempPath("does-not-exist.json"), solverNames()));
  writeText(path, std::string("PSTR\x01\x00\x00\x00garbage", 15));
  EXPECT_FALSE(openDocument(path, solverNames()));
}

TEST(Workspace, TraceStreamOpensAsMeasuredPlan) {
  std::vector<trace::Frame> frames = pipestudio::testing::cpuRunFrames("r1", 2);
  for (int d = 0; d < 2; ++d) {
    for (int mb = 0; mb < 3; ++mb) {
      trace::OpRange r;
      r.device = d;
      r.virtualStage = d;
      r.kind = OpKind::F;
      r.microbatch = mb;
      r.startNs = 1'000'000'000LL + (d + mb) * 2'000'000LL;
      r.endNs = r.startNs + 1'500'000LL;
      frames.emplace_back(r);
    }
  }
  const std::string path = tempPath("run.pstrace");
  writeText(path, trace::encodeStream(frames));
  auto doc = openDocument(path, solverNames());
  ASSERT_THAT(doc, HasValue());
  EXPECT_EQ(doc->kind, DocumentKind::Trace);
  ASSERT_EQ(doc->plan->ops.size(), 6u);
  EXPECT_DOUBLE_EQ(doc->plan->ops.front().startMs, 0.0);
  EXPECT_DOUBLE_EQ(doc->plan->ops.front().endMs, 1.5);
  EXPECT_EQ(doc->plan->config.devices, 2);
}

}  // namespace
}  // namespace pipestudio::gui
