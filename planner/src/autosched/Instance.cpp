#include "autosched/Instance.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "pipestudio/common/Units.hpp"

namespace pipestudio::autosched {

Expected<Instance> buildInstance(const ScheduleInput& input) {
  Instance inst;
  inst.devices = input.shape.devices;
  inst.microbatches = input.shape.microbatches;
  const std::size_t stages = input.virtualStages.size();
  inst.stages = static_cast<int>(stages);
  if (inst.devices <= 0) return Error{"zb-auto needs at least one device"};
  if (inst.microbatches <= 0) return Error{"zb-auto needs at least one microbatch"};
  if (inst.stages <= 0 || input.stages.size() != stages) {
    return Error{"zb-auto: the request has no virtual stages with cost estimates"};
  }
  const auto devices = static_cast<std::size_t>(inst.devices);
  inst.device.resize(stages);
  inst.stagesOf.assign(devices, {});
  for (auto& perStage : inst.durationMs) perStage.resize(stages);
  for (int s = 0; s < inst.stages; ++s) {
    const auto S = static_cast<std::size_t>(s);
    const VirtualStage& vs = input.virtualStages[S];
    if (vs.id != s) return Error{"zb-auto: virtual stage ids must be 0..n-1 in order"};
    if (vs.pipeline != 0) return Error{"zb-auto schedules one pipeline (bidirectional placements are not supported)"};
    if (vs.device < 0 || vs.device >= inst.devices) {
      return Error{"zb-auto: virtual stage " + std::to_string(s) + " is on device " + std::to_string(vs.device) +
                   " outside 0.." + std::to_string(inst.devices - 1)};
    }
    const StageEstimate& e = input.stages[S];
    inst.device[S] = vs.device;
    inst.durationMs[kF][S] = std::max(0.0, e.forwardMs);
    inst.durationMs[kB][S] = std::max(0.0, e.backwardInputMs);
    inst.durationMs[kW][S] = std::max(0.0, e.backwardWeightMs);
    inst.activationBytes.push_back(std::max<std::int64_t>(0, e.activationBytes));
    inst.weightGradBytes.push_back(std::clamp<std::int64_t>(e.weightGradBytes, 0, inst.activationBytes.back()));
    inst.sendMs.push_back(s + 1 < inst.stages ? std::max(0.0, e.sendMs) : 0.0);
    inst.stagesOf[static_cast<std::size_t>(vs.device)].push_back(s);
  }
  for (std::size_t d = 0; d < devices; ++d) {
    if (inst.stagesOf[d].empty()) return Error{"zb-auto: device " + std::to_string(d) + " holds no virtual stage"};
  }
  inst.spanObjective = input.request != nullptr && input.request->config.optimizerSync == "post-validation";
  inst.staticBytes.assign(devices, 0);
  for (std::size_t d = 0; d < input.staticBytes.size() && d < inst.staticBytes.size(); ++d) {
    inst.staticBytes[d] = input.staticBytes[d];
  }
  inst.budgetBytes.assign(devices, kUnlimited);
  for (int d = 0; d < inst.devices; ++d) {
    const auto D = static_cast<std::size_t>(d);
    std::int64_t limit = kUnlimited;
    if (input.memoryLimitBytes) {
      limit = *input.memoryLimitBytes;
    } else if (input.request != nullptr && input.request->cluster.gpu.memoryGib > 0) {
      limit = input.request->cluster.gpuOfDevice(d).memoryBytes();
    }
    if (limit >= kUnlimited) continue;
    // One microbatch must pass through all of the device's stages: their activations are
    // live together (F of the last chunk starts before the B of the first one ends).
    std::int64_t oneMicrobatch = 0;
    for (int s : inst.stagesOf[D]) oneMicrobatch += inst.activationBytes[static_cast<std::size_t>(s)];
    const std::int64_t staticBytes = inst.staticBytes[D];
    if (staticBytes + oneMicrobatch > limit) {
      return Error{"zb-auto: the memory limit of " + formatBytes(static_cast<double>(limit)) +
                   " is below one microbatch on device " + std::to_string(d) + ": it needs at least " +
                   formatBytes(static_cast<double>(staticBytes + oneMicrobatch)) + " (" +
                   std::to_string(staticBytes + oneMicrobatch) + " bytes: static " +
                   formatBytes(static_cast<double>(staticBytes)) + " + activations of one microbatch " +
                   formatBytes(static_cast<double>(oneMicrobatch)) + ")"};
    }
    inst.budgetBytes[D] = limit - staticBytes;
  }
  return inst;
}

std::vector<std::int64_t> peakActivations(const Instance& inst, const Orders& orders) {
  std::vector<std::int64_t> peak(orders.size(), 0);
  for (std::size_t d = 0; d < orders.size(); ++d) {
    std::int64_t live = 0;
    for (int op : orders[d]) {
      const auto s = static_cast<std::size_t>(inst.stageOf(op));
      switch (inst.kindOf(op)) {
        case kF:
          live += inst.activationBytes[s];
          break;
        case kB:
          live -= inst.activationBytes[s] - inst.weightGradBytes[s];
          break;
        default:
          live -= inst.weightGradBytes[s];
          break;
      }
      peak[d] = std::max(peak[d], live);
    }
  }
  return peak;
}

namespace {

// One timing of fixed orders (timeOrders): a work list of devices that may run their next op;
// a device runs ops in its order while their inputs are there (runDevice), each delivering
// its outputs to its consumers (deliver) over the serialised links (transfer).
class OrdersRun {
 public:
  OrdersRun(const Instance& inst, const Orders& orders, bool withCauses, Timing& t)
      : m_inst(inst),
        m_orders(orders),
        m_withCauses(withCauses),
        m_t(t),
        m_p(static_cast<std::size_t>(inst.devices)),
        m_ready(static_cast<std::size_t>(inst.opCount()), -1.0),
        m_linkFree(m_p * m_p, 0.0),
        m_pos(m_p, 0),
        m_free(m_p, 0.0),
        m_previous(m_p, -1),
        m_queued(m_p, 1) {
    if (withCauses) m_producer.assign(static_cast<std::size_t>(inst.opCount()), -1);
    for (int mb = 0; mb < inst.microbatches; ++mb) m_ready[static_cast<std::size_t>(inst.opId(0, kF, mb))] = 0.0;
    for (std::size_t d = m_p; d > 0; --d) m_work.push_back(d - 1);
  }

