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

Timing timeOrders(const Instance& inst, const Orders& orders, bool withCauses) {
  Timing t;
  const auto n = static_cast<std::size_t>(inst.opCount());
  const int m = inst.microbatches;
  const auto p = static_cast<std::size_t>(inst.devices);
  t.start.assign(n, 0.0);
  t.end.assign(n, -1.0);
  if (withCauses) t.cause.assign(n, -1);
  std::vector<double> ready(n, -1.0);
  std::vector<int> producer;
  if (withCauses) producer.assign(n, -1);
  for (int mb = 0; mb < m; ++mb) ready[static_cast<std::size_t>(inst.opId(0, kF, mb))] = 0.0;
  std::vector<double> linkFree(p * p, 0.0);
  std::vector<std::size_t> pos(p, 0);
  std::vector<double> free(p, 0.0);
  std::vector<int> previous(p, -1);
  std::vector<std::size_t> work;
  std::vector<char> queued(p, 1);
  for (std::size_t d = p; d > 0; --d) work.push_back(d - 1);
  auto transfer = [&](std::size_t from, int to, double at, double ms) {
    const auto toDevice = static_cast<std::size_t>(to);
    if (from == toDevice || ms <= 0) return at;
    double& link = linkFree[from * p + toDevice];
    const double begin = std::max(at, link);
    link = begin + ms;
    return link;
  };
  auto deliver = [&](int op, double at, int from) {
    const auto o = static_cast<std::size_t>(op);
    ready[o] = at;
    if (withCauses) producer[o] = from;
    const auto d = static_cast<std::size_t>(inst.deviceOf(op));
    if (!queued[d]) {
      queued[d] = 1;
      work.push_back(d);
    }
  };
  std::size_t done = 0;
  while (!work.empty()) {
    const std::size_t d = work.back();
    work.pop_back();
    queued[d] = 0;
    const auto& order = orders[d];
    std::size_t& i = pos[d];
    while (i < order.size()) {
      const int op = order[i];
      const auto o = static_cast<std::size_t>(op);
      const double r = ready[o];
      if (r < 0) break;
      const double begin = std::max(free[d], r);
      const double finish = begin + inst.duration(op);
      t.start[o] = begin;
      t.end[o] = finish;
      if (withCauses) t.cause[o] = r >= free[d] ? producer[o] : previous[d];
      free[d] = finish;
      previous[d] = op;
      ++i;
      ++done;
      const int s = inst.stageOf(op);
      const auto S = static_cast<std::size_t>(s);
      const int mb = inst.mbOf(op);
      switch (inst.kindOf(op)) {
        case kF:
          if (s + 1 < inst.stages) {
            deliver(inst.opId(s + 1, kF, mb), transfer(d, inst.device[S + 1], finish, inst.sendMs[S]), op);
          } else {
            deliver(inst.opId(s, kB, mb), finish, op);
          }
          break;
        case kB:
          deliver(inst.opId(s, kW, mb), finish, op);
          if (s > 0) deliver(inst.opId(s - 1, kB, mb), transfer(d, inst.device[S - 1], finish, inst.sendMs[S - 1]), op);
          break;
        default:
          break;
      }
    }
  }
  if (done != n) {
    std::ostringstream why;
    why << "deadlock: ";
    bool first = true;
    for (std::size_t d = 0; d < p; ++d) {
      const auto& order = orders[d];
      const std::size_t i = pos[d];
      if (i >= order.size()) continue;
      const int op = order[i];
      if (!first) why << "; ";
      first = false;
      why << "device " << d << " waits at "
          << "FBW"[inst.kindOf(op)] << inst.mbOf(op) << " of stage " << inst.stageOf(op);
    }
    t.problem = why.str();
    return t;
  }
  t.ok = true;
  for (std::size_t o = 0; o < n; ++o) {
    if (t.end[o] > t.makespanMs || t.objectiveOp < 0) {
      t.makespanMs = t.end[o];
      t.objectiveOp = static_cast<int>(o);
    }
  }
  t.objectiveMs = t.makespanMs;
  if (inst.spanObjective) {
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
  t.peakActivationBytes = peakActivations(inst, orders);
  for (std::size_t d = 0; d < p; ++d) {
    if (t.peakActivationBytes[d] > inst.budgetBytes[d]) t.memoryOk = false;
  }
  return t;
}

}  // namespace pipestudio::autosched
