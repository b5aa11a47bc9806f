#include <gtest/gtest.h>

#include "TestSupport.hpp"
#include "pipestudio/common/Json.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

// The shape of PipeStudio's own export (docs/cli.md): one X event per op, pid = device.
const char* kOurs = R"json({"traceEvents": [
  {"name": "F mb0", "ph": "X", "ts": 1000, "dur": 1000, "pid": 0, "tid": 0,
   "args": {"kind": "F", "microbatch": 0, "virtual_stage": 0, "device": 0}},
  {"name": "F mb0", "ph": "X", "ts": 2000, "dur": 1000, "pid": 1, "tid": 0,
   "args": {"kind": "F", "microbatch": 0, "virtual_stage": 1, "device": 1}},
  {"name": "B mb0", "ph": "X", "ts": 3000, "dur": 1500.5, "pid": 1, "tid": 0,
   "args": {"kind": "B", "microbatch": 0, "virtual_stage": 1, "device": 1}},
  {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "device 0"}}
], "displayTimeUnit": "ms"})json";

// PyTorch profiler / Kineto: metadata around traceEvents, CPU ops, runtime calls, kernels with
// rich args, memcpy, NCCL, flow events and ProfilerStep annotations.
const char* kKineto = R"json({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045379072}],
  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 4242, "tid": 4242, "ts": 1700000000100.0, "dur": 5000.0, "args": {"External id": 1}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242, "ts": 1700000000200.0, "dur": 40.5,
   "args": {"External id": 2, "Input Dims": [[64, 1024], [1024, 1024]], "Input type": ["float", "float"]}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 1700000000210.0, "dur": 6.0,
   "args": {"correlation": 77, "cbid": 211}},
  {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", "pid": 0, "tid": 7, "ts": 1700000000250.0, "dur": 120.25,
   "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 77, "registers per thread": 168,
            "grid": [132, 1, 1], "block": [384, 1, 1], "est. achieved occupancy %": 9}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 1700000000400.0, "dur": 10.0,
   "args": {"device": 0, "stream": 7, "correlation": 80, "bytes": 4194304, "memory bandwidth (GB/s)": 419.4}},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 1700000000420.0, "dur": 2.0, "args": {"device": 0}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "pid": 0, "tid": 20,
   "ts": 1700000000500.0, "dur": 800.0, "args": {"device": 0, "stream": 20, "correlation": 90}},
  {"ph": "s", "id": 77, "pid": 4242, "tid": 4242, "ts": 1700000000210.0, "cat": "ac2g", "name": "ac2g"},
  {"ph": "f", "id": 77, "pid": 0, "tid": 7, "ts": 1700000000250.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
  {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": 4242, "tid": 4242, "ts": 1700000000100.0, "s": "g"}
  ],
  "traceName": "rank0.pt.trace.json"
})json";

// Perfetto's JSON export style: a bare array, B/E pairs, a counter and an instant event.
const char* kPerfetto = R"json([
  {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 10},
  {"ph": "B", "name": "inner", "pid": 1, "tid": 2, "ts": 12, "args": {"note": "nested \"quoted\" \u00e9 back\\slash\n\u0001"}},
  {"ph": "E", "pid": 1, "tid": 2, "ts": 15},
  {"ph": "C", "name": "mem", "pid": 1, "ts": 16, "args": {"bytes": 100}},
  {"ph": "E", "pid": 1, "tid": 2, "ts": 20},
  {"ph": "i", "name": "mark", "pid": 1, "tid": 2, "ts": 21}
])json";

}  // namespace

// Each test imports into a fresh store in a directory of its own.
class ChromeImport : public ::testing::Test {
 protected:
  // Writes `text` to file `name` and imports it.
  Expected<ImportResult> importTrace(const std::string& name, const std::string& text) {
    const std::string path = dir.file(name);
    writeFile(path, text);
    return store.importChromeTrace(path);
  }

  TempDir dir;
  HistoryStore store = openStore(dir);
};

