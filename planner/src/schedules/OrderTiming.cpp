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
    case OpKind::F: return e.forwardMs;
    case OpKind::B: return e.backwardInputMs;
    case OpKind::W: return e.backwardWeightMs;
    case OpKind::BW: return e.backwardInputMs + e.backwardWeightMs;
    default: return 0;
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
        case OpKind::F: live += e.activationBytes; break;
        case OpKind::B: live -= e.activationBytes - e.weightGradBytes; break;
        case OpKind::BW: live -= e.activationBytes; break;
        case OpKind::W: live -= e.weightGradBytes; break;
        default: break;
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

OrderTiming timeOrder(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order, bool withTransfers) {
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
  std::vector<std::int32_t> fIdx(n * m, kNone), bIdx(n * m, kNone), wIdx(n * m, kNone);
  std::vector<const OrderedOp*> ops(total);
  std::vector<int> deviceOf(total);
  for (std::size_t d = 0; d < p; ++d) {
    for (std::size_t i = 0; i < order[d].size(); ++i) {
      const OrderedOp& o = order[d][i];
      const auto idx = static_cast<std::size_t>(offset[d]) + i;
      if (o.virtualStage < 0 || static_cast<std::size_t>(o.virtualStage) >= n || o.microbatch < 0 ||
          static_cast<std::size_t>(o.microbatch) >= m ||
          input.virtualStages[static_cast<std::size_t>(o.virtualStage)].device != static_cast<int>(d)) {
        return result;
      }
      const std::size_t key = static_cast<std::size_t>(o.virtualStage) * m + static_cast<std::size_t>(o.microbatch);
      std::int32_t* slot = o.kind == OpKind::F ? &fIdx[key] : o.kind == OpKind::W ? &wIdx[key] : &bIdx[key];
      if (*slot != kNone) return result;  // an op twice
      *slot = static_cast<std::int32_t>(idx);
      ops[idx] = &o;
      deviceOf[idx] = static_cast<int>(d);
    }
  }
  // Producers not already implied by the device's own order (same device, earlier position).
  std::vector<std::int32_t> pending(total, 0);
  std::vector<double> readyMs(total, 0.0);
  auto count = [&](std::int32_t producer, std::size_t consumer) {
    if (producer == kNone) return false;
    if (deviceOf[static_cast<std::size_t>(producer)] != deviceOf[consumer] ||
        producer > static_cast<std::int32_t>(consumer)) {
      ++pending[consumer];
    }
    return true;
  };
  for (std::size_t idx = 0; idx < total; ++idx) {
    const OrderedOp& o = *ops[idx];
    const auto s = static_cast<std::size_t>(o.virtualStage);
    const auto mb = static_cast<std::size_t>(o.microbatch);
    bool ok = true;
    if (o.kind == OpKind::F) {
      if (prev[s] != kNone) ok = count(fIdx[static_cast<std::size_t>(prev[s]) * m + mb], idx);
    } else if (o.kind == OpKind::W) {
      ok = count(bIdx[s * m + mb], idx);
    } else {
      ok = count(fIdx[s * m + mb], idx);
      if (ok && next[s] != kNone) ok = count(bIdx[static_cast<std::size_t>(next[s]) * m + mb], idx);
    }
    if (!ok) return result;  // a producer no device runs
  }

  std::vector<std::size_t> position(p, 0);
  std::vector<char> busy(p, 0);
  std::vector<double> freeMs(p, 0.0), firstMs(p, -1.0), busyMs(p, 0.0);
  std::vector<double> linkFreeMs(withTransfers ? p * p : 0, 0.0);
  DeviceWinnerTree running(static_cast<int>(p));
  auto tryStart = [&](std::size_t d) {
    if (busy[d] || position[d] >= order[d].size()) return false;
    const auto idx = static_cast<std::size_t>(offset[d]) + position[d];
    if (pending[idx] != 0) return false;
    const OrderedOp& o = *ops[idx];
    const double start = std::max(freeMs[d], readyMs[idx]);
    const double duration = durationOf(o.kind, input.stages[static_cast<std::size_t>(o.virtualStage)]);
    if (firstMs[d] < 0) firstMs[d] = start;
    busyMs[d] += duration;
    busy[d] = 1;
    running.set(static_cast<int>(d), start + duration);
    return true;
  };
  // A completed producer hands its output to a consumer (if any, and not implied).
  auto deliver = [&](std::size_t from, std::int32_t consumer, double endMs, double sendMs) {
    if (consumer == kNone) return;
    const auto c = static_cast<std::size_t>(consumer);
    const auto fromDevice = static_cast<std::size_t>(deviceOf[from]);
    const auto toDevice = static_cast<std::size_t>(deviceOf[c]);
    if (fromDevice == toDevice) {
      if (consumer < static_cast<std::int32_t>(from)) --pending[c];  // earlier in the order: deadlock below
      return;
    }
    double arrival = endMs;
    if (withTransfers) {
      double& link = linkFreeMs[fromDevice * p + toDevice];
      arrival = std::max(endMs, link) + sendMs;
      link = arrival;
    }
    readyMs[c] = std::max(readyMs[c], arrival);
    if (--pending[c] == 0) tryStart(toDevice);
  };
  for (std::size_t d = 0; d < p; ++d) tryStart(d);
  std::size_t completed = 0;
  double lastMs = 0;
  for (int dev = running.top(); dev >= 0; dev = running.top()) {
    const auto d = static_cast<std::size_t>(dev);
    const double endMs = running.keyMs(dev);
    const auto idx = static_cast<std::size_t>(offset[d]) + position[d];
    const OrderedOp& o = *ops[idx];
    ++completed;
    lastMs = std::max(lastMs, endMs);
    busy[d] = 0;
    freeMs[d] = endMs;
    ++position[d];
    const auto s = static_cast<std::size_t>(o.virtualStage);
    const auto mb = static_cast<std::size_t>(o.microbatch);
    const StageEstimate& e = input.stages[s];
    if (o.kind == OpKind::F) {
      if (next[s] != kNone) deliver(idx, fIdx[static_cast<std::size_t>(next[s]) * m + mb], endMs, e.sendMs);
      deliver(idx, bIdx[s * m + mb], endMs, 0.0);
    } else if (o.kind == OpKind::B || o.kind == OpKind::BW) {
      if (o.kind == OpKind::B) deliver(idx, wIdx[s * m + mb], endMs, 0.0);
      if (prev[s] != kNone) {
        deliver(idx, bIdx[static_cast<std::size_t>(prev[s]) * m + mb], endMs,
                input.stages[static_cast<std::size_t>(prev[s])].sendMs);
      }
    }
    if (!tryStart(d)) running.clear(dev);
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
