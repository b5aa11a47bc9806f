#include "SolveDiagnosis.hpp"

#include <algorithm>

#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"

namespace pipestudio::gui {

namespace {

/// Most pipeline sizes tried when looking for one that fits (each is a full solve).
constexpr int kMaxDeviceTrials = 64;

/// The request with memory out of the way: GPUs far larger than any plan and no memory limit,
/// so makePlan returns the plan it would have refused.
PlanRequest withoutMemoryBound(PlanRequest request) {
  constexpr double kHugeGib = 1e9;
  request.cluster.gpu.memoryGib = kHugeGib;
  for (NodeSpec& node : request.cluster.nodes) {
    if (node.gpu) node.gpu->memoryGib = kHugeGib;
  }
  request.config.memoryLimitBytes.reset();
  return request;
}

}  // namespace

std::optional<MemoryDiagnosis> diagnoseMemoryFailure(const PlanRequest& original, const SolveControl& control) {
  auto resolved = resolveRequest(original);
  if (!resolved || control.cancelled()) return std::nullopt;
  auto unbounded = makePlan(withoutMemoryBound(*resolved), control);
  if (!unbounded || control.cancelled()) return std::nullopt;
  // The same plan against the real GPUs (and limit): margins and capacities as makePlan saw them.
  Plan plan = std::move(*unbounded);
  plan.cluster = resolved->cluster;
  plan.config.memoryLimitBytes = resolved->config.memoryLimitBytes;
  plan.metrics = computeMetrics(plan);
  if (checkMemory(plan)) return std::nullopt;  // it fits: the failure was something else

  MemoryDiagnosis out;
  out.schedule = plan.config.schedule;
  out.explicitLimit = plan.config.memoryLimitBytes.has_value();
  for (std::size_t d = 0; d < plan.metrics.devices.size(); ++d) {
    const DeviceMetrics& dm = plan.metrics.devices[d];
    DeviceOverage row;
    row.device = static_cast<int>(d);
    row.memory = dm.memory;
    row.peakBytes = dm.peakMemoryBytes;
    row.capacityBytes = out.explicitLimit ? *plan.config.memoryLimitBytes
                                          : deviceGpu(plan.cluster, plan.config, static_cast<int>(d)).memoryBytes();
    row.neededBytes = dm.peakMemoryBytes + (out.explicitLimit ? 0 : dm.memory.marginBytes());
    row.largestPart = std::string(largestMemoryPart(dm.memory).name);
    out.devices.push_back(row);
  }

  // The smallest deeper pipeline that fits, as far as the cluster holds one at these degrees.
  const std::int64_t perRank = std::max<std::int64_t>(1, resolved->config.parallel.gpusPerPipelineRank());
  const std::int64_t gpus = resolved->cluster.totalGpus();
  const int maxDevices = gpus > 0 ? static_cast<int>(std::min<std::int64_t>(gpus / perRank, 1 << 20)) : 0;
  const int from = original.config.devices + 1;
  const int to = std::min(maxDevices, original.config.devices + kMaxDeviceTrials);
  for (int p = from; p <= to && !control.cancelled(); ++p) {
    out.largestTriedDevices = p;
    PlanRequest deeper = original;
    deeper.config.devices = p;
    SolveControl quiet;
    quiet.cancel = control.cancel;
    auto fits = makePlan(deeper, quiet);
    if (!fits) continue;
    out.smallestFittingDevices = p;
    for (const DeviceMetrics& dm : fits->metrics.devices)
      out.fittingPeakBytes = std::max(out.fittingPeakBytes, dm.peakMemoryBytes);
    break;
  }
  if (control.cancelled()) return std::nullopt;
  return out;
}

}  // namespace pipestudio::gui
