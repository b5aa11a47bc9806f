// Discrete-event, dependency-driven simulator (DESIGN.md §3). Every device runs its ops in
// the given order; an op starts when the device is free and all its inputs have arrived.
// Cross-device inputs travel on the directed link (from, to): bytes / bandwidth + latency,
// transfers on one link served first-come first-served (they serialise). Everything is flat
// arrays indexed by op number; the only structure in the hot loop is a winner tree over devices.
#include "pipestudio/planner/Simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "sim/DeviceWinnerTree.hpp"

namespace pipestudio {
namespace {

constexpr std::int32_t kNone = -1;

std::string opName(OpKind kind, int stage, int microbatch) {
  return std::string(opKindName(kind)) + "(stage " + std::to_string(stage) + ", microbatch " +
         std::to_string(microbatch) + ")";
}

struct Edge {
  std::int32_t from;
  std::int32_t to;
  std::int64_t bytes;
};

// Chains of data flow: plan/Dependencies.hpp's stageNeighbours, shared with the executor.
void chainNeighbours(const Plan& shell, std::vector<std::int32_t>& prev, std::vector<std::int32_t>& next) {
  const StageNeighbours n = stageNeighbours(shell);
  prev.assign(n.previous.begin(), n.previous.end());
  next.assign(n.next.begin(), n.next.end());
}

}  // namespace

std::vector<StageEstimate> stageEstimates(const Plan& shell) {
  const auto costs = stageCosts(shell);
  std::vector<std::int32_t> prev, next;
  chainNeighbours(shell, prev, next);
  std::vector<StageEstimate> out(costs.size());
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const StageCosts& c = costs[i];
    StageEstimate& e = out[i];
    e.forwardMs = c.forwardMs;
    e.backwardInputMs = c.backwardInputMs;
    e.backwardWeightMs = c.backwardWeightMs;
    e.activationBytes = c.activationBytes;
    e.weightGradBytes = c.weightGradBytes;
    if (next[i] != kNone) {
      e.sendMs = shell.cluster.transferMs(shell.virtualStages[i].device,
                                          shell.virtualStages[static_cast<std::size_t>(next[i])].device,
                                          static_cast<double>(c.outputBytes));
    }
  }
  return out;
}

