// zb-auto (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §3 "automatic scheduling").
//
// First answer: the authors' own greedy heuristic, ported (PublishedGreedy.cpp: zb.py's
// manual_order for one stage per device, zbv.py's ZB-V construction for one V per device),
// every variant of it timed and the best kept. Then, within a work budget (op steps, never
// wall-clock time, so the same request always gives the same plan): a portfolio of
// list-scheduling policies (warm-up caps relative to 1F1B, W-postponement thresholds, eager W,
// F-vs-B priority, waiting for an imminent B), and moves on the critical path of the best
// order, each judged by re-timing the whole order. Small instances can be solved exactly
// (Ilp.cpp).
#include "pipestudio/planner/AutoSchedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>

#include "autosched/Instance.hpp"
#include "autosched/PublishedGreedy.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio {
namespace autosched {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kOptimalTolerance = 1e-4;  // relative: within 0.01 % of the lower bound is optimal

struct Policy {
  std::string name;
  double capScale =
      0;  // admitted microbatches per device ≤ capScale · (stages from its first to the end); 0 = memory only
  double alpha = 1;       // run a pending W in a bubble only if the bubble is ≥ alpha · W
  bool eagerW = false;    // W right after its B (1F1B-like memory, no postponement)
  bool preferF = false;   // admit new microbatches before running a ready B while under the cap
  bool waitForB = false;  // do not start an F when a B arrives before the F would end
};

struct ListResult {
  bool ok = false;
  Orders orders;
  double makespanMs = kInf;
};

// One list-scheduling run of a policy (runPolicy): the per-device state (constructor), the
// device that decides next (nextDevice), what it could run (scanCandidates), the policy's
// choice among that (decide) and the chosen op's effects (runOp).
class PolicyRun {
 public:
  PolicyRun(const Instance& inst, const Policy& pol);
  ListResult run();

 private:
  static constexpr int kHeld = -2;  // decide: the device waits; decide again
  // What the deciding device could run at T, and the arrivals after T that bear on the choice.
  struct Candidates {
    int bOp = -1;
    int bStage = -1;
    double bReady = kInf;
    int fOp = -1;
    int fStage = -1;
    double laterB = kInf;   // next B arrival after T
    double laterFB = kInf;  // next B or allowed F arrival after T
  };
  bool fitsMemory(int d, int s) const {
    return m_live[d] + m_inst.activationBytesOf(s) + m_reserveAfter[s] <= m_inst.budgetBytesOf(d);
  }
  // An F may start: memory for it (and the rest of its microbatch on this device) and, when it
  // admits a new microbatch to the device, the warm-up cap.
  bool fAllowed(int d, int s) const {
    if (s == m_firstStage[d] && m_admitted[d] >= m_cap[d]) return false;
    return fitsMemory(d, s);
  }
  bool hasPendingW(int d) const { return m_pendingHead[d] < m_pendingW[d].size(); }
  double readyAt(int op) const { return m_ready[op]; }
  void setReady(int op, double at) { m_ready[op] = at; }
  bool memoryBlocked(int d, double t) const;
  double eventTime(int d) const;
  double transfer(int from, int to, double at, double ms);
  void runOp(int d, int op, double at);
  std::optional<int> nextDevice(double& T);
  Candidates scanCandidates(int d, double T, double h) const;
  int decide(int d, double T, double h, const Candidates& c);
  ListResult finish(bool ok);

