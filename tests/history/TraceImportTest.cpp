// Importing real profilers' traces (issue 15): PyTorch profiler (Kineto) JSON, gzipped, one file
// per rank with torch.distributed.pipelining's PP: annotations; Nsight Systems SQLite exports
// built here with the documented schema; their hostile variants; the CLI contract.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "TestSupport.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/history/Compare.hpp"
#include "pipestudio/history/TraceImport.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Planner.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

// A plan with split backward and real transfers: zb-h1, 4 devices, 6 microbatches.
// `lateForwardMs` replaces the forward cost of the second half of the layers (a slower stage).
Plan zbPlan(const std::string& schedule = "zb-h1", int devices = 4, int microbatches = 6, double lateForwardMs = 1.0) {
  std::vector<Layer> layers;
  for (int i = 0; i < 8; ++i) {
    Layer l;
    l.name = "l" + std::to_string(i);
    l.kind = "transformer";
    l.forwardMs = i < 4 ? 1.0 : lateForwardMs;
    l.backwardInputMs = 1.0;
    l.backwardWeightMs = 0.5;
    l.activationBytes = 1000;
    l.weightGradBytes = 400;
    l.parameterBytes = 1000;
    l.outputBytes = 4'000'000;
    layers.push_back(l);
  }
  return plannedPlan(std::move(layers), schedule, devices, microbatches);
}

const char* letter(OpKind k) {
  switch (k) {
    case OpKind::F:
      return "F";
    case OpKind::B:
      return "I";
    case OpKind::W:
      return "W";
    default:
      return "B";
  }
}

struct KinetoOptions {
  int iterations = 2;
  double iterationGapMs = 5;
  double recvEarlyMs = 0.2;      ///< receives are posted this much before the matching send starts
  std::int64_t clockSkewNs = 0;  ///< added to this rank's baseTimeNanoseconds and removed from its ts
};

// One rank's trace shaped like the PyTorch profiler writes it (libkineto output_json.cpp): header,
// process/thread metadata, host ProfilerStep# and PP: annotations (user_annotation), GPU PP:
// annotations (gpu_user_annotation) around one kernel each, NCCL SendRecv kernels with their
// collective args, ts relative to baseTimeNanoseconds in µs with three decimals.
std::string kinetoTrace(const Plan& plan, int device, const KinetoOptions& o = {}) {
  const std::int64_t base = 1'750'000'000'000'000'000 + o.clockSkewNs;
  const double shiftUs = -static_cast<double>(o.clockSkewNs) / 1000.0;
  std::ostringstream t;
  t.setf(std::ios::fixed);
  t.precision(3);
  t << "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"NVIDIA H100 80GB HBM3\", "
       "\"totalGlobalMem\": 85045870592}],\n  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": "
    << device << ", \"world_size\": " << plan.config.devices << "},\n  \"displayTimeUnit\": \"ms\",\n"
    << "  \"baseTimeNanoseconds\": " << base << ",\n  \"traceEvents\": [\n";
  t << "  {\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": 0, \"tid\": 0, \"args\": {\"name\": "
       "\"python3\"}},\n";
  t << "  {\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": 0, \"tid\": 7, \"args\": {\"name\": "
       "\"stream 7\"}}";
  const double span = plan.metrics.makespanMs + o.iterationGapMs;
  const int pid = 4242 + device;
  std::int64_t corr = 1000;
  const auto ev = [&](const std::string& cat, const std::string& name, int p, int tid, double tsMs, double durMs,
                      const std::string& args) {
    t << ",\n  {\"ph\": \"X\", \"cat\": \"" << cat << "\", \"name\": \"" << name << "\", \"pid\": " << p
      << ", \"tid\": " << tid << ", \"ts\": " << (tsMs * 1000.0 + shiftUs) << ", \"dur\": " << durMs * 1000.0;
    if (!args.empty()) t << ", \"args\": {" << args << "}";
    t << "}";
  };
  for (int it = 0; it < o.iterations; ++it) {
    const double offset = it * span + 1.0;
    ev("user_annotation", "ProfilerStep#" + std::to_string(it + 3), pid, pid, offset - 0.5, span - 1.0, "");
    ev("gpu_user_annotation", "ProfilerStep#" + std::to_string(it + 3), 0, 7, offset - 0.4, span - 1.2, "");
    for (const Op& op : plan.ops) {
      if (op.device != device) continue;
      const std::string name =
          "PP:" + std::to_string(op.virtualStage) + letter(op.kind) + std::to_string(op.microbatch);
      const double start = offset + op.startMs, dur = op.durationMs();
      ev("user_annotation", name, pid, pid, start - 0.3, 0.05, "\"External id\": " + std::to_string(corr));
      ev("gpu_user_annotation", name, 0, 7, start, dur, "\"External id\": " + std::to_string(corr));
      ev("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 0, 7, start, dur,
         "\"External id\": " + std::to_string(corr) + ", \"device\": 0, \"stream\": 7, \"correlation\": " +
             std::to_string(corr) + ", \"registers per thread\": 168");
      ++corr;
    }
    for (const Comm& c : plan.comms) {
      const bool forward = c.kind == OpKind::F;
      const int sender = c.virtualStage;
      const int receiver = forward ? sender + 1 : sender - 1;
      const std::string dir = forward ? "_F" : "_B";
      const double start = offset + c.startMs, end = offset + c.endMs;
      const auto nccl = [&](const std::string& action, int stage, double s, double e, const char* coll, int peer) {
        const std::string name = "PP:" + std::to_string(stage) + action + dir + std::to_string(c.microbatch);
        ev("gpu_user_annotation", name, 0, 20, s, e - s, "");
        ev("kernel", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", 0, 20, s, e - s,
           "\"device\": 0, \"stream\": 20, \"correlation\": " + std::to_string(corr++) + ", \"Collective name\": \"" +
               coll + "\", \"Group size\": 2, \"dtype\": \"BFloat16\", \"" +
               (coll[0] == 's' ? "Dst Rank" : "Src Rank") + "\": " + std::to_string(peer));
      };
      if (c.fromDevice == device) nccl("SEND", sender, start, end, "send", c.toDevice);
      if (c.toDevice == device) nccl("RECV", receiver, start - o.recvEarlyMs, end, "recv", c.fromDevice);
    }
  }
  t << "\n  ],\n  \"traceName\": \"rank" << device << ".json\"\n}\n";
  return t.str();
}

void writeGzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
}

std::vector<std::string> writeRanks(const TempDir& dir, const Plan& plan, const KinetoOptions& o = {}) {
  std::vector<std::string> files;
  for (int d = plan.config.devices - 1; d >= 0; --d) {  // command line order is not rank order
    KinetoOptions rank = o;
    rank.clockSkewNs = d * 123'456'789;  // different bases, one clock
    files.push_back(dir.file("rank" + std::to_string(d) + ".pt.trace.json.gz"));
    writeGzip(files.back(), kinetoTrace(plan, d, rank));
  }
  return files;
}

std::size_t runCount(HistoryStore& store) {
  auto runs = store.listRuns();
  return runs ? runs->size() : 999;
}

}  // namespace

TEST(KinetoImport, GzippedRanksWithAnnotationsAlignOpByOpWithThePlan) {
  TempDir dir;
  const Plan plan = zbPlan();
  const auto files = writeRanks(dir, plan);
  auto store = openStore(dir);
  auto r = importAgainstPlan(store, plan, files, "zb.json");
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->skipped, 0) << r->firstError.value_or("");
  EXPECT_EQ(r->measuredOps, 2 * static_cast<std::int64_t>(plan.ops.size()));
  EXPECT_EQ(r->matchedOps, r->measuredOps);
  ASSERT_EQ(r->notes.size(), 4u);
  EXPECT_NE(r->notes[0].find("device 3 (from its annotated stages)"), std::string::npos) << r->notes[0];

  auto c = compareRunToPlan(store, r->runId);
  ASSERT_THAT(c, HasValue());
  EXPECT_EQ(c->iterations, 2);
  EXPECT_EQ(c->unmatchedPlanned, 0);
  EXPECT_EQ(c->ops.size(), plan.ops.size());
  // Four files with four different clock bases land on one axis: every op starts where planned.
  for (const OpDrift& d : c->ops) {
    EXPECT_NEAR(d.startDriftMs, 0.0, 1e-3) << "device " << d.device << " stage " << d.virtualStage;
    EXPECT_NEAR(d.durationDeltaMs, 0.0, 1e-3);
  }
  ASSERT_EQ(c->devices.size(), 4u);
  double waits = 0;
  for (const DeviceBubble& b : c->devices) {
    // The trace replays the plan: compute busy and bubble per iteration are the plan's.
    EXPECT_NEAR(b.measuredBubbleMs, b.plannedBubbleMs, 1e-3) << "device " << b.device;
    EXPECT_NEAR(b.measuredBusyMs, b.plannedBusyMs, 1e-3) << "device " << b.device;
    waits += b.measuredCommWaitMs;
    EXPECT_GT(b.measuredCommTransferMs, 0) << "device " << b.device;
  }
  EXPECT_GT(waits, 0.0);
  ASSERT_FALSE(c->byKind.empty());
  for (const KindComparison& k : c->byKind) EXPECT_NEAR(k.measuredMs, k.plannedMs, 1e-3);
  EXPECT_EQ(planComparisonToJson(*c)["by_device"][0].count("measured_bubble_ms"), 1u);
}