TEST_F(ChromeImport, OurOwnExport) {
  auto r = importTrace("ours.json", kOurs);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 3);
  EXPECT_EQ(r->skipped, 0);
  EXPECT_FALSE(r->firstError);
  auto s = store.runSummary(r->runId);
  EXPECT_EQ(s->status, RunStatus::Complete);
  EXPECT_EQ(s->source, "chrome");
  auto ops = store.loadEvents(r->runId, EventCategory::Op);
  ASSERT_TRUE(ops);
  ASSERT_EQ(ops->size(), 3u);
  EXPECT_EQ((*ops)[0].name, "F");
  EXPECT_EQ((*ops)[0].startNs, 0);  // times from the first event
  EXPECT_EQ((*ops)[2].device, 1);
  EXPECT_EQ((*ops)[2].virtualStage, 1);
  EXPECT_EQ((*ops)[2].kind, static_cast<int>(OpKind::B));
  EXPECT_EQ((*ops)[2].durationNs, 1'500'500);
  auto plan = store.runAsPlan(r->runId);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->ops.size(), 3u);
}

TEST_F(ChromeImport, PyTorchProfilerKinetoTrace) {
  auto r = importTrace("rank0.pt.trace.json", kKineto);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 7);  // X events only; flows, metadata and instants are not ranges
  EXPECT_EQ(r->skipped, 0);
  auto events = store.loadEvents(r->runId);
  ASSERT_TRUE(events);
  std::map<std::string, MeasuredEvent> byName;
  for (const auto& e : *events) byName[e.name] = e;
  const auto& kernel = byName["sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n"];
  EXPECT_EQ(kernel.category, EventCategory::Kernel);
  EXPECT_EQ(kernel.device, 0);
  EXPECT_EQ(kernel.stream, 7);
  EXPECT_EQ(kernel.correlationId, 77);
  EXPECT_EQ(kernel.durationNs, 120'250);
  const Json args = Json::parse(kernel.argsJson);
  EXPECT_EQ(args["grid"], Json::parse("[132,1,1]"));
  EXPECT_EQ(args["registers per thread"], 168);
  EXPECT_EQ(byName["Memcpy HtoD (Pageable -> Device)"].category, EventCategory::Memcpy);
  EXPECT_EQ(byName["Memcpy HtoD (Pageable -> Device)"].bytes, 4194304);
  EXPECT_EQ(byName["Memset (Device)"].category, EventCategory::Memset);
  EXPECT_EQ(byName["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"].category,
            EventCategory::Nccl);
  EXPECT_EQ(byName["cudaLaunchKernel"].category, EventCategory::Runtime);
  EXPECT_EQ(byName["cudaLaunchKernel"].device, -1);
  EXPECT_EQ(byName["aten::mm"].category, EventCategory::Cpu);
  EXPECT_EQ(Json::parse(byName["aten::mm"].argsJson)["Input Dims"], Json::parse("[[64,1024],[1024,1024]]"));
  auto steps = store.stepTimesMs(r->runId);
  ASSERT_TRUE(steps);
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_DOUBLE_EQ(steps->front(), 5.0);
}

