// Generate + simulate p=64, m=1024 for every schedule (issue 3 target: ≤ 100 ms, one core).
#include <benchmark/benchmark.h>

#include <string>

#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace {

using namespace pipestudio;

PlanRequest bigRequest(const std::string& schedule, int chunks) {
  PlanRequest r;
  r.model.name = "bench";
  Component c;
  c.name = "backbone";
  for (int i = 0; i < 64 * 4; ++i) {
    Layer l;
    l.name = "l" + std::to_string(i);
    l.forwardMs = 1.0;
    l.backwardInputMs = 1.0;
    l.backwardWeightMs = 1.0;
    l.activationBytes = 1 << 20;
    l.parameterBytes = 1 << 20;
    l.outputBytes = 1 << 16;
    c.layers.push_back(l);
  }
  r.model.components.push_back(c);
  r.cluster.name = "bench";
  r.cluster.gpu = {"gpu", 1000, 1e6, 0.5};
  for (int n = 0; n < 8; ++n) r.cluster.nodes.push_back({"node" + std::to_string(n), 8, std::nullopt, std::nullopt});
  r.cluster.intraNode = {200, 5};
  r.cluster.interNode = {25, 10};
  r.config.schedule = schedule;
  r.config.devices = 64;
  r.config.microbatches = 1024;
  r.config.chunksPerDevice = chunks;
  r.config.partition = "uniform";  // the issue times schedule generation + simulation, not partitioning
  return r;
}

void generateAndSimulate(benchmark::State& state, std::string schedule) {
  const ScheduleGenerator* g = findScheduleGenerator(schedule);
  const PlanRequest r = bigRequest(schedule, g->defaultChunksPerDevice());
  std::size_t ops = 0;
  for (auto _ : state) {
    auto plan = makePlan(r);
    if (!plan) {
      state.SkipWithError(plan.message().c_str());
      return;
    }
    ops = plan->ops.size();
    benchmark::DoNotOptimize(plan->metrics.makespanMs);
  }
  state.counters["ops"] = static_cast<double>(ops);
}

const int kRegistered = [] {
  for (const char* s : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "bitpipe",
                        "dualpipe", "dualpipe-v"}) {
    benchmark::RegisterBenchmark((std::string("generate_simulate/") + s).c_str(), generateAndSimulate, std::string(s))
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
