#include "pipestudio/executor/Program.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio::exec {
namespace {

std::string opWhere(std::int32_t index) { return "/ops/" + std::to_string(index); }

std::string opName(const Op& op) {
  return std::string(opKindName(op.kind)) + " of virtual stage " + std::to_string(op.virtualStage) + " microbatch " +
         std::to_string(op.microbatch);
}

std::int64_t scaled(std::int64_t bytes, double fraction) {
  return static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * fraction));
}

// Groups for a rendezvous transport. The abstract run above is one valid global order of
// every op; a transfer takes the place of its producer in it (ties by consumer). Each device
// posts its transfers in that one global order, so the earliest unfinished transfer is always
// next on both of its devices and no two devices can wait on each other. Before an op, a
// device posts everything it takes part in that the global order placed before the op: sends
// of its earlier ops as soon as they exist, receives as early as they can be known, and
// nothing that depends on the op itself or later ones (which would make the op wait on its
// own consequences).
void buildRendezvousGroups(Program& program, const IdVector<std::int64_t>& pass) {
  struct Item {
    std::int64_t producerPass;
    std::int64_t consumerPass;
    bool send;
    Transfer transfer;
  };
  // When the abstract run executed op `op`; a consumer below 0 is the end of the iteration on
  // another device (Program.hpp), after every pass.
  auto passOf = [&](std::int32_t op) { return op < 0 ? std::numeric_limits<std::int64_t>::max() : pass[op]; };
  for (DeviceProgram& dp : program.perDevice) {
    std::vector<Item> queue;
    for (const Step& s : dp.steps) {
      for (const Transfer& t : s.sends) queue.push_back({passOf(t.producerOp), passOf(t.consumerOp), true, t});
      for (const Transfer& t : s.receives) queue.push_back({passOf(t.producerOp), passOf(t.consumerOp), false, t});
    }
    for (const Transfer& t : dp.endReceives) {
      queue.push_back({passOf(t.producerOp), std::numeric_limits<std::int64_t>::max(), false, t});
    }
    std::sort(queue.begin(), queue.end(), [](const Item& a, const Item& b) {
      return std::tie(a.producerPass, a.consumerPass) < std::tie(b.producerPass, b.consumerPass);
    });
    std::size_t next = 0;
    auto post = [&](CommGroup& group, std::int64_t before) {
      for (; next < queue.size() && queue[next].producerPass < before; ++next) {
        (queue[next].send ? group.sends : group.receives).push_back(queue[next].transfer);
      }
    };
    for (Step& s : dp.steps) post(s.rendezvous, passOf(s.opIndex));
    post(dp.trailing, std::numeric_limits<std::int64_t>::max());
  }
}

}  // namespace

