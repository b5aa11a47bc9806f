#pragma once
// Human summary and --json output shared by `plan` and `simulate`.
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::cli {

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
  if (c.offloadRatio > 0) {
    std::size_t copies = 0;
    for (const Op& op : plan.ops) copies += isHostCopy(op.kind) ? 1 : 0;
    out << "offload: ratio " << c.offloadRatio << ", " << copies / 2 << " activations offloaded and reloaded\n";
  }
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
  std::snprintf(line.data(), line.size(), "  %13s\n", "margin");
  out << line.data();
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
    std::snprintf(line.data(), line.size(), "  %13s\n", bytes(dm.memory.marginBytes()).c_str());
    out << line.data();
  }
}

/// One JSON document: the plan's config and metrics (not the ops).
inline Json planSummaryJson(const Plan& plan) {
  Json full = planToJson(plan);
  Json out{{"schema", full["schema"]}, {"config", full["config"]}, {"metrics", full["metrics"]}};
  out["ops"] = plan.ops.size();
  out["comms"] = plan.comms.size();
  out["gpus"] = Json{{"used", plan.config.totalGpus()}, {"cluster", plan.cluster.totalGpus()}};
  return out;
}

}  // namespace pipestudio::cli
