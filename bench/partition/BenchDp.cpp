// `dp` partitioner: 1000 layers × 64 virtual stages (issue 4 target ≤ 1 s), heterogeneous
// devices, transfers and memory budgets.
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "pipestudio/planner/Partition.hpp"

namespace {

pipestudio::PartitionProblem makeProblem(int layers, int stages, int microbatches) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> cost(0.5, 2.0);
  pipestudio::PartitionProblem p;
  p.layers = layers;
  p.microbatches = microbatches;
  std::vector<double> base(static_cast<std::size_t>(layers));
  for (double& b : base) b = cost(rng);
  double totalBytes = 0;
  for (int l = 0; l < layers; ++l) {
    p.activationBytes.push_back(1e8 * cost(rng));
    p.staticBytes.push_back(3e8 * cost(rng));
    totalBytes += p.staticBytes.back() + 8 * p.activationBytes.back();
  }
  for (int s = 0; s < stages; ++s) {
    // Two GPU generations: every fourth device is 1.5× slower.
    const double speed = s % 4 == 3 ? 1.0 / 1.5 : 1.0;
    pipestudio::PartitionStage st;
    st.device = s;
    st.liveMicrobatches = stages - s;
    st.memoryBudgetBytes = 3.0 * totalBytes / stages;
    p.stages.push_back(st);
    std::vector<double> row;
    std::vector<double> send;
    for (int l = 0; l < layers; ++l) {
      row.push_back(base[static_cast<std::size_t>(l)] / speed);
      send.push_back(s + 1 < stages ? 0.05 + 0.01 * static_cast<double>(l % 7) : 0.0);
    }
    p.computeMs.push_back(std::move(row));
    p.sendMs.push_back(std::move(send));
  }
  return p;
}

void BM_DpPartition(benchmark::State& state) {
  const auto p =
      makeProblem(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  double objective = 0;
  for (auto _ : state) {
    auto r = pipestudio::dpPartition(p);
    if (!r) {
      state.SkipWithError(r.message().c_str());
      return;
    }
    objective = r->objectiveMs;
    benchmark::DoNotOptimize(r->firstLayer.data());
  }
  state.SetLabel("objective " + std::to_string(objective) + " ms");
}
BENCHMARK(BM_DpPartition)
    ->Args({1000, 64, 256})
    ->Args({1000, 64, 64})
    ->Args({200, 16, 32})
    ->Unit(benchmark::kMillisecond);

void BM_BalancedPartition(benchmark::State& state) {
  const auto p = makeProblem(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 64);
  for (auto _ : state) {
    auto r = pipestudio::balancedPartition(p);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_BalancedPartition)->Args({1000, 64})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
