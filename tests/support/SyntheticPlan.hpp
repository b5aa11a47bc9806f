#pragma once
// Hand-timed plans with known geometry for the viz tests and benches: `p` devices, one virtual
// stage per device, 1F1B order with split backward (F, B, W) and fixed durations, so every op's
// position is known without running the planner.

#include <algorithm>
#include <vector>

#include "support/PlanBuilder.hpp"

namespace pipestudio::test {

/// F = 1 ms, B = 1 ms, W = 0.5 ms per op (durations scaled by `scale`); transfers of 0.1 ms.
inline Plan syntheticPlan(int devices, int microbatches, bool withComms = true, double scale = 1.0) {
  const LayerBytes bytes{256LL << 20, 64LL << 20, 512LL << 20, 16LL << 20};
  Plan plan = PlanBuilder("synthetic-1f1b", devices, microbatches)
                  .cluster(testCluster(devices, {100, 1}, {10, 5}))
                  .backbone(devices, 1.0 * scale, 1.0 * scale, 0.5 * scale, bytes)
                  .stagePerDevice()
                  .plan();

  // Dependency-driven timing of the 1F1B order (Narayanan et al. 2021, PipeDream-Flush):
  // warm-up F's, then one F / one B alternating, then the remaining B's; W right after its B.
  const double f = 1.0 * scale, b = 1.0 * scale, w = 0.5 * scale, comm = withComms ? 0.1 * scale : 0.0;
  std::vector<std::vector<double>> fEnd(devices, std::vector<double>(microbatches, 0));
  std::vector<std::vector<double>> bEnd(devices, std::vector<double>(microbatches, 0));
  // Order per device.
  struct Item {
    char kind;
    int mb;
  };
  std::vector<std::vector<Item>> order(devices);
  for (int d = 0; d < devices; ++d) {
    const int warmup = std::min(microbatches, devices - d);
    int nf = 0, nb = 0;
    for (; nf < warmup; ++nf) order[d].push_back({'F', nf});
    while (nb < microbatches) {
      order[d].push_back({'B', nb});
      order[d].push_back({'W', nb});
      ++nb;
      if (nf < microbatches) order[d].push_back({'F', nf++});
    }
  }
  // Iterate to a fixed point: a device's op starts after its previous op and its dependency.
  std::vector<std::size_t> next(devices, 0);
  std::vector<double> free(devices, 0);
  std::vector<std::vector<Op>> perDevice(devices);
  bool progress = true;
  std::vector<std::vector<bool>> fDone(devices, std::vector<bool>(microbatches, false));
  std::vector<std::vector<bool>> bDone(devices, std::vector<bool>(microbatches, false));
  while (progress) {
    progress = false;
    for (int d = 0; d < devices; ++d) {
      while (next[d] < order[d].size()) {
        const Item it = order[d][next[d]];
        double ready = free[d];
        if (it.kind == 'F') {
          if (d > 0) {
            if (!fDone[d - 1][it.mb]) break;
            ready = std::max(ready, fEnd[d - 1][it.mb] + comm);
          }
        } else if (it.kind == 'B') {
          if (d + 1 < devices) {
            if (!bDone[d + 1][it.mb]) break;
            ready = std::max(ready, bEnd[d + 1][it.mb] + comm);
          } else {
            if (!fDone[d][it.mb]) break;
            ready = std::max(ready, fEnd[d][it.mb]);
          }
        }
        const double duration = it.kind == 'F' ? f : (it.kind == 'B' ? b : w);
        Op op;
        op.device = d;
        op.virtualStage = d;
        op.kind = it.kind == 'F' ? OpKind::F : (it.kind == 'B' ? OpKind::B : OpKind::W);
        op.microbatch = it.mb;
        op.startMs = ready;
        op.endMs = ready + duration;
        free[d] = op.endMs;
        if (it.kind == 'F') {
          fEnd[d][it.mb] = op.endMs;
          fDone[d][it.mb] = true;
        }
        if (it.kind == 'B') {
          bEnd[d][it.mb] = op.endMs;
          bDone[d][it.mb] = true;
        }
        if (withComms && it.kind == 'F' && d + 1 < devices)
          plan.comms.push_back({d, d + 1, it.mb, OpKind::F, d, op.endMs, op.endMs + comm, 16LL << 20});
        if (withComms && it.kind == 'B' && d > 0)
          plan.comms.push_back({d, d - 1, it.mb, OpKind::B, d, op.endMs, op.endMs + comm, 16LL << 20});
        perDevice[d].push_back(op);
        ++next[d];
        progress = true;
      }
    }
  }
  for (auto& ops : perDevice) plan.ops.insert(plan.ops.end(), ops.begin(), ops.end());
  return plan;
}

}  // namespace pipestudio::test
