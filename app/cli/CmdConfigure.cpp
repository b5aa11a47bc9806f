#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Inputs.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Configurator.hpp"
#include "pipestudio/planner/Vocab.hpp"

namespace pipestudio::cli {
namespace {

struct ConfigureCliOptions {
  std::string model, cluster;
  int top = 15;
  bool json = false;
  bool vocabParallel = false;
};

// `--vocab-parallel`: 1f1b and v-half on every GPU with and without vocabulary parallelism
// (Yeung et al. 2024), showing the per-device imbalance the vocabulary layers cause.
int runVocabComparison(const ModelSpec& model, const ClusterSpec& cluster) {
  const int p = cluster.totalGpus();
  std::printf("vocabulary parallelism on '%s', %d devices, %d microbatches\n", model.name.c_str(), p, 2 * p);
  std::printf("%-8s %-14s %11s %10s %10s %10s %12s\n", "schedule", "layout", "iter ms", "max busy", "min busy",
              "imbalance", "peak mem");
  bool any = false;
  for (const char* schedule : {"1f1b", "v-half"}) {
    PlanRequest r;
    r.model = model;
    r.cluster = cluster;
    r.config.schedule = schedule;
    r.config.devices = p;
    r.config.microbatches = 2 * p;
    r.config.chunksPerDevice = std::string(schedule) == "v-half" ? 2 : 1;
    auto cmp = compareVocabParallel(r);
    if (!cmp) {
      std::printf("%-8s %s\n", schedule, cmp.message().c_str());
      continue;
    }
    any = true;
    for (const Plan* plan : {&cmp->baseline, &cmp->vocabParallel}) {
      double maxBusy = 0, minBusy = 1e300;
      std::int64_t peak = 0;
      for (const auto& d : plan->metrics.devices) {
        maxBusy = std::max(maxBusy, d.busyMs);
        minBusy = std::min(minBusy, d.busyMs);
        peak = std::max(peak, d.peakMemoryBytes);
      }
      const bool vp = plan == &cmp->vocabParallel;
      std::printf("%-8s %-14s %11.2f %10.2f %10.2f %9.3fx %12s\n", schedule, vp ? "vocab-parallel" : "baseline",
                  plan->metrics.makespanMs, maxBusy, minBusy, vp ? cmp->vocabImbalance : cmp->baselineImbalance,
                  formatBytes(static_cast<double>(peak)).c_str());
    }
  }
  std::printf("imbalance = max busy / mean busy over devices (1.000x = perfectly balanced)\n");
  return any ? kExitOk : kExitFailure;
}

int runConfigure(const ConfigureCliOptions& o) {
  auto inputs = loadModelAndCluster(o.model, o.cluster);
  if (!inputs) return kExitFailure;
  const auto& [model, cluster] = *inputs;
  if (o.vocabParallel) return runVocabComparison(model, cluster);
  auto result = configure(model, cluster);
  if (!result) {
    std::cerr << "configure: " << result.message() << '\n';
    return kExitFailure;
  }
  if (o.json) {
    Json doc;
    doc["model"] = model.name;
    doc["cluster"] = cluster.name;
    doc["evaluated"] = result->evaluated;
    Json feasible = Json::array();
    for (const auto& c : result->feasible) {
      feasible.push_back({{"schedule", c.config.schedule},
                          {"pipeline_devices", c.config.devices},
                          {"data_parallel", c.config.dataParallel},
                          {"microbatches", c.config.microbatches},
                          {"chunks_per_device", c.config.chunksPerDevice},
                          {"partition", c.config.partition},
                          {"fill", c.config.fill},
                          {"makespan_ms", c.makespanMs},
                          {"all_reduce_ms", c.allReduceMs},
                          {"iteration_ms", c.iterationMs},
                          {"throughput_samples_per_s", c.throughputSamplesPerS},
                          {"bubble_ratio", c.bubbleRatio},
                          {"peak_memory_bytes", c.peakMemoryBytes}});
    }
    doc["feasible"] = feasible;
    Json rejected = Json::array();
    for (const auto& r : result->rejected) {
      rejected.push_back({{"schedule", r.schedule},
                          {"pipeline_devices", r.pipelineDegree},
                          {"data_parallel", r.dataParallel},
                          {"reason", r.reason}});
    }
    doc["rejected"] = rejected;
    std::cout << doc.dump(2) << '\n';
    return kExitOk;
  }
  std::cout << "model '" << model.name << "' on cluster '" << cluster.name << "': " << result->evaluated
            << " configurations simulated, " << result->feasible.size() << " fit in memory\n\n";
  std::printf("%4s %-17s %3s %3s %4s %3s %-9s %11s %10s %12s %7s %10s\n", "rank", "schedule", "pp", "dp", "m", "v",
              "partition", "iter ms", "allred ms", "samples/s", "bubble", "peak mem");
  int rank = 0;
  for (const auto& c : result->feasible) {
    if (++rank > o.top) break;
    std::printf("%4d %-17s %3d %3d %4d %3d %-9s %11.2f %10.2f %12.1f %6.1f%% %10s\n", rank, c.config.schedule.c_str(),
                c.config.devices, c.config.dataParallel, c.config.microbatches, c.config.chunksPerDevice,
                c.config.partition.c_str(), c.iterationMs, c.allReduceMs, c.throughputSamplesPerS,
                100.0 * c.bubbleRatio, formatBytes(static_cast<double>(c.peakMemoryBytes)).c_str());
  }
  if (!result->rejected.empty()) {
    std::cout << "\nrejected families (pipeline degree × data parallel, schedule):\n";
    for (const auto& r : result->rejected) {
      std::string reason = r.reason;
      const auto nl = reason.find('\n');
      if (nl != std::string::npos) reason = reason.substr(0, nl) + " …";
      std::cout << "  pp " << r.pipelineDegree << " × dp " << r.dataParallel << ", " << r.schedule << ": " << reason
                << '\n';
    }
  }
  if (result->feasible.empty()) {
    std::cerr << "configure: no configuration fits in memory\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void addConfigureCommand(CLI::App& root, int& exitCode) {
  static ConfigureCliOptions o;
  auto* cmd = root.add_subcommand("configure", "Search pipeline × data parallel, microbatches, schedule, chunks and "
                                               "partition; rank feasible configurations by throughput");
  cmd->add_option("--model", o.model, "Model file (pipestudio.model/1)")->required();
  cmd->add_option("--cluster", o.cluster, "Cluster file (pipestudio.cluster/1)")->required();
  cmd->add_option("--top", o.top, "Rows to print (text output)")->check(intIn(1, 1'000'000));
  cmd->add_flag("--json", o.json, "One JSON document on stdout");
  cmd->add_flag("--vocab-parallel", o.vocabParallel,
                "Compare 1f1b and v-half with and without vocabulary parallelism instead of searching");
  cmd->callback([&exitCode] { exitCode = runConfigure(o); });
}

}  // namespace pipestudio::cli