Status checkRendezvous(const Program& program) {
  // Groups of each device in posting order: (the step they precede, the group).
  struct GroupRef {
    std::size_t beforeStep;
    const CommGroup* group;
  };
  const int devices = program.devices;
  IdVector<std::vector<GroupRef>> groups(devices);
  using Key = std::pair<std::int32_t, std::int32_t>;            // (producer op, consumer op)
  std::map<Key, std::pair<int, std::size_t>> sender, receiver;  // transfer → (device, group)
  for (int d = 0; d < devices; ++d) {
    const DeviceProgram& dp = program.perDevice[d];
    auto add = [&](std::size_t beforeStep, const CommGroup& g) {
      if (g.empty()) return;
      const std::size_t index = groups[d].size();
      groups[d].push_back({beforeStep, &g});
      for (const Transfer& t : g.sends) sender[{t.producerOp, t.consumerOp}] = {d, index};
      for (const Transfer& t : g.receives) receiver[{t.producerOp, t.consumerOp}] = {d, index};
    };
    for (std::size_t k = 0; k < dp.steps.size(); ++k) add(k, dp.steps[k].rendezvous);
    add(dp.steps.size(), dp.trailing);
  }
  IdVector<std::size_t> step(devices, 0), group(devices, 0);
  IdVector<char> started(devices, 0);
  auto hasStarted = [&](std::pair<int, std::size_t> at) {
    return group[at.first] > at.second || (group[at.first] == at.second && started[at.first] != 0);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < devices; ++d) {
      const auto& steps = program.perDevice[d].steps;
      for (bool moved = true; moved;) {
        moved = false;
        if (group[d] < groups[d].size()) {
          const GroupRef& g = groups[d][group[d]];
          if (started[d] == 0 && (g.group->sends.empty() || step[d] >= g.beforeStep)) {
            started[d] = 1;
            moved = true;
          }
          if (started[d] != 0) {
            bool met = true;
            auto peerStarted = [&](const auto& peers, const Transfer& t) {
              const auto at = peers.find(Key{t.producerOp, t.consumerOp});
              return at != peers.end() && hasStarted(at->second);
            };
            for (const Transfer& t : g.group->sends) met = met && peerStarted(receiver, t);
            for (const Transfer& t : g.group->receives) met = met && peerStarted(sender, t);
            if (met) {
              ++group[d];
              started[d] = 0;
              moved = true;
            }
          }
        }
        while (step[d] < steps.size()) {
          const Step& s = steps[step[d]];
          const bool ready = std::all_of(s.receives.begin(), s.receives.end(), [&](const Transfer& t) {
            const auto at = receiver.find({t.producerOp, t.consumerOp});
            return at != receiver.end() && group[d] > at->second.second;
          });
          if (!ready) break;
          ++step[d];
          moved = true;
        }
        progress = progress || moved;
      }
    }
  }
  std::string stuck;
  for (int d = 0; d < devices; ++d) {
    const auto& steps = program.perDevice[d].steps;
    if (step[d] >= steps.size() && group[d] >= groups[d].size()) continue;
    stuck += (stuck.empty() ? "" : "; ") + std::string("device ") + std::to_string(d);
    if (step[d] < steps.size()) stuck += " at " + opWhere(steps[step[d]].opIndex);
    if (group[d] < groups[d].size()) {
      stuck += started[d] != 0 ? " (a posted group waits for its peers)" : " (a group waits for the op before it)";
    }
  }
  if (!stuck.empty()) return Error{"NCCL point-to-point groups would deadlock: " + stuck};
  return {};
}

std::vector<std::int32_t> deviceOrder(const Plan& plan, int device) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    if (plan.ops[i].device == device) out.push_back(static_cast<std::int32_t>(i));
  }
  return out;
}

namespace {

// The plan fields compileProgram relies on before it indexes anything: devices, ops, the
// structure checks and, per virtual stage, its id, component and layer range.
Status checkCompilable(const Plan& plan) {
  if (plan.config.devices < 1)
    return Error{"/config/devices: " + std::to_string(plan.config.devices) + " devices (expected at least 1)"};
  if (plan.ops.empty()) return Error{"/ops: the plan has no ops to execute"};
  PS_RETURN_IF_ERROR(validatePlanStructure(plan));
  for (std::size_t i = 0; i < plan.virtualStages.size(); ++i) {
    const VirtualStage& vs = plan.virtualStages[i];
    if (vs.id != static_cast<int>(i)) {
      return Error{"/virtual_stages/" + std::to_string(i) + "/id: " + std::to_string(vs.id) + " (expected " +
                   std::to_string(i) + ": virtual stages are listed in id order)"};
    }
    if (!inRange(plan.model.components, vs.component)) {
      return Error{"/virtual_stages/" + std::to_string(i) + "/component: not a component of the embedded model"};
    }
    const auto layers = static_cast<int>(plan.model.component(vs.component).layers.size());
    if (vs.firstLayer < 0 || vs.lastLayer < vs.firstLayer || vs.lastLayer >= layers) {
      return Error{"/virtual_stages/" + std::to_string(i) + ": layers " + std::to_string(vs.firstLayer) + ".." +
                   std::to_string(vs.lastLayer) + " are not a range of the component's " + std::to_string(layers) +
                   " layers"};
    }
  }
  return {};
}

// One run of compileProgram over a checked plan, its phases in the order compile calls them:
// index the ops (indexOps), one step per op with its data flow and buffers (addStep), the
// dependencies beyond the data flow (addDerivedDependencies), the per-device programs
// (assembleDevices) and the abstract run that proves them free of deadlock (abstractRun).
class ProgramCompiler {
 public:
  explicit ProgramCompiler(const Plan& plan)
      : m_plan(plan),
        m_devices(plan.config.devices),
        m_costs(stageCosts(plan)),
        m_chain(stageNeighbours(plan)),
        m_samplesPerMb(static_cast<double>(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch))) {}
  Expected<Program> compile();

