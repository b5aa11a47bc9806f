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

namespace {

// The ops of an order as flat arrays (global op index = offset[d] + position in d's order),
// their dependencies (indexOps, linkProducers) and the event loop that times them (run).
class OrderRun {
 public:
  OrderRun(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order);
  bool indexOps();
  bool linkProducers();
  OrderTiming run(bool withTransfers);

 private:
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
  // The event loop's state per device.
  struct Devices {
    IdVector<std::int32_t> cursor, stop;  // the global index of its next op, and the one past its last
    IdVector<double> freeMs, firstMs, busyMs;
  };
  int deviceOfIndex(std::int32_t idx) const {
    return static_cast<int>(std::upper_bound(m_offset.begin(), m_offset.end(), idx) - m_offset.begin()) - 1;
  }
  // Called for every op started (the timing's inner loop): inline, as the lambda it was.
  inline bool tryStart(Devices& dev, DeviceWinnerTree& running, int d);
  OrderTiming summary(const Devices& dev, std::int32_t completed, double lastMs) const;

  const ScheduleInput& m_input;
  const std::vector<std::vector<OrderedOp>>& m_order;
  const std::size_t m_p;
  const int m_stages;
  IdVector<std::int32_t> m_prev, m_next;
  std::vector<std::int32_t> m_offset;
  IdVector<OpState> m_state;
  Grid<std::int32_t> m_fIdx, m_bIdx, m_wIdx;
};

OrderRun::OrderRun(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order)
    : m_input(input),
      m_order(order),
      m_p(order.size()),
      m_stages(static_cast<int>(input.virtualStages.size())),
      m_prev(m_stages, kNone),
      m_next(m_stages, kNone),
      m_offset(m_p + 1, 0),
      m_fIdx(m_stages, input.shape.microbatches, kNone),
      m_bIdx(m_stages, input.shape.microbatches, kNone),
      m_wIdx(m_stages, input.shape.microbatches, kNone) {
  for (const auto& chain : pipelineChains(input.virtualStages)) {
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (i > 0) m_prev[chain[i]] = chain[i - 1];
      if (i + 1 < chain.size()) m_next[chain[i]] = chain[i + 1];
    }
  }
  for (std::size_t d = 0; d < m_p; ++d) {
    m_offset[d + 1] = m_offset[d] + static_cast<std::int32_t>(order[d].size());
  }
  m_state.resize(m_offset[m_p]);
}

// Each op's slot and duration; false when an op is out of range, on a device not its stage's,
// or there twice.
bool OrderRun::indexOps() {
  for (std::size_t d = 0; d < m_p; ++d) {
    for (std::size_t i = 0; i < m_order[d].size(); ++i) {
      const OrderedOp& o = m_order[d][i];
      if (!m_fIdx.contains(o.virtualStage, o.microbatch) ||
          m_input.stage(o.virtualStage).device != static_cast<int>(d)) {
        return false;
      }
      Grid<std::int32_t>& slots = o.kind == OpKind::F ? m_fIdx : o.kind == OpKind::W ? m_wIdx : m_bIdx;
      std::int32_t& slot = slots(o.virtualStage, o.microbatch);
      if (slot != kNone) return false;  // an op twice
      slot = m_offset[d] + static_cast<std::int32_t>(i);
      m_state[slot].durationMs = durationOf(o.kind, m_input.estimate(o.virtualStage));
    }
  }
  return true;
}

// Producers not already implied by the device's own order (same device, earlier position);
// false when one that must exist is missing.
bool OrderRun::linkProducers() {
  for (std::size_t d = 0; d < m_p; ++d) {
    for (std::size_t i = 0; i < m_order[d].size(); ++i) {
      const OrderedOp& o = m_order[d][i];
      const std::int32_t idx = m_offset[d] + static_cast<std::int32_t>(i);
      const int s = o.virtualStage;
      const int mb = o.microbatch;
      auto depend = [&](std::int32_t producer, bool maybeCross, double sendMs) {
        if (producer == kNone) return false;
        const bool sameDevice = producer >= m_offset[d] && producer < m_offset[d + 1];
        if (!sameDevice || producer > idx) ++m_state[idx].pending;
        if (!sameDevice && maybeCross) {
          m_state[producer].consumer = idx;
          m_state[producer].sendMs = sendMs;
        }
        return true;
      };
      bool ok = true;
      if (o.kind == OpKind::F) {
        if (m_prev[s] != kNone) ok = depend(m_fIdx(m_prev[s], mb), true, m_input.estimate(m_prev[s]).sendMs);
      } else if (o.kind == OpKind::W) {
        ok = depend(m_bIdx(s, mb), false, 0);
      } else {
        ok = depend(m_fIdx(s, mb), false, 0);
        if (ok && m_next[s] != kNone) ok = depend(m_bIdx(m_next[s], mb), true, m_input.estimate(s).sendMs);
      }
      if (!ok) return false;  // a producer no device runs
    }
  }
  return true;
}