  const Instance& m_inst;
  const Policy& m_pol;
  const int m_m;
  const int m_P;
  IdVector<double> m_ready;        // per op: when its inputs are there (-1: not yet known)
  IdVector<int> m_nextF, m_nextB;  // per stage: next microbatch
  // Per device.
  IdVector<double> m_tFree, m_noWUntil, m_holdUntil;
  IdVector<std::int64_t> m_live;
  IdVector<int> m_admitted, m_cap;
  IdVector<std::vector<int>> m_pendingW;
  IdVector<std::size_t> m_pendingHead;
  IdVector<std::int64_t> m_reserveAfter;  // per stage: activation of the device's later stages
  IdVector<int> m_firstStage;
  Grid<double> m_linkFree;  // per (from, to) device
  IdVector<std::vector<int>> m_orders;
  // Event times change only on the device that ran an op and on the devices its outputs reach,
  // so they are cached and recomputed for those alone.
  IdVector<double> m_event;
  IdVector<char> m_dirty;
  ListResult m_result;
};

PolicyRun::PolicyRun(const Instance& inst, const Policy& pol)
    : m_inst(inst), m_pol(pol), m_m(inst.microbatches), m_P(inst.devices) {
  const int stages = inst.stages;
  m_ready.assign(inst.opCount(), -1.0);
  for (int mb = 0; mb < m_m; ++mb) setReady(inst.opId(0, kF, mb), 0.0);
  m_nextF.assign(stages, 0);
  m_nextB.assign(stages, 0);
  m_tFree.assign(m_P, 0.0);
  m_noWUntil.assign(m_P, 0.0);
  m_holdUntil.assign(m_P, 0.0);
  m_live.assign(m_P, 0);
  m_admitted.assign(m_P, 0);
  m_cap.assign(m_P, std::numeric_limits<int>::max());
  m_pendingW.resize(m_P);
  m_pendingHead.assign(m_P, 0);
  m_reserveAfter.assign(stages, 0);
  m_firstStage.assign(m_P, 0);
  for (int d = 0; d < m_P; ++d) {
    const auto& st = inst.stagesOn(d);
    m_firstStage[d] = st.front();
    std::int64_t after = 0;
    for (std::size_t k = st.size(); k-- > 0;) {  // the device's stages from its last
      m_reserveAfter[st[k]] = after;
      after += inst.activationBytesOf(st[k]);
    }
    if (pol.capScale > 0) {
      const int base = inst.stages - st.front();
      m_cap[d] = std::max(1, static_cast<int>(std::ceil(pol.capScale * base)));
    }
  }
  m_linkFree.assign(m_P, m_P, 0.0);
  m_orders.assign(m_P, {});
  m_event.assign(m_P, kInf);
  m_dirty.assign(m_P, 1);
}

bool PolicyRun::memoryBlocked(int d, double t) const {
  for (int s : m_inst.stagesOn(d)) {
    const int i = m_nextF[s];
    if (i >= m_m) continue;
    const double r = readyAt(m_inst.opId(s, kF, i));
    if (r >= 0 && r <= t && !fitsMemory(d, s)) return true;
  }
  return false;
}

// Earliest time each kind of candidate could start on d: B when it arrives, F after a hold
// (waiting for an imminent B), W after a hold or a postponement.
double PolicyRun::eventTime(int d) const {
  const double t0 = m_tFree[d];
  const double h = std::max(t0, m_holdUntil[d]);
  double e = kInf;
  for (int s : m_inst.stagesOn(d)) {
    const int b = m_nextB[s];
    if (b < m_m) {
      const double r = readyAt(m_inst.opId(s, kB, b));
      if (r >= 0) e = std::min(e, std::max(t0, r));
    }
    const int f = m_nextF[s];
    if (f < m_m && fAllowed(d, s)) {
      const double r = readyAt(m_inst.opId(s, kF, f));
      if (r >= 0) e = std::min(e, std::max(h, r));
    }
  }
  if (hasPendingW(d)) e = std::min(e, std::max(h, m_noWUntil[d]));
  return e;
}

double PolicyRun::transfer(int from, int to, double at, double ms) {
  if (from == to || ms <= 0) return at;
  double& link = m_linkFree(from, to);
  const double begin = std::max(at, link);
  link = begin + ms;
  return link;
}

void PolicyRun::runOp(int d, int op, double at) {
  const double finish = at + m_inst.duration(op);
  m_tFree[d] = finish;
  m_orders[d].push_back(op);
  const int s = m_inst.stageOf(op);
  const int mb = m_inst.mbOf(op);
  switch (m_inst.kindOf(op)) {
    case kF:
      ++m_nextF[s];
      m_live[d] += m_inst.activationBytesOf(s);
      if (s == m_firstStage[d]) ++m_admitted[d];
      if (s + 1 < m_inst.stages) {
        setReady(m_inst.opId(s + 1, kF, mb), transfer(d, m_inst.deviceOfStage(s + 1), finish, m_inst.sendMsOf(s)));
      } else {
        setReady(m_inst.opId(s, kB, mb), finish);
      }
      break;
    case kB:
      ++m_nextB[s];
      m_live[d] -= m_inst.activationBytesOf(s) - m_inst.weightGradBytesOf(s);
      if (s == m_firstStage[d]) --m_admitted[d];
      m_pendingW[d].push_back(m_inst.opId(s, kW, mb));
      if (s > 0) {
        setReady(m_inst.opId(s - 1, kB, mb), transfer(d, m_inst.deviceOfStage(s - 1), finish, m_inst.sendMsOf(s - 1)));
      }
      break;
    default:
      m_live[d] -= m_inst.weightGradBytesOf(s);
      ++m_pendingHead[d];
      break;
  }
  m_result.makespanMs = std::max(m_result.makespanMs == kInf ? 0.0 : m_result.makespanMs, finish);
}

// The device whose next decision is earliest (T: when), or nullopt when no device can ever start.
std::optional<int> PolicyRun::nextDevice(double& T) {
  int d = m_P;  // none yet (a plain index keeps this hot loop branch-free)
  T = kInf;
  for (int c = 0; c < m_P; ++c) {
    if (m_dirty[c]) {
      m_event[c] = eventTime(c);
      m_dirty[c] = 0;
    }
    if (m_event[c] < T) {
      T = m_event[c];
      d = c;
    }
  }
  if (d == m_P) return std::nullopt;
  return d;
}

PolicyRun::Candidates PolicyRun::scanCandidates(int d, double T, double h) const {
  Candidates c;
  for (int s : m_inst.stagesOn(d)) {
    if (m_nextB[s] < m_m) {
      const int op = m_inst.opId(s, kB, m_nextB[s]);
      const double r = readyAt(op);
      // The earliest-arrived B; on a tie the later stage (it unblocks more of the pipeline).
      if (r >= 0 && r <= T && (r < c.bReady || (r == c.bReady && s > c.bStage))) {
        c.bOp = op;
        c.bReady = r;
        c.bStage = s;
      } else if (r > T) {
        c.laterB = std::min(c.laterB, r);
      }
    }
    if (m_nextF[s] < m_m && fAllowed(d, s)) {
      const int op = m_inst.opId(s, kF, m_nextF[s]);
      const double r = readyAt(op);
      // Continue an admitted microbatch (the later stage) before admitting a new one.
      if (r >= 0 && std::max(h, r) <= T && s > c.fStage) {
        c.fOp = op;
        c.fStage = s;
      } else if (r >= 0 && std::max(h, r) > T) {
        c.laterFB = std::min(c.laterFB, std::max(h, r));
      }
    }
  }
  c.laterFB = std::min(c.laterFB, c.laterB);
  return c;
}

// The op device d runs at T under the policy; kHeld when it waits (a hold or a W
// postponement, recorded), -1 when it has nothing to run.
int PolicyRun::decide(int d, double T, double h, const Candidates& c) {
  const bool wReady = hasPendingW(d) && std::max(h, m_noWUntil[d]) <= T;
  const int wOp = hasPendingW(d) ? m_pendingW[d][m_pendingHead[d]] : -1;
  if (m_pol.eagerW && wReady) return wOp;
  if (c.bOp >= 0 && !(m_pol.preferF && c.fOp >= 0 && c.fStage == m_firstStage[d])) return c.bOp;
  if (c.fOp >= 0) {
    if (m_pol.waitForB && c.bOp < 0 && c.laterB < T + m_inst.duration(c.fOp)) {
      m_holdUntil[d] = c.laterB;  // an F now would delay the imminent B
      return kHeld;
    }
    return c.fOp;
  }
  if (c.bOp >= 0) return c.bOp;
  if (!wReady) return -1;
  // Fill the bubble with a W if it is long enough, or when memory blocks the next F.
  if (memoryBlocked(d, T) || c.laterFB - T >= m_pol.alpha * m_inst.duration(wOp)) return wOp;
  m_noWUntil[d] = c.laterFB;
  return kHeld;
}

// The result with the orders so far (partial ones when the policy deadlocked).
ListResult PolicyRun::finish(bool ok) {
  m_result.ok = ok;
  m_result.orders = std::move(m_orders.values());
  return std::move(m_result);
}

ListResult PolicyRun::run() {
  const int n = m_inst.opCount();
  int scheduled = 0;
  while (scheduled < n) {
    double T = kInf;
    const std::optional<int> next = nextDevice(T);
    if (!next) return finish(false);  // nothing can ever start: this policy deadlocked
    const int d = *next;
    m_dirty[d] = 1;
    const double h = std::max(m_tFree[d], m_holdUntil[d]);
    const int choice = decide(d, T, h, scanCandidates(d, T, h));
    if (choice == kHeld) continue;
    if (choice < 0) return finish(false);
    runOp(d, choice, T);
    ++scheduled;
    // The op's outputs reach the neighbouring stages' devices.
    const int s = m_inst.stageOf(choice);
    if (s + 1 < m_inst.stages) m_dirty[m_inst.deviceOfStage(s + 1)] = 1;
    if (s > 0) m_dirty[m_inst.deviceOfStage(s - 1)] = 1;
  }
  return finish(true);
}

// Discrete-event list scheduling of one policy: the device whose next decision is earliest
// decides next, so every arrival it could see is already known.
ListResult runPolicy(const Instance& inst, const Policy& pol) { return PolicyRun(inst, pol).run(); }

std::vector<Policy> portfolio() {
  std::vector<Policy> out;
  // Memory-bound warm-up, F before B while memory allows, W into bubbles of at least one W,
  // with and without waiting for an imminent B (the shape of the paper's §3 heuristic).
  out.push_back({"mem-warmup", 0, 1, false, true, false});
  out.push_back({"mem-warmup,wait-B", 0, 1, false, true, true});
  for (double capScale : {0.0, 1.0, 1.5, 2.0, 3.0}) {
    for (bool preferF : {false, true}) {
      for (bool waitForB : {false, true}) {
        for (double alpha : {0.0, 0.5, 1.0}) {
          for (bool eagerW : {false, true}) {
            if (eagerW && alpha != 1.0) continue;  // alpha is moot when W follows its B at once
            if (capScale == 0 && preferF && alpha == 1.0 && !eagerW) continue;  // the two above
            std::string name = "cap" +
                               (capScale == 0 ? std::string("=mem") : "x" + std::to_string(capScale).substr(0, 3)) +
                               (preferF ? ",F-first" : ",B-first") + (waitForB ? ",wait-B" : "") +
                               (eagerW ? ",eager-W" : ",W-gap>=" + std::to_string(alpha).substr(0, 3) + "W");
            out.push_back({name, capScale, alpha, eagerW, preferF, waitForB});
          }
        }
      }
    }
  }
  return out;
}

// Lower bounds of the makespan and (spanBound) of the longest device span: the busiest
// device's work, the memory slots and one microbatch's round trip bound both (all of them lie
// within one device's span); the earliest start of a device plus its work only the makespan.
double lowerBound(const Instance& inst, double& busiest, double& spanBound) {
  const double m = inst.microbatches;
  busiest = 0;
  double bound = 0;
  double slotsBound = 0;
  const int stages = inst.stages;
  // Earliest time stage s can start: the forward chain of microbatch 0 up to it.
  IdVector<double> head(stages, 0.0);
  for (int s = 1; s < stages; ++s) head[s] = head[s - 1] + inst.durationOf(kF, s - 1) + inst.sendMsOf(s - 1);
  for (int d = 0; d < inst.devices; ++d) {
    double work = 0;
    for (int s : inst.stagesOn(d))
      work += m * (inst.durationOf(kF, s) + inst.durationOf(kB, s) + inst.durationOf(kW, s));
    busiest = std::max(busiest, work);
    bound = std::max(bound, head[inst.stagesOn(d).front()] + work);
  }
  // Memory: at most k_d microbatches' activations of device d's first stage are live at once,
  // each for at least the round trip R_d from that stage's F start to its B end, so the k_d
  // "slots" hold m intervals of length ≥ R_d: makespan ≥ ceil(m / k_d) · R_d.
  for (int d = 0; d < inst.devices; ++d) {
    const std::int64_t budget = inst.budgetBytesOf(d);
    const int s0 = inst.stagesOn(d).front();
    const std::int64_t act = inst.activationBytesOf(s0);
    if (budget >= kUnlimited || act <= 0) continue;
    const std::int64_t wholeSlots = budget / act;  // microbatches whose activations fit
    const double slots = std::max<double>(1, static_cast<double>(wholeSlots));
    double roundTrip = inst.durationOf(kF, s0) + inst.durationOf(kB, s0);
    for (int s = s0 + 1; s < stages; ++s) {
      roundTrip += inst.durationOf(kF, s) + inst.durationOf(kB, s) + 2 * inst.sendMsOf(s - 1);
    }
    slotsBound = std::max(slotsBound, std::ceil(m / slots) * roundTrip);
  }
  // One microbatch's full round trip: forward chain, backward chain, the first stage's W.
  double path = inst.durationOf(kW, 0);
  for (int s = 0; s < stages; ++s) path += inst.durationOf(kF, s) + inst.durationOf(kB, s) + 2 * inst.sendMsOf(s);
  spanBound = std::max({slotsBound, busiest, path});
  return std::max({bound, spanBound});
}

// Critical-path moves: walk back from the last op along what bound each start; where an op
// waited for the op before it on its device, try running it before that op (or running a
// blocking W a few ops later). First improvement is kept; the walk restarts. Each timing of
// the whole order costs opCount() steps of `work`.
void localSearch(const Instance& inst, Orders& orders, double& objective, const AutoScheduleOptions& options,
                 AutoScheduleReport& report, const std::function<bool()>& stop) {
  const std::int64_t cost = inst.opCount();
  IdVector<std::size_t> posOf(inst.opCount(), 0);  // per op: where in its order
  auto indexPositions = [&] {
    for (const auto& order : orders) {
      for (std::size_t i = 0; i < order.size(); ++i) posOf[order[i]] = i;
    }
  };
  auto affordable = [&] {
    return report.searchEvaluations < options.maxSearchEvaluations &&
           report.workSteps + cost <= options.workBudgetSteps;
  };
  indexPositions();
  while (affordable() && !stop()) {
    const Timing timing = timeOrders(inst, orders, true);
    report.workSteps += cost;
    if (!timing.ok) return;
    int cur = timing.objectiveOp;
    struct Move {
      std::size_t device;
      std::size_t from;  // position of the op to move later
      std::size_t to;    // its new position
    };
    std::vector<Move> moves;
    while (cur >= 0) {
      const auto curOp = static_cast<std::size_t>(cur);  // Timing's per-op vectors (timeOrders)
      const int c = timing.cause[curOp];
      if (c < 0) break;
      const auto causeOp = static_cast<std::size_t>(c);
      const int d = inst.deviceOf(cur);
      const std::size_t pc = posOf[c];
      if (inst.deviceOf(c) == d && pc + 1 == posOf[cur] && timing.start[curOp] == timing.end[causeOp]) {
        const auto device = static_cast<std::size_t>(d);  // Orders is indexed by size_t
        for (std::size_t k : {1, 2, 4}) {
          if (pc + k < orders[device].size()) moves.push_back({device, pc, pc + k});
          if (inst.kindOf(c) != kW) break;
        }
      }
      cur = c;
    }
    bool improved = false;
    for (const Move& mv : moves) {
      if (!affordable() || stop()) break;
      auto& order = orders[mv.device];
      std::rotate(order.begin() + mv.from, order.begin() + mv.from + 1, order.begin() + mv.to + 1);
      ++report.searchEvaluations;
      report.workSteps += cost;
      const Timing t = timeOrders(inst, orders, false);
      if (t.ok && t.memoryOk && t.objectiveMs < objective - 1e-9) {
        objective = t.objectiveMs;
        ++report.searchImprovements;
        improved = true;
        indexPositions();
        break;
      }
      std::rotate(order.begin() + mv.from, order.begin() + mv.to, order.begin() + mv.to + 1);
    }
    if (!improved) return;
  }
}

ScheduleSkeleton toSkeleton(const Instance& inst, const Orders& orders, const std::vector<VirtualStage>& stages) {
  ScheduleSkeleton skeleton;
  skeleton.virtualStages = stages;
  skeleton.devices.assign(orders.size(), {});
  static constexpr std::array<OpKind, 3> kKinds = {OpKind::F, OpKind::B, OpKind::W};
  for (std::size_t d = 0; d < orders.size(); ++d) {
    skeleton.devices[d].reserve(orders[d].size());
    for (int op : orders[d]) {
      skeleton.devices[d].push_back({inst.stageOf(op), kKinds[inst.kindOf(op)], inst.mbOf(op), 0});
    }
  }
  return skeleton;
}

Expected<Orders> fromSkeleton(const Instance& inst, const ScheduleSkeleton& skeleton) {
  if (static_cast<int>(skeleton.devices.size()) != inst.devices) {
    return Error{"the order has " + std::to_string(skeleton.devices.size()) + " device(s), expected " +
                 std::to_string(inst.devices)};
  }
  Orders orders(skeleton.devices.size());
  IdVector<char> seen(inst.opCount(), 0);  // per op
  for (std::size_t d = 0; d < skeleton.devices.size(); ++d) {
    for (std::size_t i = 0; i < skeleton.devices[d].size(); ++i) {
      const OrderedOp& o = skeleton.devices[d][i];
      const std::string where = "device " + std::to_string(d) + ", op " + std::to_string(i) + ": ";
      int kind = -1;
      if (o.kind == OpKind::F) kind = kF;
      if (o.kind == OpKind::B) kind = kB;
      if (o.kind == OpKind::W) kind = kW;
      if (kind < 0) return Error{where + std::string(opKindName(o.kind)) + " is not an F, B or W op"};
      if (o.virtualStage < 0 || o.virtualStage >= inst.stages) return Error{where + "virtual stage out of range"};
      if (inst.deviceOfStage(o.virtualStage) != static_cast<int>(d)) {
        return Error{where + "virtual stage " + std::to_string(o.virtualStage) + " is not on this device"};
      }
      if (o.microbatch < 0 || o.microbatch >= inst.microbatches) return Error{where + "microbatch out of range"};
      const int op = inst.opId(o.virtualStage, kind, o.microbatch);
      if (seen[op]++) return Error{where + "duplicated op"};
      orders[d].push_back(op);
    }
  }
  for (int op = 0; op < inst.opCount(); ++op) {
    if (!seen[op]) {
      return Error{std::string("missing op ") + "FBW"[inst.kindOf(op)] + std::to_string(inst.mbOf(op)) + " of stage " +
                   std::to_string(inst.stageOf(op))};
    }
  }
  return orders;
}

// One zb-auto search (autoSchedule): the published heuristic gives the first answer
// (publishedFirst), the policy portfolio and local search improve it while the budget lasts
// (portfolioSearch, run), the exact solver last (exactSearch); offer() keeps the best order timed
// so far.
class AutoSearch {
 public:
  AutoSearch(const Instance& inst, const ScheduleInput& input, const AutoScheduleOptions& options,
             AutoScheduleReport& report)
      : m_inst(inst),
        m_input(input),
        m_options(options),
        m_report(report),
        m_opSteps(inst.opCount()),
        m_canCancel(input.control != nullptr && input.control->cancel != nullptr) {
    double spanBound = 0;
    report.lowerBoundMs = lowerBound(inst, report.busiestDeviceWorkMs, spanBound);
    report.objective = inst.spanObjective ? "longest device span" : "makespan";
    m_objectiveBound = inst.spanObjective ? spanBound : report.lowerBoundMs;
  }

