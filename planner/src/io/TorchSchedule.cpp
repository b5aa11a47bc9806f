// torch.distributed.pipelining's schedule IR: the compute order of a plan, the checks of
// `_validate_schedule`, and the lowering `_PipelineScheduleRuntime._prepare_schedule_with_comms`
// applies to a compute-only order (torch/distributed/pipelining/schedules.py). The lowering is
// reproduced step for step, so a compute_comms CSV we write is the one PyTorch would dump.
#include "TorchSchedule.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Dependencies.hpp"

namespace pipestudio::torchpp {
namespace {

// Iteration order of a CPython set of small non-negative ints (Objects/setobject.c, 3.11+):
// open addressing with hash(i) = i, up to 9 linear probes then perturbed probing, a discarded
// key leaves a dummy, an insert reuses the last dummy met on its probe path, and the table
// grows to the next power of two above 4·used once fill·5 ≥ mask·3. `_add_unshard_reshard`
// iterates such a set when it evicts and when it reshards what is left, so the order of those
// RESHARD actions (and everything the round-robin lowering places after them) depends on it.
class PySmallIntSet {
 public:
  bool contains(int key) const { return find(key).has_value(); }
  void add(int key) {
    const std::size_t mask = m_slots.size() - 1;
    std::size_t i = hashOf(key) & mask;
    std::size_t perturb = hashOf(key);
    std::optional<std::size_t> freeSlot;
    for (;;) {
      const std::size_t probes = i + kLinearProbes <= mask ? kLinearProbes : 0;
      for (std::size_t p = 0; p <= probes; ++p) {
        Slot& s = m_slots[i + p];
        if (s.state == Empty) {
          if (freeSlot) {
            m_slots[*freeSlot] = {key, Active};
            ++m_used;
            return;
          }
          s = {key, Active};
          ++m_used;
          ++m_fill;
          if (m_fill * 5 >= mask * 3) resize(m_used * 4);
          return;
        }
        if (s.state == Active && s.key == key) return;
        if (s.state == Dummy) freeSlot = i + p;
      }
      perturb >>= kPerturbShift;
      i = (i * 5 + 1 + perturb) & mask;
    }
  }
  void discard(int key) {
    const std::optional<std::size_t> at = find(key);
    if (!at) return;
    m_slots[*at].state = Dummy;
    --m_used;
  }
  std::vector<int> items() const {
    std::vector<int> out;
    for (const Slot& s : m_slots) {
      if (s.state == Active) out.push_back(s.key);
    }
    return out;
  }

 private:
  enum State : std::uint8_t { Empty, Active, Dummy };
  struct Slot {
    int key = 0;
    State state = Empty;
  };
  static constexpr std::size_t kLinearProbes = 9;
  static constexpr int kPerturbShift = 5;

  // CPython's hash of a small non-negative int is the int itself.
  static std::size_t hashOf(int key) { return static_cast<std::size_t>(key); }

  // The slot that holds `key`, if any.
  std::optional<std::size_t> find(int key) const {
    const std::size_t mask = m_slots.size() - 1;
    std::size_t i = hashOf(key) & mask;
    std::size_t perturb = hashOf(key);
    for (;;) {
      const std::size_t probes = i + kLinearProbes <= mask ? kLinearProbes : 0;
      for (std::size_t p = 0; p <= probes; ++p) {
        const Slot& s = m_slots[i + p];
        if (s.state == Empty) return std::nullopt;
        if (s.state == Active && s.key == key) return i + p;
      }
      perturb >>= kPerturbShift;
      i = (i * 5 + 1 + perturb) & mask;
    }
  }
  void resize(std::size_t minUsed) {
    std::size_t size = 8;
    while (size <= minUsed) size <<= 1;
    std::vector<Slot> old(size);
    old.swap(m_slots);
    const std::size_t mask = size - 1;
    for (const Slot& e : old) {
      if (e.state != Active) continue;
      std::size_t i = hashOf(e.key) & mask;
      std::size_t perturb = hashOf(e.key);
      for (bool placed = false; !placed;) {
        const std::size_t probes = i + kLinearProbes <= mask ? kLinearProbes : 0;
        for (std::size_t p = 0; p <= probes && !placed; ++p) {
          if (m_slots[i + p].state == Empty) {
            m_slots[i + p] = e;
            placed = true;
          }
        }
        perturb >>= kPerturbShift;
        i = (i * 5 + 1 + perturb) & mask;
      }
    }
    m_fill = m_used;
  }

