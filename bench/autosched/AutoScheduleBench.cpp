// zb-auto at scale (issue 3: p = 32, m = 256 with a memory limit, target ≤ 1 s; issue 20: the first
// answer within 50 ms at p = 64, m = 512) and its gap to the lower bound. `bench_autosched` runs
// Google Benchmark; `bench_autosched --table` prints the README table (time to the first answer
// and in total, makespan, bounds, gaps, the authors' published heuristic for comparison).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "pipestudio/planner/AutoSchedule.hpp"

namespace {

using namespace pipestudio;

constexpr std::int64_t kActivationBytes = 64ll << 20;  // per stage and microbatch
constexpr std::int64_t kStaticBytes = 8ll << 30;

// Per-stage F/B/W drawn around F=1, B=1, W=0.8 ms (±25 %), transfers 0.05 ms; V placement when
// chunks = 2. The limit allows `inFlight` microbatches of activations per device on top of the
// static memory (1F1B's first device needs p).
ScheduleInput instance(int p, int m, int chunks, double inFlight, unsigned seed = 42) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(0.75, 1.25);
  ScheduleInput in;
  in.shape = {p, m, chunks};
  const int stages = p * chunks;
  for (int s = 0; s < stages; ++s) {
    VirtualStage vs;
    vs.id = s;
    const int chunk = s / p;
    vs.chunk = chunk;
    vs.device = chunk % 2 == 0 ? s % p : p - 1 - s % p;
    in.virtualStages.push_back(vs);
    StageEstimate e;
    e.forwardMs = 1.0 * jitter(rng) / chunks;
    e.backwardInputMs = 1.0 * jitter(rng) / chunks;
    e.backwardWeightMs = 0.8 * jitter(rng) / chunks;
    e.activationBytes = kActivationBytes / chunks;
    e.weightGradBytes = e.activationBytes / 3;
    in.stages.push_back(e);
  }
  for (int s = 0; s + 1 < stages; ++s) {
    const bool cross = in.virtualStages[static_cast<std::size_t>(s)].device !=
                       in.virtualStages[static_cast<std::size_t>(s + 1)].device;
    in.stages[static_cast<std::size_t>(s)].sendMs = cross ? 0.05 : 0.0;
  }
  in.staticBytes.assign(static_cast<std::size_t>(p), kStaticBytes);
  in.memoryLimitBytes = kStaticBytes + static_cast<std::int64_t>(inFlight * static_cast<double>(kActivationBytes));
  return in;
}

void BM_ZbAuto(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  const int chunks = static_cast<int>(state.range(2));
  const ScheduleInput in = instance(p, m, chunks, p);
  AutoScheduleReport report;
  for (auto _ : state) {
    auto r = autoSchedule(in);
    if (!r) {
      state.SkipWithError(r.message().c_str());
      return;
    }
    report = r->report;
    benchmark::DoNotOptimize(r->skeleton.devices.data());
  }
  state.counters["makespan_ms"] = report.makespanMs;
  state.counters["gap_busiest_pct"] = 100 * report.gapToBusiestWork;
  state.counters["gap_bound_pct"] = 100 * report.gapToLowerBound;
  state.counters["published_gap_busiest_pct"] = 100 * (report.paperGreedyMakespanMs / report.busiestDeviceWorkMs - 1);
}
BENCHMARK(BM_ZbAuto)
    ->Args({8, 64, 1})
    ->Args({16, 128, 1})
    ->Args({32, 256, 1})
    ->Args({32, 256, 2})
    ->Unit(benchmark::kMillisecond);

void printTable() {
  std::printf(
      "| p | m | chunks | memory limit (activations) | first answer | total | makespan | lower bound | busiest work | "
      "gap to bound | gap to busiest | published heuristic gap | best policy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct Row {
    int p, m, chunks;
    double inFlight;
  };
  const Row rows[] = {{8, 64, 1, 8},    {16, 128, 1, 16}, {32, 256, 1, 32}, {32, 256, 1, 16}, {32, 256, 1, 64},
                      {32, 256, 2, 32}, {32, 256, 2, 16}, {64, 512, 1, 64}, {64, 512, 2, 64}};
  for (const Row& row : rows) {
    ScheduleInput in = instance(row.p, row.m, row.chunks, row.inFlight);
    // The first answer: the first progress report (after the authors' heuristic is timed).
    const auto t0 = std::chrono::steady_clock::now();
    double firstMs = -1;
    SolveControl control;
    control.progress = [&](double) {
      if (firstMs < 0)
        firstMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    in.control = &control;
    auto r = autoSchedule(in);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) {
      std::printf("| %d | %d | %d | %.0f mb | error: %s |\n", row.p, row.m, row.chunks, row.inFlight,
                  r.message().c_str());
      continue;
    }
    const AutoScheduleReport& rep = r->report;
    char published[64] = "none";
    if (rep.paperGreedyMakespanMs > 0) {
      std::snprintf(published, sizeof published, "%.2f%% (%s)",
                    100 * (rep.paperGreedyMakespanMs / rep.busiestDeviceWorkMs - 1), rep.publishedHeuristic.c_str());
    }
    std::printf(
        "| %d | %d | %d | %.0f microbatches | %.0f ms | %.0f ms | %.1f ms | %.1f ms | %.1f ms | %.2f%% | %.2f%% | %s | "
        "%s |\n",
        row.p, row.m, row.chunks, row.inFlight, firstMs, 1000 * seconds, rep.makespanMs, rep.lowerBoundMs,
        rep.busiestDeviceWorkMs, 100 * rep.gapToLowerBound, 100 * rep.gapToBusiestWork, published,
        rep.bestPolicy.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--table") == 0) {
      printTable();
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
