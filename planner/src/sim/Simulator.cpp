// Discrete-event, dependency-driven simulator (DESIGN.md §3). Every device runs its ops in
// the given order; an op starts when the device is free and all its inputs have arrived.
// Cross-device inputs travel on the directed link (from, to): bytes / bandwidth + latency,
// transfers on one link served first-come first-served (they serialise). Everything is flat
// arrays indexed by op number; the only container in the hot loop is one binary heap.
#include "pipestudio/planner/Simulator.hpp"

#include <algorithm>
#include <queue>
#include <sstream>

#include "pipestudio/plan/Memory.hpp"

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

struct Event {
  double timeMs;
  std::int64_t seq;
  std::int32_t op;      // op that ended (type 0) or the consumer whose input arrived (type 1)
  std::int32_t type;
};
struct EventLater {
  bool operator()(const Event& a, const Event& b) const {
    if (a.timeMs != b.timeMs) return a.timeMs > b.timeMs;
    return a.seq > b.seq;
  }
};

// Chains of data flow: per pipeline, trainable stages in id order; each frozen component's
// stages form their own chain (frozen outputs feed the next iteration, DESIGN.md §2).
void chainNeighbours(const Plan& shell, std::vector<std::int32_t>& prev, std::vector<std::int32_t>& next) {
  const auto n = shell.virtualStages.size();
  prev.assign(n, kNone);
  next.assign(n, kNone);
  std::vector<std::pair<long, std::int32_t>> lastOfChain;  // (chain key, last stage)
  for (std::size_t i = 0; i < n; ++i) {
    const VirtualStage& vs = shell.virtualStages[i];
    bool trainable = true;
    if (vs.component >= 0 && static_cast<std::size_t>(vs.component) < shell.model.components.size()) {
      trainable = shell.model.components[static_cast<std::size_t>(vs.component)].trainable;
    }
    const long key = static_cast<long>(vs.pipeline) * 100000L + (trainable ? 0L : 1L + vs.component);
    auto it = std::find_if(lastOfChain.begin(), lastOfChain.end(), [&](const auto& e) { return e.first == key; });
    if (it == lastOfChain.end()) {
      lastOfChain.emplace_back(key, static_cast<std::int32_t>(i));
    } else {
      prev[i] = it->second;
      next[static_cast<std::size_t>(it->second)] = static_cast<std::int32_t>(i);
      it->second = static_cast<std::int32_t>(i);
    }
  }
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
  for (int d = 0; d < p; ++d) {
    const auto& lane = skeleton.devices[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const OrderedOp& o = lane[i];
      const std::int32_t idx = offset[static_cast<std::size_t>(d)] + static_cast<std::int32_t>(i);
      const std::string where = "device " + std::to_string(d) + " op " + std::to_string(i);
      if (o.virtualStage < 0 || o.virtualStage >= nStages) {
        return Error{where + ": virtual stage " + std::to_string(o.virtualStage) + " does not exist"};
      }
      if (o.microbatch < 0 || o.microbatch >= m) {
        return Error{where + ": microbatch " + std::to_string(o.microbatch) + " is outside 0.." + std::to_string(m - 1)};
      }
      const VirtualStage& vs = shell.virtualStages[static_cast<std::size_t>(o.virtualStage)];
      if (vs.device != d) {
        return Error{where + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " belongs to device " +
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
          return Error{where + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " appears twice (also op " +
                       std::to_string(*slot - offset[static_cast<std::size_t>(d)]) + " of device " +
                       std::to_string(d) + ")"};
        }
        *slot = idx;
      }
    }
  }

  // Dependencies (edges producer → consumer).
  std::vector<Edge> edges;
  edges.reserve(static_cast<std::size_t>(nOps) * 2);
  auto missing = [&](std::int32_t consumer, OpKind kind, std::int32_t stage, std::int32_t mb) {
    const Op& c = shell.ops[static_cast<std::size_t>(consumer)];
    return Error{"device " + std::to_string(c.device) + ": " + opName(c.kind, c.virtualStage, c.microbatch) +
                 " needs " + opName(kind, stage, mb) + ", which no device runs"};
  };
  for (std::int32_t i = 0; i < nOps; ++i) {
    const Op& op = shell.ops[static_cast<std::size_t>(i)];
    const auto s = static_cast<std::size_t>(op.virtualStage);
    const auto mb = static_cast<std::size_t>(op.microbatch);
    const auto m_ = static_cast<std::size_t>(m);
    switch (op.kind) {
      case OpKind::F:
        if (prevStage[s] != kNone) {
          const std::int32_t src = fIdx[static_cast<std::size_t>(prevStage[s]) * m_ + mb];
          if (src == kNone) return missing(i, OpKind::F, prevStage[s], op.microbatch);
          edges.push_back({src, i, costs[static_cast<std::size_t>(prevStage[s])].outputBytes});
        }
        break;
      case OpKind::B:
      case OpKind::BW: {
        const std::int32_t own = fIdx[s * m_ + mb];
        if (own == kNone) return missing(i, OpKind::F, op.virtualStage, op.microbatch);
        edges.push_back({own, i, 0});
        if (nextStage[s] != kNone) {
          const std::int32_t src = bIdx[static_cast<std::size_t>(nextStage[s]) * m_ + mb];
          if (src == kNone) return missing(i, op.kind == OpKind::BW ? OpKind::BW : OpKind::B, nextStage[s], op.microbatch);
          edges.push_back({src, i, costs[s].outputBytes});
        }
        break;
      }
      case OpKind::W: {
        const std::int32_t src = bIdx[s * m_ + mb];
        if (src == kNone || shell.ops[static_cast<std::size_t>(src)].kind != OpKind::B) {
          return missing(i, OpKind::B, op.virtualStage, op.microbatch);
        }
        edges.push_back({src, i, 0});
        break;
      }
      case OpKind::N:
        if (prevStage[s] != kNone) {
          const std::int32_t src = nIdx[static_cast<std::size_t>(prevStage[s]) * m_ + mb];
          if (src != kNone) edges.push_back({src, i, costs[static_cast<std::size_t>(prevStage[s])].outputBytes});
        }
        break;
      default:
        break;
    }
  }
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
    edges.push_back({a, b, dep.bytes});
  }

  // CSR of consumers per producer; pending input count per op.
  std::vector<std::int32_t> firstOut(static_cast<std::size_t>(nOps) + 1, 0);
  std::vector<std::int32_t> pending(static_cast<std::size_t>(nOps), 0);
  for (const Edge& e : edges) {
    ++firstOut[static_cast<std::size_t>(e.from) + 1];
    ++pending[static_cast<std::size_t>(e.to)];
  }
  for (std::int32_t i = 0; i < nOps; ++i) firstOut[static_cast<std::size_t>(i) + 1] += firstOut[static_cast<std::size_t>(i)];
  std::vector<std::int32_t> outEdge(edges.size());
  {
    std::vector<std::int32_t> fillPos(firstOut.begin(), firstOut.end() - 1);
    for (std::size_t e = 0; e < edges.size(); ++e) {
      outEdge[static_cast<std::size_t>(fillPos[static_cast<std::size_t>(edges[e].from)]++)] = static_cast<std::int32_t>(e);
    }
  }

  std::vector<std::int32_t> position(static_cast<std::size_t>(p), 0);
  std::vector<char> busy(static_cast<std::size_t>(p), 0);
  std::vector<double> linkFreeMs(static_cast<std::size_t>(p) * static_cast<std::size_t>(p), 0.0);
  std::vector<char> done(static_cast<std::size_t>(nOps), 0);
  std::priority_queue<Event, std::vector<Event>, EventLater> events;
  std::int64_t seq = 0;
  if (options.recordComms) shell.comms.reserve(edges.size() / 2);

  auto tryStart = [&](int d, double now) {
    const auto du = static_cast<std::size_t>(d);
    if (busy[du]) return;
    const std::int32_t idx = offset[du] + position[du];
    if (idx >= offset[du + 1] || pending[static_cast<std::size_t>(idx)] != 0) return;
    Op& op = shell.ops[static_cast<std::size_t>(idx)];
    op.startMs = now;
    op.endMs = now + duration[static_cast<std::size_t>(idx)];
    busy[du] = 1;
    events.push({op.endMs, seq++, idx, 0});
  };
  for (int d = 0; d < p; ++d) tryStart(d, 0.0);
  std::int32_t completed = 0;
  while (!events.empty()) {
    const Event ev = events.top();
    events.pop();
    if (ev.type == 1) {
      --pending[static_cast<std::size_t>(ev.op)];
      tryStart(shell.ops[static_cast<std::size_t>(ev.op)].device, ev.timeMs);
      continue;
    }
    const Op& op = shell.ops[static_cast<std::size_t>(ev.op)];
    const auto du = static_cast<std::size_t>(op.device);
    done[static_cast<std::size_t>(ev.op)] = 1;
    ++completed;
    busy[du] = 0;
    ++position[du];
    for (std::int32_t k = firstOut[static_cast<std::size_t>(ev.op)]; k < firstOut[static_cast<std::size_t>(ev.op) + 1]; ++k) {
      const Edge& e = edges[static_cast<std::size_t>(outEdge[static_cast<std::size_t>(k)])];
      const Op& consumer = shell.ops[static_cast<std::size_t>(e.to)];
      if (consumer.device == op.device) {
        --pending[static_cast<std::size_t>(e.to)];
        // Same device: the consumer is later in this order; tryStart below covers it.
        continue;
      }
      const std::size_t link = du * static_cast<std::size_t>(p) + static_cast<std::size_t>(consumer.device);
      const double startMs = std::max(ev.timeMs, linkFreeMs[link]);
      const double endMs = startMs + shell.cluster.transferMs(op.device, consumer.device, static_cast<double>(e.bytes));
      linkFreeMs[link] = endMs;
      if (options.recordComms) {
        Comm c;
        c.fromDevice = op.device;
        c.toDevice = consumer.device;
        c.microbatch = op.microbatch;
        c.kind = (op.kind == OpKind::B || op.kind == OpKind::BW || op.kind == OpKind::T) ? OpKind::B : OpKind::F;
        c.virtualStage = op.virtualStage;
        c.startMs = startMs;
        c.endMs = endMs;
        c.bytes = e.bytes;
        shell.comms.push_back(c);
      }
      events.push({endMs, seq++, e.to, 1});
    }
    tryStart(op.device, ev.timeMs);
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
      for (const Edge& e : edges) {  // error path only: a linear scan is fine
        if (e.to != idx || done[static_cast<std::size_t>(e.from)]) continue;
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
  Plan shell;
  shell.config = plan.config;
  shell.model = plan.model;
  shell.cluster = plan.cluster;
  return simulateSkeleton(std::move(shell), skeleton);
}

}  // namespace pipestudio
