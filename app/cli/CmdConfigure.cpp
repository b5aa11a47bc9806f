#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "Commands.hpp"
#include "Flags.hpp"
#include "Inputs.hpp"
#include "RecipeFlags.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/Caveats.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
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
  bool splitBlocks = false;  // also partition over the blocks' attention and MLP halves
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
    Json d = memoryBreakdownJson(dm.memory);
    d["peak_memory_bytes"] = dm.peakMemoryBytes;
    devices.push_back(std::move(d));
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
  if (c.blockHalves) out["block_halves"] = true;  // a stage ends between a block's attention and its MLP
  recipeToJson(cfg, out);
  return out;
}

// The settings of a ranked row: its plan's config (configToJson) with every recipe field written
// out (recipeToJson writes defaults too), the columns every row shows and the figures left out.
std::map<std::string, std::string> rowSettings(const ConfigCandidate& c) {
  Json all = configToJson(c.config);
  recipeToJson(c.config, all);
  all["micro_batch_size"] = c.samplesPerMicrobatch;
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : all.items()) out[key] = value.is_string() ? value.get<std::string>() : value.dump();
  return out;
}

// The fixed columns of the table (rank, schedule, pp … zero) by their config keys.
constexpr std::array<std::string_view, 11> kShownSettings = {
    "schedule",     "devices",           "tp",        "cp",  "dp", "ep", "micro_batch_size",
    "microbatches", "chunks_per_device", "recompute", "zero"};

struct RankedRow {
  int rank = 0;
  const ConfigCandidate* candidate = nullptr;
  std::map<std::string, std::string> settings;
};

// The rows `configure` prints: the first `top` ranked candidates, a row whose settings all equal
// an earlier row's folded into it (the same plan), and, where two printed rows would look alike
// in the fixed columns, columns for the settings that tell them apart (cp_comm_type, etp, …),
// added until no two printed rows look alike.
struct RankedTable {
  std::vector<RankedRow> rows;
  std::vector<std::pair<std::string, std::size_t>> extra;  // key, column width
  int folded = 0;

  std::string header() const {
    std::string out;
    for (const auto& [key, width] : extra) out += format(" %-*s", static_cast<int>(width), key.c_str());
    return out;
  }
  std::string cells(const RankedRow& row) const {
    std::string out;
    for (const auto& [key, width] : extra) {
      const auto it = row.settings.find(key);
      out += format(" %-*s", static_cast<int>(width), it == row.settings.end() ? "-" : it->second.c_str());
    }
    return out;
  }
};

