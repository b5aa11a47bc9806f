#pragma once
// Layers, requests and an enumeration the partition suites share.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "planner/PlannerFixtures.hpp"

namespace pipestudio::test {

/// A measured layer of 1 MiB of parameters; `b` or `w` of 0 leaves that pass out (frozen layers
/// have no backward: the loader refuses one).
inline Layer layer(const std::string& name, const std::string& kind, double f, double b, double w, std::int64_t act,
                   std::int64_t out) {
  Layer l;
  l.name = name;
  l.kind = kind;
  l.forwardMs = f;
  if (b > 0) l.backwardInputMs = b;
  if (w > 0) l.backwardWeightMs = w;
  l.activationBytes = act;
  l.parameterBytes = 1 << 20;
  l.outputBytes = out;
  return l;
}

/// `model` on `cluster` under `schedule` with its default chunks per device (2 for
/// interleaved-1f1b), partitioned by `partition`, its bubbles filled by `fill`.
inline PlanRequest partitionRequest(const ModelSpec& model, const ClusterSpec& cluster, int devices, int microbatches,
                                    const std::string& schedule, const std::string& partition,
                                    const std::string& fill) {
  int chunks = PlanConfig{}.chunksPerDevice;
  if (const auto* g = findScheduleGenerator(schedule)) chunks = g->defaultChunksPerDevice();
  if (schedule == "interleaved-1f1b") chunks = 2;
  PlanRequest r = request(model, cluster, schedule, devices, microbatches, chunks);
  r.config.partition = partition;
  r.config.fill = fill;
  return r;
}

/// Calls `f` with every split of `layers` into `stages` non-empty contiguous parts (the first
/// layer of each).
inline void forEachSplit(int layers, int stages, const std::function<void(const std::vector<int>&)>& f) {
  std::vector<int> first(static_cast<std::size_t>(stages), 0);
  std::function<void(int, int)> rec = [&](int s, int start) {
    first[static_cast<std::size_t>(s)] = start;
    if (s + 1 == stages) {
      f(first);
      return;
    }
    for (int next = start + 1; next <= layers - (stages - s - 1); ++next) rec(s + 1, next);
  };
  rec(0, 0);
}

}  // namespace pipestudio::test