  std::vector<Slot> m_slots = std::vector<Slot>(8);
  std::size_t m_used = 0;
  std::size_t m_fill = 0;
};

// --- _add_unshard_reshard (max_active_stages = 3) ---
std::vector<Action> addUnshardReshard(const std::vector<Action>& compute) {
  constexpr std::size_t kMaxActiveStages = 3;
  std::vector<Action> out;
  out.reserve(compute.size() + 8);
  PySmallIntSet active;
  for (std::size_t i = 0; i < compute.size(); ++i) {
    // The next three distinct stages this rank computes on, in order.
    // An OVERLAP_F_B contributes both of its stages (so `next` may hold four).
    std::vector<int> next;
    const auto note = [&](int stage) {
      if (std::find(next.begin(), next.end(), stage) == next.end()) next.push_back(stage);
    };
    for (std::size_t j = i; j < compute.size() && next.size() < kMaxActiveStages; ++j) {
      if (compute[j].type == ActionType::OverlapFB) {
        for (const Action& a : compute[j].sub) note(a.stage);
      } else {
        note(compute[j].stage);
      }
    }
    std::vector<int> evict;
    for (int s : active.items()) {
      if (std::find(next.begin(), next.end(), s) == next.end()) evict.push_back(s);
    }
    std::vector<int> fetch;
    for (int s : next) {
      if (!active.contains(s)) fetch.push_back(s);
    }
    for (int s : evict) {
      active.discard(s);
      out.push_back({s, ActionType::Reshard, -1, {}});
    }
    for (int s : fetch) {
      active.add(s);
      out.push_back({s, ActionType::Unshard, -1, {}});
    }
    out.push_back(compute[i]);
  }
  for (int s : active.items()) {
    active.discard(s);
    out.push_back({s, ActionType::Reshard, -1, {}});
  }
  return out;
}

// --- _add_reduce_grad: after a stage's n-th W or B ---
std::vector<Action> addReduceGrad(const std::vector<Action>& actions, int microbatches) {
  std::vector<Action> out;
  out.reserve(actions.size() + 4);
  std::map<int, int> count;
  for (const Action& a : actions) {
    out.push_back(a);
    const auto leaf = [&](const Action& l) {
      if ((l.type == ActionType::W || l.type == ActionType::B) && ++count[l.stage] == microbatches) {
        out.push_back({l.stage, ActionType::ReduceGrad, -1, {}});
      }
    };
    if (a.type == ActionType::OverlapFB) {
      for (const Action& l : a.sub) leaf(l);
    } else {
      leaf(a);
    }
  }
  return out;
}

struct ActionLess {
  bool operator()(const Action& a, const Action& b) const {
    // Only leaf actions go into these sets (an OVERLAP_F_B is entered as its members).
    return std::tie(a.stage, a.type, a.microbatch) < std::tie(b.stage, b.type, b.microbatch);
  }
};

std::string describeType(ActionType t) {
  switch (t) {
    case ActionType::F:
      return "forward";
    case ActionType::I:
      return "input-gradient backward";
    case ActionType::W:
      return "weight-gradient backward";
    case ActionType::B:
      return "full backward";
    default:
      return typeName(t);
  }
}

}  // namespace

const char* typeName(ActionType type) {
  switch (type) {
    case ActionType::F:
      return "F";
    case ActionType::I:
      return "I";
    case ActionType::W:
      return "W";
    case ActionType::B:
      return "B";
    case ActionType::SendF:
      return "SEND_F";
    case ActionType::RecvF:
      return "RECV_F";
    case ActionType::SendB:
      return "SEND_B";
    case ActionType::RecvB:
      return "RECV_B";
    case ActionType::Unshard:
      return "UNSHARD";
    case ActionType::Reshard:
      return "RESHARD";
    case ActionType::ReduceGrad:
      return "REDUCE_GRAD";
    case ActionType::OverlapFB:
      return "OVERLAP_F_B";
  }
  return "?";
}

bool isCompute(ActionType type) {
  return type == ActionType::F || type == ActionType::I || type == ActionType::W || type == ActionType::B ||
         type == ActionType::OverlapFB;
}

std::string toString(const Action& a) {
  if (a.type == ActionType::OverlapFB) {
    std::string s = "(";
    for (std::size_t i = 0; i < a.sub.size(); ++i) s += (i > 0 ? ";" : "") + toString(a.sub[i]);
    return s + ")" + typeName(a.type);
  }
  std::string s = std::to_string(a.stage) + typeName(a.type);
  if (a.microbatch >= 0) s += std::to_string(a.microbatch);
  return s;
}

Expected<RankOrder> computeOrder(const Plan& plan, IdVector<std::vector<int>>* passes) {
  const int devices = std::max(0, plan.config.devices);
  RankOrder order(devices);
  if (passes) *passes = IdVector<std::vector<int>>(devices);
  // Overlapped groups (lane index of the F → size), per device.
  std::vector<std::map<int, int>> groupAt(static_cast<std::size_t>(devices));
  if (plan.config.overlapForwardBackward) {
    std::vector<std::vector<OrderedOp>> lanes(static_cast<std::size_t>(devices));
    for (const Op& op : plan.ops) {
      if (op.device >= 0 && op.device < devices) {
        lanes[static_cast<std::size_t>(op.device)].push_back({op.virtualStage, op.kind, op.microbatch, op.samples});
      }
    }
    for (const OverlapGroup& g : overlappedGroups(plan, lanes))
      groupAt[static_cast<std::size_t>(g.device)][g.first] = g.size;
  }
  if (plan.config.seqSplits > 1) {
    // PyTorch's actions name whole microbatches: a sequence chunk, and the causal order between
    // the chunks of one microbatch (Seq1F1B), has no action.
    return Error{"/config/seq_splits: the plan runs " + std::to_string(plan.config.seqSplits) +
                 " sequence chunks per microbatch, which torch.distributed.pipelining cannot express (its actions "
                 "name whole microbatches; expected a plan without --seq-splits)"};
  }
  IdVector<int> laneIndex(devices, 0);
  int pendingMembers = 0;  // members of the current OVERLAP_F_B still to come on that device
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    const std::string where = "/ops/" + std::to_string(i);
    if (op.device < 0 || op.device >= devices) {
      return Error{where + ": device " + std::to_string(op.device) + " out of range (the plan has " +
                   std::to_string(devices) + " devices)"};
    }
    ActionType type = ActionType::F;
    switch (op.kind) {
      case OpKind::F:
        type = ActionType::F;
        break;
      case OpKind::B:
        type = ActionType::I;
        break;
      case OpKind::W:
        type = ActionType::W;
        break;
      case OpKind::BW:
        type = ActionType::B;
        break;
      default:
        return Error{where + (op.kind == OpKind::T || op.kind == OpKind::D2H ? ": a " : ": an ") +
                     std::string(opKindName(op.kind)) + " op (" +
                     (op.kind == OpKind::N                           ? "frozen-component fill"
                      : op.kind == OpKind::S || op.kind == OpKind::T ? "a vocabulary pass of --vocab-parallel"
                      : isHostCopy(op.kind) ? "an activation copy to or from host memory, PipeOffload's offloading"
                                            : "the optimizer step") +
                     ") has no torch.distributed.pipelining action (expected F, B, W or BW ops only)"};
    }
    if (op.samples > 0) {
      return Error{where + ": a partial-batch op (" + std::to_string(op.samples) +
                   " samples) has no torch.distributed.pipelining action (expected whole microbatches)"};
    }
    const int at = laneIndex[op.device]++;
    const auto& groups = groupAt[static_cast<std::size_t>(op.device)];
    if (auto g = groups.find(at); g != groups.end()) {
      order[op.device].push_back({-1, ActionType::OverlapFB, -1, {{op.virtualStage, type, op.microbatch, {}}}});
      if (passes) (*passes)[op.device].push_back(1);
      pendingMembers = g->second - 1;
      continue;
    }
    if (pendingMembers > 0) {
      if (passes) ++(*passes)[op.device].back();
      // The group's backward (B → I) and, in a group of three, its W: together the full backward B.
      auto& members = order[op.device].back().sub;
      --pendingMembers;
      if (type == ActionType::W) {
        members.back().type = ActionType::B;
      } else {
        members.push_back({op.virtualStage, type, op.microbatch, {}});
      }
      continue;
    }
    order[op.device].push_back({op.virtualStage, type, op.microbatch, {}});
    if (passes) (*passes)[op.device].push_back(1);
  }
  // After the ops: a plan with fill or vocabulary passes is refused for those, not for the
  // second pipeline its extra stages sit in.
  for (const VirtualStage& vs : plan.virtualStages) {
    if (vs.pipeline != 0) {
      return Error{"/virtual_stages/" + std::to_string(vs.id) + ": the plan holds the model twice (a bidirectional " +
                   plan.config.schedule +
                   " schedule); torch.distributed.pipelining runs one copy of each stage (expected one pipeline)"};
    }
  }
  return order;
}