  // Every phase in turn; an error when cancelled (see stop) or when no order was found.
  Status run() {
    publishedFirst();
    PS_RETURN_IF_ERROR(portfolioSearch());
    if (m_best.empty()) {
      return Error{"zb-auto: no policy found a schedule within the memory limit (every greedy order deadlocked)"};
    }
    m_report.bestPolicyMakespanMs = m_bestMakespan;
    if (m_options.localSearch && !atBound() && !m_report.stoppedEarly) {
      localSearch(m_inst, m_best, m_bestMakespan, m_options, m_report, [this] { return stop(); });
    }
    if (m_report.stoppedEarly && !m_options.keepBestOnCancel) return Error::cancelled();
    if (m_options.exact) exactSearch();
    return {};
  }

  const Orders& best() const { return m_best; }

 private:
  bool cancelled() const { return m_canCancel && m_input.control->cancelled(); }
  // Cancel before a first answer, or without keepBestOnCancel, is an error; after one it
  // stops the search with the best order so far.
  bool stop() {
    if (!cancelled()) return false;
    m_report.stoppedEarly = true;
    return true;
  }
  void progress() const {
    if (m_input.control != nullptr && m_input.control->progress) {
      const double used = static_cast<double>(m_report.workSteps) /
                          static_cast<double>(std::max<std::int64_t>(1, m_options.workBudgetSteps));
      m_input.control->progress(std::min(0.99, used));
    }
  }
  // Times an order and keeps it when it beats the best so far.
  double offer(const Orders& orders, const std::string& name) {
    const Timing t = timeOrders(m_inst, orders);
    m_report.workSteps += m_opSteps;
    if (!t.ok || !t.memoryOk) return std::numeric_limits<double>::infinity();
    if (t.objectiveMs < m_bestMakespan - 1e-9) {
      m_bestMakespan = t.objectiveMs;
      m_best = orders;
      m_report.bestPolicy = name;
    }
    return t.objectiveMs;
  }
  // Nothing beats an objective at its lower bound (to rounding).
  bool atBound() const { return m_bestMakespan <= m_objectiveBound * (1 + kOptimalTolerance); }