TEST(KinetoImport, WithoutOpAnnotationsTheGpuActivityComparesAndNcclWaitsAreBubble) {
  TempDir dir;
  const Plan plan = zbPlan();
  std::vector<std::string> files;
  for (int d = 0; d < plan.config.devices; ++d) {
    // Only the communication annotations stay (compute ranges renamed away).
    const std::string text = std::regex_replace(kinetoTrace(plan, d), std::regex("PP:([0-9]+)([FIWB])([0-9]+)\""),
                                                std::string("compute_$1_$2_$3\""));
    files.push_back(dir.file("r" + std::to_string(d) + ".json.gz"));
    writeGzip(files.back(), text);
  }
  auto store = openStore(dir);
  auto r = importAgainstPlan(store, plan, files);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->measuredOps, 0);
  auto c = compareRunToPlan(store, r->runId);
  ASSERT_THAT(c, HasValue());
  EXPECT_TRUE(c->ops.empty());
  EXPECT_EQ(c->iterations, 2);  // the devices' ProfilerStep ranges
  ASSERT_EQ(c->devices.size(), 4u);
  double waits = 0;
  for (const DeviceBubble& b : c->devices) {
    EXPECT_GT(b.measuredBusyMs, b.plannedBusyMs) << "device " << b.device;  // kernels and transfers
    waits += b.measuredCommWaitMs;
    // Everything in the window is busy (kernels, transfers) or bubble (idle, waits).
    EXPECT_GT(b.measuredBubbleMs, b.measuredCommWaitMs - 1e-9);
  }
  // Per iteration each receive waited 0.2 ms; the part while the device computed is not bubble.
  EXPECT_GT(waits, 0.0);
  EXPECT_LE(waits, 0.2 * static_cast<double>(plan.comms.size()) + 1e-6);
}

TEST(KinetoImport, LegacyAnnotationsAndARunWithoutAPlan) {
  TempDir dir;
  const Plan plan = zbPlan();
  // PyTorch ≈2.5 named the input gradient B: rewrite the I annotations as B.
  const std::string text =
      std::regex_replace(kinetoTrace(plan, 1), std::regex("PP:([0-9]+)I([0-9]+)"), std::string("PP:$1B$2"));
  writeGzip(dir.file("legacy.json.gz"), text);
  auto store = openStore(dir);
  TraceImportOptions o;
  o.plan = &plan;
  auto r = importTraces(store, {dir.file("legacy.json.gz")}, o);
  ASSERT_THAT(r, HasValue());
  EXPECT_GT(r->matchedOps, 0);
  EXPECT_EQ(r->matchedOps, r->measuredOps);  // B read as the input gradient, W after it
  // Without a plan: ops are measured but nothing is matched; device from distributedInfo.rank.
  auto bare = importTraces(store, {dir.file("legacy.json.gz")}, {});
  ASSERT_THAT(bare, HasValue());
  EXPECT_EQ(bare->matchedOps, 0);
  EXPECT_GT(bare->measuredOps, 0);
  EXPECT_NE(bare->notes[0].find("device 1 (rank 1)"), std::string::npos) << bare->notes[0];
}

