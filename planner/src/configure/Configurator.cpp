// Configurator search (issue 4). Every (p, d = G/p) split of the cluster's G GPUs, each
// schedule with its chunk choices, each partition and microbatch count is solved and
// simulated; the pipeline iteration plus the data-parallel gradient all-reduce gives the
// throughput. Memory-infeasible families are pruned after their first failure.
#include "pipestudio/planner/Configurator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio {
namespace {

bool isMemoryError(const std::string& msg) {
  return msg.find("memory") != std::string::npos || msg.find("does not fit") != std::string::npos;
}

}  // namespace

double ringAllReduceMs(const ClusterSpec& cluster, int firstDevice, int stride, int replicas, double bytes) {
  if (replicas <= 1 || bytes <= 0) return 0.0;
  double worstBandwidth = std::numeric_limits<double>::infinity();
  double worstLatencyUs = 0;
  for (int r = 0; r < replicas; ++r) {
    const int a = firstDevice + r * stride;
    const int b = firstDevice + ((r + 1) % replicas) * stride;
    const bool sameNode = cluster.nodeOfDevice(a) == cluster.nodeOfDevice(b);
    const LinkSpec& link = sameNode ? cluster.intraNode : cluster.interNode;
    if (link.bandwidthGBps > 0) worstBandwidth = std::min(worstBandwidth, link.bandwidthGBps);
    worstLatencyUs = std::max(worstLatencyUs, link.latencyUs);
  }
  const double n = static_cast<double>(replicas);
  const double transferMs = std::isinf(worstBandwidth) ? 0.0 : 2.0 * (n - 1.0) / n * bytes / (worstBandwidth * 1e6);
  return transferMs + 2.0 * (n - 1.0) * worstLatencyUs / 1000.0;
}

Expected<Configuration> configure(const ModelSpec& model, const ClusterSpec& cluster, const ConfigureOptions& options,
                                  const SolveControl& control) {
  const int gpus = cluster.totalGpus();
  if (gpus < 1) return Error{"configure: cluster '" + cluster.name + "' has no GPUs"};
  if (model.trainableComponents().empty()) return Error{"configure: model '" + model.name + "' has no trainable component"};
  std::vector<std::string> schedules = options.schedules;
  if (schedules.empty()) {
    for (const ScheduleGenerator* g : scheduleGenerators()) {
      const std::string n(g->name());
      if (n == "custom" || n == "zb-auto") continue;  // need a CSV / a memory limit to mean anything
      schedules.push_back(n);
    }
  }
  const bool hasFrozen = !model.frozenComponents().empty();
  int trainableLayers = 0;
  for (int c : model.trainableComponents()) {
    trainableLayers += static_cast<int>(model.components[static_cast<std::size_t>(c)].layers.size());
  }

  struct Job {
    int p;
    std::string schedule;
  };
  std::vector<Job> families;
  for (int p = 1; p <= gpus; ++p) {
    if (gpus % p != 0) continue;
    for (const auto& s : schedules) families.push_back({p, s});
  }

  Configuration out;
  for (std::size_t f = 0; f < families.size(); ++f) {
    if (control.cancelled()) return Error{"cancelled"};
    if (control.progress) control.progress(static_cast<double>(f) / static_cast<double>(families.size()));
    const auto& [p, schedule] = families[f];
    const int d = gpus / p;
    const ScheduleGenerator* g = findScheduleGenerator(schedule);
    if (!g) {
      out.rejected.push_back({p, d, schedule, "unknown schedule"});
      continue;
    }
    std::vector<int> chunkChoices = {g->defaultChunksPerDevice()};
    if (schedule == "interleaved-1f1b") chunkChoices = {2, 4};
    std::string firstReason;
    bool anyFeasible = false;
    for (int chunks : chunkChoices) {
      if (p * chunks > trainableLayers) {
        if (firstReason.empty()) {
          firstReason = std::to_string(p * chunks) + " virtual stages but only " + std::to_string(trainableLayers) +
                        " trainable layers";
        }
        continue;
      }
      bool memoryFailed = false;
      for (int perDevice : options.microbatchesPerDevice) {
        const int m = p * perDevice;
        if (m > options.maxMicrobatches || memoryFailed) continue;
        const ScheduleShape shape{p, m, chunks};
        if (auto st = g->validate(shape); !st) {
          if (firstReason.empty()) firstReason = st.message();
          continue;
        }
        for (const auto& partition : options.partitions) {
          if (control.cancelled()) return Error{"cancelled"};
          PlanRequest r;
          r.model = model;
          r.cluster = cluster;
          r.config.schedule = schedule;
          r.config.devices = p;
          r.config.microbatches = m;
          r.config.chunksPerDevice = chunks;
          r.config.partition = partition;
          r.config.fill = hasFrozen ? "greedy" : "none";
          r.config.dataParallel = d;
          SolveControl inner;
          inner.cancel = control.cancel;
          auto plan = makePlan(r, inner);
          ++out.evaluated;
          if (!plan) {
            if (firstReason.empty()) firstReason = plan.message();
            // More microbatches never lower activation memory: stop this family's counts.
            if (isMemoryError(plan.message()) && partition == options.partitions.back()) memoryFailed = true;
            continue;
          }
          // Gradient all-reduce: replicas of each pipeline device k are k + r·p; the
          // slowest device (most trainable parameters) bounds the step.
          const auto costs = stageCosts(*plan);
          std::vector<double> params(static_cast<std::size_t>(p), 0.0);
          for (std::size_t i = 0; i < plan->virtualStages.size(); ++i) {
            params[static_cast<std::size_t>(plan->virtualStages[i].device)] += costs[i].trainableParameters;
          }
          double allReduceMs = 0;
          for (int k = 0; k < p; ++k) {
            allReduceMs = std::max(allReduceMs, ringAllReduceMs(cluster, k, p, d, 2.0 * params[static_cast<std::size_t>(k)]));
          }
          ConfigCandidate c;
          c.config = plan->config;
          c.makespanMs = plan->metrics.makespanMs;
          c.allReduceMs = allReduceMs;
          c.iterationMs = c.makespanMs + allReduceMs;
          const double samples = static_cast<double>(m) * static_cast<double>(model.samplesPerMicrobatch) * d;
          c.throughputSamplesPerS = c.iterationMs > 0 ? samples / (c.iterationMs / 1000.0) : 0.0;
          c.bubbleRatio = plan->metrics.bubbleRatio;
          for (const auto& dm : plan->metrics.devices) c.peakMemoryBytes = std::max(c.peakMemoryBytes, dm.peakMemoryBytes);
          out.feasible.push_back(std::move(c));
          anyFeasible = true;
        }
      }
    }
    if (!anyFeasible) {
      out.rejected.push_back({p, d, schedule, firstReason.empty() ? "no configuration tried" : firstReason});
    }
  }
  std::stable_sort(out.feasible.begin(), out.feasible.end(), [](const ConfigCandidate& a, const ConfigCandidate& b) {
    return a.throughputSamplesPerS > b.throughputSamplesPerS;
  });
  if (control.progress) control.progress(1.0);
  return out;
}

}  // namespace pipestudio
