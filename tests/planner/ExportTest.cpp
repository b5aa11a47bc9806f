// Chrome trace export: event shapes Perfetto needs (X events with µs times, pid = device,
// args), communication on its own labelled track, name metadata, measured activities.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "pipestudio/common/Json.hpp"
#include "pipestudio/planner/Export.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

Plan tracedPlan() {
  Plan plan;
  plan.config.schedule = "1f1b";
  plan.config.devices = 2;
  plan.config.microbatches = 1;
  plan.cluster.nodes = {{"node-a", 1, std::nullopt, std::nullopt}, {"node-b", 1, std::nullopt, std::nullopt}};
  plan.virtualStages = {{0, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 1, 1, 0}};
  plan.ops = {{0, 0, OpKind::F, 0, 0.0, 1.0, 0},
              {0, 0, OpKind::BW, 0, 4.5, 6.5, 0},
              {1, 1, OpKind::F, 0, 1.25, 2.25, 0},
              {1, 1, OpKind::BW, 0, 2.25, 4.25, 0}};
  plan.comms = {{0, 1, 0, OpKind::F, 0, 1.0, 1.25, 4096}, {1, 0, 0, OpKind::B, 1, 4.25, 4.5, 4096}};
  plan.metrics.makespanMs = 6.5;
  return plan;
}

TEST(ChromeTrace, OneCompleteEventPerOpWithDeviceAsPid) {
  const Plan plan = tracedPlan();
  const Json trace = chromeTraceJson(plan);
  ASSERT_TRUE(trace.contains("traceEvents"));
  int opEvents = 0;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] == "comm") continue;
    const Op& op = plan.op(opEvents++);
    EXPECT_EQ(e["pid"], op.device);
    EXPECT_EQ(e["tid"], 0);
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), op.startMs * 1000.0);
    EXPECT_DOUBLE_EQ(e["dur"].get<double>(), op.durationMs() * 1000.0);
    EXPECT_EQ(e["args"]["kind"], std::string(opKindName(op.kind)));
    EXPECT_EQ(e["args"]["microbatch"], op.microbatch);
    EXPECT_EQ(e["args"]["virtual_stage"], op.virtualStage);
    EXPECT_EQ(e["args"]["device"], op.device);
  }
  EXPECT_EQ(opEvents, 4);
}

TEST(ChromeTrace, CommunicationHasItsOwnLabelledTrackPerLink) {
  const Json trace = chromeTraceJson(tracedPlan());
  std::map<std::pair<int, int>, std::string> threadNames;
  std::map<int, std::string> processNames;
  int comms = 0;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") threadNames[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_name") processNames[e["pid"]] = e["args"]["name"];
  }
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "comm") continue;
    ++comms;
    EXPECT_NE(e["tid"], 0);
    const auto it = threadNames.find({e["pid"], e["tid"]});
    ASSERT_NE(it, threadNames.end());
    EXPECT_EQ(it->second, "send → device " + std::to_string(e["args"]["to_device"].get<int>()));
    EXPECT_EQ(e["args"]["bytes"], 4096);
  }
  EXPECT_EQ(comms, 2);
  EXPECT_EQ(processNames.at(0), "device 0 (node-a)");
  EXPECT_EQ(processNames.at(1), "device 1 (node-b)");
  EXPECT_EQ((threadNames.at({0, 0})), "compute");
}

TEST(ChromeTrace, MeasuredActivitiesGoOnStreamThreads) {
  ChromeTraceOptions options;
  options.title = "run 7";
  options.activities = {{1, 7, "sgemm_128x64", "kernel", 1.3, 1.9}};
  const Json trace = chromeTraceJson(tracedPlan(), options);
  bool found = false;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "sgemm_128x64") {
      found = true;
      EXPECT_EQ(e["pid"], 1);
      EXPECT_EQ(e["cat"], "kernel");
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(trace["otherData"]["title"], "run 7");
}

TEST(ChromeTrace, WrittenFileIsValidJson) {
  const auto path = std::filesystem::temp_directory_path() / "pipestudio-trace-test.json";
  ASSERT_TRUE(writeChromeTrace(path.string(), tracedPlan()));
  auto doc = loadJsonFile(path.string());
  ASSERT_THAT(doc, HasValue());
  EXPECT_EQ(doc->root["displayTimeUnit"], "ms");
  std::filesystem::remove(path);
}

TEST(ChromeTrace, UnwritablePathIsAnError) {
  const Status st = writeChromeTrace("/nonexistent/dir/trace.json", tracedPlan());
  EXPECT_THAT(st, HasError("/nonexistent/dir/trace.json"));
}

}  // namespace
}  // namespace pipestudio