 private:
  Status indexOps();
  std::int32_t find(OpKind kind, int stage, int microbatch) const {
    auto it = m_unique.find({static_cast<int>(kind), stage, microbatch});
    return it == m_unique.end() ? -1 : it->second;
  }
  std::int32_t newBuffer(int stage, int microbatch, int part) {
    const auto id = static_cast<std::int32_t>(m_program.bufferCount++);
    m_bufferOf[{stage, microbatch, part}] = id;
    return id;
  }
  Status depend(std::int32_t consumer, std::int32_t producer, std::int64_t sizeBytes);
  Status addStep(std::int32_t idx);
  Status addForward(std::int32_t idx, Step& s, int prev, std::int64_t act, std::int64_t wgrad);
  Status addBackward(std::int32_t idx, Step& s, int next, std::int64_t act, std::int64_t wgrad);
  Status addWeight(std::int32_t idx, Step& s, std::int64_t wgrad);
  Status addFrozen(std::int32_t idx, Step& s, int prev, std::int64_t act, double fraction);
  Status addDerivedDependencies();
  void assembleDevices();
  Status abstractRun(IdVector<std::int64_t>& pass) const;

  const Plan& m_plan;
  const int m_devices;
  const IdVector<StageCosts> m_costs;  ///< by virtual stage
  const StageNeighbours m_chain;
  const double m_samplesPerMb;
  // Position of every op in its device's order, and the unique producers looked up by key.
  IdVector<std::int32_t> m_position;
  std::map<std::tuple<int, int, int>, std::int32_t> m_unique;         // (kind, stage, microbatch) for F, B, BW, W, S
  std::map<std::pair<int, int>, std::vector<std::int32_t>> m_frozen;  // (stage, microbatch) → N ops in order
  std::map<std::pair<int, int>, std::size_t> m_frozenSeen;            // N ops of (stage, microbatch) handled so far
  Program m_program;
  IdVector<Step> m_steps;  ///< by op, until assembleDevices moves them to their device
  // Buffers live per (stage, microbatch, part): part 0 = activations freed by B, part 1 = the
  // weight-gradient share kept until W (docs/formats.md activation convention), part 2 = S's output.
  std::map<std::tuple<int, int, int>, std::int32_t> m_bufferOf;
  std::vector<Transfer> m_endReceives;
};

Status ProgramCompiler::indexOps() {
  // Sequence chunks (Seq1F1B) cost a share of a microbatch each, which the synthetic workload
  // (one size per virtual stage) does not model: such plans are planned, not run.
  if (m_plan.config.seqSplits > 1) {
    return Error{"/config/seq_splits: " + std::to_string(m_plan.config.seqSplits) +
                 " sequence chunks per microbatch; the executor runs whole microbatches (expected a plan without "
                 "--seq-splits)"};
  }
  m_position.assign(m_plan.ops.size(), 0);
  IdVector<std::int32_t> counter(m_devices, 0);
  for (std::size_t i = 0; i < m_plan.ops.size(); ++i) {
    const Op& op = m_plan.ops[i];
    const auto idx = static_cast<std::int32_t>(i);
    if (static_cast<int>(op.kind) >= kOpKindCount) {
      return Error{opWhere(idx) + "/kind: unknown op kind " + std::to_string(static_cast<int>(op.kind))};
    }
    if (!(op.endMs >= op.startMs) || !std::isfinite(op.startMs) || !std::isfinite(op.endMs)) {
      return Error{opWhere(idx) + ": end_ms before start_ms (expected a non-negative duration)"};
    }
    if (isHostCopy(op.kind)) {
      // Offloading needs a host-copy stream beside the compute lane, which the executor's one
      // lane per device does not have.
      return Error{opWhere(idx) + ": " + opName(op) +
                   " is an activation copy to or from host memory, which the executor does not run (expected a plan "
                   "without offloading: --offload-ratio 0)"};
    }
    m_position[idx] = counter[op.device]++;
    const bool trainable = m_plan.model.component(m_plan.stage(op.virtualStage).component).trainable;
    const bool backward = op.kind == OpKind::B || op.kind == OpKind::W || op.kind == OpKind::BW;
    if (backward && !trainable) {
      return Error{opWhere(idx) + ": " + opName(op) + " is a backward op on a frozen component (expected N ops only)"};
    }
    if (op.kind == OpKind::N) {
      m_frozen[{op.virtualStage, op.microbatch}].push_back(idx);
    } else if (op.kind != OpKind::OPT && op.kind != OpKind::T) {
      const auto key = std::make_tuple(static_cast<int>(op.kind == OpKind::BW ? OpKind::B : op.kind), op.virtualStage,
                                       op.microbatch);
      if (!m_unique.emplace(key, idx).second) {
        return Error{opWhere(idx) + ": " + opName(op) + " appears twice (first at " + opWhere(m_unique[key]) + ")"};
      }
    }
  }
  return {};
}