  void publishedFirst();
  Status portfolioSearch();
  void exactSearch();

  const Instance& m_inst;
  const ScheduleInput& m_input;
  const AutoScheduleOptions& m_options;
  AutoScheduleReport& m_report;
  const std::int64_t m_opSteps;
  const bool m_canCancel;
  double m_objectiveBound = 0;
  Orders m_best;
  double m_bestMakespan = std::numeric_limits<double>::infinity();
};

// The published heuristic: the first answer. Every variant is timed as soon as it is built, so
// the first one is an answer at once.
void AutoSearch::publishedFirst() {
  m_report.paperGreedyMakespanMs = 0;
  int variant = 0;
  IdVector<double> variantMs;  // per published variant
  std::string publishedName = "zb.py";
  auto each = [&](const PublishedRun& run) {
    const int index = variant++;
    m_report.workSteps += m_opSteps;
    variantMs.push_back(run.ok
                            ? offer(run.orders, publishedName + (index == 0 ? "" : " variant " + std::to_string(index)))
                            : std::numeric_limits<double>::infinity());
    if (index == 0 && m_best.size() > 0) progress();
  };
  std::vector<PublishedRun> published = zbGreedyRuns(m_inst, each);
  if (published.empty()) {
    publishedName = "zbv.py";
    // The construction's first order is an answer before its refinements run.
    published = zbvRuns(m_inst, m_input, each, [&](const PublishedRun& run) {
      m_report.workSteps += m_opSteps;
      offer(run.orders, "zbv.py (unrefined)");
      progress();
    });
  }
  if (published.empty()) return;
  m_report.publishedHeuristic = publishedName;
  ++m_report.policiesTried;
  const int choice = publishedChoice(published);
  if (variantMs.contains(choice)) {
    const double ms = variantMs[choice];
    if (std::isfinite(ms)) m_report.paperGreedyMakespanMs = ms;
  }
}

// The policy portfolio, while the budget lasts.
Status AutoSearch::portfolioSearch() {
  const auto policies = portfolio();
  for (std::size_t i = 0; i < policies.size() && !atBound(); ++i) {
    if (cancelled()) {
      if (m_best.empty() || !m_options.keepBestOnCancel) return Error::cancelled();
      m_report.stoppedEarly = true;
      break;
    }
    // A policy places every op once, looking at every device for the next decision (about
    // 1 + p/8 steps per op, measured), and is timed once.
    const std::int64_t policySteps = m_opSteps * (1 + m_inst.devices / 8);
    if (!m_best.empty() && m_report.workSteps + policySteps + m_opSteps > m_options.workBudgetSteps) break;
    const ListResult r = runPolicy(m_inst, policies[i]);
    m_report.workSteps += policySteps;
    ++m_report.policiesTried;
    if (r.ok) offer(r.orders, policies[i].name);
    progress();
  }
  return {};
}

// The exact solver (CBC) from the best order, on instances small enough for it.
void AutoSearch::exactSearch() {
  AutoScheduleReport& report = m_report;
  if (!exactSchedulingAvailable()) {
    report.exactStatus = ExactStatus::Unavailable;
    report.exactMessage = "exact mode needs CBC (coinor-libcbc-dev); this build has none";
    return;
  }
  if (m_inst.devices > kExactMaxDevices || m_inst.microbatches > kExactMaxMicrobatches ||
      m_inst.stages > 2 * kExactMaxDevices) {
    report.exactStatus = ExactStatus::TooLarge;
    report.exactMessage = "exact mode is offered for at most " + std::to_string(kExactMaxDevices) + " devices and " +
                          std::to_string(kExactMaxMicrobatches) + " microbatches";
    return;
  }
  const ExactResult exact = solveExact(m_inst, m_best, m_bestMakespan, m_options.exactTimeLimitS);
  report.exactSeconds = exact.seconds;
  report.exactMessage = exact.message;
  report.exactMakespanMs = exact.objectiveMs;
  report.exactBoundMs = exact.boundMs;
  report.exactGap =
      exact.objectiveMs > 0 ? std::max(0.0, (exact.objectiveMs - exact.boundMs) / exact.objectiveMs) : 0.0;
  report.exactStatus = !exact.solved   ? ExactStatus::Failed
                       : exact.optimal ? ExactStatus::Optimal
                                       : ExactStatus::TimeLimit;
  if (!exact.solved) return;
  const Timing t = timeOrders(m_inst, exact.orders);
  if (t.ok && t.memoryOk && t.objectiveMs < m_bestMakespan - 1e-9) {
    m_best = exact.orders;
    m_bestMakespan = t.objectiveMs;
    report.bestPolicy += " + ILP";
  }
}

}  // namespace
}  // namespace autosched

