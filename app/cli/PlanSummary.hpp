#pragma once
// Human summary and --json output shared by `plan` and `simulate`.
#include <cstdio>
#include <iostream>

#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::cli {

inline void printPlanSummary(const Plan& plan, std::ostream& out) {
  const Metrics& m = plan.metrics;
  out << "schedule " << plan.config.schedule << ", " << plan.config.devices << " devices, " << plan.config.microbatches
      << " microbatches, " << plan.config.chunksPerDevice << " chunk(s) per device, " << plan.ops.size() << " ops\n";
  char line[256];
  std::snprintf(line, sizeof line, "makespan %s   bubble ratio %.2f%%   throughput %.2f samples/s\n",
                formatMs(m.makespanMs).c_str(), 100.0 * m.bubbleRatio, m.throughputSamplesPerS);
  out << line;
  std::snprintf(line, sizeof line, "%6s  %12s  %12s  %12s  %12s\n", "device", "busy", "span", "bubble", "peak memory");
  out << line;
  for (std::size_t d = 0; d < m.devices.size(); ++d) {
    const DeviceMetrics& dm = m.devices[d];
    std::snprintf(line, sizeof line, "%6zu  %12s  %12s  %12s  %12s\n", d, formatMs(dm.busyMs).c_str(),
                  formatMs(dm.spanMs).c_str(), formatMs(dm.spanMs - dm.busyMs).c_str(),
                  formatBytes(static_cast<double>(dm.peakMemoryBytes)).c_str());
    out << line;
  }
}

/// One JSON document: the plan's config and metrics (not the ops).
inline Json planSummaryJson(const Plan& plan) {
  Json full = planToJson(plan);
  Json out{{"schema", full["schema"]}, {"config", full["config"]}, {"metrics", full["metrics"]}};
  out["ops"] = plan.ops.size();
  out["comms"] = plan.comms.size();
  return out;
}

}  // namespace pipestudio::cli
