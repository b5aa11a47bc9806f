// Megatron-LM's OpenTelemetry spans (issue 46). The fixtures in tests/data/otel were emitted by
// Megatron-LM's own 1F1B schedule (forward_backward_pipelining_without_interleaving of
// NVIDIA/Megatron-LM d98e8a64dd, with its forward_step / backward_step / P2PCommunicator spans)
// run under stubs by bench/megatron/otel_spans.py --pp 2 --microbatches 4 --iterations 2: per
// iteration, rank 0 emits a megatron.train.iteration, 4 forwards, 4 backwards and 6 p2p spans (15),
// rank 1 a megatron.train.iteration, 4 forwards, 4 backwards and 2 p2p spans (11), so 30 and 22 spans in all;
// rank*.otlp.json are OTLP/JSON (one file per rank), jaeger-pp2.json a Jaeger export of both.
#include <gtest/gtest.h>

#include <fstream>

#include "TestSupport.hpp"
#include "pipestudio/history/Compare.hpp"
#include "pipestudio/history/TraceImport.hpp"
#include "pipestudio/planner/Planner.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

const std::string kOtel = std::string(PIPESTUDIO_TEST_DATA) + "/otel/";

// The plan the spans' run follows: 1F1B over 2 devices, 4 microbatches, forward 4 ms and backward
// 8 ms a stage (the generator's clock).
Plan oneFOneB() {
  std::vector<Layer> layers;
  for (int i = 0; i < 4; ++i) {
    Layer l;
    l.name = "l" + std::to_string(i);
    l.kind = "transformer";
    l.forwardMs = 2.0;
    l.backwardInputMs = 2.0;
    l.backwardWeightMs = 2.0;
    l.activationBytes = 1000;
    l.parameterBytes = 1000;
    l.outputBytes = 1000;
    layers.push_back(l);
  }
  return plannedPlan(std::move(layers), "1f1b", 2, 4);
}

}  // namespace

TEST(OtelImport, MegatronSpansBecomeThePlansOpsRankByRank) {
  TempDir dir;
  const Plan plan = oneFOneB();
  auto store = openStore(dir);
  auto r = importAgainstPlan(store, plan, {kOtel + "rank0.otlp.json", kOtel + "rank1.otlp.json"}, "1f1b.json");
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 30 + 22);
  EXPECT_EQ(r->skipped, 0) << r->firstError.value_or("");
  EXPECT_EQ(r->measuredOps, 2 * 2 * 8);  // iterations × ranks × (4 F + 4 backward)
  EXPECT_EQ(r->matchedOps, r->measuredOps);
  ASSERT_EQ(r->notes.size(), 2U);
  EXPECT_NE(r->notes[1].find("OpenTelemetry JSON (Megatron-LM spans), device 1 (rank 1)"), std::string::npos)
      << r->notes[1];
  auto c = compareRunToPlan(store, r->runId);
  ASSERT_THAT(c, HasValue());
  EXPECT_EQ(c->iterations, 2);
  EXPECT_EQ(c->unmatchedPlanned, 0);
  EXPECT_EQ(c->ops.size(), plan.ops.size());
  ASSERT_EQ(c->devices.size(), 2U);
  // Megatron's spans time a 4 ms forward and an 8 ms backward on each device.
  for (const KindComparison& k : c->byKind) {
    EXPECT_NEAR(k.measuredMs, std::string(opKindName(k.kind)) == "F" ? 4.0 : 8.0, 1e-6) << opKindName(k.kind);
  }
  // The p2p spans are the devices' communication.
  auto comm = store.loadEvents(r->runId, EventCategory::Nccl);
  ASSERT_TRUE(comm.hasValue());
  EXPECT_EQ(comm->size(), 2U * (6 + 2));
  // Rank 0's megatron.train.iteration spans are the run's steps (62.6 ms on the generator's clock).
  auto steps = store.stepTimesMs(r->runId);
  ASSERT_THAT(steps, HasValue());
  ASSERT_EQ(steps->size(), 2U);
  EXPECT_NEAR((*steps)[0], 62.6, 1e-6);
  EXPECT_NEAR((*steps)[1], 62.6, 1e-6);
}

