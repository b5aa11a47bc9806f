#include "schedules/OrderTiming.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipestudio/common/Index.hpp"
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
      const StageEstimate& e = input.estimate(o.virtualStage);
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
  const int devices = static_cast<int>(p);
  const int stages = static_cast<int>(input.virtualStages.size());
  const int m = input.shape.microbatches;
  IdVector<std::int32_t> prev(stages, kNone), next(stages, kNone);
  for (const auto& chain : pipelineChains(input.virtualStages)) {
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (i > 0) prev[chain[i]] = chain[i - 1];
      if (i + 1 < chain.size()) next[chain[i]] = chain[i + 1];
    }
  }
  // Global op index = offset[d] + position in d's order.
  std::vector<std::int32_t> offset(p + 1, 0);
  for (std::size_t d = 0; d < p; ++d) offset[d + 1] = offset[d] + static_cast<std::int32_t>(order[d].size());
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
  IdVector<OpState> state(offset[p]);
  Grid<std::int32_t> fIdx(stages, m, kNone), bIdx(stages, m, kNone), wIdx(stages, m, kNone);
  for (std::size_t d = 0; d < p; ++d) {
    for (std::size_t i = 0; i < order[d].size(); ++i) {
      const OrderedOp& o = order[d][i];
      if (!fIdx.contains(o.virtualStage, o.microbatch) || input.stage(o.virtualStage).device != static_cast<int>(d)) {
        return result;
      }
      Grid<std::int32_t>& slots = o.kind == OpKind::F ? fIdx : o.kind == OpKind::W ? wIdx : bIdx;
      std::int32_t& slot = slots(o.virtualStage, o.microbatch);
      if (slot != kNone) return result;  // an op twice
      slot = offset[d] + static_cast<std::int32_t>(i);
      state[slot].durationMs = durationOf(o.kind, input.estimate(o.virtualStage));
    }
  }
  auto deviceOfIndex = [&](std::int32_t idx) {
    return static_cast<int>(std::upper_bound(offset.begin(), offset.end(), idx) - offset.begin()) - 1;
  };
  // Producers not already implied by the device's own order (same device, earlier position);
  // false when one that must exist is missing.
  for (std::size_t d = 0; d < p; ++d) {
    for (std::size_t i = 0; i < order[d].size(); ++i) {
      const OrderedOp& o = order[d][i];
      const std::int32_t idx = offset[d] + static_cast<std::int32_t>(i);
      const int s = o.virtualStage;
      const int mb = o.microbatch;
      auto depend = [&](std::int32_t producer, bool maybeCross, double sendMs) {
        if (producer == kNone) return false;
        const bool sameDevice = producer >= offset[d] && producer < offset[d + 1];
        if (!sameDevice || producer > idx) ++state[idx].pending;
        if (!sameDevice && maybeCross) {
          state[producer].consumer = idx;
          state[producer].sendMs = sendMs;
        }
        return true;
      };
      bool ok = true;
      if (o.kind == OpKind::F) {
        if (prev[s] != kNone) ok = depend(fIdx(prev[s], mb), true, input.estimate(prev[s]).sendMs);
      } else if (o.kind == OpKind::W) {
        ok = depend(bIdx(s, mb), false, 0);
      } else {
        ok = depend(fIdx(s, mb), false, 0);
        if (ok && next[s] != kNone) ok = depend(bIdx(next[s], mb), true, input.estimate(s).sendMs);
      }
      if (!ok) return result;  // a producer no device runs
    }
  }

  // Per device from here on: the global index of its next op, and the one past its last.
  IdVector<std::int32_t> cursor(std::vector<std::int32_t>(offset.begin(), offset.end() - 1));
  IdVector<std::int32_t> stop(std::vector<std::int32_t>(offset.begin() + 1, offset.end()));
  IdVector<double> freeMs(devices, 0.0), firstMs(devices, -1.0), busyMs(devices, 0.0);
  Grid<double> linkFreeMs(withTransfers ? devices : 0, withTransfers ? devices : 0, 0.0);
  DeviceWinnerTree running(devices);
  // Starts device d's next op when its inputs are there.
  auto tryStart = [&](int d) {
    if (cursor[d] == stop[d]) return false;
    OpState& op = state[cursor[d]];
    if (op.pending != 0) return false;
    const double start = std::max(freeMs[d], op.readyMs);
    if (firstMs[d] < 0) firstMs[d] = start;
    busyMs[d] += op.durationMs;
    running.set(d, start + op.durationMs);
    return true;
  };
  IdVector<char> busy(devices, 0);
  for (int d = 0; d < devices; ++d) busy[d] = tryStart(d) ? 1 : 0;
  std::int32_t completed = 0;
  double lastMs = 0;
  for (int d = running.top(); d >= 0; d = running.top()) {
    const double endMs = running.keyMs(d);
    const OpState& op = state[cursor[d]];
    ++completed;
    lastMs = std::max(lastMs, endMs);
    freeMs[d] = endMs;
    ++cursor[d];
    if (op.consumer != kNone) {
      const int to = deviceOfIndex(op.consumer);
      double arrival = endMs;
      if (withTransfers) {
        double& link = linkFreeMs(d, to);
        arrival = std::max(endMs, link) + op.sendMs;
        link = arrival;
      }
      OpState& c = state[op.consumer];
      c.readyMs = std::max(c.readyMs, arrival);
      if (--c.pending == 0 && !busy[to]) busy[to] = tryStart(to) ? 1 : 0;
    }
    busy[d] = tryStart(d) ? 1 : 0;
    if (!busy[d]) running.clear(d);
  }
  if (completed != offset[p]) return result;
  result.ok = true;
  double firstAll = std::numeric_limits<double>::infinity();
  for (int d = 0; d < devices; ++d) {
    if (firstMs[d] < 0) continue;
    firstAll = std::min(firstAll, firstMs[d]);
    result.maxDeviceBubbleMs = std::max(result.maxDeviceBubbleMs, freeMs[d] - firstMs[d] - busyMs[d]);
    result.maxDeviceSpanMs = std::max(result.maxDeviceSpanMs, freeMs[d] - firstMs[d]);
  }
  result.makespanMs = std::isfinite(firstAll) ? lastMs - firstAll : 0.0;
  result.peakBytes = orderPeakBytes(input, order);
  return result;
}

}  // namespace pipestudio::schedules
