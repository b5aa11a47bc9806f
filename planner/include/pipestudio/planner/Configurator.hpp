#pragma once
/// \file The configurator (`pipestudio-cli configure`, issue 4): searches pipeline ×
/// data-parallel degree, microbatch count, schedule, chunks and partition for a model on a
/// cluster, simulates each, and ranks the memory-feasible ones by throughput.

#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio {

struct ConfigureOptions {
  /// Microbatches per iteration are tried as multiples of the pipeline degree p.
  std::vector<int> microbatchesPerDevice = {1, 2, 4};
  int maxMicrobatches = 128;
  /// Schedules to try (empty: every registered one except those needing extra input, such as
  /// custom and zb-auto).
  std::vector<std::string> schedules;
  std::vector<std::string> partitions = {"balanced", "dp"};
};

/// One simulated, memory-feasible configuration.
struct ConfigCandidate {
  PlanConfig config;               ///< devices = pipeline degree, dataParallel = replicas
  double makespanMs = 0;           ///< simulated pipeline iteration
  double allReduceMs = 0;          ///< gradient all-reduce across the replicas
  double iterationMs = 0;          ///< makespan + all-reduce
  double throughputSamplesPerS = 0;
  double bubbleRatio = 0;
  std::int64_t peakMemoryBytes = 0;  ///< the fullest device
};

/// A (pipeline degree, schedule) family none of whose configurations could be used.
struct ConfigRejection {
  int pipelineDegree = 0;
  int dataParallel = 0;
  std::string schedule;
  std::string reason;  ///< the first failure (memory numbers, shape requirements, …)
};

struct Configuration {
  std::vector<ConfigCandidate> feasible;  ///< best throughput first
  std::vector<ConfigRejection> rejected;
  int evaluated = 0;                      ///< configurations simulated
};

/// Runs the search. Families whose smallest microbatch count already runs out of memory
/// skip their larger counts (activation memory does not shrink with more microbatches).
/// Honors control.cancel and reports progress.
Expected<Configuration> configure(const ModelSpec& model, const ClusterSpec& cluster,
                                  const ConfigureOptions& options = {}, const SolveControl& control = {});

/// Ring all-reduce time of `bytes` over `replicas` devices spaced `stride` apart (replica r of
/// a device k is device k + r·stride): 2(n−1)/n · bytes / bandwidth + 2(n−1) · latency on the
/// slowest link of the ring.
double ringAllReduceMs(const ClusterSpec& cluster, int firstDevice, int stride, int replicas, double bytes);

}  // namespace pipestudio