// A dependency on an op of the same device is honoured by the device order; on another
// device it becomes a transfer.
Status ProgramCompiler::depend(std::int32_t consumer, std::int32_t producer, std::int64_t sizeBytes) {
  const Op& c = m_plan.op(consumer);
  const Op& p = m_plan.op(producer);
  if (p.device == c.device) {
    if (m_position[producer] >= m_position[consumer]) {
      return Error{opWhere(consumer) + ": " + opName(c) + " runs before " + opName(p) + " (" + opWhere(producer) +
                   ") on device " + std::to_string(c.device) + ", which it needs"};
    }
    return {};
  }
  Transfer t{producer, consumer, p.device, c.device, std::max<std::int64_t>(0, sizeBytes)};
  m_steps[consumer].receives.push_back(t);
  m_steps[producer].sends.push_back(t);
  ++m_program.transferCount;
  return {};
}

// --- one step per op: data flow and buffers ---

Status ProgramCompiler::addStep(std::int32_t idx) {
  const Op& op = m_plan.op(idx);
  const auto stage = static_cast<std::size_t>(op.virtualStage);
  const StageCosts& cost = m_costs[op.virtualStage];
  const double fraction = op.samples > 0 ? static_cast<double>(op.samples) / m_samplesPerMb : 1.0;
  Step& s = m_steps[idx];
  s.opIndex = idx;
  s.device = op.device;
  s.virtualStage = op.virtualStage;
  s.kind = op.kind;
  s.microbatch = op.microbatch;
  s.samples = op.samples;
  s.plannedMs = op.durationMs();
  const std::int64_t act = scaled(cost.activationBytes, fraction);
  const std::int64_t wgrad = std::min(act, scaled(cost.weightGradBytes, fraction));
  switch (op.kind) {
    case OpKind::F:
      return addForward(idx, s, m_chain.previous[stage], act, wgrad);
    case OpKind::B:
    case OpKind::BW:
      return addBackward(idx, s, m_chain.next[stage], act, wgrad);
    case OpKind::W:
      return addWeight(idx, s, wgrad);
    case OpKind::N:
      return addFrozen(idx, s, m_chain.previous[stage], act, fraction);
    case OpKind::S:
      s.allocate.push_back({newBuffer(op.virtualStage, op.microbatch, 2), act});
      break;
    case OpKind::T:
      if (auto it = m_bufferOf.find({op.virtualStage, op.microbatch, 2}); it != m_bufferOf.end()) {
        s.release.push_back({it->second, act});
      }
      break;
    case OpKind::OPT:
      m_program.perDevice[op.device].hasOptimizerStep = true;
      break;
    case OpKind::D2H:
    case OpKind::H2D:
      break;  // refused by indexOps
  }
  return {};
}

Status ProgramCompiler::addForward(std::int32_t idx, Step& s, int prev, std::int64_t act, std::int64_t wgrad) {
  const Op& op = m_plan.op(idx);
  Status st;
  if (prev >= 0) {
    const std::int32_t producer = find(OpKind::F, prev, op.microbatch);
    if (producer < 0) {
      return Error{opWhere(idx) + ": " + opName(op) + " needs the F of virtual stage " + std::to_string(prev) +
                   " for microbatch " + std::to_string(op.microbatch) + ", which the plan does not contain"};
    }
    st = depend(idx, producer, m_costs[prev].outputBytes);
  }
  s.allocate.push_back({newBuffer(op.virtualStage, op.microbatch, 0), act - wgrad});
  s.allocate.push_back({newBuffer(op.virtualStage, op.microbatch, 1), wgrad});
  return st;
}