Expected<RankOrder> computeOrderWithFsdp(const Plan& plan) {
  IdVector<std::vector<int>> passes;
  auto order = computeOrder(plan, &passes);
  if (!order) return order;
  const int devices = order->size();
  RankOrder out(devices);
  // Each device's actions, in order, with the pass each precedes.
  IdVector<std::vector<const FsdpAction*>> actions(devices);
  for (const FsdpAction& a : plan.fsdpActions) {
    if (actions.contains(a.device)) actions[a.device].push_back(&a);
  }
  const auto fsdpType = [](FsdpActionKind k) {
    return k == FsdpActionKind::Unshard   ? ActionType::Unshard
           : k == FsdpActionKind::Reshard ? ActionType::Reshard
                                          : ActionType::ReduceGrad;
  };
  for (int d = 0; d < devices; ++d) {
    std::size_t next = 0;
    int pass = 0;
    const auto emitUpTo = [&](int upTo) {
      for (; next < actions[d].size() && actions[d][next]->beforePass <= upTo; ++next) {
        out[d].push_back({actions[d][next]->virtualStage, fsdpType(actions[d][next]->kind), -1, {}});
      }
    };
    for (std::size_t i = 0; i < (*order)[d].size(); ++i) {
      emitUpTo(pass);
      out[d].push_back((*order)[d][i]);
      pass += passes[d][i];
    }
    emitUpTo(INT32_MAX);
  }
  return out;
}

