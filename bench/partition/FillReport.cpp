// Prints the README table for the diffusion examples (issue 4): fill vs no fill, pipeline vs
// data parallel. Run by bench/partition/report.sh (`make bench`).
#include <cstdio>
#include <string>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Fill.hpp"

using namespace pipestudio;

int main(int argc, char** argv) {
  const std::string resources = argc > 1 ? argv[1] : PIPESTUDIO_RESOURCES;
  auto cluster = loadCluster(resources + "/clusters/a100-1x8-nvlink.json");
  if (!cluster) {
    std::fprintf(stderr, "%s\n", cluster.message().c_str());
    return 1;
  }
  std::printf("## Stable Diffusion 2.1 / ControlNet: bubble filling and data parallelism (%s, 8 GPUs)\n\n",
              cluster->name.c_str());
  std::printf("| model | schedule | partition | m | backbone only ms | fill none ms | fill greedy ms | bubble filled | "
              "data parallel ms | greedy vs none | greedy vs DP | frozen transfers |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const char* name : {"stable-diffusion-2.1", "controlnet"}) {
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
                  row.microbatches, f.backboneOnlyMs, f.noFillMs, f.iterationMs, bubble > 0 ? 100.0 * used / bubble : 0.0,
                  dp, f.speedupOverNoFill, vsDp, transfers, transferBytes / 1e6);
    }
  }
  std::printf("\nbubble filled = frozen work placed in the backbone's idle time / that idle time, over all devices;\n"
              "data parallel = one whole-model replica per GPU, m·b/8 samples each plus a ring all-reduce of bf16 gradients;\n"
              "frozen transfers = frozen outputs (text embeddings, VAE latents) sent to the devices whose stages read them.\n");
  return failures == 0 ? 0 : 1;
}