TEST(KinetoImport, HostileFilesAreRefusedAndLeaveNothingBehind) {
  TempDir dir;
  const Plan plan = zbPlan();
  const auto files = writeRanks(dir, plan);
  auto store = openStore(dir);
  // Truncated gzip: the last rank's file cut in half.
  const std::string whole = readFile(files.back());
  writeFile(dir.file("cut.json.gz"), whole.substr(0, whole.size() / 2));
  std::vector<std::string> withCut = files;
  withCut.back() = dir.file("cut.json.gz");
  auto r = importTraces(store, withCut, {});
  EXPECT_THAT(r, HasError("cut.json.gz"));
  EXPECT_THAT(r, HasError("truncated"));
  EXPECT_EQ(runCount(store), 0u);
  // Garbage inside a valid gzip; a JSON file without events; two files of one rank.
  writeGzip(dir.file("garbage.json.gz"), "\x01\x02 not json at all");
  r = importTraces(store, {dir.file("garbage.json.gz")}, {});
  EXPECT_THAT(r, HasError("garbage.json.gz: byte"));
  writeFile(dir.file("empty.json"), "{\"schemaVersion\": 1}");
  r = importTraces(store, {dir.file("empty.json")}, {});
  EXPECT_THAT(r, HasError("no trace events"));
  r = importTraces(store, {files[0], files[0]}, {});
  EXPECT_THAT(r, HasError("are both device"));
  EXPECT_EQ(runCount(store), 0u);
  // A plan that is not the run's: annotations name stages the plan does not have.
  const Plan small = zbPlan("1f1b", 2, 2);
  TraceImportOptions o;
  o.plan = &small;
  r = importTraces(store, files, o);
  EXPECT_THAT(r, HasError("is this the plan the run executed?"));
  EXPECT_EQ(runCount(store), 0u);
}

TEST(KinetoImport, AMillionEventsOnOneTimestamp) {
  TempDir dir;
  const std::string path = dir.file("flat.json.gz");
  {
    gzFile f = gzopen(path.c_str(), "wb1");
    ASSERT_NE(f, nullptr);
    std::string head = "{\"baseTimeNanoseconds\": 1000, \"traceEvents\": [";
    gzwrite(f, head.data(), static_cast<unsigned>(head.size()));
    const std::string event =
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":5.000,\"dur\":0.000},";
    std::string block;
    for (int i = 0; i < 1000; ++i) block += event;
    for (int i = 0; i < 1000; ++i) gzwrite(f, block.data(), static_cast<unsigned>(block.size()));
    const std::string tail =
        "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"PP:0F0\",\"pid\":1,\"tid\":1,\"ts\":5.000,\"dur\":0.000}]"
        "}";
    gzwrite(f, tail.data(), static_cast<unsigned>(tail.size()));
    gzclose(f);
  }
  auto store = openStore(dir);
  auto r = importTraces(store, {path}, {});
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 1'000'001);
  EXPECT_EQ(r->measuredOps, 1);
  auto summary = store.runSummary(r->runId);
  ASSERT_TRUE(summary.hasValue());
  EXPECT_EQ(summary->events, 1'000'001);
  EXPECT_EQ(summary->durationMs, 0.0);
}

