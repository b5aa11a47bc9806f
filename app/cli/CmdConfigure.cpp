#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <string>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Inputs.hpp"
#include "RecipeFlags.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Configurator.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Vocab.hpp"

namespace pipestudio::cli {
namespace {

struct ConfigureCliOptions {
  std::string model, cluster;
  int top = 15;
  std::int64_t globalBatch = 0;
  bool json = false;
  bool vocabParallel = false;
  std::string recompute;  // fixes the recomputation mode (with the recipe's details)
  std::string framework = "any";
  RecipeOptions recipe;
};

// printf-style text for std::cout (stdout goes through the checked buffer of Output.hpp,
// which printf would bypass).
template <typename... Args>
std::string format(const char* pattern, Args... args) {
  std::array<char, 512> line{};
  std::snprintf(line.data(), line.size(), pattern, args...);
  return line.data();
}

// `--vocab-parallel`: 1f1b and v-half on every GPU with and without vocabulary parallelism
// (Yeung et al. 2024), showing the per-device imbalance the vocabulary layers cause.
int runVocabComparison(const ModelSpec& model, const ClusterSpec& cluster) {
  const int p = cluster.totalGpus();
  std::cout << "vocabulary parallelism on '" << excerpt(model.name) << "', " << p << " devices, " << 2 * p
            << " microbatches\n";
  std::cout << format("%-8s %-14s %11s %10s %10s %10s %12s\n", "schedule", "layout", "iter ms", "max busy", "min busy",
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
      std::cout << format("%-8s ", schedule) << cmp.message() << '\n';
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
      std::cout << format("%-8s %-14s %11.2f %10.2f %10.2f %9.3fx %12s\n", schedule, vp ? "vocab-parallel" : "baseline",
                          plan->metrics.makespanMs, maxBusy, minBusy, vp ? cmp->vocabImbalance : cmp->baselineImbalance,
                          formatBytes(static_cast<double>(peak)).c_str());
    }
  }
  std::cout << "imbalance = max busy / mean busy over devices (1.000x = perfectly balanced)\n";
  return any ? kExitOk : kExitFailure;
}

Json candidateJson(const ConfigCandidate& c) {
  const PlanConfig& cfg = c.config;
  const Parallelism& par = cfg.parallel;
  const Metrics& m = c.metrics;
  Json devices = Json::array();
  for (const DeviceMetrics& dm : m.devices) {
    devices.push_back({{"peak_memory_bytes", dm.peakMemoryBytes},
                       {"parameter_bytes", dm.memory.parameterBytes},
                       {"gradient_bytes", dm.memory.gradientBytes},
                       {"optimizer_bytes", dm.memory.optimizerBytes},
                       {"activation_bytes", dm.memory.activationBytes},
                       {"communication_bytes", dm.memory.communicationBytes},
                       {"margin_bytes", dm.memory.marginBytes}});
  }
  Json out{{"schedule", cfg.schedule},
           {"pipeline_devices", cfg.devices},
           {"tp", par.tensor},
           {"cp", par.context},
           {"ep", par.expert},
           {"dp", par.data},
           {"data_parallel", par.data},
           {"sequence_parallel", par.sequenceParallel},
           {"recompute", std::string(recomputeName(par.recompute))},
           {"zero", par.zeroStage},
           {"micro_batch_size", c.samplesPerMicrobatch},
           {"microbatches", cfg.microbatches},
           {"chunks_per_device", cfg.chunksPerDevice},
           {"partition", cfg.partition},
           {"fill", cfg.fill},
           {"gpus", cfg.totalGpus()},
           {"makespan_ms", c.makespanMs},
           {"all_reduce_ms", c.allReduceMs},
           {"gradient_sync_ms", m.gradientSyncMs},
           {"optimizer_ms", m.optimizerMs},
           {"iteration_ms", c.iterationMs},
           {"throughput_samples_per_s", c.throughputSamplesPerS},
           {"tokens_per_s", m.tokensPerS},
           {"model_tflops_per_gpu", m.modelTflopsPerGpu},
           {"mfu", m.mfu},
           {"bubble_ratio", c.bubbleRatio},
           {"peak_memory_bytes", c.peakMemoryBytes},
           {"devices", std::move(devices)}};
  recipeToJson(cfg, out);
  return out;
}

// Why nothing was ranked, from what the search counted: nothing to enumerate (the batch does not
// split), everything over the memory bounds, or failures the rejected families list.
// What stopping at the work budget means for the ranking.
std::string budgetNote(const Configuration& r, const ModelSpec& model) {
  std::size_t layers = 0;
  for (int c : model.trainableComponents()) layers += model.component(c).layers.size();
  return "the search stopped at its work budget (" + std::to_string(kConfigureWorkBudget) +
         " stage·layer pairs and ops planned) after screening " + std::to_string(r.evaluated) +
         " configurations: each plan of this model's " + std::to_string(layers) +
         " trainable layers is large, so the ranking covers only the configurations screened";
}

std::string nothingRanked(const Configuration& r, const ClusterSpec& cluster) {
  const std::string gpus = std::to_string(cluster.totalGpus());
  if (r.enumerated == 0) {
    const std::string limit = std::to_string(kMaxConfigureMicrobatches);
    return "no configuration to search: the global batch of " + std::to_string(r.globalBatch) +
           " samples does not split over the " + gpus +
           " GPUs (no tensor × context × pipeline × data split and micro-batch size B gives a whole number of at "
           "most " +
           limit + " microbatches per pipeline; expected a global batch G with G / (B·D) whole and at most " + limit +
           ")";
  }
  if (r.prunedByMemory == r.enumerated) {
    return "no configuration fits in memory (all " + std::to_string(r.enumerated) +
           " ruled out by their memory bounds on " + gpus + " GPUs)";
  }
  return "none of the " + std::to_string(r.enumerated) + " configurations could be planned (" +
         std::to_string(r.prunedByMemory) + " ruled out by memory bounds; the rejected families say why the others " +
         "failed)";
}

int runConfigure(const ConfigureCliOptions& o) {
  auto inputs = loadModelAndCluster(o.model, o.cluster);
  if (!inputs) return kExitFailure;
  const auto& [model, cluster] = *inputs;
  if (o.vocabParallel) return runVocabComparison(model, cluster);
  ConfigureOptions options;
  options.globalBatch = o.globalBatch;
  if (o.framework != "any") {
    const auto space = frameworkSpace(o.framework);
    if (!space) {
      std::cerr << "configure: --framework '" << o.framework << "' is not one (expected any, megatron or torchtitan)\n";
      return kExitUsage;
    }
    options.schedules = space->schedules;
    options.zeroStages = space->zeroStages;
  }
  if (!o.recompute.empty()) {
    const auto rc = recomputeFromName(o.recompute);
    if (!rc) {
      std::cerr << "configure: --recompute '" << o.recompute << "' is not a mode (expected none, selective or full)\n";
      return kExitUsage;
    }
    options.recipe.parallel.recompute = *rc;
    options.recomputes = {*rc};
  }
  // Sequence parallelism is what --tp-comm-overlap needs; the search turns it on with T > 1.
  options.recipe.parallel.sequenceParallel = true;
  if (auto st = applyRecipeFlags(o.recipe, options.recipe); !st) {
    std::cerr << "configure: " << st.message() << '\n';
    return kExitUsage;
  }
  // Issue 26: a named context-parallel communication type is held fixed (else searched).
  if (!o.recipe.cpCommType.empty()) options.cpCommType = options.recipe.parallel.cpCommType;
  if ((options.recipe.parallel.recomputeNumLayers > 0 && options.recipe.parallel.recompute != Recompute::Full) ||
      (options.recipe.parallel.recomputeModules != 0 && options.recipe.parallel.recompute != Recompute::Selective)) {
    std::cerr << "configure: --recompute-num-layers needs --recompute full, --recompute-modules --recompute "
                 "selective (they fix the mode the search would vary)\n";
    return kExitUsage;
  }
  options.keep = std::max(o.top, 1);
  SolveControl control;
  // Progress on stderr for the long searches (a terminal only, so scripts stay quiet).
  const bool tty = isatty(2) != 0;
  int lastPercent = -1;
  if (tty && !o.json) {
    control.progress = [&lastPercent](double f) {
      const int percent = static_cast<int>(f * 100.0);
      if (percent / 10 != lastPercent / 10) {
        lastPercent = percent;
        std::cerr << "\rconfigure: " << percent << "%" << std::flush;
      }
    };
  }
  auto result = configure(model, cluster, options, control);
  if (tty && !o.json) std::cerr << "\r              \r";
  if (!result) {
    std::cerr << "configure: " << result.message() << '\n';
    return kExitFailure;
  }
  if (result->workBudgetSpent) std::cerr << "configure: note: " << budgetNote(*result, model) << '\n';
  if (o.json) {
    Json doc;
    doc["model"] = model.name;
    doc["cluster"] = cluster.name;
    doc["global_batch"] = result->globalBatch;
    doc["enumerated"] = result->enumerated;
    doc["pruned_by_memory"] = result->prunedByMemory;
    doc["bounded_out"] = result->boundedOut;
    doc["evaluated"] = result->evaluated;
    doc["simulated_in_full"] = result->simulatedInFull;
    doc["work"] = result->work;
    doc["work_budget_spent"] = result->workBudgetSpent;
    Json feasible = Json::array();
    for (const auto& c : result->feasible) feasible.push_back(candidateJson(c));
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
    if (result->feasible.empty()) {
      std::cerr << "configure: " << nothingRanked(*result, cluster) << '\n';
      return kExitFailure;
    }
    return kExitOk;
  }
  std::cout << "model '" << excerpt(model.name) << "' on cluster '" << excerpt(cluster.name) << "' ("
            << cluster.totalGpus() << " GPUs), global batch " << result->globalBatch << " samples"
            << (o.globalBatch > 0
                    ? ""
                    : (model.globalBatch ? " (the model's)" : " (default: 4 per GPU; set --global-batch)"))
            << ":\n  " << result->enumerated << " configurations, " << result->prunedByMemory
            << " ruled out by memory bounds, " << result->evaluated
            << " screened (short runs extended to the full batch), " << result->simulatedInFull
            << " of them simulated in full, " << result->boundedOut << " bounded out, " << result->feasible.size()
            << " ranked\n\n";
  std::cout << format("%4s %-16s %3s %3s %3s %4s %3s %3s %4s %3s %-9s %4s %10s %9s %12s %7s %5s %10s\n", "rank",
                      "schedule", "pp", "tp", "cp", "dp", "ep", "mbs", "m", "v", "recompute", "zero", "iter ms",
                      "sync ms", "tokens/s", "bubble", "mfu", "peak mem");
  int rank = 0;
  for (const auto& c : result->feasible) {
    if (++rank > o.top) break;
    const Parallelism& par = c.config.parallel;
    std::cout << format(
        "%4d %-16s %3d %3d %3d %4d %3d %3lld %4d %3d %-9s %4d %10.1f %9.2f %12.0f %6.1f%% %4.1f%% %10s\n", rank,
        c.config.schedule.c_str(), c.config.devices, par.tensor, par.context, par.data, par.expert,
        static_cast<long long>(c.samplesPerMicrobatch), c.config.microbatches, c.config.chunksPerDevice,
        std::string(recomputeName(par.recompute)).c_str(), par.zeroStage, c.iterationMs, c.allReduceMs,
        c.metrics.tokensPerS, 100.0 * c.bubbleRatio, 100.0 * c.metrics.mfu,
        formatBytes(static_cast<double>(c.peakMemoryBytes)).c_str());
  }
  if (!result->rejected.empty()) {
    std::cout << "\nrejected families (pipeline degree × data parallel, schedule):\n";
    int shown = 0;
    for (const auto& r : result->rejected) {
      if (++shown > 20) {
        std::cout << "  … and " << (result->rejected.size() - 20) << " more (--json lists all)\n";
        break;
      }
      std::string reason = r.reason;
      const auto nl = reason.find('\n');
      if (nl != std::string::npos) reason = reason.substr(0, nl) + " …";
      std::cout << "  pp " << r.pipelineDegree << " × dp " << r.dataParallel << ", " << r.schedule << ": " << reason
                << '\n';
    }
  }
  if (result->feasible.empty()) {
    std::cerr << "configure: " << nothingRanked(*result, cluster) << '\n';
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void addConfigureCommand(CLI::App& root, int& exitCode) {
  static ConfigureCliOptions o;
  auto* cmd = root.add_subcommand("configure",
                                  "Search tensor × context × pipeline × data (× expert) parallel degrees, "
                                  "micro-batch size, schedule, chunks, recomputation and ZeRO for a fixed "
                                  "global batch; rank feasible configurations by throughput");
  cmd->add_option("--model", o.model, "Model file (pipestudio.model/1)")->required();
  cmd->add_option("--cluster", o.cluster, "Cluster file (pipestudio.cluster/1)")->required();
  cmd->add_option("--top", o.top, "Configurations to rank (and print); each is simulated in full")
      ->check(intIn(1, kMaxConfigureKeep));
  cmd->add_option("--global-batch", o.globalBatch,
                  "Global batch in samples, held fixed (default: the model's global_batch, else 4 per GPU)")
      ->check(intIn(1, std::int64_t{1} << 40));
  cmd->add_flag("--json", o.json, "One JSON document on stdout");
  cmd->add_flag("--vocab-parallel", o.vocabParallel,
                "Compare 1f1b and v-half with and without vocabulary parallelism instead of searching");
  cmd->add_option("--recompute", o.recompute, "Fix recomputation to none|selective|full (default: searched)");
  cmd->add_option("--framework", o.framework,
                  "any (default) | megatron (1F1B, interleaved; ZeRO 0/1) | torchtitan (torch.distributed.pipelining "
                  "schedules; DDP, FSDP): only what that framework runs");
  addRecipeFlags(cmd, o.recipe);
  cmd->callback([&exitCode] { exitCode = runConfigure(o); });
}

}  // namespace pipestudio::cli