std::string formatAutoScheduleReport(const AutoScheduleReport& r) {
  std::array<char, 512> line{};
  std::string out;
  std::snprintf(line.data(), line.size(),
                "zb-auto: makespan %.3f ms; lower bound %.3f ms (busiest device work %.3f ms); gap %.2f%% to the "
                "bound, %.2f%% to the busiest work\n",
                r.makespanMs, r.lowerBoundMs, r.busiestDeviceWorkMs, 100 * r.gapToLowerBound, 100 * r.gapToBusiestWork);
  out += line.data();
  if (r.objective != "makespan") {
    std::snprintf(line.data(), line.size(), "zb-auto: minimised the %s (optimizer post-validation): %.3f ms\n",
                  r.objective.c_str(), r.objectiveMs);
    out += line.data();
  }
  std::string published = "no published heuristic for this placement";
  if (!r.publishedHeuristic.empty()) {
    std::array<char, 128> buf{};
    std::snprintf(buf.data(), buf.size(), "the authors' %s heuristic %.3f ms", r.publishedHeuristic.c_str(),
                  r.paperGreedyMakespanMs);
    published = buf.data();
  }
  std::snprintf(line.data(), line.size(),
                "zb-auto: best of %d policies %.3f ms (%s); %s; local search %d/%d moves kept; %lld work steps%s\n",
                r.policiesTried, r.bestPolicyMakespanMs, r.bestPolicy.c_str(), published.c_str(), r.searchImprovements,
                r.searchEvaluations, static_cast<long long>(r.workSteps), r.stoppedEarly ? " (stopped early)" : "");
  out += line.data();
  if (r.exactStatus != ExactStatus::NotRun) {
    std::snprintf(line.data(), line.size(),
                  "zb-auto exact (ILP, CBC): %s; incumbent %.3f ms, bound %.3f ms, gap %.2f%%, %.1f s%s%s\n",
                  std::string(exactStatusName(r.exactStatus)).c_str(), r.exactMakespanMs, r.exactBoundMs,
                  100 * r.exactGap, r.exactSeconds, r.exactMessage.empty() ? "" : "; ", r.exactMessage.c_str());
    out += line.data();
  }
  return out;
}