namespace {

// An Nsight Systems export as `nsys export --type sqlite` lays it out (the tables and columns
// this importer reads, in the documented schema; other columns are left out, as older nsys
// versions do).
struct NsysOptions {
  std::int64_t sessionStartNs = 1'750'000'000'000'000'000;
  bool nullEnd = false;
  bool withRuntime = true;
};

void makeNsys(const std::string& path, const Plan& plan, int device, const NsysOptions& o = {}) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* schema = R"(
    CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
    CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT,
      isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
      smCount INTEGER, uuid TEXT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER, deviceId INTEGER NOT NULL,
      contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
      demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, gridX INTEGER, registersPerThread INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
      contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
      bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
      globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
    CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
      category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
      domainId INTEGER);
  )";
  ASSERT_EQ(sqlite3_exec(db, schema, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
  const auto exec = [&](const std::string& sql) {
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db) << ": " << sql;
  };
  exec(
      "INSERT INTO StringIds VALUES (1, 'void gemm_kernel<128>(float*)'), (2, 'gemm_kernel'), "
      "(3, 'ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)'), (4, 'ncclDevKernel_SendRecv'), "
      "(5, 'cudaLaunchKernel_v7000')");
  exec("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (" + std::to_string(o.sessionStartNs) + ", '', '')");
  exec("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H100 80GB HBM3', '0000:18:00.0', 1, 0, 0, 0, 0, 132, '')");
  const std::int64_t pid = (std::int64_t{4000 + device} << 24);
  const std::int64_t tid = pid | 77;
  // Absolute times share one clock: this file's times are relative to its own session start.
  const std::int64_t epoch = 1'750'000'000'100'000'000;
  const auto ns = [&](double ms) { return epoch + static_cast<std::int64_t>(ms * 1e6) - o.sessionStartNs; };
  std::int64_t corr = 1;
  int nvtx = 0;
  for (const Op& op : plan.ops) {
    if (op.device != device) continue;
    const std::string name = "PP:" + std::to_string(op.virtualStage) + letter(op.kind) + std::to_string(op.microbatch);
    // Host range starts before the GPU work (launch ahead); the kernel runs at the planned time.
    const std::string text = (nvtx++ % 2 == 0) ? "'" + name + "', NULL" : "NULL, " + std::to_string(100 + nvtx);
    if (nvtx % 2 == 0) exec("INSERT INTO StringIds VALUES (" + std::to_string(100 + nvtx) + ", '" + name + "')");
    exec("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid) VALUES (" +
         std::to_string(ns(op.startMs) - 300'000) + ", " +
         (o.nullEnd && nvtx == 3 ? std::string("NULL") : std::to_string(ns(op.startMs) - 200'000)) + ", 59, " + text +
         ", " + std::to_string(tid) + ")");
    exec("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (" + std::to_string(ns(op.startMs) - 250'000) + ", " +
         std::to_string(ns(op.startMs) - 240'000) + ", 1, " + std::to_string(tid) + ", " + std::to_string(corr) +
         ", 5, 0)");
    exec("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + std::to_string(ns(op.startMs)) + ", " +
         std::to_string(ns(op.endMs)) + ", 0, 1, 7, " + std::to_string(corr) + ", " + std::to_string(pid) +
         ", 1, 2, 132, 96)");
    ++corr;
  }
  exec("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (" + std::to_string(ns(0) - 1'000'000) +
       ", " + std::to_string(ns(plan.metrics.makespanMs)) + ", 59, 'ProfilerStep#0', " + std::to_string(tid) + ")");
  exec("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (" + std::to_string(ns(0) - 500'000) + ", " +
       std::to_string(ns(0) - 400'000) + ", 0, 1, 7, 999, " + std::to_string(pid) + ", 1048576, 1)");
  if (!o.withRuntime) exec("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME");
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

}  // namespace

TEST(NsysImport, RanksOnOneAxisAndNvtxOpsProjectedOntoTheirKernels) {
  TempDir dir;
  const Plan plan = zbPlan();
  std::vector<std::string> files;
  for (int d = 0; d < plan.config.devices; ++d) {
    files.push_back(dir.file("rank" + std::to_string(d) + ".sqlite"));
    NsysOptions o;
    o.sessionStartNs += d * 7'000'000;  // each rank's nsys session started at another time
    makeNsys(files.back(), plan, d, o);
  }
  auto store = openStore(dir);
  auto r = importAgainstPlan(store, plan, files);
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->skipped, 0) << r->firstError.value_or("");
  EXPECT_EQ(r->matchedOps, static_cast<std::int64_t>(plan.ops.size()));
  auto summary = store.runSummary(r->runId);
  EXPECT_EQ(summary->gpu, "NVIDIA H100 80GB HBM3");
  auto c = compareRunToPlan(store, r->runId);
  ASSERT_THAT(c, HasValue());
  // Ops take their kernels' GPU times, not the NVTX host ranges 0.3 ms earlier.
  for (const OpDrift& d : c->ops) {
    EXPECT_NEAR(d.startDriftMs, 0.0, 1e-6) << "device " << d.device;
    EXPECT_NEAR(d.durationDeltaMs, 0.0, 1e-6);
  }
  auto steps = store.stepTimesMs(r->runId);
  ASSERT_TRUE(steps.hasValue());
  EXPECT_EQ(steps->size(), 1u);
}

TEST(NsysImport, WithoutTheCudaApiTableOpsKeepTheirHostTimes) {
  TempDir dir;
  const Plan plan = zbPlan("1f1b", 2, 2);
  NsysOptions o;
  o.withRuntime = false;
  makeNsys(dir.file("r0.sqlite"), plan, 0, o);
  auto store = openStore(dir);
  TraceImportOptions opts;
  opts.plan = &plan;
  auto r = importTraces(store, {dir.file("r0.sqlite")}, opts);
  ASSERT_THAT(r, HasValue());
  auto ops = store.loadEvents(r->runId, EventCategory::Op);
  ASSERT_TRUE(ops.hasValue());
  ASSERT_FALSE(ops->empty());
  EXPECT_EQ(ops->front().durationNs, 100'000);  // the NVTX range, 0.1 ms
}

TEST(NsysImport, HostileExports) {
  TempDir dir;
  const Plan plan = zbPlan("1f1b", 2, 2);
  auto store = openStore(dir);
  // Not an nsys export: a SQLite file without any of its tables.
  {
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("other.sqlite").c_str(), &db);
    sqlite3_exec(db, "CREATE TABLE StringIds (id INTEGER, value TEXT); CREATE TABLE t(x)", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  auto r = importTraces(store, {dir.file("other.sqlite")}, {});
  EXPECT_THAT(r, HasError("not an Nsight Systems export"));
  // A corrupt file that starts like SQLite.
  writeFile(dir.file("corrupt.sqlite"), std::string("SQLite format 3\0", 16) + std::string(3000, '\x7f'));
  r = importTraces(store, {dir.file("corrupt.sqlite")}, {});
  EXPECT_THAT(r, HasError("corrupt.sqlite"));
  EXPECT_EQ(runCount(store), 0u);
  // NULL ends are skipped, counted and named.
  NsysOptions o;
  o.nullEnd = true;
  makeNsys(dir.file("nullend.sqlite"), plan, 0, o);
  r = importTraces(store, {dir.file("nullend.sqlite")}, {});
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->skipped, 1);
  EXPECT_NE(r->firstError.value_or("").find("NVTX_EVENTS row"), std::string::npos) << r->firstError.value_or("");
  // 10^5 NVTX op ranges and CUDA API calls on one timestamp: projection stays O(n log n).
  {
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("flat.sqlite").c_str(), &db);
    sqlite3_exec(
        db,
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER,"
        " correlationId INTEGER, demangledName INTEGER);"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, correlationId "
        "INTEGER);"
        "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER);"
        "INSERT INTO StringIds VALUES (1, 'k');"
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 99999)"
        " INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT 1000, 1000, 0, 7, i, 1 FROM n;"
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 99999)"
        " INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT 1000, 1000, 1, i FROM n;"
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 99999)"
        " INSERT INTO NVTX_EVENTS SELECT 1000, 1000, 59, 'PP:0F' || i, 1 FROM n;",
        nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  r = importTraces(store, {dir.file("flat.sqlite")}, {});
  ASSERT_THAT(r, HasValue());
  EXPECT_EQ(r->events, 200'000);
  EXPECT_EQ(r->measuredOps, 100'000);
}

TEST(OpPattern, UserPatternsNameTheirGroupsAndBadOnesAreRefused) {
  EXPECT_TRUE(checkOpPattern(""));
  EXPECT_TRUE(checkOpPattern("stage=(?<stage>\\d+) op=(?<kind>[FIWB]) mb=(?<microbatch>\\d+)"));
  auto bad = checkOpPattern("stage=(?<stage>\\d+");
  EXPECT_THAT(bad, HasError("at offset"));
  auto missing = checkOpPattern("(?<stage>\\d+)(?<kind>F)");
  EXPECT_THAT(missing, HasError("(?<microbatch>"));

  TempDir dir;
  const Plan plan = zbPlan("1f1b", 2, 2);
  std::string text = kinetoTrace(plan, 0);
  for (std::size_t p = 0; (p = text.find("\"PP:", p)) != std::string::npos;) {
    // "PP:0F1" → "stage=0 op=F mb=1"
    const std::size_t end = text.find('"', p + 1);
    const std::string action = text.substr(p + 4, end - p - 4);
    const std::size_t k = action.find_first_not_of("0123456789");
    const std::string mb = action.substr(action.find_first_of("0123456789", k));
    const std::string renamed =
        "stage=" + action.substr(0, k) + " op=" + action.substr(k, action.size() - k - mb.size()) + " mb=" + mb;
    text.replace(p + 1, end - p - 1, renamed);
    p = p + 1 + renamed.size();
  }
  writeFile(dir.file("custom.json"), text);
  auto store = openStore(dir);
  TraceImportOptions o;
  o.plan = &plan;
  o.opPattern = "stage=(?<stage>\\d+) op=(?<kind>[FIWB]) mb=(?<microbatch>\\d+)";
  auto r = importTraces(store, {dir.file("custom.json")}, o);
  ASSERT_THAT(r, HasValue());
  EXPECT_GT(r->matchedOps, 0);
  EXPECT_EQ(r->matchedOps, r->measuredOps);
}

namespace {

std::string dataFile(const std::string& name) { return std::string(PIPESTUDIO_TEST_DATA) + "/trace/" + name; }

}  // namespace

// The committed fixture (tests/data/trace): a zb-h1 plan and its two ranks' Kineto traces, as
// the README's worked example uses them: the run went as the plan would with stage 1's forward
// 30% slower than profiled. PIPESTUDIO_UPDATE_GOLDENS=1 rewrites them.
TEST(TraceImportCli, CommittedFixtureImportAndCompareContract) {
#ifndef PIPESTUDIO_CLI
  GTEST_SKIP() << "no pipestudio-cli in this build";
#else
  if (std::getenv("PIPESTUDIO_UPDATE_GOLDENS")) {
    const Plan plan = zbPlan("zb-h1", 2, 4);
    ASSERT_TRUE(savePlan(dataFile("plan-zb-h1.json"), plan));
    const Plan measured = zbPlan("zb-h1", 2, 4, 1.3);
    for (int d = 0; d < 2; ++d) {
      KinetoOptions o;
      o.clockSkewNs = d * 250'000'000;
      writeGzip(dataFile("rank" + std::to_string(d) + ".pt.trace.json.gz"), kinetoTrace(measured, d, o));
    }
  }
  TempDir dir;
  const std::string db = "--db " + dir.file("h.sqlite");
  auto imp = cli(dir, "history " + db + " import " + dataFile("rank1.pt.trace.json.gz") + " " +
                          dataFile("rank0.pt.trace.json.gz") + " --plan " + dataFile("plan-zb-h1.json") + " --json");
  ASSERT_EQ(imp.exitCode, 0) << imp.err;
  auto j = Json::parse(imp.out);
  auto plan = loadPlan(dataFile("plan-zb-h1.json"));
  ASSERT_TRUE(plan.hasValue());
  EXPECT_EQ(j["matched_ops"].get<std::int64_t>(), 2 * static_cast<std::int64_t>(plan->ops.size()));
  EXPECT_GT(j["events"].get<std::int64_t>(), j["matched_ops"].get<std::int64_t>());
  const std::string id = std::to_string(j["id"].get<std::int64_t>());
  auto cmp = cli(dir, "history " + db + " compare " + id + " plan --json");
  ASSERT_EQ(cmp.exitCode, 0) << cmp.err;
  auto c = Json::parse(cmp.out);
  ASSERT_EQ(c["by_device"].size(), 2u);
  for (const auto& d : c["by_device"]) {
    EXPECT_TRUE(d.contains("planned_bubble_ms"));
    EXPECT_TRUE(d.contains("measured_bubble_ms"));
    // The wait counted is the bubble's: a receive posted while the device computes is not idle.
    EXPECT_LE(d["measured_comm_wait_ms"].get<double>(), d["measured_bubble_ms"].get<double>() + 1e-9) << d.dump();
  }
  EXPECT_FALSE(c["latest"].empty());
  // Stage 1 (device 1) ran its forwards late and slow: device 0 waited for its backwards.
  EXPECT_GT(c["latest"][0]["start_drift_ms"].get<double>(), 0.5);
  EXPECT_GT(c["by_device"][0]["measured_bubble_ms"].get<double>(),
            c["by_device"][0]["planned_bubble_ms"].get<double>() + 0.5);
  // Hostile through the CLI: a bad pattern is a usage error, a missing file exit 1.
  auto badPattern =
      cli(dir, "history " + db + " import " + dataFile("rank0.pt.trace.json.gz") + " --op-pattern '(?<stage>'");
  EXPECT_EQ(badPattern.exitCode, 2) << badPattern.err;
  auto missing = cli(dir, "history " + db + " import " + dir.file("nope.json.gz"));
  EXPECT_EQ(missing.exitCode, 1);
  EXPECT_NE(missing.err.find("nope.json.gz"), std::string::npos);
#endif
}