Status validate(const RankOrder& order, int ranks, int stages, int microbatches) {
  if (order.size() != ranks) {
    return Error{"the schedule has " + std::to_string(order.size()) + " rank rows, expected " + std::to_string(ranks) +
                 " (one per pipeline rank)"};
  }
  struct Seen {
    std::set<int> f, b, i, w;
  };
  IdVector<Seen> seen(std::max(0, stages));
  std::map<int, std::pair<int, std::size_t>> stageRank;  // stage → (rank, step of first action)
  for (int rank = 0; rank < ranks; ++rank) {
    // An OVERLAP_F_B is checked as its members, at its step.
    std::vector<std::pair<std::size_t, const Action*>> leaves;
    for (std::size_t step = 0; step < order[rank].size(); ++step) {
      const Action& a = order[rank][step];
      if (a.type == ActionType::OverlapFB) {
        for (const Action& member : a.sub) leaves.emplace_back(step, &member);
      } else {
        leaves.emplace_back(step, &a);
      }
    }
    for (const auto& [step, leaf] : leaves) {
      const Action& a = *leaf;
      const std::string at =
          "rank " + std::to_string(rank) + ", step " + std::to_string(step) + " (" + toString(a) + ")";
      if (a.stage < 0 || a.stage >= stages) {
        return Error{at + ": stage " + std::to_string(a.stage) + " does not exist (expected 0.." +
                     std::to_string(stages - 1) + ")"};
      }
      auto [it, inserted] = stageRank.try_emplace(a.stage, rank, step);
      if (!inserted && it->second.first != rank) {
        return Error{at + ": stage " + std::to_string(a.stage) + " is also on rank " +
                     std::to_string(it->second.first) + " (step " + std::to_string(it->second.second) +
                     "); PyTorch runs each stage on one rank"};
      }
      if (!isCompute(a.type)) continue;
      Seen& s = seen[a.stage];
      const auto need = [&](const std::set<int>& before, ActionType t) -> Status {
        if (before.count(a.microbatch) == 0) {
          return Error{at + ": " + describeType(a.type) + " of stage " + std::to_string(a.stage) + ", microbatch " +
                       std::to_string(a.microbatch) + " runs before its " + describeType(t) +
                       " (PyTorch requires F before I or B, and I before W)"};
        }
        return {};
      };
      switch (a.type) {
        case ActionType::F:
          s.f.insert(a.microbatch);
          break;
        case ActionType::B:
          PS_RETURN_IF_ERROR(need(s.f, ActionType::F));
          s.b.insert(a.microbatch);
          break;
        case ActionType::I:
          PS_RETURN_IF_ERROR(need(s.f, ActionType::F));
          s.i.insert(a.microbatch);
          break;
        case ActionType::W:
          PS_RETURN_IF_ERROR(need(s.i, ActionType::I));
          s.w.insert(a.microbatch);
          break;
        default:
          break;
      }
    }
  }
  for (int stage = 0; stage < stages; ++stage) {
    const Seen& s = seen[stage];
    const std::string where = "stage " + std::to_string(stage);
    if (static_cast<int>(s.f.size()) != microbatches) {
      return Error{where + ": " + std::to_string(s.f.size()) + " forward microbatches, expected " +
                   std::to_string(microbatches)};
    }
    if (s.i.size() != s.w.size()) {
      return Error{where + ": " + std::to_string(s.i.size()) + " input-gradient (I) and " + std::to_string(s.w.size()) +
                   " weight-gradient (W) microbatches, PyTorch expects as many of each"};
    }
    if (static_cast<int>(s.b.size() + (s.i.size() + s.w.size()) / 2) != microbatches) {
      return Error{where + ": " + std::to_string(s.b.size()) + " full (B) and " + std::to_string(s.i.size()) +
                   " split (I/W) backwards, expected " + std::to_string(microbatches) + " in all"};
    }
  }
  return {};
}