// Starts device d's next op when its inputs are there.
bool OrderRun::tryStart(Devices& dev, DeviceWinnerTree& running, int d) {
  if (dev.cursor[d] == dev.stop[d]) return false;
  OpState& op = m_state[dev.cursor[d]];
  if (op.pending != 0) return false;
  const double start = std::max(dev.freeMs[d], op.readyMs);
  if (dev.firstMs[d] < 0) dev.firstMs[d] = start;
  dev.busyMs[d] += op.durationMs;
  running.set(d, start + op.durationMs);
  return true;
}

OrderTiming OrderRun::run(bool withTransfers) {
  const int devices = static_cast<int>(m_p);
  Devices dev{IdVector<std::int32_t>(std::vector<std::int32_t>(m_offset.begin(), m_offset.end() - 1)),
              IdVector<std::int32_t>(std::vector<std::int32_t>(m_offset.begin() + 1, m_offset.end())),
              IdVector<double>(devices, 0.0), IdVector<double>(devices, -1.0), IdVector<double>(devices, 0.0)};
  Grid<double> linkFreeMs(withTransfers ? devices : 0, withTransfers ? devices : 0, 0.0);
  DeviceWinnerTree running(devices);
  IdVector<char> busy(devices, 0);
  for (int d = 0; d < devices; ++d) busy[d] = tryStart(dev, running, d) ? 1 : 0;
  std::int32_t completed = 0;
  double lastMs = 0;
  for (int d = running.top(); d >= 0; d = running.top()) {
    const double endMs = running.keyMs(d);
    const OpState& op = m_state[dev.cursor[d]];
    ++completed;
    lastMs = std::max(lastMs, endMs);
    dev.freeMs[d] = endMs;
    ++dev.cursor[d];
    if (op.consumer != kNone) {
      const int to = deviceOfIndex(op.consumer);
      double arrival = endMs;
      if (withTransfers) {
        double& link = linkFreeMs(d, to);
        arrival = std::max(endMs, link) + op.sendMs;
        link = arrival;
      }
      OpState& c = m_state[op.consumer];
      c.readyMs = std::max(c.readyMs, arrival);
      if (--c.pending == 0 && !busy[to]) busy[to] = tryStart(dev, running, to) ? 1 : 0;
    }
    busy[d] = tryStart(dev, running, d) ? 1 : 0;
    if (!busy[d]) running.clear(d);
  }
  return summary(dev, completed, lastMs);
}

OrderTiming OrderRun::summary(const Devices& dev, std::int32_t completed, double lastMs) const {
  OrderTiming result;
  if (completed != m_offset[m_p]) return result;
  result.ok = true;
  double firstAll = std::numeric_limits<double>::infinity();
  for (int d = 0; d < static_cast<int>(m_p); ++d) {
    if (dev.firstMs[d] < 0) continue;
    firstAll = std::min(firstAll, dev.firstMs[d]);
    result.maxDeviceBubbleMs = std::max(result.maxDeviceBubbleMs, dev.freeMs[d] - dev.firstMs[d] - dev.busyMs[d]);
    result.maxDeviceSpanMs = std::max(result.maxDeviceSpanMs, dev.freeMs[d] - dev.firstMs[d]);
  }
  result.makespanMs = std::isfinite(firstAll) ? lastMs - firstAll : 0.0;
  result.peakBytes = orderPeakBytes(m_input, m_order);
  return result;
}

}  // namespace

OrderTiming timeOrder(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& order,
                      bool withTransfers) {
  OrderRun run(input, order);
  if (!run.indexOps() || !run.linkProducers()) return {};
  return run.run(withTransfers);
}

}  // namespace pipestudio::schedules
