#pragma once
// What the window can say about a failed solve beyond the planner's message: when the plan
// does not fit in memory, the plan as it would run with its per-device memory against each
// GPU's capacity (which part is largest, by how much each device is over) and the smallest
// pipeline size that fits. Qt-free; runs on the solve's worker thread after the failure.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/planner/Planner.hpp"

namespace pipestudio::gui {

struct DeviceOverage {
  int device = 0;
  MemoryBreakdown memory;          ///< at the device's peak (margin included)
  std::int64_t peakBytes = 0;      ///< what the plan allocates (without the margin)
  std::int64_t capacityBytes = 0;  ///< GPU memory, or the memory limit
  std::int64_t neededBytes = 0;    ///< peak + margin (the margin is 0 under an explicit limit)
  std::int64_t overBytes() const { return neededBytes - capacityBytes; }
  std::string largestPart;  ///< parameters, gradients, optimizer state, activations, …
};

struct MemoryDiagnosis {
  std::string schedule;
  bool explicitLimit = false;  ///< capacity is the Memory limit field, not the GPUs
  std::vector<DeviceOverage> devices;
  /// The smallest pipeline size (Devices) above the requested one whose plan fits, if any up
  /// to what the cluster holds at the other degrees; with its busiest device's peak.
  std::optional<int> smallestFittingDevices;
  std::int64_t fittingPeakBytes = 0;
  int largestTriedDevices = 0;  ///< how far the search went
};

/// nullopt when the request fails for another reason than memory (or was cancelled).
std::optional<MemoryDiagnosis> diagnoseMemoryFailure(const PlanRequest& request, const SolveControl& control);

}  // namespace pipestudio::gui
