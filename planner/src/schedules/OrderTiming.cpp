#include "schedules/OrderTiming.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "schedules/Generators.hpp"
#include "sim/DeviceWinnerTree.hpp"

namespace pipestudio::schedules {
namespace {

constexpr std::int32_t kNone = -1;

double durationOf(OpKind kind, const StageEstimate& e) {
  switch (kind) {
    case OpKind::F:
      return e.forwardMs;
    case OpKind::B:
      return e.backwardInputMs;
    case OpKind::W:
      return e.backwardWeightMs;
    case OpKind::BW:
      return e.backwardInputMs + e.backwardWeightMs;
    default:
      return 0;
  }
}

}  // namespace

std::vector<std::int64_t> orderPeakBytes(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order) {
  std::vector<std::int64_t> peak(order.size(), 0);
  for (std::size_t d = 0; d < order.size(); ++d) {
    std::int64_t live = 0;
    for (const OrderedOp& o : order[d]) {
      const StageEstimate& e = input.stages[static_cast<std::size_t>(o.virtualStage)];
      switch (o.kind) {
        case OpKind::F:
          live += e.activationBytes;
          break;
        case OpKind::B:
          live -= e.activationBytes - e.weightGradBytes;
          break;
        case OpKind::BW:
          live -= e.activationBytes;
          break;
        case OpKind::W:
          live -= e.weightGradBytes;
          break;
        default:
          break;
      }
      peak[d] = std::max(peak[d], live);
    }
  }
  return peak;
}

bool fasterThan(const OrderTiming& a, const OrderTiming& b) {
  if (!a.ok) return false;
  if (!b.ok) return true;
  const double tolerance = 1e-9 * std::max({1.0, a.makespanMs, b.makespanMs});
  if (a.makespanMs < b.makespanMs - tolerance) return true;
  if (a.makespanMs > b.makespanMs + tolerance) return false;
  return a.maxDeviceBubbleMs < b.maxDeviceBubbleMs - tolerance;
}

OrderTiming timeOrder(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order,
                      bool withTransfers) {
  OrderTiming result;
  const auto p = order.size();
  const auto m = static_cast<std::size_t>(input.shape.microbatches);
  const auto n = input.virtualStages.size();
  std::vector<std::int32_t> prev(n, kNone), next(n, kNone);
  for (const auto& chain : pipelineChains(input.virtualStages)) {
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (i > 0) prev[static_cast<std::size_t>(chain[i])] = chain[i - 1];
      if (i + 1 < chain.size()) next[static_cast<std::size_t>(chain[i])] = chain[i + 1];
    }
  }
  // Global op index = offset[d] + position in d's order.
  std::vector<std::int32_t> offset(p + 1, 0);
  for (std::size_t d = 0; d < p; ++d) offset[d + 1] = offset[d] + static_cast<std::int32_t>(order[d].size());
  const auto total = static_cast<std::size_t>(offset[p]);
  // Per op what the event loop needs: its duration, the one consumer on another device (a
  // forward's next stage, a backward's previous stage; consumers on the op's own device are
  // either implied by the order or wait forever, a deadlock) and that transfer's time.
  struct OpState {
    double durationMs = 0;
    double readyMs = 0;
    double sendMs = 0;
    std::int32_t pending = 0;
    std::int32_t consumer = kNone;
  };
  std::vector<OpState> state(total);
  std::vector<std::int32_t> fIdx(n * m, kNone), bIdx(n * m, kNone), wIdx(n * m, kNone);
  for (std::size_t d = 0; d < p; ++d) {
    for (std::size_t i = 0; i < order[d].size(); ++i) {
      const OrderedOp& o = order[d][i];
      if (o.virtualStage < 0 || static_cast<std::size_t>(o.virtualStage) >= n || o.microbatch < 0 ||
          static_cast<std::size_t>(o.microbatch) >= m ||
          input.virtualStages[static_cast<std::size_t>(o.virtualStage)].device != static_cast<int>(d)) {
        return result;
      }
      const std::size_t key = static_cast<std::size_t>(o.virtualStage) * m + static_cast<std::size_t>(o.microbatch);
      std::int32_t* slot = o.kind == OpKind::F ? &fIdx[key] : o.kind == OpKind::W ? &wIdx[key] : &bIdx[key];
      if (*slot != kNone) return result;  // an op twice
      const auto idx = static_cast<std::size_t>(offset[d]) + i;
      *slot = static_cast<std::int32_t>(idx);
      state[idx].durationMs = durationOf(o.kind, input.stages[static_cast<std::size_t>(o.virtualStage)]);
    }
  }
  auto deviceOfIndex = [&](std::int32_t idx) {
    return static_cast<std::size_t>(std::upper_bound(offset.begin(), offset.end(), idx) - offset.begin()) - 1;
  };
  // Producers not already implied by the device's own order (same device, earlier position);
  // false when one that must exist is missing.
  for (std::size_t d = 0; d < p; ++d) {
    for (std::size_t i = 0; i < order[d].size(); ++i) {
      const OrderedOp& o = order[d][i];
      const auto idx = static_cast<std::int32_t>(static_cast<std::size_t>(offset[d]) + i);
      const auto s = static_cast<std::size_t>(o.virtualStage);
      const auto mb = static_cast<std::size_t>(o.microbatch);
      auto depend = [&](std::int32_t producer, bool maybeCross, double sendMs) {
        if (producer == kNone) return false;
        const bool sameDevice = producer >= offset[d] && producer < offset[d + 1];
        if (!sameDevice || producer > idx) ++state[static_cast<std::size_t>(idx)].pending;
        if (!sameDevice && maybeCross) {
          state[static_cast<std::size_t>(producer)].consumer = idx;
          state[static_cast<std::size_t>(producer)].sendMs = sendMs;
        }
        return true;
      };
      bool ok = true;
      if (o.kind == OpKind::F) {
        if (prev[s] != kNone) {
          ok = depend(fIdx[static_cast<std::size_t>(prev[s]) * m + mb], true,
                      input.stages[static_cast<std::size_t>(prev[s])].sendMs);
        }
      } else if (o.kind == OpKind::W) {
        ok = depend(bIdx[s * m + mb], false, 0);
      } else {
        ok = depend(fIdx[s * m + mb], false, 0);
        if (ok && next[s] != kNone)
          ok = depend(bIdx[static_cast<std::size_t>(next[s]) * m + mb], true, input.stages[s].sendMs);
      }
      if (!ok) return result;  // a producer no device runs
    }
  }

