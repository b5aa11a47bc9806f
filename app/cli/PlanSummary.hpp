#pragma once
// Human summary and --json output shared by `plan` and `simulate`.
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/Caveats.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::cli {

// How much of what the offload ratio names went to host memory: activations (a stage's, one
// microbatch's) whose copies the host link carried in the time between their forward and
// backward, those it could not, and the saving at each device's peak.
inline void printOffload(const Plan& plan, std::ostream& out) {
  const PlanConfig& c = plan.config;
  std::size_t eligible = 0, offloaded = 0;
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::D2H) ++offloaded;
    if (op.kind != OpKind::F || op.samples > 0 || !inRange(plan.virtualStages, op.virtualStage)) continue;
    if (offloadFraction(c, plan.stage(op.virtualStage)) > 0) ++eligible;
  }
  out << "offload: ratio " << c.offloadRatio << ", " << offloaded << " of " << eligible
      << " activations offloaded and reloaded";
  if (offloaded < eligible) {
    out << "; " << eligible - offloaded << " stay on the GPU (the host link cannot carry their copies in time"
        << (offloaded == 0 ? ": nothing is offloaded" : "") << ")";
  }
  std::int64_t saved = 0;
  for (const DeviceMetrics& dm : plan.metrics.devices) saved = std::max(saved, dm.memory.offloadSavedBytes);
  if (saved > 0) out << "; up to " << formatBytes(static_cast<double>(saved)) << " less at a device's peak";
  out << '\n';
}

inline void printPlanSummary(const Plan& plan, std::ostream& out) {
  const Metrics& m = plan.metrics;
  const PlanConfig& c = plan.config;
  const Parallelism& par = c.parallel;
  out << "schedule " << c.schedule << ", " << c.devices << " devices, " << c.microbatches << " microbatches of "
      << plan.model.samplesPerMicrobatch << " sample(s), " << c.chunksPerDevice << " chunk(s) per device, "
      << plan.ops.size() << " ops\n";
  if (c.seqSplits > 1) {
    out << "sequence: " << c.trainingMicrobatches() << " microbatches × " << c.seqSplits << " chunks (" << c.seqSplit
        << " split)\n";
  }
  if (c.offloadRatio <= 0 && c.schedule == "pipeoffload") {
    out << "offload: none (the cluster's GPU names no host link: the group-interleaved order alone)\n";
  }
  if (c.offloadRatio > 0) printOffload(plan, out);
  if (par.cpuOffloadingNumLayers > 0) {
    out << "activation offload: the first " << par.cpuOffloadingNumLayers
        << " transformer layers' activations to host memory (Megatron-Core CPU offloading)\n";
  }
  if (par.offloadModules != 0) {
    out << "activation offload: " << offloadModulesName(par.offloadModules) << " (fine-grained, fraction "
        << par.activationOffloadFraction << ")\n";
  }
  if (!par.isPurePipeline() || par.data > 1) {
    out << "parallelism: pp " << c.devices << " × tp " << par.tensor << " × cp " << par.context << " × dp " << par.data
        << " = " << c.totalGpus() << " GPUs, ep " << par.expert << ", sequence parallel "
        << (par.sequenceParallel ? "on" : "off") << ", recompute " << recomputeName(par.recompute) << ", ZeRO "
        << par.zeroStage << '\n';
  }
  const std::int64_t clusterGpus = plan.cluster.totalGpus();
  if (clusterGpus > 0 && c.totalGpus() < clusterGpus) {
    out << "note: the plan uses " << c.totalGpus() << " of the cluster's " << clusterGpus << " GPUs"
        << (clusterGpus % c.totalGpus() != 0 ? " (T·C·P·D does not divide the cluster)" : "") << '\n';
  }
  // What the prediction leaves out for this model and recipe, with the published runs' size.
  for (const std::string& caveat : costModelCaveats(plan.model, par)) out << "note: " << caveat << '\n';
  std::array<char, 320> line{};
  std::snprintf(line.data(), line.size(),
                "makespan %s   bubble ratio %.2f%%   iteration %s (gradient sync %s, optimizer %s)\n",
                formatMs(m.makespanMs).c_str(), 100.0 * m.bubbleRatio, formatMs(m.iterationMs).c_str(),
                formatMs(m.gradientSyncMs).c_str(), formatMs(m.optimizerMs).c_str());
  out << line.data();
  std::snprintf(line.data(), line.size(),
                "throughput %.2f samples/s, %.0f tokens/s, %.1f model TFLOP/s per GPU, MFU %.1f%%\n",
                m.throughputSamplesPerS, m.tokensPerS, m.modelTflopsPerGpu, 100.0 * m.mfu);
  out << line.data();
  // Per device: times, the peak, and each part of the breakdown that some device holds (the
  // parts add up to the peak), then the margin the GPU keeps back.
  std::vector<const MemoryPart*> parts;
  for (const MemoryPart& part : memoryParts()) {
    const bool held = std::any_of(m.devices.begin(), m.devices.end(),
                                  [&](const DeviceMetrics& dm) { return dm.memory.*part.bytes != 0; });
    if (!part.keptBack && held) parts.push_back(&part);
  }
  auto bytes = [](std::int64_t b) { return formatBytes(static_cast<double>(b)); };
  std::snprintf(line.data(), line.size(), "%6s  %10s  %10s  %10s  %11s", "device", "busy", "span", "bubble",
                "peak memory");
  out << line.data();
  for (const MemoryPart* part : parts) {
    std::snprintf(line.data(), line.size(), " %11s", std::string(part->shortName).c_str());
    out << line.data();
  }
  // With host copies, one more column: what they save at the device's peak (not a part of it).
  const bool offloading = std::any_of(m.devices.begin(), m.devices.end(),
                                      [](const DeviceMetrics& dm) { return dm.memory.offloadSavedBytes > 0; });
  std::snprintf(line.data(), line.size(), "  %13s", "margin");
  out << line.data() << (offloading ? "  offload saves" : "") << '\n';
  for (std::size_t d = 0; d < m.devices.size(); ++d) {
    const DeviceMetrics& dm = m.devices[d];
    std::snprintf(line.data(), line.size(), "%6zu  %10s  %10s  %10s  %11s", d, formatMs(dm.busyMs).c_str(),
                  formatMs(dm.spanMs).c_str(), formatMs(dm.spanMs - dm.busyMs).c_str(),
                  bytes(dm.peakMemoryBytes).c_str());
    out << line.data();
    for (const MemoryPart* part : parts) {
      std::snprintf(line.data(), line.size(), " %11s", bytes(dm.memory.*part->bytes).c_str());
      out << line.data();
    }
    const MemoryBreakdown& mb = dm.memory;
    std::snprintf(line.data(), line.size(), "  %13s", bytes(mb.marginBytes()).c_str());
    out << line.data();
    if (offloading) {
      std::snprintf(line.data(), line.size(), "  %14s", bytes(mb.offloadSavedBytes).c_str());
      out << line.data();
    }
    out << '\n';
  }
}

/// One JSON document: the plan's config and metrics (not the ops).
inline Json planSummaryJson(const Plan& plan) {
  Json full = planToJson(plan);
  Json out{{"schema", full["schema"]}, {"config", full["config"]}, {"metrics", full["metrics"]}};
  out["ops"] = plan.ops.size();
  out["comms"] = plan.comms.size();
  out["gpus"] = Json{{"used", plan.config.totalGpus()}, {"cluster", plan.cluster.totalGpus()}};
  if (auto caveats = costModelCaveats(plan.model, plan.config.parallel); !caveats.empty()) out["notes"] = caveats;
  return out;
}

}  // namespace pipestudio::cli