// Megatron's observability guide names the step span `megatron.train_step`, but no Megatron code
// emits it: such a span is a host range, neither a step nor the start of an iteration.
TEST(OtelImport, OnlyMegatronsEmittedIterationSpanIsAStep) {
  TempDir dir;
  auto store = openStore(dir);
  const std::string path = dir.file("guide-name.json");
  std::ofstream(path)
      << R"({"resourceSpans":[{"scopeSpans":[{"spans":[)"
         R"({"name":"megatron.train_step","startTimeUnixNano":"1000","endTimeUnixNano":"9000"},)"
         R"({"name":"megatron.microbatch.forward","startTimeUnixNano":"2000","endTimeUnixNano":"3000"},)"
         R"({"name":"megatron.train_step","startTimeUnixNano":"10000","endTimeUnixNano":"19000"},)"
         R"({"name":"megatron.microbatch.forward","startTimeUnixNano":"11000","endTimeUnixNano":"12000"})"
         R"(]}]}]})";
  auto r = importTraces(store, {path}, {});
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 4);
  auto steps = store.stepTimesMs(r->runId);
  ASSERT_THAT(steps, HasValue());
  EXPECT_TRUE(steps->empty());
  // Without a plan the count runs on across the guide-named spans: microbatches 0 and 1.
  auto ops = store.loadEvents(r->runId, EventCategory::Op);
  ASSERT_TRUE(ops.hasValue());
  ASSERT_EQ(ops->size(), 2U);
  EXPECT_EQ((*ops)[0].microbatch, 0);
  EXPECT_EQ((*ops)[1].microbatch, 1);
}

TEST(OtelImport, AJaegerExportOfBothRanksAndARunWithoutAPlan) {
  TempDir dir;
  const Plan plan = oneFOneB();
  auto store = openStore(dir);
  TraceImportOptions o;
  o.plan = &plan;
  auto r = importTraces(store, {kOtel + "jaeger-pp2.json"}, o);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 52);
  EXPECT_EQ(r->measuredOps, 32);
  EXPECT_EQ(r->matchedOps, 32);
  // Without a plan: one model chunk per rank, microbatches in the order they ran.
  auto bare = importTraces(store, {kOtel + "rank0.otlp.json", kOtel + "rank1.otlp.json"}, {});
  ASSERT_THAT(bare, HasValue());
  EXPECT_EQ(bare->measuredOps, 32);
  auto ops = store.loadEvents(bare->runId, EventCategory::Op);
  ASSERT_TRUE(ops.hasValue());
  for (const MeasuredEvent& e : *ops) {
    EXPECT_EQ(e.virtualStage, e.device);
    EXPECT_GE(e.microbatch, 0);
    EXPECT_LT(e.microbatch, 4);
  }
}

TEST(OtelImport, HostileSpanFilesAreRefusedAndLeaveNothingBehind) {
  TempDir dir;
  auto store = openStore(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::string path = dir.file(name);
    std::ofstream(path) << text;
    return path;
  };
  const std::string backwards =
      write("backwards.json", R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"megatron.microbatch.forward",)"
                              R"("startTimeUnixNano":"2000","endTimeUnixNano":"1000"}]}]}]})");
  auto r = importTraces(store, {backwards}, {});
  EXPECT_THAT(r, HasError("/resourceSpans/0/scopeSpans/0/spans/0"));
  EXPECT_THAT(r, HasError("end >= start"));
  const std::string notArray = write("notarray.json", R"({"resourceSpans": 3})");
  auto n = importTraces(store, {notArray}, {});
  EXPECT_THAT(n, HasError("/resourceSpans is not an array"));
  const std::string jaeger = write("jaeger.json", R"({"data":[{"traceID":"1","spans":[{"operationName":"x",)"
                                                  R"("startTime":-5,"duration":1}]}]})");
  auto j = importTraces(store, {jaeger}, {});
  EXPECT_THAT(j, HasError("/data/0/spans/0"));
  auto runs = store.listRuns();
  ASSERT_TRUE(runs.hasValue());
  EXPECT_TRUE(runs->empty());
}