Json autoScheduleReportJson(const AutoScheduleReport& r) {
  Json j{{"objective", r.objective},
         {"objective_ms", r.objectiveMs},
         {"makespan_ms", r.makespanMs},
         {"lower_bound_ms", r.lowerBoundMs},
         {"busiest_device_work_ms", r.busiestDeviceWorkMs},
         {"gap_to_lower_bound", r.gapToLowerBound},
         {"gap_to_busiest_work", r.gapToBusiestWork},
         {"best_policy", r.bestPolicy},
         {"best_policy_makespan_ms", r.bestPolicyMakespanMs},
         {"published_heuristic", r.publishedHeuristic},
         {"published_heuristic_makespan_ms", r.paperGreedyMakespanMs},
         {"work_steps", r.workSteps},
         {"stopped_early", r.stoppedEarly},
         {"policies_tried", r.policiesTried},
         {"search_evaluations", r.searchEvaluations},
         {"search_improvements", r.searchImprovements},
         {"peak_bytes", r.peakBytes}};
  if (r.exactStatus != ExactStatus::NotRun) {
    j["exact"] = Json{{"status", std::string(exactStatusName(r.exactStatus))},
                      {"makespan_ms", r.exactMakespanMs},
                      {"bound_ms", r.exactBoundMs},
                      {"gap", r.exactGap},
                      {"message", r.exactMessage}};  // no solve time: the same request prints the same document
  }
  return j;
}