  // Runs until no device can go on; the number of ops run.
  std::size_t run() {
    std::size_t done = 0;
    while (!m_work.empty()) {
      const std::size_t d = m_work.back();
      m_work.pop_back();
      m_queued[d] = 0;
      done += runDevice(d);
    }
    return done;
  }

  // Where each device waits (after run() stopped short of every op).
  std::string deadlock() const {
    std::ostringstream why;
    why << "deadlock: ";
    bool first = true;
    for (std::size_t d = 0; d < m_p; ++d) {
      const auto& order = m_orders[d];
      const std::size_t i = m_pos[d];
      if (i >= order.size()) continue;
      const int op = order[i];
      if (!first) why << "; ";
      first = false;
      why << "device " << d << " waits at "
          << "FBW"[m_inst.kindOf(op)] << m_inst.mbOf(op) << " of stage " << m_inst.stageOf(op);
    }
    return why.str();
  }

 private:
  double transfer(std::size_t from, int to, double at, double ms) {
    const auto toDevice = static_cast<std::size_t>(to);
    if (from == toDevice || ms <= 0) return at;
    double& link = m_linkFree[from * m_p + toDevice];
    const double begin = std::max(at, link);
    link = begin + ms;
    return link;
  }
  void deliver(int op, double at, int from) {
    const auto o = static_cast<std::size_t>(op);
    m_ready[o] = at;
    if (m_withCauses) m_producer[o] = from;
    const auto d = static_cast<std::size_t>(m_inst.deviceOf(op));
    if (!m_queued[d]) {
      m_queued[d] = 1;
      m_work.push_back(d);
    }
  }
  std::size_t runDevice(std::size_t d) {
    const auto& order = m_orders[d];
    std::size_t& i = m_pos[d];
    std::size_t done = 0;
    while (i < order.size()) {
      const int op = order[i];
      const auto o = static_cast<std::size_t>(op);
      const double r = m_ready[o];
      if (r < 0) break;
      const double begin = std::max(m_free[d], r);
      const double finish = begin + m_inst.duration(op);
      m_t.start[o] = begin;
      m_t.end[o] = finish;
      if (m_withCauses) m_t.cause[o] = r >= m_free[d] ? m_producer[o] : m_previous[d];
      m_free[d] = finish;
      m_previous[d] = op;
      ++i;
      ++done;
      const int s = m_inst.stageOf(op);
      const auto S = static_cast<std::size_t>(s);
      const int mb = m_inst.mbOf(op);
      switch (m_inst.kindOf(op)) {
        case kF:
          if (s + 1 < m_inst.stages) {
            deliver(m_inst.opId(s + 1, kF, mb), transfer(d, m_inst.device[S + 1], finish, m_inst.sendMs[S]), op);
          } else {
            deliver(m_inst.opId(s, kB, mb), finish, op);
          }
          break;
        case kB:
          deliver(m_inst.opId(s, kW, mb), finish, op);
          if (s > 0)
            deliver(m_inst.opId(s - 1, kB, mb), transfer(d, m_inst.device[S - 1], finish, m_inst.sendMs[S - 1]), op);
          break;
        default:
          break;
      }
    }
    return done;
  }

