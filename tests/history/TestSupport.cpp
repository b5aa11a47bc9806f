#include "TestSupport.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "support/MustPlan.hpp"
#include "support/PlanBuilder.hpp"
#include "support/ProcFs.hpp"
#include "support/RunCommand.hpp"
#include "support/SyntheticStream.hpp"

namespace pipestudio::history::testing {

TempDir::TempDir() {
  static int counter = 0;
  m_path = std::filesystem::temp_directory_path() /
           ("pipestudio-history-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(m_path);
  std::filesystem::create_directories(m_path);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(m_path, ec);
}

Plan smallPlan() {
  return test::PlanBuilder("1f1b", 2, 2)
      .samplesPerMicrobatch(4)
      .backbone(2)
      .stagePerDevice()
      .order(0, "F0 F1 .  B0 W0 .  B1 W1")
      .order(1, ".  F0 B0 W0 F1 B1 W1")
      .build();
}

std::vector<trace::Frame> executorFrames(const Plan& plan, const StreamOptions& o) {
  std::vector<trace::Frame> frames;
  trace::Header h;
  h.runId = "test-run";
  h.rank = o.rank;
  h.world = plan.config.devices;
  h.host = "testhost";
  h.backend = "cpu";
  h.deviceName = "cpu";
  h.clockOriginNs = 5'000'000;
  h.wallClockNs = o.wallClockNs;
  frames.emplace_back(h);
  const double iterationMs = plan.metrics.makespanMs * o.slowdown + 2.0;
  std::vector<double> steps;
  for (int it = 0; it < o.iterations; ++it) {
    const double base = it * iterationMs;
    for (const Op& op : plan.ops) {
      const auto start = static_cast<std::int64_t>((base + op.startMs * o.slowdown) * 1e6) + o.launchDelayNs;
      const auto dur = static_cast<std::int64_t>(op.durationMs() * o.slowdown * 1e6);
      const bool crossDevice =
          (op.kind == OpKind::F && op.virtualStage > 0) || (op.kind == OpKind::B && op.virtualStage == 0);
      if (crossDevice && o.withKernels) {
        frames.emplace_back(trace::Activity{trace::Activity::Kind::Nccl, op.device, 1, start - 200'000, start - 100'000,
                                            4096, 0, "ncclDevKernel_SendRecv"});
      }
      frames.emplace_back(trace::OpRange{true, op.device, op.virtualStage, op.kind, op.microbatch, it, start, start});
      if (o.withKernels) {
        frames.emplace_back(trace::Activity{trace::Activity::Kind::Kernel, op.device, 0, start, start + dur, 0,
                                            static_cast<std::uint64_t>(frames.size()),
                                            op.kind == OpKind::F ? "sgemm_fwd" : "sgemm_bwd"});
      }
      frames.emplace_back(
          trace::OpRange{false, op.device, op.virtualStage, op.kind, op.microbatch, it, start, start + dur});
    }
    frames.emplace_back(trace::MemorySample{0, static_cast<std::int64_t>(base * 1e6), 1000 + it, 2000});
    steps.push_back(iterationMs);
  }
  if (o.withSummary) {
    trace::Summary s;
    s.iterations = o.iterations;
    s.ok = o.summaryOk;
    s.elapsedNs = static_cast<std::int64_t>(o.iterations * iterationMs * 1e6);
    s.iterationMs = steps;
    frames.emplace_back(s);
  }
  return frames;
}

std::string largeStream(std::int64_t events, int devices) { return test::syntheticStream(events, devices); }

std::string readFile(const std::string& path) { return test::wholeFile(path); }

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

Plan plannedPlan(std::vector<Layer> layers, const std::string& schedule, int devices, int microbatches) {
  PlanRequest r;
  Component c;
  c.name = "backbone";
  c.layers = std::move(layers);
  r.model.name = "t";
  r.model.components.push_back(std::move(c));
  r.cluster.name = "c";
  r.cluster.gpu.name = "test-gpu";
  r.cluster.gpu.peakTflops = 100;
  r.cluster.gpu.memoryGib = 80;
  NodeSpec n;
  n.host = "localhost";
  n.gpus = devices;
  r.cluster.nodes.push_back(n);
  r.cluster.intraNode = {100, 5};
  r.cluster.interNode = {100, 5};
  r.config.schedule = schedule;
  r.config.devices = devices;
  r.config.microbatches = microbatches;
  r.config.partition = "uniform";
  return ::pipestudio::test::mustPlan(r);
}

CliResult cli(const TempDir& dir, const std::string& args, const std::string& env) {
  CliResult r;
#ifdef PIPESTUDIO_CLI
  const std::string errFile = dir.file("stderr.txt");
  const test::CommandResult run = test::runCommand((env.empty() ? "" : "env " + env + " ") +
                                                   std::string(PIPESTUDIO_CLI) + " " + args + " 2>" + errFile);
  r.exitCode = run.status;
  r.out = run.out;
  r.err = readFile(errFile);
#else
  (void)dir;
  (void)args;
  (void)env;
#endif
  return r;
}

std::int64_t queryInt(HistoryStore& store, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(store.connection(), sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
  std::int64_t v = -1;
  if (st && sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

Expected<TraceImportResult> importAgainstPlan(HistoryStore& store, const Plan& plan,
                                              const std::vector<std::string>& files, const std::string& name) {
  TraceImportOptions o;
  o.plan = &plan;
  PS_ASSIGN_OR_RETURN(o.info.planId, store.addPlan(plan, name));
  return importTraces(store, files, o);
}

HistoryStore openStore(const TempDir& dir) {
  auto s = HistoryStore::open(dir.file("history.sqlite"));
  EXPECT_THAT(s, HasValue());
  return std::move(*s);
}

}  // namespace pipestudio::history::testing