std::string_view exactStatusName(ExactStatus status) {
  switch (status) {
    case ExactStatus::NotRun:
      return "not run";
    case ExactStatus::Unavailable:
      return "unavailable (built without CBC)";
    case ExactStatus::TooLarge:
      return "too large";
    case ExactStatus::Optimal:
      return "optimal";
    case ExactStatus::TimeLimit:
      return "time limit";
    case ExactStatus::Failed:
      return "failed";
  }
  return "?";
}

bool exactSchedulingAvailable() {
#ifdef PIPESTUDIO_HAVE_CBC
  return true;
#else
  return false;
#endif
}

double busiestDeviceWorkMs(const Plan& plan) {
  IdVector<double> busy(std::max(0, plan.config.devices), 0.0);
  for (const Op& op : plan.ops) {
    if (busy.contains(op.device)) busy[op.device] += op.durationMs();
  }
  return busy.empty() ? 0.0 : *std::max_element(busy.begin(), busy.end());
}

Expected<ScheduleSkeleton> improveOrder(const ScheduleInput& input, const ScheduleSkeleton& start,
                                        const std::vector<std::int64_t>& capBytes, int maxEvaluations) {
  using namespace autosched;
  ScheduleInput unlimited = input;
  unlimited.memoryLimitBytes.reset();
  unlimited.request = nullptr;
  PS_ASSIGN_OR_RETURN(Instance inst, buildInstance(unlimited));
  if (capBytes.size() != static_cast<std::size_t>(inst.devices))
    return Error{"improveOrder: one cap per device expected"};
  inst.budgetBytes = capBytes;
  PS_ASSIGN_OR_RETURN(auto orders, fromSkeleton(inst, start));
  const Timing t = timeOrders(inst, orders);
  if (!t.ok) return Error{t.problem};
  if (!t.memoryOk) return Error{"improveOrder: the order exceeds its activation caps"};
  double objective = t.objectiveMs;
  AutoScheduleOptions options;
  options.maxSearchEvaluations = maxEvaluations;
  options.workBudgetSteps = std::numeric_limits<std::int64_t>::max() / 2;
  AutoScheduleReport report;
  const SolveControl* control = input.control;
  localSearch(inst, orders, objective, options, report,
              [control] { return control != nullptr && control->cancelled(); });
  return toSkeleton(inst, orders, input.virtualStages);
}

