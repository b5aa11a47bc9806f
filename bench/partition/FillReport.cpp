// Prints the README table for the diffusion examples (issue 4): fill vs no fill, pipeline vs
// data parallel. Run by bench/partition/report.sh (`make bench`).
#include <cstdio>
#include <string>

#include "partition/Partitioners.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"

using namespace pipestudio;

namespace {

// Independent backbones (cascaded-sd: base and super-resolution UNets, no data flow between
// them): the fastest chain layout (dp over every schedule diffusionpipe searches) against the
// two backbones running in opposite directions over all devices, and what diffusionpipe keeps.
int cascadedTable(const std::string& resources, const ClusterSpec& cluster) {
  auto model = loadModel(resources + "/models/cascaded-sd.json");
  if (!model) {
    std::fprintf(stderr, "%s\n", model.message().c_str());
    return 1;
  }
  std::printf("\n## Cascaded models: two independent backbones (cascaded-sd, %s)\n\n", cluster.name.c_str());
  std::printf("| devices | m | fill | best chain layout ms | opposed directions ms | diffusionpipe ms (schedule) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const int devices : {4, 8}) {
    for (const int microbatches : {devices, 2 * devices}) {
      for (const char* fill : {"none", "greedy"}) {
        PlanRequest r;
        r.model = *model;
        r.cluster = cluster;
        r.config.schedule = "1f1b";
        r.config.devices = devices;
        r.config.microbatches = microbatches;
        r.config.partition = "diffusionpipe";
        r.config.fill = fill;
        double chainMs = 0;
        std::string chainSchedule = "none feasible";
        for (const PlanConfig& c : partition::diffusionPipeCandidates(r)) {
          PlanRequest chain = r;
          chain.config = c;
          chain.config.partition = "dp";
          auto plan = makePlan(chain);
          if (plan && (chainMs == 0 || plan->metrics.makespanMs < chainMs)) {
            chainMs = plan->metrics.makespanMs;
            chainSchedule = c.schedule;
          }
        }
        auto opposed = partition::solveOpposedBackbones(r, {});
        auto best = makePlan(r);
        char opposedText[64] = "infeasible";
        if (opposed) std::snprintf(opposedText, sizeof opposedText, "%.1f", opposed->metrics.makespanMs);
        if (!best) {
          std::printf("| %d | %d | %s | %s |||\n", devices, microbatches, fill, best.message().c_str());
          ++failures;
          continue;
        }
        std::printf("| %d | %d | %s | %.1f (%s) | %s | %.1f (%s) |\n", devices, microbatches, fill, chainMs,
                    chainSchedule.c_str(), opposedText, best->metrics.makespanMs, best->config.schedule.c_str());
      }
    }
  }
  std::printf(
      "\nchain layout = the backbones share the pipeline's virtual stages in data-flow order (dp partition);\n"
      "opposed directions = base UNet down zb-v's V (devices 0 → p−1), SR UNet up it (p−1 → 0), each over all\n"
      "devices, ordered as two concurrent chains. DualPipe/BitPipe hold every backbone twice (2× parameters).\n");
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string resources = argc > 1 ? argv[1] : PIPESTUDIO_RESOURCES;
  auto cluster = loadCluster(resources + "/clusters/a100-1x8-nvlink.json");
  if (!cluster) {
    std::fprintf(stderr, "%s\n", cluster.message().c_str());
    return 1;
  }
  std::printf("## Stable Diffusion 2.1 / ControlNet: bubble filling and data parallelism (%s, 8 GPUs)\n\n",
              cluster->name.c_str());
  std::printf(
      "| model | schedule | partition | m | backbone only ms | fill none ms | fill greedy ms | bubble filled | "
      "data parallel ms | greedy vs none | greedy vs DP | frozen transfers |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const char* name : {"stable-diffusion-2.1", "controlnet", "cascaded-sd"}) {
    auto model = loadModel(resources + "/models/" + name + ".json");
    if (!model) {
      std::fprintf(stderr, "%s\n", model.message().c_str());
      return 1;
    }
    struct Row {
      const char* schedule;
      const char* partition;
      int chunks;
      int microbatches;
    };
    for (const Row& row : {Row{"1f1b", "uniform", 1, 16}, Row{"1f1b", "dp", 1, 16}, Row{"1f1b", "diffusionpipe", 1, 16},
                           Row{"1f1b", "diffusionpipe", 1, 32}}) {
      PlanRequest r;
      r.model = *model;
      r.cluster = *cluster;
      r.config.schedule = row.schedule;
      r.config.devices = 8;
      r.config.microbatches = row.microbatches;
      r.config.chunksPerDevice = row.chunks;
      r.config.partition = row.partition;
      r.config.fill = "greedy";
      auto filled = makeFilledPlan(r);
      if (!filled) {
        std::printf("| %s | %s | %s | %d | %s |||||||\n", name, row.schedule, row.partition, row.microbatches,
                    filled.message().c_str());
        ++failures;
        continue;
      }
      const FillReport& f = filled->report;
      double bubble = 0, used = 0;
      for (const auto& d : f.devices) {
        bubble += d.bubbleMs;
        used += d.filledMs;
      }
      char dp[64] = "does not fit";
      char vsDp[32] = "–";
      if (f.dataParallelMs) {
        std::snprintf(dp, sizeof dp, "%.1f", *f.dataParallelMs);
        std::snprintf(vsDp, sizeof vsDp, "%.2f×", f.speedupOverDataParallel);
      }
      // Frozen outputs sent to the devices that consume them (cross-iteration, kind N).
      const int transfers = f.frozenTransfers;
      const auto transferBytes = static_cast<double>(f.frozenTransferBytes);
      std::printf("| %s | %s%s | %s | %d | %.1f | %.1f | %.1f | %.0f%% | %s | %.2f× | %s | %d, %.0f MB |\n", name,
                  filled->plan.config.schedule.c_str(), f.usedNoFillLayout ? " (none layout)" : "", row.partition,
                  row.microbatches, f.backboneOnlyMs, f.noFillMs, f.iterationMs,
                  bubble > 0 ? 100.0 * used / bubble : 0.0, dp, f.speedupOverNoFill, vsDp, transfers,
                  transferBytes / 1e6);
    }
  }
  std::printf(
      "\nbubble filled = frozen work placed in the backbone's idle time / that idle time, over all devices;\n"
      "data parallel = one whole-model replica per GPU, m·b/8 samples each plus a ring all-reduce of bf16 gradients;\n"
      "frozen transfers = frozen outputs (text embeddings, VAE latents) sent to the devices whose stages read them.\n");
  failures += cascadedTable(resources, *cluster);
  return failures == 0 ? 0 : 1;
}
