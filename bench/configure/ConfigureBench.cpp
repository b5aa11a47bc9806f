// Configurator search time (issue 13 targets: a Llama-3-405B-shaped search on 16,384 H100s
// in <= 10 s, the bundled examples in <= 2 s). One search per iteration; the counters say how
// many configurations were enumerated and simulated.
#include <benchmark/benchmark.h>

#include <string>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Configurator.hpp"

namespace {

void configureSearch(benchmark::State& state, const std::string& model, const std::string& cluster) {
  const std::string res = PIPESTUDIO_RESOURCES;
  auto m = pipestudio::loadModel(res + "/models/" + model);
  auto c = pipestudio::loadCluster(res + "/clusters/" + cluster);
  if (!m || !c) {
    state.SkipWithError("cannot load the bundled model or cluster");
    return;
  }
  pipestudio::ConfigureOptions options;
  options.keep = 15;  // what `pipestudio-cli configure` ranks by default
  int enumerated = 0, simulated = 0;
  for (auto _ : state) {
    auto r = pipestudio::configure(*m, *c, options);
    if (!r) {
      state.SkipWithError(r.message().c_str());
      return;
    }
    enumerated = r->enumerated;
    simulated = r->evaluated;
    benchmark::DoNotOptimize(r->feasible.data());
  }
  state.counters["configurations"] = enumerated;
  state.counters["simulated"] = simulated;
}

}  // namespace

BENCHMARK_CAPTURE(configureSearch, llama2_70b_32xH100, std::string("llama2-70b.json"), std::string("h100-4x8-ib.json"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(configureSearch, llama3_8b_64xH100, std::string("llama3-8b.json"), std::string("h100-8x8-ib.json"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(configureSearch, llama3_70b_64xH100, std::string("llama3-70b.json"), std::string("h100-8x8-ib.json"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(configureSearch, mixtral_8x7b_64xH100, std::string("mixtral-8x7b.json"),
                  std::string("h100-8x8-ib.json"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(configureSearch, deepseek_v3_1024xH100, std::string("deepseek-v3-moe.json"),
                  std::string("h100-128x8-ib.json"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(configureSearch, dit_xl_64xH100, std::string("dit-xl-t5.json"), std::string("h100-8x8-ib.json"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(configureSearch, llama3_405b_16384xH100, std::string("llama3-405b.json"),
                  std::string("h100-2048x8-ib.json"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_MAIN();
