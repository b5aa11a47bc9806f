// Discrete-event, dependency-driven simulator (DESIGN.md §3). Every device runs its ops in
// the given order; an op starts when the device is free and all its inputs have arrived.
// Cross-device inputs travel on the directed link (from, to): bytes / bandwidth + latency,
// transfers on one link served first-come first-served (they serialise). Everything is flat
// arrays indexed by op number; the only structure in the hot loop is a winner tree over devices.
#include "pipestudio/planner/Simulator.hpp"
#include "pipestudio/plan/Costs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "sim/DeviceWinnerTree.hpp"

namespace pipestudio {
namespace {

constexpr std::int32_t kNone = -1;

std::string opName(OpKind kind, int stage, int microbatch) {
  return std::string(opKindName(kind)) + "(stage " + std::to_string(stage) + ", microbatch " +
         std::to_string(microbatch) + ")";
}

// An op's duration for a whole microbatch (partial batches scale it by their share). The
// vocabulary passes split the shards' work by the plan's barrier count (PlanConfig::
// vocabBarriers): with one barrier S also computes the input-gradient partial sums.
double baseDurationMs(OpKind kind, const StageCosts& c, int vocabBarriers) {
  switch (kind) {
    case OpKind::F: case OpKind::N: return c.forwardMs;
    case OpKind::S: return vocabBarriers == 1 ? c.forwardMs + c.backwardInputMs : c.forwardMs;
    case OpKind::B: return c.backwardInputMs;
    case OpKind::W: return c.backwardWeightMs;
    case OpKind::T: return vocabBarriers == 1 ? c.backwardWeightMs : c.backwardInputMs + c.backwardWeightMs;
    case OpKind::BW: return c.backwardInputMs + c.backwardWeightMs;
    case OpKind::OPT: return 0;
  }
  return 0;
}

// The collective share of an op's duration (TP/CP/EP/ZeRO-3 inside the pass): what an
// overlapped F&B group can hide under the other op's computation.
double baseCommMs(OpKind kind, const StageCosts& c) {
  switch (kind) {
    case OpKind::F: return c.forwardCommMs;
    case OpKind::B: return c.backwardInputCommMs;
    case OpKind::W: return c.backwardWeightCommMs;
    case OpKind::BW: return c.backwardInputCommMs + c.backwardWeightCommMs;
    default: return 0;
  }
}

// Blockwise ZeRO-3 (PlanConfig::unitMicrobatches): per op, how much of its gather (or W's
// gradient reduce-scatter) it skips because it continues a run of its stage's passes in the
// same direction on its device: F after F, B/BW after B/BW of the same stage (W, N, S, T in
// between neither need nor drop the gathered parameters), W after W of the same stage
// (gradients accumulate over the run, one reduce-scatter). Empty when the plan has no runs.
std::vector<double> blockwiseGatherSavingsMs(const Plan& shell, const ScheduleSkeleton& skeleton,
                                             const std::vector<StageCosts>& costs) {
  std::vector<double> out;
  if (shell.config.unitMicrobatches <= 0 || shell.config.parallel.zeroStage < 3) return out;
  for (const auto& lane : skeleton.devices) {
    int lastF = -1, lastB = -1, lastW = -1;
    OpKind lastParamKind = OpKind::OPT;
    for (const OrderedOp& o : lane) {
      double saved = 0;
      const bool known = o.virtualStage >= 0 && static_cast<std::size_t>(o.virtualStage) < costs.size();
      const StageCosts* c = known ? &costs[static_cast<std::size_t>(o.virtualStage)] : nullptr;
      switch (o.kind) {
        case OpKind::F:
          if (c && lastParamKind == OpKind::F && lastF == o.virtualStage) saved = c->zeroGatherForwardMs;
          lastParamKind = OpKind::F;
          lastF = o.virtualStage;
          break;
        case OpKind::B:
        case OpKind::BW:
          if (c && lastParamKind == OpKind::B && lastB == o.virtualStage) {
            saved = c->zeroGatherBackwardMs;
            if (o.kind == OpKind::BW) saved += c->zeroScatterWeightMs;
          }
          lastParamKind = OpKind::B;
          lastB = o.virtualStage;
          break;
        case OpKind::W:
          if (c && lastW == o.virtualStage) saved = c->zeroScatterWeightMs;
          lastW = o.virtualStage;
          break;
        default:
          break;
      }
      if (o.samples > 0) saved = 0;  // partial batches are frozen work, never ZeRO-3-sharded passes
      out.push_back(saved);
    }
  }
  return out;
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

double passDurationMs(OpKind kind, const StageCosts& costs, int vocabBarriers) {
  return baseDurationMs(kind, costs, vocabBarriers);
}

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
      e.sendMs = deviceTransferMs(shell.cluster, shell.config, shell.virtualStages[i].device,
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
  shell.ops.reserve(static_cast<std::size_t>(nOps));  // appended in index order below
  const auto table = static_cast<std::size_t>(nStages) * static_cast<std::size_t>(m);
  std::vector<std::int32_t> fIdx(table, kNone), bIdx(table, kNone), wIdx(table, kNone), nIdx(table, kNone);
  // Whether bIdx names a fused BW (a W needs a B): a small table instead of a random read of the op.
  std::vector<char> bIsFused(table, 0);
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
      Op& op = shell.ops.emplace_back();  // index idx
      op.device = d;
      op.virtualStage = o.virtualStage;
      op.kind = o.kind;
      op.microbatch = o.microbatch;
      op.samples = o.samples;
      double dur = baseDurationMs(o.kind, costs[static_cast<std::size_t>(o.virtualStage)], shell.config.vocabBarriers);
      if (o.samples > 0) dur *= static_cast<double>(o.samples) / samplesPerMb;
      if (!std::isfinite(dur)) {
        return Error{where(d, i) + ": " + opName(o.kind, o.virtualStage, o.microbatch) + " has no finite duration"};
      }
      const std::size_t key = static_cast<std::size_t>(o.virtualStage) * static_cast<std::size_t>(m) +
                              static_cast<std::size_t>(o.microbatch);
      std::int32_t* slot = nullptr;
      switch (o.kind) {
        case OpKind::F: slot = &fIdx[key]; break;
        case OpKind::B: slot = &bIdx[key]; break;
        case OpKind::BW: slot = &bIdx[key]; bIsFused[key] = 1; break;
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
  // B/BW: its own F, then the next stage's B; W: its B; N: the previous stage's N), found
  // from the (stage, microbatch) tables in that order. They are looked up again when the
  // consumer lists are filled (and for a deadlock message) instead of being stored: the
  // lookups are cheap, an array of them is 16 bytes per op. Extra dependencies follow, in
  // skeleton order.
  struct Pred {
    std::int32_t from;
    std::int32_t fromStage;
  };
  auto stageDevice = [&](std::int32_t stage) { return shell.virtualStages[static_cast<std::size_t>(stage)].device; };
  auto missing = [&](std::int32_t consumer, OpKind kind, std::int32_t stage, std::int32_t mb) {
    const Op& c = shell.ops[static_cast<std::size_t>(consumer)];
    return Error{"device " + std::to_string(c.device) + ": " + opName(c.kind, c.virtualStage, c.microbatch) +
                 " needs " + opName(kind, stage, mb) + ", which no device runs"};
  };
  const auto m_ = static_cast<std::size_t>(m);
  // Fills slot[0..1] with op i's producers (kNone where there is none); an error when one
  // that must exist does not.
  auto producers = [&](std::int32_t i, Pred* slot) -> std::optional<Error> {
    slot[0] = slot[1] = Pred{kNone, kNone};
    const Op& op = shell.ops[static_cast<std::size_t>(i)];
    const auto s = static_cast<std::size_t>(op.virtualStage);
    const auto mb = static_cast<std::size_t>(op.microbatch);
    switch (op.kind) {
      case OpKind::F:
        if (prevStage[s] != kNone) {
          const std::int32_t src = fIdx[static_cast<std::size_t>(prevStage[s]) * m_ + mb];
          if (src == kNone) return missing(i, OpKind::F, prevStage[s], op.microbatch);
          slot[0] = {src, prevStage[s]};
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
        if (src == kNone || bIsFused[s * m_ + mb]) {
          return missing(i, OpKind::B, op.virtualStage, op.microbatch);
        }
        slot[0] = {src, op.virtualStage};
        break;
      }
      case OpKind::N:
        if (prevStage[s] != kNone) {
          const std::int32_t src = nIdx[static_cast<std::size_t>(prevStage[s]) * m_ + mb];
          if (src != kNone) slot[0] = {src, prevStage[s]};
        }
        break;
      default:
        break;
    }
    return std::nullopt;
  };
  // Per op: producers not yet completed and the latest arrival of an input, side by side
  // (the hot loop touches both for a consumer). Out-degree per producer goes into firstOut
  // (CSR offsets below); the number of transfers is counted while the producers are found.
  // A producer earlier in the consumer's own device order has always completed by the time
  // the consumer is next on that device (a device runs its order one op at a time), and
  // brings no transfer: such an edge is neither counted nor listed. A producer later in the
  // same order (a deadlock) still is.
  auto implied = [](std::int32_t from, std::int32_t to, bool sameDevice) { return sameDevice && from < to; };
  struct OpState {
    double readyMs = 0;
    std::int32_t pending = 0;
  };
  std::vector<OpState> state(static_cast<std::size_t>(nOps));
  std::vector<std::int32_t> firstOut(static_cast<std::size_t>(nOps) + 1, 0);
  std::size_t crossEdges = 0;
  for (std::int32_t i = 0; i < nOps; ++i) {
    Pred slot[2];
    if (auto err = producers(i, slot)) return std::move(*err);
    const int device = shell.ops[static_cast<std::size_t>(i)].device;
    for (const Pred& pr : slot) {
      if (pr.from == kNone) continue;
      const bool sameDevice = stageDevice(pr.fromStage) == device;
      if (!sameDevice) ++crossEdges;
      if (implied(pr.from, i, sameDevice)) continue;
      ++firstOut[static_cast<std::size_t>(pr.from)];
      ++state[static_cast<std::size_t>(i)].pending;
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

  // CSR of consumers per producer, in the order the edges were listed above: per producer,
  // consumers by op index, extra dependencies last. That order fixes the order in which one
  // producer's transfers queue on a link. An entry is the consumer and its edge class: what
  // the hot loop needs of an edge (consumer device, transfer time, bytes) depends only on
  // the producing stage and whether the consumer is that stage, its chain successor or its
  // chain predecessor, so data-flow edges share 3 classes per stage (ClusterSpec::transferMs
  // is pure); every extra dependency gets a class of its own.
  struct Out {
    std::int32_t to;
    std::int32_t edgeClass;
  };
  struct EdgeClass {
    std::int32_t toDevice = kNone;
    double transferMs = 0;
    std::int64_t bytes = 0;
  };
  std::vector<EdgeClass> classes(static_cast<std::size_t>(nStages) * 3);
  auto dataFlowClass = [&](std::int32_t fromStage, std::int32_t toStage) -> std::int32_t {
    const auto fs = static_cast<std::size_t>(fromStage);
    int relation = -1;
    if (toStage == fromStage) relation = 0;
    else if (toStage == nextStage[fs]) relation = 1;
    else if (toStage == prevStage[fs]) relation = 2;
    std::size_t c = 0;
    if (relation >= 0) {
      c = fs * 3 + static_cast<std::size_t>(relation);
      if (classes[c].toDevice != kNone) return static_cast<std::int32_t>(c);
    } else {
      c = classes.size();  // not a chain neighbour (not produced by stageNeighbours): its own class
      classes.emplace_back();
    }
    const int fromDevice = stageDevice(fromStage);
    const int toDevice = stageDevice(toStage);
    EdgeClass& e = classes[c];
    e.toDevice = toDevice;
    e.bytes = edgeBytes(fromStage, toStage);
    e.transferMs = deviceTransferMs(shell.cluster, shell.config, fromDevice, toDevice, static_cast<double>(e.bytes));
    return static_cast<std::int32_t>(c);
  };
  for (const Edge& e : extra) {
    const bool sameDevice = shell.ops[static_cast<std::size_t>(e.from)].device == shell.ops[static_cast<std::size_t>(e.to)].device;
    if (!sameDevice) ++crossEdges;
    if (implied(e.from, e.to, sameDevice)) continue;
    ++firstOut[static_cast<std::size_t>(e.from)];
    ++state[static_cast<std::size_t>(e.to)].pending;
  }
  // Inclusive prefix sums: firstOut[x] is the end of x's consumers; filling backwards with
  // --firstOut[x] leaves it at their start, so firstOut[x + 1] is their end.
  for (std::int32_t i = 1; i < nOps; ++i) firstOut[static_cast<std::size_t>(i)] += firstOut[static_cast<std::size_t>(i) - 1];
  if (nOps > 0) firstOut[static_cast<std::size_t>(nOps)] = firstOut[static_cast<std::size_t>(nOps) - 1];
  // Every slot is written below: no value-initialisation of this (large) array.
  const auto outs = std::make_unique_for_overwrite<Out[]>(static_cast<std::size_t>(firstOut.back()));
  for (auto e = extra.rbegin(); e != extra.rend(); ++e) {
    const int fromDevice = shell.ops[static_cast<std::size_t>(e->from)].device;
    const int toDevice = shell.ops[static_cast<std::size_t>(e->to)].device;
    if (implied(e->from, e->to, fromDevice == toDevice)) continue;
    EdgeClass c;
    c.toDevice = toDevice;
    c.bytes = e->bytes;
    c.transferMs = deviceTransferMs(shell.cluster, shell.config, fromDevice, toDevice, static_cast<double>(e->bytes));
    classes.push_back(c);
    outs[static_cast<std::size_t>(--firstOut[static_cast<std::size_t>(e->from)])] = {e->to, static_cast<std::int32_t>(classes.size() - 1)};
  }
  for (std::int32_t i = nOps - 1; i >= 0; --i) {
    Pred slot[2];
    (void)producers(i, slot);  // cannot fail: the same lookups succeeded above
    const Op& op = shell.ops[static_cast<std::size_t>(i)];
    for (int k = 1; k >= 0; --k) {
      const Pred& pr = slot[k];
      if (pr.from == kNone || implied(pr.from, i, stageDevice(pr.fromStage) == op.device)) continue;
      outs[static_cast<std::size_t>(--firstOut[static_cast<std::size_t>(pr.from)])] = {i, dataFlowClass(pr.fromStage, op.virtualStage)};
    }
  }

  // Duration of each op kind per stage (the expressions of the validation pass above, so
  // the values are the same bits); a partial batch scales it by its share of the samples.
  std::vector<double> kindDurationMs(static_cast<std::size_t>(nStages) * kOpKindCount, 0.0);
  for (std::int32_t s = 0; s < nStages; ++s) {
    for (int k = 0; k < kOpKindCount; ++k) {
      kindDurationMs[static_cast<std::size_t>(s) * kOpKindCount + static_cast<std::size_t>(k)] =
          baseDurationMs(static_cast<OpKind>(k), costs[static_cast<std::size_t>(s)], shell.config.vocabBarriers);
    }
  }
  const std::vector<double> gatherSavedMs = blockwiseGatherSavingsMs(shell, skeleton, costs);
  auto durationMs = [&](const Op& op, std::int32_t idx) {
    double dur = kindDurationMs[static_cast<std::size_t>(op.virtualStage) * kOpKindCount + static_cast<std::size_t>(op.kind)];
    if (op.samples > 0) dur *= static_cast<double>(op.samples) / samplesPerMb;
    if (!gatherSavedMs.empty()) dur = std::max(0.0, dur - gatherSavedMs[static_cast<std::size_t>(idx)]);
    return dur;
  };

  // Overlapped F&B groups (DualPipe): per op, the size of the group it leads (1: an op on its
  // own; 0: a later member of a group). A group starts when its device is free and every
  // member's inputs have arrived, and lasts max(Σ computation, Σ collectives) of its members
  // (the collectives of one hide under the computation of the other, DeepSeek-V3 §3.2.1). The
  // plan shows the members back to back, each with its share of that time in proportion to
  // its own duration (so a device's ops never overlap and busy/span keep their meaning); every
  // member's output leaves when the group ends.
  std::vector<std::int8_t> groupSize;
  if (shell.config.overlapForwardBackward) {
    const auto groups = overlappedGroups(shell, skeleton.devices);
    if (!groups.empty()) {
      groupSize.assign(static_cast<std::size_t>(nOps), 1);
      for (const OverlapGroup& g : groups) {
        const std::int32_t lead = offset[static_cast<std::size_t>(g.device)] + g.first;
        groupSize[static_cast<std::size_t>(lead)] = static_cast<std::int8_t>(g.size);
        for (std::int32_t k = 1; k < g.size; ++k) groupSize[static_cast<std::size_t>(lead + k)] = 0;
      }
    }
  }
  auto commMs = [&](const Op& op) { return baseCommMs(op.kind, costs[static_cast<std::size_t>(op.virtualStage)]); };

  // Event loop over op completions only. An op starts when its device is free and every
  // input has arrived: start = max(device free, latest arrival). Arrival times are known as
  // soon as the producer completes (its transfer queues on the link then), so no arrival
  // events are needed: an op whose producers have all completed starts at that maximum,
  // possibly later than the current event. Transfers on a link queue in the order their
  // producers complete, which is the sending device's op order.
  std::vector<std::int32_t> position(static_cast<std::size_t>(p), 0);
  std::vector<char> busy(static_cast<std::size_t>(p), 0);
  std::vector<double> deviceFreeMs(static_cast<std::size_t>(p), 0.0);
  std::vector<double> linkFreeMs(static_cast<std::size_t>(p) * static_cast<std::size_t>(p), 0.0);
  DeviceWinnerTree running(p);
  if (options.recordComms) shell.comms.reserve(crossEdges);

  // Starts device d's next op if it is idle and every producer of that op has completed;
  // returns whether it did.
  // A group's members, timed together (see groupSize); returns the group's end.
  auto startGroup = [&](std::int32_t lead, std::int32_t size, double readyMs) {
    double computeMs = 0, collectiveMs = 0, ownMs = 0;
    for (std::int32_t k = 0; k < size; ++k) {
      const Op& member = shell.ops[static_cast<std::size_t>(lead + k)];
      const double dur = durationMs(member, lead + k);
      const double comm = std::min(dur, commMs(member));
      ownMs += dur;
      computeMs += dur - comm;
      collectiveMs += comm;
    }
    const double spanMs = std::max(computeMs, collectiveMs);
    double at = readyMs;
    for (std::int32_t k = 0; k < size; ++k) {
      Op& member = shell.ops[static_cast<std::size_t>(lead + k)];
      member.startMs = at;
      at += ownMs > 0 ? spanMs * durationMs(member, lead + k) / ownMs : 0.0;
      member.endMs = k + 1 == size ? readyMs + spanMs : at;
    }
    return readyMs + spanMs;
  };
  auto tryStart = [&](int d) {
    const auto du = static_cast<std::size_t>(d);
    if (busy[du]) return false;
    const std::int32_t idx = offset[du] + position[du];
    if (idx >= offset[du + 1]) return false;
    const OpState& st = state[static_cast<std::size_t>(idx)];
    if (st.pending != 0) return false;
    Op& op = shell.ops[static_cast<std::size_t>(idx)];
    const std::int32_t size = groupSize.empty() ? 1 : groupSize[static_cast<std::size_t>(idx)];
    if (size > 1) {
      double readyMs = std::max(deviceFreeMs[du], st.readyMs);
      for (std::int32_t k = 1; k < size; ++k) {
        const OpState& member = state[static_cast<std::size_t>(idx + k)];
        if (member.pending != 0) return false;
        readyMs = std::max(readyMs, member.readyMs);
      }
      busy[du] = 1;
      running.set(d, startGroup(idx, size, readyMs));
      return true;
    }
    op.startMs = std::max(deviceFreeMs[du], st.readyMs);
    op.endMs = op.startMs + durationMs(op, idx);
    busy[du] = 1;
    running.set(d, op.endMs);
    // Sixty-odd devices walk their orders side by side, too many streams for the hardware
    // prefetcher: fetch what this op's end and this device's next start will read.
    if (idx + 1 < offset[du + 1]) {
      const Op* next = &shell.ops[static_cast<std::size_t>(idx) + 1];
      __builtin_prefetch(next);
      __builtin_prefetch(reinterpret_cast<const char*>(next) + sizeof(Op) - 1);  // an Op may straddle two lines
      __builtin_prefetch(&state[static_cast<std::size_t>(idx) + 1]);
    }
    for (std::int32_t k = firstOut[static_cast<std::size_t>(idx)]; k < firstOut[static_cast<std::size_t>(idx) + 1]; ++k) {
      __builtin_prefetch(&state[static_cast<std::size_t>(outs[static_cast<std::size_t>(k)].to)]);
    }
    return true;
  };
  for (int d = 0; d < p; ++d) tryStart(d);
  std::int32_t completed = 0;
  for (int dev = running.top(); dev >= 0; dev = running.top()) {
    const auto du = static_cast<std::size_t>(dev);
    const double timeMs = running.keyMs(dev);
    busy[du] = 0;
    deviceFreeMs[du] = timeMs;
    const std::int32_t lead = offset[du] + position[du];
    const std::int32_t members = groupSize.empty() ? 1 : std::max<std::int32_t>(1, groupSize[static_cast<std::size_t>(lead)]);
    for (std::int32_t member = 0; member < members; ++member) {
    const std::int32_t code = lead + member;
    const Op& op = shell.ops[static_cast<std::size_t>(code)];
    ++completed;
    ++position[du];
    const Out* o = outs.get() + firstOut[static_cast<std::size_t>(code)];
    const Out* oEnd = outs.get() + firstOut[static_cast<std::size_t>(code) + 1];
    for (; o != oEnd; ++o) {
      OpState& consumer = state[static_cast<std::size_t>(o->to)];
      const EdgeClass& edge = classes[static_cast<std::size_t>(o->edgeClass)];
      if (edge.toDevice == dev) {
        // Same device, consumer earlier in this order: never runs (deadlock, reported below).
        --consumer.pending;
        continue;
      }
      const std::size_t link = du * static_cast<std::size_t>(p) + static_cast<std::size_t>(edge.toDevice);
      const double startMs = std::max(timeMs, linkFreeMs[link]);
      const double endMs = startMs + edge.transferMs;
      linkFreeMs[link] = endMs;
      if (options.recordComms) {
        // Fields written in place: a Comm built on the stack and copied cost a store-forwarding stall.
        Comm& c = shell.comms.emplace_back();
        c.fromDevice = dev;
        c.toDevice = edge.toDevice;
        c.microbatch = op.microbatch;
        c.kind = (op.kind == OpKind::B || op.kind == OpKind::BW || op.kind == OpKind::T) ? OpKind::B : OpKind::F;
        c.virtualStage = op.virtualStage;
        c.startMs = startMs;
        c.endMs = endMs;
        c.bytes = edge.bytes;
      }
      consumer.readyMs = std::max(consumer.readyMs, endMs);
      if (--consumer.pending == 0) tryStart(edge.toDevice);
    }
    }
    if (!tryStart(dev)) running.clear(dev);
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
      Pred slot[2];
      (void)producers(idx, slot);
      for (const Pred& pr : slot) waits.push_back({pr.from, idx, 0});
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
  // The checks validate, run and pipestudio-exec apply (core/plan): an edited plan that passes
  // them is one the simulator can time.
  if (auto st = validatePlanStructure(plan); !st) return st.error();
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