Status ProgramCompiler::addBackward(std::int32_t idx, Step& s, int next, std::int64_t act, std::int64_t wgrad) {
  const Op& op = m_plan.op(idx);
  const std::int32_t forward = find(OpKind::F, op.virtualStage, op.microbatch);
  if (forward < 0) return Error{opWhere(idx) + ": " + opName(op) + " has no F in the plan"};
  PS_RETURN_IF_ERROR(depend(idx, forward, 0));
  if (next >= 0) {
    const std::int32_t producer = find(OpKind::B, next, op.microbatch);
    if (producer < 0) {
      return Error{opWhere(idx) + ": " + opName(op) + " needs the backward of virtual stage " + std::to_string(next) +
                   " for microbatch " + std::to_string(op.microbatch) + ", which the plan does not contain"};
    }
    if (auto st = depend(idx, producer, m_costs[op.virtualStage].outputBytes); !st) {
      return st.error();
    }
  }
  s.release.push_back({m_bufferOf.at({op.virtualStage, op.microbatch, 0}), act - wgrad});
  if (op.kind == OpKind::BW) s.release.push_back({m_bufferOf.at({op.virtualStage, op.microbatch, 1}), wgrad});
  return {};
}

Status ProgramCompiler::addWeight(std::int32_t idx, Step& s, std::int64_t wgrad) {
  const Op& op = m_plan.op(idx);
  const std::int32_t b = find(OpKind::B, op.virtualStage, op.microbatch);
  if (b < 0 || m_plan.op(b).kind != OpKind::B) {
    return Error{opWhere(idx) + ": " + opName(op) + " has no B in the plan (a W follows a split B)"};
  }
  PS_RETURN_IF_ERROR(depend(idx, b, 0));
  s.release.push_back({m_bufferOf.at({op.virtualStage, op.microbatch, 1}), wgrad});
  return {};
}

// Partial batches: the j-th N op of a (stage, microbatch) covers samples up to its
// cumulative count; it needs the first producer N op whose cumulative count reaches it.
Status ProgramCompiler::addFrozen(std::int32_t idx, Step& s, int prev, std::int64_t act, double fraction) {
  const Op& op = m_plan.op(idx);
  auto samplesOf = [&](std::int32_t i) {
    const Op& o = m_plan.op(i);
    return o.samples > 0 ? o.samples : m_samplesPerMb;
  };
  const auto key = std::make_pair(op.virtualStage, op.microbatch);
  const auto& mine = m_frozen[key];
  const std::size_t j = m_frozenSeen[key]++;
  double need = 0;
  for (std::size_t k = 0; k <= j; ++k) need += samplesOf(mine[k]);
  Status st;
  if (prev >= 0) {
    std::int32_t producer = -1;
    double have = 0;
    if (auto it = m_frozen.find({prev, op.microbatch}); it != m_frozen.end()) {
      for (std::int32_t p : it->second) {
        have += samplesOf(p);
        if (have + 1e-9 >= need) {
          producer = p;
          break;
        }
      }
    }
    if (producer < 0) {
      return Error{opWhere(idx) + ": " + opName(op) + " needs " + std::to_string(static_cast<long long>(need)) +
                   " samples of virtual stage " + std::to_string(prev) + ", which its N ops do not cover"};
    }
    st = depend(idx, producer, scaled(m_costs[prev].outputBytes, fraction));
  }
  const auto temp = static_cast<std::int32_t>(m_program.bufferCount++);
  s.allocate.push_back({temp, act});
  s.release.push_back({temp, act});
  return st;
}

// --- dependencies beyond the data flow ---

// Derived exactly as the planner's simulator derives them; frozen outputs handed to the
// next iteration become end-of-iteration receives.
Status ProgramCompiler::addDerivedDependencies() {
  std::vector<std::vector<std::int32_t>> laneOp;
  const auto lanes = planLanes(m_plan, &laneOp);
  auto planIndex = [&](const OpRef& r) -> std::int32_t {
    if (!inRange(laneOp, r.device)) return -1;
    const auto& ops = laneOp[static_cast<std::size_t>(r.device)];
    return inRange(ops, r.index) ? ops[static_cast<std::size_t>(r.index)] : -1;
  };
  for (const OpDependency& dep : derivedDependencies(m_plan, lanes)) {
    const std::int32_t producer = planIndex(dep.from);
    const std::int32_t consumer = planIndex(dep.to);
    if (producer < 0 || consumer < 0) continue;
    PS_RETURN_IF_ERROR(depend(consumer, producer, dep.bytes));
  }
  for (const FrozenHandoff& h : crossIterationFrozenOutputs(m_plan, lanes)) {
    const std::int32_t producer = planIndex(h.producer);
    if (producer < 0 || h.consumerDevice < 0 || h.consumerDevice >= m_devices) continue;
    const Transfer t{producer, -1 - h.consumerDevice, m_plan.op(producer).device, h.consumerDevice,
                     std::max<std::int64_t>(0, h.bytes)};
    m_steps[producer].sends.push_back(t);
    m_endReceives.push_back(t);
    ++m_program.transferCount;
  }
  return {};
}