Expected<RankOrder> lowerWithComms(const RankOrder& computeOnly, const std::function<int(int)>& stageToRank, int stages,
                                   int microbatches, bool runtimePasses) {
  const int ranks = computeOnly.size();
  RankOrder pending(ranks);
  for (int r = 0; r < ranks; ++r) {
    pending[r] = runtimePasses ? addReduceGrad(addUnshardReshard(computeOnly[r]), microbatches) : computeOnly[r];
  }
  // --- _add_send_recv ---
  const auto hasComms = [&](const Action& a) {
    if (a.type == ActionType::F) return a.stage != stages - 1 && stageToRank(a.stage + 1) != stageToRank(a.stage);
    if (a.type == ActionType::I || a.type == ActionType::B) {
      return a.stage != 0 && stageToRank(a.stage - 1) != stageToRank(a.stage);
    }
    return false;
  };
  RankOrder out(ranks);
  IdVector<std::set<Action, ActionLess>> done(ranks);
  const auto readyOne = [&](const Action& a, const std::set<Action, ActionLess>& prev) {
    if (a.type == ActionType::F && a.stage != 0) {
      return prev.count({a.stage, ActionType::RecvF, a.microbatch, {}}) > 0 ||
             prev.count({a.stage - 1, ActionType::F, a.microbatch, {}}) > 0;
    }
    if ((a.type == ActionType::I || a.type == ActionType::B) && a.stage != stages - 1) {
      return prev.count({a.stage, ActionType::RecvB, a.microbatch, {}}) > 0 ||
             prev.count({a.stage + 1, ActionType::I, a.microbatch, {}}) > 0 ||
             prev.count({a.stage + 1, ActionType::B, a.microbatch, {}}) > 0;
    }
    return true;
  };
  // An OVERLAP_F_B waits for the inputs of all its members.
  const auto ready = [&](const Action& a, const std::set<Action, ActionLess>& prev) {
    if (a.type != ActionType::OverlapFB) return readyOne(a, prev);
    return std::all_of(a.sub.begin(), a.sub.end(), [&](const Action& m) { return readyOne(m, prev); });
  };
  IdVector<std::size_t> next(ranks, 0);
  std::size_t remaining = 0;
  for (const auto& p : pending) remaining += p.size();
  while (remaining > 0) {
    bool progress = false;
    for (int rank = 0; rank < ranks; ++rank) {
      auto& queue = pending[rank];
      std::size_t& k = next[rank];
      if (k >= queue.size()) continue;
      const Action a = queue[k];
      if (!ready(a, done[rank])) continue;
      out[rank].push_back(a);
      const std::vector<Action> single{a};
      for (const Action& member : a.type == ActionType::OverlapFB ? a.sub : single) {
        done[rank].insert(member);
        if (!hasComms(member)) continue;
        const bool forward = member.type == ActionType::F;
        const Action send{member.stage, forward ? ActionType::SendF : ActionType::SendB, member.microbatch, {}};
        const Action recv{forward ? member.stage + 1 : member.stage - 1,
                          forward ? ActionType::RecvF : ActionType::RecvB,
                          member.microbatch,
                          {}};
        out[rank].push_back(send);
        done[rank].insert(send);
        const int peer = stageToRank(recv.stage);
        if (peer < 0 || peer >= ranks) {
          return Error{"stage " + std::to_string(recv.stage) + " has no rank (expected 0.." +
                       std::to_string(ranks - 1) + ")"};
        }
        out[peer].push_back(recv);
        done[peer].insert(recv);
      }
      ++k;
      --remaining;
      progress = true;
    }
    if (!progress) {
      std::string stuck;
      for (int rank = 0; rank < ranks; ++rank) {
        const auto& queue = pending[rank];
        const std::size_t k = next[rank];
        if (k < queue.size()) {
          stuck += (stuck.empty() ? "" : ", ") + std::string("rank ") + std::to_string(rank) + " waits at " +
                   toString(queue[k]);
        }
      }
      return Error{"the order cannot be lowered to sends and receives: no rank can proceed (" + stuck +
                   "); every action's input must be produced earlier on its rank or sent by another"};
    }
  }
  return out;
}

std::string csvText(const RankOrder& order) {
  std::string out;
  for (const auto& row : order) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      out += toString(row[i]);
    }
    out += "\r\n";  // Python's csv.writer default line terminator
  }
  return out;
}

}  // namespace pipestudio::torchpp