  std::vector<std::size_t> position(p, 0);
  std::vector<double> freeMs(p, 0.0), firstMs(p, -1.0), busyMs(p, 0.0);
  std::vector<double> linkFreeMs(withTransfers ? p * p : 0, 0.0);
  DeviceWinnerTree running(static_cast<int>(p));
  // Starts device d's next op when its inputs are there.
  auto tryStart = [&](std::size_t d) {
    if (position[d] >= order[d].size()) return false;
    OpState& op = state[static_cast<std::size_t>(offset[d]) + position[d]];
    if (op.pending != 0) return false;
    const double start = std::max(freeMs[d], op.readyMs);
    if (firstMs[d] < 0) firstMs[d] = start;
    busyMs[d] += op.durationMs;
    running.set(static_cast<int>(d), start + op.durationMs);
    return true;
  };
  std::vector<char> busy(p, 0);
  for (std::size_t d = 0; d < p; ++d) busy[d] = tryStart(d) ? 1 : 0;
  std::size_t completed = 0;
  double lastMs = 0;
  for (int dev = running.top(); dev >= 0; dev = running.top()) {
    const auto d = static_cast<std::size_t>(dev);
    const double endMs = running.keyMs(dev);
    const OpState& op = state[static_cast<std::size_t>(offset[d]) + position[d]];
    ++completed;
    lastMs = std::max(lastMs, endMs);
    freeMs[d] = endMs;
    ++position[d];
    if (op.consumer != kNone) {
      const auto to = deviceOfIndex(op.consumer);
      double arrival = endMs;
      if (withTransfers) {
        double& link = linkFreeMs[d * p + to];
        arrival = std::max(endMs, link) + op.sendMs;
        link = arrival;
      }
      OpState& c = state[static_cast<std::size_t>(op.consumer)];
      c.readyMs = std::max(c.readyMs, arrival);
      if (--c.pending == 0 && !busy[to]) busy[to] = tryStart(to) ? 1 : 0;
    }
    busy[d] = tryStart(d) ? 1 : 0;
    if (!busy[d]) running.clear(dev);
  }
  if (completed != total) return result;
  result.ok = true;
  double firstAll = std::numeric_limits<double>::infinity();
  for (std::size_t d = 0; d < p; ++d) {
    if (firstMs[d] < 0) continue;
    firstAll = std::min(firstAll, firstMs[d]);
    result.maxDeviceBubbleMs = std::max(result.maxDeviceBubbleMs, freeMs[d] - firstMs[d] - busyMs[d]);
  }
  result.makespanMs = std::isfinite(firstAll) ? lastMs - firstAll : 0.0;
  result.peakBytes = orderPeakBytes(input, order);
  return result;
}

}  // namespace pipestudio::schedules