RankedTable rankedTable(const std::vector<ConfigCandidate>& ranked, int top) {
  RankedTable t;
  int rank = 0;
  for (const ConfigCandidate& c : ranked) {
    if (++rank > top) break;
    RankedRow row{rank, &c, rowSettings(c)};
    const bool same = std::any_of(t.rows.begin(), t.rows.end(),
                                  [&](const RankedRow& earlier) { return earlier.settings == row.settings; });
    if (same) {
      ++t.folded;
      continue;
    }
    t.rows.push_back(std::move(row));
  }
  // Rows the columns shown so far print alike: add the setting that tells most such pairs
  // apart, until none are left.
  std::set<std::string> shown(kShownSettings.begin(), kShownSettings.end());
  const auto valueOf = [](const RankedRow& row, const std::string& key) {
    const auto it = row.settings.find(key);
    return it == row.settings.end() ? std::string("-") : it->second;
  };
  for (;;) {
    std::map<std::string, std::vector<const RankedRow*>> alike;
    for (const RankedRow& row : t.rows) {
      std::string printed;
      for (const std::string& key : shown) printed += valueOf(row, key) + '\x1f';
      alike[printed].push_back(&row);
    }
    std::map<std::string, int> separates;
    for (const auto& [printed, group] : alike) {
      for (std::size_t i = 0; i < group.size(); ++i) {
        for (std::size_t j = i + 1; j < group.size(); ++j) {
          for (const auto& [key, value] : group[i]->settings) {
            if (!shown.count(key) && valueOf(*group[j], key) != value) ++separates[key];
          }
          for (const auto& [key, value] : group[j]->settings) {
            if (!shown.count(key) && !group[i]->settings.count(key)) ++separates[key];
          }
        }
      }
    }
    if (separates.empty()) break;
    const auto best = std::max_element(separates.begin(), separates.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    shown.insert(best->first);
    std::size_t width = best->first.size();
    for (const RankedRow& row : t.rows) width = std::max(width, valueOf(row, best->first).size());
    t.extra.emplace_back(best->first, width);
  }
  return t;
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

// The search space the flags fix (framework, block halves, recomputation, recipe); a refusal is
// printed and its exit status returned (kExitOk: go on).
int readSearchOptions(const ConfigureCliOptions& o, ConfigureOptions& options) {
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
  if (o.splitBlocks) {
    if (o.framework == "torchtitan") {
      std::cerr << "configure: --split-blocks: torchtitan places whole blocks (layers.k); its plans cannot end a "
                   "stage between attention and MLP\n";
      return kExitUsage;
    }
    // balanced-split plans whole blocks too and keeps the halves only where they are faster or fit.
    std::replace(options.partitions.begin(), options.partitions.end(), std::string("balanced"),
                 std::string("balanced-split"));
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
  return kExitOk;
}

// The search, with progress on stderr for the long ones (a terminal only, so scripts stay quiet).
Expected<Configuration> search(const ModelSpec& model, const ClusterSpec& cluster, const ConfigureOptions& options,
                               bool json) {
  SolveControl control;
  const bool tty = isatty(2) != 0;
  int lastPercent = -1;
  if (tty && !json) {
    control.progress = [&lastPercent](double f) {
      const int percent = static_cast<int>(f * 100.0);
      if (percent / 10 != lastPercent / 10) {
        lastPercent = percent;
        std::cerr << "\rconfigure: " << percent << "%" << std::flush;
      }
    };
  }
  auto result = configure(model, cluster, options, control);
  if (tty && !json) std::cerr << "\r              \r";
  return result;
}

// `--json`: the search's counts, every ranked candidate and every rejected family.
Json configurationJson(const Configuration& result, const ModelSpec& model, const ClusterSpec& cluster) {
  Json doc;
  doc["model"] = model.name;
  doc["cluster"] = cluster.name;
  doc["global_batch"] = result.globalBatch;
  doc["enumerated"] = result.enumerated;
  doc["pruned_by_memory"] = result.prunedByMemory;
  doc["bounded_out"] = result.boundedOut;
  doc["evaluated"] = result.evaluated;
  doc["simulated_in_full"] = result.simulatedInFull;
  doc["work"] = result.work;
  doc["work_budget_spent"] = result.workBudgetSpent;
  Json feasible = Json::array();
  for (const auto& c : result.feasible) feasible.push_back(candidateJson(c));
  doc["feasible"] = feasible;
  Json rejected = Json::array();
  for (const auto& r : result.rejected) {
    rejected.push_back({{"schedule", r.schedule},
                        {"pipeline_devices", r.pipelineDegree},
                        {"data_parallel", r.dataParallel},
                        {"reason", r.reason}});
  }
  doc["rejected"] = rejected;
  // What the predictions leave out: the recipe's MoE settings are every candidate's.
  if (!result.feasible.empty()) {
    if (auto caveats = costModelCaveats(model, result.feasible.front().config.parallel); !caveats.empty())
      doc["notes"] = caveats;
  }
  return doc;
}

// The text form's opening lines: what was searched and what the search counted.
void printSearchCounts(const Configuration& result, const ConfigureCliOptions& o, const ModelSpec& model,
                       const ClusterSpec& cluster) {
  std::cout << "model '" << excerpt(model.name) << "' on cluster '" << excerpt(cluster.name) << "' ("
            << cluster.totalGpus() << " GPUs), global batch " << result.globalBatch << " samples"
            << (o.globalBatch > 0
                    ? ""
                    : (model.globalBatch ? " (the model's)" : " (default: 4 per GPU; set --global-batch)"))
            << ":\n  " << result.enumerated << " configurations, " << result.prunedByMemory
            << " ruled out by memory bounds, " << result.evaluated
            << " screened (short runs extended to the full batch), " << result.simulatedInFull
            << " of them simulated in full, " << result.boundedOut << " bounded out, " << result.feasible.size()
            << " ranked\n\n";
}

// The ranked rows, then notes on block halves and folded rows.
void printRankedTable(const RankedTable& table) {
  std::cout << format("%4s %-16s %3s %3s %3s %4s %3s %3s %4s %3s %-9s %4s", "rank", "schedule", "pp", "tp", "cp", "dp",
                      "ep", "mbs", "m", "v", "recompute", "zero")
            << table.header()
            << format(" %10s %9s %12s %7s %5s %10s\n", "iter ms", "sync ms", "tokens/s", "bubble", "mfu", "peak mem");
  for (const RankedRow& row : table.rows) {
    const ConfigCandidate& c = *row.candidate;
    const Parallelism& par = c.config.parallel;
    std::cout << format("%4d %-16s %3d %3d %3d %4d %3d %3lld %4d %3d %-9s %4d", row.rank, c.config.schedule.c_str(),
                        c.config.devices, par.tensor, par.context, par.data, par.expert,
                        static_cast<long long>(c.samplesPerMicrobatch), c.config.microbatches, c.config.chunksPerDevice,
                        std::string(recomputeName(par.recompute)).c_str(), par.zeroStage)
              << table.cells(row)
              << format(" %10.1f %9.2f %12.0f %6.1f%% %4.1f%% %10s\n", c.iterationMs, c.allReduceMs,
                        c.metrics.tokensPerS, 100.0 * c.bubbleRatio, 100.0 * c.metrics.mfu,
                        formatBytes(static_cast<double>(c.peakMemoryBytes)).c_str());
  }
  std::string halves;
  for (const RankedRow& row : table.rows) {
    if (row.candidate->blockHalves) halves += (halves.empty() ? "" : ", ") + std::to_string(row.rank);
  }
  if (!halves.empty()) {
    std::cout << "rank " << halves
              << ": a stage ends between a block's attention and its MLP (balanced-split over the blocks' halves; of "
                 "the exports only Megatron-LM's HybridModel form takes it)\n";
  }
  if (table.folded > 0) {
    std::cout << "(" << table.folded << " ranked row" << (table.folded == 1 ? " is" : "s are")
              << " the same plan as a row above, with every setting equal, and not shown again)\n";
  }
}

// The first 20 rejected families, each with the first line of its reason.
void printRejected(const std::vector<ConfigRejection>& rejected) {
  if (rejected.empty()) return;
  std::cout << "\nrejected families (pipeline degree × data parallel, schedule):\n";
  int shown = 0;
  for (const auto& r : rejected) {
    if (++shown > 20) {
      std::cout << "  … and " << (rejected.size() - 20) << " more (--json lists all)\n";
      break;
    }
    std::string reason = r.reason;
    const auto nl = reason.find('\n');
    if (nl != std::string::npos) reason = reason.substr(0, nl) + " …";
    std::cout << "  pp " << r.pipelineDegree << " × dp " << r.dataParallel << ", " << r.schedule << ": " << reason
              << '\n';
  }
}

int runConfigure(const ConfigureCliOptions& o) {
  auto inputs = loadModelAndCluster(o.model, o.cluster);
  if (!inputs) return kExitFailure;
  if (auto st = applyExpertGemmCurve(o.recipe, inputs->second); !st) {
    std::cerr << "configure: " << st.message() << '\n';
    return kExitFailure;
  }
  const auto& [model, cluster] = *inputs;
  if (o.vocabParallel) return runVocabComparison(model, cluster);
  ConfigureOptions options;
  if (int rc = readSearchOptions(o, options); rc != kExitOk) return rc;
  auto result = search(model, cluster, options, o.json);
  if (!result) {
    std::cerr << "configure: " << result.message() << '\n';
    return kExitFailure;
  }
  if (result->workBudgetSpent) std::cerr << "configure: note: " << budgetNote(*result, model) << '\n';
  if (o.json) {
    std::cout << configurationJson(*result, model, cluster).dump(2) << '\n';
  } else {
    printSearchCounts(*result, o, model, cluster);
    printRankedTable(rankedTable(result->feasible, o.top));
    // What the predictions leave out: the recipe's MoE settings are every candidate's.
    if (!result->feasible.empty()) {
      for (const std::string& caveat : costModelCaveats(model, result->feasible.front().config.parallel))
        std::cout << "note: " << caveat << '\n';
    }
    printRejected(result->rejected);
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
  cmd->add_flag("--split-blocks", o.splitBlocks,
                "Partition with balanced-split: also stages that end between a block's attention and its MLP, "
                "where faster or where whole blocks do not fit (Megatron-LM's HybridModel runs them)");
  addRecipeFlags(cmd, o.recipe);
  cmd->callback([&exitCode] { exitCode = runConfigure(o); });
}

}  // namespace pipestudio::cli
