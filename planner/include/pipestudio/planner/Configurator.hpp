#pragma once
/// \file The configurator (`pipestudio-cli configure`, issues 4 and 13): for a model, a cluster
/// and a fixed global batch (the training recipe), searches the factorizations of the cluster
/// into tensor × context × pipeline × data (× expert) parallel degrees, the micro-batch size,
/// schedule, chunks, recomputation and ZeRO stage, and ranks the memory-feasible plans by
/// simulated throughput.
///
/// The space is large (tens of thousands of configurations for a 405B model on 16k GPUs), so
/// every configuration first gets a static-memory lower bound (pruned when even that does not
/// fit) and, from its schedule run on identical stages, an activation and an iteration estimate
/// (Configurator.cpp says how); configurations are then simulated best estimate first until
/// the next estimate falls 1 % below the `keep`-th simulated throughput or `maxSimulations` is
/// spent. Configurations that are the same plan (every schedule at P = 1; selective
/// recomputation with FlashAttention) are collapsed to one.

#include <optional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/planner/Request.hpp"

namespace pipestudio {

/// The most microbatches per pipeline a configuration may have (G / (micro-batch size × D));
/// splits past it are not enumerated.
inline constexpr int kMaxConfigureMicrobatches = 100000;

/// The most configurations a search ranks (`keep`, `configure --top`): each is simulated in
/// full, and the screening budget grows with it, so the time of a search is bounded by this.
inline constexpr int kMaxConfigureKeep = 1000;

/// The work a search may spend planning candidates, in (virtual stage, layer) pairs its
/// partitions split plus ops its plans hold (the partitioners' and the simulator's work, a few
/// microseconds each): a model of thousands of layers makes every candidate's plan that large,
/// and the search then stops early (Configuration::workBudgetSpent) instead of running for
/// hours. The bundled searches use at most about a third of it (Llama-3-405B on 16,384 GPUs: 6.5 M).
inline constexpr std::int64_t kConfigureWorkBudget = 20'000'000;

struct ConfigureOptions {
  /// Samples per iteration, held fixed; 0: the model's `global_batch`, else 4 × GPUs ×
  /// samples_per_microbatch.
  std::int64_t globalBatch = 0;
  std::vector<int> microBatchSizes = {1, 2, 4, 8};
  /// Schedules to try (empty: every registered one except those needing extra input, such as
  /// custom and zb-auto).
  std::vector<std::string> schedules;
  std::vector<std::string> partitions = {"balanced"};
  std::vector<Recompute> recomputes = {Recompute::None, Recompute::Selective, Recompute::Full};
  std::vector<int> zeroStages = {0, 1, 2, 3};
  int maxContextParallel = 16;
  /// Context parallelism's communication type; nullopt: every type the heads allow (issue 26).
  /// The expert tensor parallelism (recipe.parallel.expertTensor) and the capacity factor
  /// (recipe.parallel.moeCapacityFactor) are searched likewise unless the recipe fixes them.
  std::optional<CpCommType> cpCommType;
  /// Feasible configurations to rank (the rest are left out once no estimate can enter); at
  /// most kMaxConfigureKeep are.
  int keep = 25;
  /// At most this many plans are simulated (time budget by work, never by the clock).
  int maxSimulations = 200;
  /// The search's work budget (kConfigureWorkBudget; tests lower it).
  std::int64_t workBudget = kConfigureWorkBudget;
  /// Profile a candidate's schedule only when its estimate without the schedule's idle time
  /// reaches the top of the screening queue (true), or every candidate as it is enumerated
  /// (false: the same ranking and rejected families, slower; the pruned and bounded-out counts
  /// differ, as unprofiled candidates count as bounded out).
  bool lazyProfiles = true;
  /// What every candidate shares and the search never changes: the precision, the overlap
  /// settings and the gradient reduction type (issue 25), and the details of a recomputation
  /// mode (recompute_num_layers with full, recompute_modules with selective).
  PlanConfig recipe;
};

/// One simulated, memory-feasible configuration.
struct ConfigCandidate {
  PlanConfig config;  ///< devices = pipeline degree; parallel = T, C, E, D, …
  std::int64_t samplesPerMicrobatch = 1;
  Metrics metrics;         ///< iteration, throughput, MFU, memory breakdown …
  double makespanMs = 0;   ///< simulated pipeline of one iteration
  double allReduceMs = 0;  ///< exposed gradient synchronisation
  double iterationMs = 0;  ///< one training step
  double throughputSamplesPerS = 0;
  double bubbleRatio = 0;
  std::int64_t peakMemoryBytes = 0;  ///< the fullest GPU
  /// A stage ends between a block's attention and its MLP (partition balanced-split chose the
  /// blocks' halves, BlockHalves.hpp): only Megatron-LM's HybridModel runs it.
  bool blockHalves = false;
};

/// A family (pipeline degree, data parallel, schedule) none of whose configurations could be
/// used, with the first reason.
struct ConfigRejection {
  int pipelineDegree = 0;
  int dataParallel = 0;
  std::string schedule;
  std::string reason;  ///< the first failure (memory numbers, shape requirements, …)
};

struct Configuration {
  std::int64_t globalBatch = 0;           ///< the batch every configuration trains
  std::vector<ConfigCandidate> feasible;  ///< best throughput first, at most options.keep
  std::vector<ConfigRejection> rejected;
  int enumerated = 0;       ///< distinct configurations considered
  int prunedByMemory = 0;   ///< whose memory lower bound exceeds the GPU
  int boundedOut = 0;       ///< never simulated: their estimate cannot enter the top
  int evaluated = 0;        ///< configurations screened (simulated on short runs, or in full)
  int simulatedInFull = 0;  ///< screened ones simulated again at their full microbatch count
  std::int64_t work = 0;    ///< planning work spent (kConfigureWorkBudget's units)
  /// The work budget ran out before the screening settled: the ranking covers the configurations
  /// screened (`evaluated`), not every one whose estimate could still have entered it.
  bool workBudgetSpent = false;
};

/// Runs the search. Honors control.cancel and reports progress.
Expected<Configuration> configure(const ModelSpec& model, const ClusterSpec& cluster,
                                  const ConfigureOptions& options = {}, const SolveControl& control = {});

}  // namespace pipestudio