Expected<Plan> simulateSkeleton(Plan shell, const ScheduleSkeleton& skeleton, const SimulationOptions& options) {
  shell.virtualStages = skeleton.virtualStages;
  shell.ops.clear();
  shell.comms.clear();
  const int p = shell.config.devices;
  const int m = shell.config.microbatches;
  const auto nStages = static_cast<std::int32_t>(shell.virtualStages.size());
  if (static_cast<int>(skeleton.devices.size()) != p) {
    return Error{"schedule has " + std::to_string(skeleton.devices.size()) + " device lanes, the plan " +
                 std::to_string(p) + " devices"};
  }
  if (m <= 0) return Error{"the plan needs at least one microbatch"};
  for (std::int32_t s = 0; s < nStages; ++s) {
    const VirtualStage& vs = shell.virtualStages[static_cast<std::size_t>(s)];
    if (vs.id != s) return Error{"virtual stage " + std::to_string(s) + " has id " + std::to_string(vs.id) + " (expected ids in order)"};
    if (vs.device < 0 || vs.device >= p) {
      return Error{"virtual stage " + std::to_string(s) + " is on device " + std::to_string(vs.device) +
                   ", not a device of the plan (0.." + std::to_string(p - 1) + ")"};
    }
  }
  const std::vector<StageCosts> costs = stageCosts(shell);
  std::vector<std::int32_t> prevStage, nextStage;
  chainNeighbours(shell, prevStage, nextStage);

  // Flatten ops in device order: plan.ops is exactly this order.
  std::vector<std::int32_t> offset(static_cast<std::size_t>(p) + 1, 0);
  std::size_t totalOps = 0;
  for (int d = 0; d < p; ++d) totalOps += skeleton.devices[static_cast<std::size_t>(d)].size();
  // Op indices are int32.
  if (totalOps > (std::size_t{1} << 30)) return Error{"schedule has " + std::to_string(totalOps) + " ops, more than the simulator handles"};
  for (int d = 0; d < p; ++d) {
    offset[static_cast<std::size_t>(d) + 1] =
        offset[static_cast<std::size_t>(d)] + static_cast<std::int32_t>(skeleton.devices[static_cast<std::size_t>(d)].size());
  }
  const std::int32_t nOps = offset.back();
  shell.ops.resize(static_cast<std::size_t>(nOps));
  std::vector<double> duration(static_cast<std::size_t>(nOps));
  const auto table = static_cast<std::size_t>(nStages) * static_cast<std::size_t>(m);
  std::vector<std::int32_t> fIdx(table, kNone), bIdx(table, kNone), wIdx(table, kNone), nIdx(table, kNone);
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, shell.model.samplesPerMicrobatch));
  // Error messages name an op by its place in its device's order; built only on error.
  auto where = [](int d, std::size_t i) { return "device " + std::to_string(d) + " op " + std::to_string(i); };
  for (int d = 0; d < p; ++d) {
    const auto& lane = skeleton.devices[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const OrderedOp& o = lane[i];
      const std::int32_t idx = offset[static_cast<std::size_t>(d)] + static_cast<std::int32_t>(i);
      if (o.virtualStage < 0 || o.virtualStage >= nStages) {
        return Error{where(d, i) + ": virtual stage " + std::to_string(o.virtualStage) + " does not exist"};
      }
      if (o.microbatch < 0 || o.microbatch >= m) {
        return Error{where(d, i) + ": microbatch " + std::to_string(o.microbatch) + " is outside 0.." + std::to_string(m - 1)};
      }
      const VirtualStage& vs = shell.virtualStages[static_cast<std::size_t>(o.virtualStage)];
      if (vs.device != d) {
        return Error{where(d, i) + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " belongs to device " +
                     std::to_string(vs.device)};
      }
      Op& op = shell.ops[static_cast<std::size_t>(idx)];
      op.device = d;
      op.virtualStage = o.virtualStage;
      op.kind = o.kind;
      op.microbatch = o.microbatch;
      op.samples = o.samples;
      const StageCosts& c = costs[static_cast<std::size_t>(o.virtualStage)];
      double dur = 0;
      switch (o.kind) {
        case OpKind::F: case OpKind::N: case OpKind::S: dur = c.forwardMs; break;
        case OpKind::B: dur = c.backwardInputMs; break;
        case OpKind::W: dur = c.backwardWeightMs; break;
        case OpKind::BW: case OpKind::T: dur = c.backwardInputMs + c.backwardWeightMs; break;
        case OpKind::OPT: dur = 0; break;
      }
      if (o.samples > 0) dur *= static_cast<double>(o.samples) / samplesPerMb;
      if (!std::isfinite(dur)) {
        return Error{where(d, i) + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " has no finite duration"};
      }
      duration[static_cast<std::size_t>(idx)] = dur;
      const std::size_t key = static_cast<std::size_t>(o.virtualStage) * static_cast<std::size_t>(m) +
                              static_cast<std::size_t>(o.microbatch);
      std::int32_t* slot = nullptr;
      switch (o.kind) {
        case OpKind::F: slot = &fIdx[key]; break;
        case OpKind::B: case OpKind::BW: slot = &bIdx[key]; break;
        case OpKind::W: slot = &wIdx[key]; break;
        case OpKind::N: nIdx[key] = idx; break;  // partial batches: several N per key
        default: break;
      }
      if (slot) {
        if (*slot != kNone) {
          return Error{where(d, i) + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " appears twice (also op " +
                       std::to_string(*slot - offset[static_cast<std::size_t>(d)]) + " of device " +
                       std::to_string(d) + ")"};
        }
        *slot = idx;
      }
    }
  }

  // Data-flow dependencies: each op has at most two producers (F: the previous stage's F;
  // B/BW: its own F, then the next stage's B; W: its B; N: the previous stage's N), kept in
  // two flat slots per op in that order (producer op and its stage, so that devices and
  // bytes come from small per-stage tables, not from random reads of ops). Extra
  // dependencies follow, in skeleton order.
  struct Pred {
    std::int32_t from;
    std::int32_t fromStage;
  };
  std::vector<Pred> preds(static_cast<std::size_t>(nOps) * 2, Pred{kNone, kNone});
  // Out-degree per producer (CSR offsets below), producers not yet completed per op, and
  // the number of transfers, counted while the producers are found.
  std::vector<std::int32_t> firstOut(static_cast<std::size_t>(nOps) + 1, 0);
  std::vector<std::int32_t> pending(static_cast<std::size_t>(nOps), 0);
  std::size_t crossEdges = 0;
  auto stageDevice = [&](std::int32_t stage) { return shell.virtualStages[static_cast<std::size_t>(stage)].device; };
  auto missing = [&](std::int32_t consumer, OpKind kind, std::int32_t stage, std::int32_t mb) {
    const Op& c = shell.ops[static_cast<std::size_t>(consumer)];
    return Error{"device " + std::to_string(c.device) + ": " + opName(c.kind, c.virtualStage, c.microbatch) +
                 " needs " + opName(kind, stage, mb) + ", which no device runs"};
  };
  const auto m_ = static_cast<std::size_t>(m);
  for (std::int32_t i = 0; i < nOps; ++i) {
    const Op& op = shell.ops[static_cast<std::size_t>(i)];
    const auto s = static_cast<std::size_t>(op.virtualStage);
    const auto mb = static_cast<std::size_t>(op.microbatch);
    Pred* slot = &preds[static_cast<std::size_t>(i) * 2];
    switch (op.kind) {
      case OpKind::F:
        if (prevStage[s] != kNone) {
          const std::int32_t src = fIdx[static_cast<std::size_t>(prevStage[s]) * m_ + mb];
          if (src == kNone) return missing(i, OpKind::F, prevStage[s], op.microbatch);
          *slot = {src, prevStage[s]};
        }
        break;
      case OpKind::B:
      case OpKind::BW: {
        const std::int32_t own = fIdx[s * m_ + mb];
        if (own == kNone) return missing(i, OpKind::F, op.virtualStage, op.microbatch);
        slot[0] = {own, op.virtualStage};
        if (nextStage[s] != kNone) {
          const std::int32_t src = bIdx[static_cast<std::size_t>(nextStage[s]) * m_ + mb];
          if (src == kNone) return missing(i, op.kind == OpKind::BW ? OpKind::BW : OpKind::B, nextStage[s], op.microbatch);
          slot[1] = {src, nextStage[s]};
        }
        break;
      }
      case OpKind::W: {
        const std::int32_t src = bIdx[s * m_ + mb];
        if (src == kNone || shell.ops[static_cast<std::size_t>(src)].kind != OpKind::B) {
          return missing(i, OpKind::B, op.virtualStage, op.microbatch);
        }
        *slot = {src, op.virtualStage};
        break;
      }
      case OpKind::N:
        if (prevStage[s] != kNone) {
          const std::int32_t src = nIdx[static_cast<std::size_t>(prevStage[s]) * m_ + mb];
          if (src != kNone) *slot = {src, prevStage[s]};
        }
        break;
      default:
        break;
    }
    for (int k = 0; k < 2; ++k) {
      if (slot[k].from == kNone) continue;
      ++firstOut[static_cast<std::size_t>(slot[k].from) + 1];
      ++pending[static_cast<std::size_t>(i)];
      if (stageDevice(slot[k].fromStage) != op.device) ++crossEdges;
    }
  }
  std::vector<Edge> extra;
  extra.reserve(skeleton.extraDependencies.size());
  for (const OpDependency& dep : skeleton.extraDependencies) {
    auto resolve = [&](const OpRef& r) -> std::int32_t {
      if (r.device < 0 || r.device >= p) return kNone;
      const auto& lane = skeleton.devices[static_cast<std::size_t>(r.device)];
      if (r.index < 0 || static_cast<std::size_t>(r.index) >= lane.size()) return kNone;
      return offset[static_cast<std::size_t>(r.device)] + r.index;
    };
    const std::int32_t a = resolve(dep.from);
    const std::int32_t b = resolve(dep.to);
    if (a == kNone || b == kNone) return Error{"extra dependency names an op that is not in the schedule"};
    extra.push_back({a, b, dep.bytes});
  }
  // Bytes on a data-flow edge: activations forward (the producing stage's output) or
  // gradients backward (the consuming stage's output); nothing within one stage.
  auto edgeBytes = [&](std::int32_t fromStage, std::int32_t toStage) -> std::int64_t {
    if (fromStage == toStage) return 0;
    return costs[static_cast<std::size_t>(std::min(fromStage, toStage))].outputBytes;
  };

  // CSR of consumers per producer with everything the hot loop needs inline (consumer,
  // its device, transfer time), in the order the edges were listed above: per producer,
  // consumers by op index, extra dependencies last. That order fixes the order in which
  // one producer's transfers queue on a link.
  struct Out {
    std::int32_t to;
    std::int32_t toDevice;
    double transferMs;
    std::int64_t bytes;
  };
  for (const Edge& e : extra) {
    ++firstOut[static_cast<std::size_t>(e.from) + 1];
    ++pending[static_cast<std::size_t>(e.to)];
    if (shell.ops[static_cast<std::size_t>(e.from)].device != shell.ops[static_cast<std::size_t>(e.to)].device) ++crossEdges;
  }
  for (std::int32_t i = 0; i < nOps; ++i) firstOut[static_cast<std::size_t>(i) + 1] += firstOut[static_cast<std::size_t>(i)];
  // Every slot is written below: no value-initialisation of this (large) array.
  const auto outs = std::make_unique_for_overwrite<Out[]>(static_cast<std::size_t>(firstOut.back()));
  {
    // Transfers between a stage and its chain neighbour always carry the same bytes between
    // the same two devices: compute each once (ClusterSpec::transferMs is pure). Key: the
    // producing stage and the direction (toward a later or an earlier stage).
    std::vector<double> sendCache(static_cast<std::size_t>(nStages) * 2, -1.0);
    std::vector<std::int32_t> fillPos(firstOut.begin(), firstOut.end() - 1);
    for (std::int32_t i = 0; i < nOps; ++i) {
      const Op& op = shell.ops[static_cast<std::size_t>(i)];
      for (int k = 0; k < 2; ++k) {
        const Pred& pr = preds[static_cast<std::size_t>(i) * 2 + static_cast<std::size_t>(k)];
        if (pr.from == kNone) continue;
        const int fromDevice = stageDevice(pr.fromStage);
        const std::int64_t bytes = edgeBytes(pr.fromStage, op.virtualStage);
        double ms = 0;
        if (fromDevice != op.device) {
          const std::size_t key = static_cast<std::size_t>(pr.fromStage) * 2 + (op.virtualStage < pr.fromStage ? 1U : 0U);
          if (sendCache[key] < 0) sendCache[key] = shell.cluster.transferMs(fromDevice, op.device, static_cast<double>(bytes));
          ms = sendCache[key];
        }
        outs[static_cast<std::size_t>(fillPos[static_cast<std::size_t>(pr.from)]++)] = {i, op.device, ms, bytes};
      }
    }
    for (const Edge& e : extra) {
      const int fromDevice = shell.ops[static_cast<std::size_t>(e.from)].device;
      const int toDevice = shell.ops[static_cast<std::size_t>(e.to)].device;
      const double ms = fromDevice == toDevice ? 0.0 : shell.cluster.transferMs(fromDevice, toDevice, static_cast<double>(e.bytes));
      outs[static_cast<std::size_t>(fillPos[static_cast<std::size_t>(e.from)]++)] = {e.to, toDevice, ms, e.bytes};
    }
  }

  // Event loop over op completions only. An op starts when its device is free and every
  // input has arrived: start = max(device free, latest arrival). Arrival times are known as
  // soon as the producer completes (its transfer queues on the link then), so no arrival
  // events are needed: an op whose producers have all completed starts at that maximum,
  // possibly later than the current event. Transfers on a link queue in the order their
  // producers complete, which is the sending device's op order.
  std::vector<std::int32_t> position(static_cast<std::size_t>(p), 0);
  std::vector<char> busy(static_cast<std::size_t>(p), 0);
  std::vector<double> deviceFreeMs(static_cast<std::size_t>(p), 0.0);
  std::vector<double> readyMs(static_cast<std::size_t>(nOps), 0.0);
  std::vector<double> linkFreeMs(static_cast<std::size_t>(p) * static_cast<std::size_t>(p), 0.0);
  DeviceWinnerTree running(p);
  if (options.recordComms) shell.comms.reserve(crossEdges);

  // Starts device d's next op if it is idle and every producer of that op has completed;
  // returns whether it did.
  auto tryStart = [&](int d) {
    const auto du = static_cast<std::size_t>(d);
    if (busy[du]) return false;
    const std::int32_t idx = offset[du] + position[du];
    if (idx >= offset[du + 1] || pending[static_cast<std::size_t>(idx)] != 0) return false;
    Op& op = shell.ops[static_cast<std::size_t>(idx)];
    op.startMs = std::max(deviceFreeMs[du], readyMs[static_cast<std::size_t>(idx)]);
    op.endMs = op.startMs + duration[static_cast<std::size_t>(idx)];
    busy[du] = 1;
    running.set(d, op.endMs);
    return true;
  };
  for (int d = 0; d < p; ++d) tryStart(d);
  std::int32_t completed = 0;
  for (int dev = running.top(); dev >= 0; dev = running.top()) {
    const std::int32_t code = offset[static_cast<std::size_t>(dev)] + position[static_cast<std::size_t>(dev)];
    const struct {
      double timeMs;
      std::int32_t code;
    } ev{running.keyMs(dev), code};
    const Op& op = shell.ops[static_cast<std::size_t>(ev.code)];
    const auto du = static_cast<std::size_t>(op.device);
    ++completed;
    busy[du] = 0;
    deviceFreeMs[du] = ev.timeMs;
    ++position[du];
    const Out* o = outs.get() + firstOut[static_cast<std::size_t>(ev.code)];
    const Out* oEnd = outs.get() + firstOut[static_cast<std::size_t>(ev.code) + 1];
    for (; o != oEnd; ++o) {
      std::int32_t& consumerPending = pending[static_cast<std::size_t>(o->to)];
      if (o->toDevice == op.device) {
        // Same device: the consumer is later in this order and cannot start before this
        // op's end; tryStart below covers it.
        --consumerPending;
        continue;
      }
      const std::size_t link = du * static_cast<std::size_t>(p) + static_cast<std::size_t>(o->toDevice);
      const double startMs = std::max(ev.timeMs, linkFreeMs[link]);
      const double endMs = startMs + o->transferMs;
      linkFreeMs[link] = endMs;
      if (options.recordComms) {
        Comm c;
        c.fromDevice = op.device;
        c.toDevice = o->toDevice;
        c.microbatch = op.microbatch;
        c.kind = (op.kind == OpKind::B || op.kind == OpKind::BW || op.kind == OpKind::T) ? OpKind::B : OpKind::F;
        c.virtualStage = op.virtualStage;
        c.startMs = startMs;
        c.endMs = endMs;
        c.bytes = o->bytes;
        shell.comms.push_back(c);
      }
      double& ready = readyMs[static_cast<std::size_t>(o->to)];
      ready = std::max(ready, endMs);
      if (--consumerPending == 0) tryStart(o->toDevice);
    }
    if (!tryStart(op.device)) running.clear(op.device);
  }

  if (completed != nOps) {
    // Deadlock: follow "waits for" from a stuck device until a device repeats.
    std::ostringstream msg;
    msg << "deadlock after " << completed << " of " << nOps << " ops:";
    std::vector<int> waitsOn(static_cast<std::size_t>(p), -1);
    for (int d = 0; d < p; ++d) {
      const auto du = static_cast<std::size_t>(d);
      const std::int32_t idx = offset[du] + position[du];
      if (idx >= offset[du + 1]) continue;
      const Op& op = shell.ops[static_cast<std::size_t>(idx)];
      msg << "\n  device " << d << " waits at " << opName(op.kind, op.virtualStage, op.microbatch);
      auto isDone = [&](std::int32_t x) {
        const Op& o = shell.ops[static_cast<std::size_t>(x)];
        return x < offset[static_cast<std::size_t>(o.device)] + position[static_cast<std::size_t>(o.device)];
      };
      // The producers of the stuck op, in the order the simulator lists them.
      std::vector<Edge> waits;
      for (std::size_t k = 0; k < 2; ++k) waits.push_back({preds[static_cast<std::size_t>(idx) * 2 + k].from, idx, 0});
      for (const Edge& e : extra) {
        if (e.to == idx) waits.push_back(e);
      }
      for (const Edge& e : waits) {
        if (e.from == kNone || isDone(e.from)) continue;
        const Op& need = shell.ops[static_cast<std::size_t>(e.from)];
        msg << " for " << opName(need.kind, need.virtualStage, need.microbatch) << " on device " << need.device;
        if (need.device == d) msg << " (later in its own order)";
        waitsOn[du] = need.device;
        break;
      }
    }
    for (int start = 0; start < p; ++start) {
      if (waitsOn[static_cast<std::size_t>(start)] < 0) continue;
      std::vector<int> seen(static_cast<std::size_t>(p), -1);
      std::vector<int> path;
      int d = start;
      while (d >= 0 && seen[static_cast<std::size_t>(d)] < 0) {
        seen[static_cast<std::size_t>(d)] = static_cast<int>(path.size());
        path.push_back(d);
        d = waitsOn[static_cast<std::size_t>(d)];
      }
      if (d < 0) continue;
      msg << "\n  cycle: device";
      for (std::size_t i = static_cast<std::size_t>(seen[static_cast<std::size_t>(d)]); i < path.size(); ++i) {
        msg << ' ' << path[i] << " →";
      }
      msg << ' ' << d;
      break;
    }
    return Error{msg.str()};
  }
  if (options.recordComms) appendFrozenTransfers(shell);  // part: frozen outputs to their consumers (Fill.hpp)
  if (options.computeMetrics) shell.metrics = computeMetrics(shell);
  return shell;
}