TEST_F(ChromeImport, PerfettoBeginEndPairs) {
  auto r = importTrace("perfetto.json", kPerfetto);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 2);
  auto events = store.loadEvents(r->runId);
  ASSERT_EQ(events->size(), 2u);
  std::map<std::string, MeasuredEvent> byName;
  for (const auto& e : *events) byName[e.name] = e;
  EXPECT_EQ(byName["outer"].durationNs, 10'000);
  EXPECT_EQ(byName["inner"].durationNs, 3'000);
  EXPECT_EQ(byName["inner"].startNs, 2'000);
  EXPECT_EQ(Json::parse(byName["inner"].argsJson)["note"], "nested \"quoted\" \xc3\xa9 back\\slash\n\x01");
}

TEST_F(ChromeImport, TruncatedTraceKeepsWhatWasWellFormed) {
  const std::string text = kOurs;
  // Cut inside the third event: the first two are stored, the cut one is counted as skipped.
  const std::size_t cut = text.find("\"B mb0\"") + 3;
  auto r = importTrace("cut.json", text.substr(0, cut));
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 2);
  EXPECT_EQ(r->skipped, 1);
  ASSERT_TRUE(r->firstError);
  EXPECT_NE(r->firstError->find("cut.json: byte " + std::to_string(cut)), std::string::npos) << *r->firstError;
  auto s = store.runSummary(r->runId);
  EXPECT_EQ(s->status, RunStatus::Incomplete);
  EXPECT_FALSE(s->error.empty());
  // Every cut point: never a crash, never more events than complete objects before the cut.
  for (std::size_t at = 0; at < text.size(); at += 17) {
    writeFile(dir.file("c.json"), text.substr(0, at));
    auto x = store.importChromeTrace(dir.file("c.json"));
    if (x) {
      EXPECT_LE(x->events, 3);
      EXPECT_TRUE(x->firstError) << "cut " << at;
    } else {
      EXPECT_THAT(x, HasError("c.json"));
    }
  }
}

TEST_F(ChromeImport, MalformedEventsAreSkippedAndCounted) {
  const std::string text = R"({"traceEvents": [
    {"name": "ok1", "ph": "X", "ts": 1, "dur": 2, "pid": 0, "tid": 0},
    {"name": "bad ts", "ph": "X", "ts": "soon", "dur": 2},
    {"name": "no dur", "ph": "X", "ts": 5},
    {"name": "negative", "ph": "X", "ts": 5, "dur": -1},
    42,
    {"ph": "E", "pid": 9, "tid": 9, "ts": 3},
    {"name": "open", "ph": "B", "pid": 3, "tid": 3, "ts": 3},
    {"name": "ok2", "ph": "X", "ts": 7, "dur": 1, "pid": 0, "tid": 0, "args": {"deep": [[[[{"a": [1, 2, {"b": null}]}]]]]}}
  ]})";
  auto r = importTrace("bad.json", text);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 2);
  EXPECT_EQ(r->skipped, 6);  // bad ts, no dur, negative, 42, lone E, unclosed B
  ASSERT_TRUE(r->firstError);
  const std::size_t at = text.find(R"({"name": "bad ts")");
  EXPECT_NE(r->firstError->find("byte " + std::to_string(at)), std::string::npos) << *r->firstError;
  EXPECT_NE(r->firstError->find("\"ts\""), std::string::npos) << *r->firstError;
  auto s = store.runSummary(r->runId);
  EXPECT_EQ(s->status, RunStatus::Complete);  // the file parsed; the skips are reported
  EXPECT_NE(s->error.find("6 event(s) skipped"), std::string::npos) << s->error;
  auto events = store.loadEvents(r->runId);
  EXPECT_EQ(Json::parse(events->back().argsJson)["deep"][0][0][0][0]["a"][2]["b"], nullptr);
}

TEST_F(ChromeImport, NotATraceIsAnErrorAndLeavesNoRun) {
  auto a = importTrace("garbage.json", "\x01\x02 not json");
  EXPECT_THAT(a, HasError("garbage.json: byte 1"));
  auto b = importTrace("plan.json", R"({"schema": "pipestudio.plan/1", "ops": []})");
  EXPECT_THAT(b, HasError("no trace events"));
  auto c = store.importChromeTrace(dir.file("missing.json"));
  EXPECT_THAT(c, HasError("cannot open"));
  EXPECT_TRUE(store.listRuns()->empty());
  // An empty traceEvents array is a valid, empty trace.
  auto d = importTrace("empty.json", R"({"traceEvents": []})");
  ASSERT_THAT(d, HasValue());
  EXPECT_EQ(d->events, 0);
}

TEST_F(ChromeImport, ManyEventsStreamThrough) {
  std::string text = "{\"traceEvents\": [";
  for (int i = 0; i < 30000; ++i) {
    if (i) text += ',';
    text += R"({"ph":"X","cat":"kernel","name":"k)" + std::to_string(i % 50) + R"(","pid":0,"tid":7,"ts":)" +
            std::to_string(i * 10) + R"(,"dur":5,"args":{"device":)" + std::to_string(i % 4) + "}}";
  }
  text += "]}";
  auto r = importTrace("many.json", text);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 30000);
  EXPECT_EQ(store.runSummary(r->runId)->devices, 4);
}