Expected<OrderTiming> timeAutoOrder(const ScheduleInput& input, const ScheduleSkeleton& skeleton) {
  using namespace autosched;
  ScheduleInput unlimited = input;
  unlimited.memoryLimitBytes.reset();
  unlimited.request = nullptr;  // timing only: no memory check here
  PS_ASSIGN_OR_RETURN(auto inst, buildInstance(unlimited));
  PS_ASSIGN_OR_RETURN(auto orders, fromSkeleton(inst, skeleton));
  const Timing t = timeOrders(inst, orders);
  if (!t.ok) return Error{t.problem};
  OrderTiming out;
  out.makespanMs = t.makespanMs;
  for (std::size_t d = 0; d < inst.staticBytes.size(); ++d) {
    out.peakBytes.push_back(inst.staticBytes[d] + t.peakActivationBytes[d]);
  }
  return out;
}

Expected<AutoScheduleResult> autoSchedule(const ScheduleInput& input, const AutoScheduleOptions& options) {
  using namespace autosched;
  PS_ASSIGN_OR_RETURN(const Instance inst, buildInstance(input));
  AutoScheduleResult result;
  AutoScheduleReport& report = result.report;
  AutoSearch search(inst, input, options, report);
  PS_RETURN_IF_ERROR(search.run());
  const Orders& best = search.best();
  const Timing final = timeOrders(inst, best);
  report.makespanMs = final.makespanMs;
  report.objectiveMs = final.objectiveMs;
  report.gapToBusiestWork = report.busiestDeviceWorkMs > 0 ? report.makespanMs / report.busiestDeviceWorkMs - 1 : 0;
  report.gapToLowerBound = report.lowerBoundMs > 0 ? report.makespanMs / report.lowerBoundMs - 1 : 0;
  for (std::size_t d = 0; d < inst.staticBytes.size(); ++d) {
    report.peakBytes.push_back(inst.staticBytes[d] + final.peakActivationBytes[d]);
  }
  result.skeleton = toSkeleton(inst, best, input.virtualStages);
  if (input.control != nullptr && input.control->progress) input.control->progress(1.0);
  return result;
}

}  // namespace pipestudio