Expected<Plan> simulate(const PlanRequest& request, const ScheduleSkeleton& skeleton) {
  Plan shell;
  shell.config = request.config;
  shell.model = request.model;
  shell.cluster = request.cluster;
  return simulateSkeleton(std::move(shell), skeleton);
}

Expected<Plan> resimulate(const Plan& plan) {
  ScheduleSkeleton skeleton;
  skeleton.virtualStages = plan.virtualStages;
  skeleton.devices.resize(static_cast<std::size_t>(std::max(0, plan.config.devices)));
  for (const Op& op : plan.ops) {
    if (op.device < 0 || op.device >= plan.config.devices) {
      return Error{"op on device " + std::to_string(op.device) + ", not a device of the plan"};
    }
    OrderedOp o;
    o.virtualStage = op.virtualStage;
    o.kind = op.kind;
    o.microbatch = op.microbatch;
    o.samples = op.samples;
    skeleton.devices[static_cast<std::size_t>(op.device)].push_back(o);
  }
  // part: dependencies the plan implies but does not store (frozen outputs, vocabulary S/T).
  skeleton.extraDependencies = derivedDependencies(plan, skeleton.devices);
  Plan shell;
  shell.config = plan.config;
  shell.model = plan.model;
  shell.cluster = plan.cluster;
  return simulateSkeleton(std::move(shell), skeleton);
}

}  // namespace pipestudio