// --- per-device programs ---

void ProgramCompiler::assembleDevices() {
  const auto staticBytes = staticMemoryPerDevice(m_plan, m_costs.values());
  for (int d = 0; d < m_devices; ++d) {
    DeviceProgram& dp = m_program.perDevice[d];
    dp.staticBytes = staticBytes[static_cast<std::size_t>(d)];
    for (const VirtualStage& vs : m_plan.virtualStages) {
      if (vs.device == d) dp.trainableParameters += m_costs[vs.id].trainableParameters;
    }
    std::int64_t live = 0;
    for (std::int32_t idx : deviceOrder(m_plan, d)) {
      Step& s = m_steps[idx];
      for (const auto& b : s.allocate) live += b.sizeBytes;
      dp.peakActivationBytes = std::max(dp.peakActivationBytes, live);
      for (const auto& b : s.release) live -= b.sizeBytes;
      dp.steps.push_back(std::move(s));
    }
    m_program.stepCount += static_cast<std::int64_t>(dp.steps.size());
    for (const Transfer& t : m_endReceives) {
      if (t.toDevice == d) dp.endReceives.push_back(t);
    }
  }
}

// --- abstract run ---

// Abstract run with buffered sends: every device advances while the data its next op
// needs has been produced. Anything left waiting is a cycle of waits (a deadlock). `pass`
// gets when the abstract run executed each op.
Status ProgramCompiler::abstractRun(IdVector<std::int64_t>& pass) const {
  IdVector<char> done(m_plan.ops.size(), 0);
  pass.assign(m_plan.ops.size(), 0);
  std::int64_t passed = 0;
  const auto& devices = m_program.perDevice;
  IdVector<std::size_t> at(devices.size(), 0);  // next step of each device
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < devices.size(); ++d) {
      const auto& ds = devices[d].steps;
      auto& pos = at[d];
      while (pos < ds.size()) {
        const Step& s = ds[pos];
        const bool ready = std::all_of(s.receives.begin(), s.receives.end(),
                                       [&](const Transfer& t) { return done[t.producerOp] != 0; });
        if (!ready) break;
        done[s.opIndex] = 1;
        pass[s.opIndex] = passed++;
        ++pos;
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int d = 0; d < devices.size(); ++d) {
    const auto& ds = devices[d].steps;
    const auto pos = at[d];
    if (pos >= ds.size()) continue;
    const Step& s = ds[pos];
    for (const Transfer& t : s.receives) {
      if (done[t.producerOp] != 0) continue;
      stuck += (stuck.empty() ? "" : "; ") + std::string("device ") + std::to_string(d) + " at " + opWhere(s.opIndex) +
               " (" + opName(m_plan.op(s.opIndex)) + ") waits for " + opWhere(t.producerOp) + " on device " +
               std::to_string(t.fromDevice);
      break;
    }
  }
  if (!stuck.empty()) return Error{"/ops: the per-device orders wait on each other in a cycle: " + stuck};
  return {};
}

Expected<Program> ProgramCompiler::compile() {
  PS_RETURN_IF_ERROR(indexOps());
  m_program.devices = m_devices;
  m_program.perDevice.assign(m_devices, {});
  m_steps.resize(m_plan.ops.size());
  for (std::int32_t idx = 0; idx < m_steps.size(); ++idx) {
    PS_RETURN_IF_ERROR(addStep(idx));
  }
  PS_RETURN_IF_ERROR(addDerivedDependencies());
  assembleDevices();
  IdVector<std::int64_t> pass;
  PS_RETURN_IF_ERROR(abstractRun(pass));
  buildRendezvousGroups(m_program, pass);
  return std::move(m_program);
}

}  // namespace

Expected<Program> compileProgram(const Plan& plan) {
  PS_RETURN_IF_ERROR(checkCompilable(plan));
  return ProgramCompiler(plan).compile();
}

}  // namespace pipestudio::exec