  const Instance& m_inst;
  const Orders& m_orders;
  const bool m_withCauses;
  Timing& m_t;
  const std::size_t m_p;
  std::vector<double> m_ready;
  std::vector<int> m_producer;
  std::vector<double> m_linkFree;
  std::vector<std::size_t> m_pos;
  std::vector<double> m_free;
  std::vector<int> m_previous;
  std::vector<std::size_t> m_work;
  std::vector<char> m_queued;
};

// The makespan and the objective (makespan or longest device span), with the op that sets it.
void setObjective(const Instance& inst, const Orders& orders, Timing& t) {
  for (std::size_t o = 0; o < t.end.size(); ++o) {
    if (t.end[o] > t.makespanMs || t.objectiveOp < 0) {
      t.makespanMs = t.end[o];
      t.objectiveOp = static_cast<int>(o);
    }
  }
  t.objectiveMs = t.makespanMs;
  if (!inst.spanObjective) return;
  t.objectiveMs = 0;
  for (const auto& order : orders) {
    if (order.empty()) continue;
    const double span =
        t.end[static_cast<std::size_t>(order.back())] - t.start[static_cast<std::size_t>(order.front())];
    if (span > t.objectiveMs) {
      t.objectiveMs = span;
      t.objectiveOp = order.back();
    }
  }
}

}  // namespace

Timing timeOrders(const Instance& inst, const Orders& orders, bool withCauses) {
  Timing t;
  const auto n = static_cast<std::size_t>(inst.opCount());
  t.start.assign(n, 0.0);
  t.end.assign(n, -1.0);
  if (withCauses) t.cause.assign(n, -1);
  OrdersRun run(inst, orders, withCauses, t);
  if (run.run() != n) {
    t.problem = run.deadlock();
    return t;
  }
  t.ok = true;
  setObjective(inst, orders, t);
  t.peakActivationBytes = peakActivations(inst, orders);
  for (std::size_t d = 0; d < static_cast<std::size_t>(inst.devices); ++d) {
    if (t.peakActivationBytes[d] > inst.budgetBytes[d]) t.memoryOk = false;
  }
  return t;
}

}  // namespace pipestudio::autosched
