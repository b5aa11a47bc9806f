// checkMemory / describeMemory: a timed plan's peaks against the GPU memory (or the plan's
// --memory-limit), each peak written as the sum of its parts.
#include <cstdint>
#include <sstream>
#include <string>

#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio {

std::string describeMemory(const MemoryBreakdown& memory, bool withMargin) {
  const auto gib = [](std::int64_t b) { return formatBytes(static_cast<double>(b)); };
  // Every part of the peak, so that the parts add up to it; zero parts are left out.
  const auto parts = [&](bool keptBack) {
    std::string out;
    for (const MemoryPart& part : memoryParts()) {
      if (part.keptBack != keptBack || memory.*part.bytes == 0) continue;
      out += (out.empty() ? "" : " + ") + std::string(part.name) + " " + gib(memory.*part.bytes);
    }
    return out.empty() ? std::string("0 B") : out;
  };
  std::string out = "peak " + gib(memory.allocatedBytes()) + " = " + parts(false);
  if (withMargin) out += "; kept back: " + parts(true);
  return out;
}

Status checkMemory(const Plan& plan) {
  std::ostringstream msg;
  bool fits = true;
  const auto gib = [](std::int64_t b) { return formatBytes(static_cast<double>(b)); };
  for (std::size_t d = 0; d < plan.metrics.devices.size(); ++d) {
    const DeviceMetrics& dm = plan.metrics.devices[d];
    const bool explicitLimit = plan.config.memoryLimitBytes.has_value();
    // A --memory-limit is what the plan may allocate; a GPU's capacity first keeps back the
    // margin (CUDA context, fragmentation: memoryMarginBytes).
    const std::int64_t capacity = explicitLimit
                                      ? *plan.config.memoryLimitBytes
                                      : deviceGpu(plan.cluster, plan.config, static_cast<int>(d)).memoryBytes();
    const std::int64_t margin = explicitLimit ? 0 : dm.memory.marginBytes();
    if (capacity <= 0 || dm.peakMemoryBytes + margin <= capacity) continue;
    if (fits) {
      msg << plan.config.schedule << " does not fit in memory (" << (explicitLimit ? "--memory-limit " : "GPU memory ")
          << gib(capacity) << " per GPU"
          << (explicitLimit ? "" : ", of which " + gib(margin) + " is kept back as margin") << "):";
    }
    fits = false;
    msg << "\n  device " << d << ": " << describeMemory(dm.memory, !explicitLimit) << "; over by "
        << gib(dm.peakMemoryBytes + margin - capacity) << " (largest part: " << largestMemoryPart(dm.memory).name
        << ")";
  }
  if (fits) return {};
  msg << "\n  (use more devices, tensor parallelism, recomputation, ZeRO, activation offloading "
         "(--cpu-offloading-num-layers, --offload-modules), fewer in-flight microbatches, or a schedule with less "
         "activation memory such as v-half or v-min)";
  return Error{msg.str()};
}

}  // namespace pipestudio
