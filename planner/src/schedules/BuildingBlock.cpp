// v-half and v-min: V-shaped schedules built from a repeating building block (Qi, Wan,
// Amar, Lin 2024, "Pipeline Parallelism with Controllable Memory", §3–§4).
//
// A building block lays out the F, B and W passes of one microbatch over all virtual
// stages. Repeating it every period T (one microbatch's work on a device) gives the steady
// state, and the block's lifespans (F start to W end of a stage) fix the peak activation
// memory: a stage whose lifespan is L holds ⌈L/T⌉ microbatches at once (§3). The V
// placement pairs a long-lived first-half stage with its short-lived mirror on each
// device, so every device holds about the same (§4).
//
// Construction of a block:
//   * F of stage s+1 aims δF slots (one slot = an average pass) after F of s on the ideal
//     line, B of s δB slots after B of s+1, B of the last stage right after its F; a pass
//     never starts before its input is ready (transfer included). The lifespan of stage s
//     is then about (n−1−s)(δF+δB) slots: δF+δB = 2 is v-min (the paper's table: (p+4)/3
//     microbatches, ~⅓ of 1F1B), 3 is v-half ((p+2)/2, ~½).
//   * A pass that would collide, modulo T, with a pass of the block already on its device
//     (the two would overlap once the block repeats) moves to the next free gap; W goes
//     into the first free gap after its B (§4). Aiming at the ideal line rather than at the
//     predecessor keeps such pushes from accumulating down the chain.
//   * Slot blocks take every pass as one slot (the paper designs blocks with
//     T_F = T_B = T_W): their memory is the paper's whatever the real costs. Timed blocks
//     use the stage estimates' durations: fewer stalls when F, B and W differ, at the price
//     of lifespans (memory) that depend on the costs. A pass that fits no gap of a timed
//     block (the period fragmented) takes the widest one and overlaps its neighbour.
// Repetition: device d's order is its passes sorted by start modulo T, once per period,
// each pass taking microbatch (period index − ⌊start / T⌋); microbatches outside 0..m−1
// are left out. Squeeze: the simulator starts every op as soon as its inputs and its device
// allow, in this order, which removes the empty slots of the warm-up and cool-down. A
// device's live activations change only at its own ops, so a fixed order keeps the peak.
// Choice: each schedule builds a few blocks (offsets × slot/timed), times each repeated
// order on the stage estimates, and keeps v-min: the least memory (then the fastest);
// v-half: the fastest within the paper's (p+2)/2 microbatches (else the least memory).
// Reorder (warm-up): forwards move into the warm-up's waits while the live bytes stay
// under the steady state's peak (reorderWarmUp below); it takes v-half from 0.57 to 0.52 of
// 1F1B's bubble at p = 8. Moving W passes into the cool-down's waits was tried and changed
// no makespan (p = 4…64): the B chain sets the cool-down.
#include <algorithm>
#include <cmath>
#include <limits>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "schedules/Generators.hpp"
#include "schedules/OrderTiming.hpp"

namespace pipestudio::schedules {
namespace {

// The local search after the block: on instances up to kSearchMaxOps ops, with
// kSearchSteps / ops order timings (at most 2000).
constexpr double kSearchMaxOps = 1 << 16;
constexpr double kSearchSteps = 4e6;
constexpr std::size_t kSearchFinalists = 4;
// Grid slots the building-block search may build (all of its blocks up to p = 16).
constexpr double kSearchCells = 1e7;

struct BlockShape {
  double forwardOffset;   // δF in slots
  double backwardOffset;  // δB in slots
  bool timed;             // stage estimates' durations (else one slot per pass)
};

struct BlockPass {
  double start;  // within the block, may exceed the period (slots or ms)
  OpKind kind;
  int stage;
};

struct Block {
  double period = 0;
  IdVector<std::vector<BlockPass>> devices;  // passes of one microbatch, per device
  int lastWindow = 0;                        // max over passes of ⌊start / period⌋
};

double workOf(const StageEstimate& e) { return e.forwardMs + e.backwardInputMs + e.backwardWeightMs; }

// The state of one block under construction (buildBlock): its period and unit, the passes'
// durations in that unit, and the occupied intervals modulo the period per device, where
// place() puts each pass.
class BlockBuilder {
 public:
  BlockBuilder(const ScheduleInput& input, const BlockShape& shape);

  double fwd(int stage) const { return m_shape.timed ? m_input.estimate(stage).forwardMs : 1.0; }
  double bwd(int stage) const { return m_shape.timed ? m_input.estimate(stage).backwardInputMs : 1.0; }
  double wgt(int stage) const { return m_shape.timed ? m_input.estimate(stage).backwardWeightMs : 1.0; }
  double send(int stage) const {
    const double ms = m_input.estimate(stage).sendMs;
    if (m_shape.timed) return ms;
    return m_slotMs > 0 ? std::floor(ms / m_slotMs + 0.5) : 0.0;  // a transfer under half a slot hides
  }
  double unit() const { return m_shape.timed ? m_slotMs : 1.0; }  // one slot in the block's time unit
  double place(int stage, OpKind kind, double duration, double earliest);
  Block take() { return std::move(m_block); }

 private:
  using Intervals = std::vector<std::pair<double, double>>;
  double conflictEnd(const Intervals& busy, double t, double d) const;
  double widestGapStart(const Intervals& busy, double earliest, double t) const;

  const ScheduleInput& m_input;
  const BlockShape& m_shape;
  double m_slotMs = 0;
  Block m_block;
  double m_eps = 0;
  // Occupied intervals modulo the period, per device: [a, b) with 0 ≤ a < period.
  IdVector<Intervals> m_taken;
};

BlockBuilder::BlockBuilder(const ScheduleInput& input, const BlockShape& shape) : m_input(input), m_shape(shape) {
  const int p = input.shape.devices;
  double total = 0;
  IdVector<double> deviceWork(p, 0.0);
  for (std::size_t s = 0; s < input.stages.size(); ++s) {
    total += workOf(input.stages[s]);
    deviceWork[input.virtualStages[s].device] += workOf(input.stages[s]);
  }
  m_slotMs = total / (3.0 * static_cast<double>(std::max<std::size_t>(1, input.stages.size())));
  IdVector<int> perDevice(p, 0);
  for (const auto& vs : input.virtualStages) ++perDevice[vs.device];
  m_block.period = shape.timed ? std::max(1e-9, *std::max_element(deviceWork.begin(), deviceWork.end()))
                               : 3.0 * *std::max_element(perDevice.begin(), perDevice.end());
  m_block.devices.resize(p);
  m_eps = 1e-9 * std::max(1.0, m_block.period);
  m_taken.resize(p);
}

// The end (unwrapped near t) of the first taken interval that [t, t + d) meets, or t.
double BlockBuilder::conflictEnd(const Intervals& busy, double t, double d) const {
  const double period = m_block.period;
  const double base = std::floor(t / period) * period;
  for (const auto& [a, b] : busy) {
    for (double shift : {base - period, base, base + period}) {
      if (a + shift < t + d - m_eps && t < b + shift - m_eps) return b + shift;
    }
  }
  return t;
}

// No gap is wide enough (timed blocks only: slots always fit): the start of the widest gap at
// or after `earliest` (t when there is none); the simulator serialises the overlap.
double BlockBuilder::widestGapStart(const Intervals& busy, double earliest, double t) const {
  const double period = m_block.period;
  auto sorted = busy;
  std::sort(sorted.begin(), sorted.end());
  double bestWidth = -1;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const double gapStart = sorted[i].second;
    const double gapEnd = i + 1 < sorted.size() ? sorted[i + 1].first : sorted.front().first + period;
    const double shift = std::ceil((earliest - gapEnd) / period) * period;  // first copy ending after earliest
    const double begin = std::max(gapStart + shift, earliest);
    if (gapEnd + shift - begin > bestWidth + m_eps) {
      bestWidth = gapEnd + shift - begin;
      t = begin;
    }
  }
  return t;
}

double BlockBuilder::place(int stage, OpKind kind, double duration, double earliest) {
  const double period = m_block.period;
  const int d = m_input.stage(stage).device;
  auto& busy = m_taken[d];
  double t = earliest;
  bool placed = false;
  for (std::size_t tries = 0; tries <= 2 * busy.size() + 2; ++tries) {
    const double next = conflictEnd(busy, t, duration);
    if (next == t) {
      placed = true;
      break;
    }
    t = next;
  }
  if (!placed) t = widestGapStart(busy, earliest, t);
  const double a = t - std::floor(t / period) * period;
  busy.emplace_back(a, a + duration);
  m_block.devices[d].push_back({t, kind, stage});
  m_block.lastWindow = std::max(m_block.lastWindow, static_cast<int>(std::floor(t / period)));
  return t;
}

Block buildBlock(const ScheduleInput& input, const std::vector<int>& chain, const BlockShape& shape) {
  const auto n = chain.size();
  BlockBuilder builder(input, shape);
  std::vector<double> f(n), b(n);
  double target = 0;  // the ideal line
  for (std::size_t i = 0; i < n; ++i) {
    double earliest = 0;
    if (i > 0) {
      const double ready = builder.fwd(chain[i - 1]) + builder.send(chain[i - 1]);
      target += std::max(ready, shape.forwardOffset * builder.unit());
      earliest = std::max(f[i - 1] + ready, target);
    }
    f[i] = builder.place(chain[i], OpKind::F, builder.fwd(chain[i]), earliest);
  }
  target += builder.fwd(chain[n - 1]);
  for (std::size_t k = n; k-- > 0;) {
    double earliest = f[k] + builder.fwd(chain[k]);
    if (k + 1 < n) {
      const double ready = builder.bwd(chain[k + 1]) + builder.send(chain[k]);
      target += std::max(ready, shape.backwardOffset * builder.unit());
      earliest = std::max(b[k + 1] + ready, target);
    }
    b[k] = builder.place(chain[k], OpKind::B, builder.bwd(chain[k]), earliest);
  }
  for (std::size_t k = n; k-- > 0;) {
    builder.place(chain[k], OpKind::W, builder.wgt(chain[k]), b[k] + builder.bwd(chain[k]));
  }
  return builder.take();
}

// Repetition: per device, the block's passes by start modulo the period, once per period.
Expected<std::vector<std::vector<OrderedOp>>> repeatBlock(Block block, int microbatches, const SolveControl* control) {
  std::vector<std::vector<OrderedOp>> out;
  const double period = block.period;
  for (std::vector<BlockPass>& passes : block.devices) {
    std::vector<OrderedOp>& lane = out.emplace_back();
    auto window = [period](const BlockPass& pass) { return static_cast<int>(std::floor(pass.start / period)); };
    std::sort(passes.begin(), passes.end(), [&](const BlockPass& x, const BlockPass& y) {
      return x.start - window(x) * period < y.start - window(y) * period;
    });
    lane.reserve(passes.size() * static_cast<std::size_t>(microbatches));
    for (int w = 0; w < microbatches + block.lastWindow; ++w) {
      if (control && (w & 1023) == 1023 && control->cancelled()) return Error::cancelled();
      for (const BlockPass& pass : passes) {
        const int mb = w - window(pass);
        if (mb < 0 || mb >= microbatches) continue;
        OrderedOp o;
        o.virtualStage = pass.stage;
        o.kind = pass.kind;
        o.microbatch = mb;
        lane.push_back(o);
      }
    }
  }
  return out;
}

struct OrderEstimate {
  double makespanMs = 0;
  double peakRatio = 0;  // max over devices of peak live activation / one microbatch's activation there
  // Only when asked for: per device, parallel to the order, each op's start and end; and the
  // end of every F by stage and microbatch (−1: never ran).
  std::vector<std::vector<std::pair<double, double>>> times;
  Grid<double> forwardEndMs;
};

// Times a per-device order on the stage estimates (transfers not serialised) and measures
// its activation peaks (docs/formats.md: live from F start; B frees all but the weight-gradient
// part, W the rest). The orders come from a collision-free repetition, so they never stall.
OrderEstimate estimateOrder(const ScheduleInput& input, const std::vector<int>& chain,
                            const std::vector<std::vector<OrderedOp>>& order, int microbatches,
                            bool keepTimes = false) {
  const int n = static_cast<int>(input.virtualStages.size());
  IdVector<int> prev(n, -1), next(n, -1);
  for (std::size_t i = 0; i < chain.size(); ++i) {
    if (i > 0) prev[chain[i]] = chain[i - 1];
    if (i + 1 < chain.size()) next[chain[i]] = chain[i + 1];
  }
  const double kNotYet = -1;
  Grid<double> fEnd(n, microbatches, kNotYet), bEnd(n, microbatches, kNotYet);
  const std::size_t p = order.size();
  std::vector<std::size_t> at(p, 0);
  std::vector<double> freeAt(p, 0.0);
  std::vector<std::int64_t> live(p, 0), peak(p, 0), perMicrobatch(p, 0);
  for (std::size_t s = 0; s < input.virtualStages.size(); ++s) {
    perMicrobatch[static_cast<std::size_t>(input.virtualStages[s].device)] += input.stages[s].activationBytes;
  }
  OrderEstimate result;
  if (keepTimes) {
    result.times.resize(p);
    for (std::size_t d = 0; d < p; ++d) result.times[d].resize(order[d].size());
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t d = 0; d < p; ++d) {
      for (; at[d] < order[d].size(); ++at[d]) {
        const OrderedOp& o = order[d][at[d]];
        const int s = o.virtualStage;
        const int mb = o.microbatch;
        const StageEstimate& e = input.estimate(s);
        double ready = 0;
        double duration = 0;
        if (o.kind == OpKind::F) {
          if (prev[s] >= 0) {
            ready = fEnd(prev[s], mb);
            if (ready == kNotYet) break;
            ready += input.estimate(prev[s]).sendMs;
          }
          duration = e.forwardMs;
        } else if (o.kind == OpKind::B) {
          if (next[s] >= 0) {
            ready = bEnd(next[s], mb);
            if (ready == kNotYet) break;
            ready += e.sendMs;
          } else {
            ready = fEnd(s, mb);
            if (ready == kNotYet) break;
          }
          duration = e.backwardInputMs;
        } else {
          ready = bEnd(s, mb);
          if (ready == kNotYet) break;
          duration = e.backwardWeightMs;
        }
        const double start = std::max(ready, freeAt[d]);
        const double end = start + duration;
        if (keepTimes) result.times[d][at[d]] = {start, end};
        freeAt[d] = end;
        result.makespanMs = std::max(result.makespanMs, end);
        if (o.kind == OpKind::F) {
          fEnd(s, mb) = end;
          live[d] += e.activationBytes;
          peak[d] = std::max(peak[d], live[d]);
        } else if (o.kind == OpKind::B) {
          bEnd(s, mb) = end;
          live[d] -= e.activationBytes - e.weightGradBytes;
        } else {
          live[d] -= e.weightGradBytes;
        }
        progress = true;
      }
    }
  }
  if (keepTimes) result.forwardEndMs = std::move(fEnd);
  for (std::size_t d = 0; d < p; ++d) {
    if (perMicrobatch[d] > 0) {
      result.peakRatio =
          std::max(result.peakRatio, static_cast<double>(peak[d]) / static_cast<double>(perMicrobatch[d]));
    }
  }
  return result;
}

// Reorder (the paper's optional pass, §3): in the warm-up a device idles while its second
// chunk waits for the first microbatch to come back, and its memory is far below the
// steady state's. A later F whose input is ready then moves into such a wait when it fits
// entirely (no op of the device starts later) and the live bytes from its new place to its
// old one stay within the device's peak (so the peak cannot rise). Times are the estimate's
// before the moves, which only get earlier as ops move up. Moves stay within the first
// `limit[d]` ops of each device. Returns whether anything moved.
bool reorderWarmUp(const ScheduleInput& input, const std::vector<int>& chain, const OrderEstimate& estimate,
                   const std::vector<std::size_t>& limit, std::vector<std::vector<OrderedOp>>& order) {
  constexpr double kTolerance = 1e-9;
  IdVector<int> prev(input.virtualStages.size(), -1);
  for (std::size_t i = 1; i < chain.size(); ++i) prev[chain[i]] = chain[i - 1];
  auto readyMs = [&](const OrderedOp& f) {
    const int ps = prev[f.virtualStage];
    if (ps < 0) return 0.0;
    const double end = estimate.forwardEndMs(ps, f.microbatch);
    if (end < 0) return std::numeric_limits<double>::infinity();
    return end + input.estimate(ps).sendMs;
  };
  bool moved = false;
  for (std::size_t d = 0; d < order.size(); ++d) {
    auto& ops = order[d];
    auto times = estimate.times[d];
    // Live bytes while each op runs (an F's own activation included), recounted from
    // position `from` to `to` (inclusive) after a move; before[i]: live bytes as op i starts.
    std::vector<std::int64_t> live(ops.size()), before(ops.size() + 1, 0);
    auto recount = [&](std::size_t from, std::size_t to) {
      std::int64_t now = before[from];
      for (std::size_t i = from; i <= to && i < ops.size(); ++i) {
        const StageEstimate& e = input.estimate(ops[i].virtualStage);
        before[i] = now;
        if (ops[i].kind == OpKind::F) now += e.activationBytes;
        live[i] = now;
        if (ops[i].kind == OpKind::B) now -= e.activationBytes - e.weightGradBytes;
        if (ops[i].kind == OpKind::W) now -= e.weightGradBytes;
      }
    };
    recount(0, ops.size());
    const std::int64_t peak = live.empty() ? 0 : *std::max_element(live.begin(), live.end());
    std::size_t firstB = 0;
    while (firstB < ops.size() && ops[firstB].kind != OpKind::B) ++firstB;
    const std::size_t end = std::min(limit[d], ops.size());
    for (std::size_t j = 1; j < std::min(firstB + 1, end); ++j) {
      double gapStart = times[j - 1].second;
      const double gapEnd = times[j].first;
      std::int64_t liveMax = 0;  // max of live[j..k)
      for (std::size_t k = j; k < end && gapEnd - gapStart > kTolerance; ++k) {
        if (k > j && ops[k].kind == OpKind::F) {
          const StageEstimate& e = input.estimate(ops[k].virtualStage);
          if (e.forwardMs <= gapEnd - gapStart + kTolerance && readyMs(ops[k]) <= gapStart + kTolerance &&
              liveMax + e.activationBytes <= peak) {
            const OrderedOp f = ops[k];
            ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(k));
            times.erase(times.begin() + static_cast<std::ptrdiff_t>(k));
            ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(j), f);
            times.insert(times.begin() + static_cast<std::ptrdiff_t>(j), {gapStart, gapStart + e.forwardMs});
            recount(j, k);  // only ops j..k see different live bytes
            gapStart += e.forwardMs;
            moved = true;
            ++j;
            ++firstB;
            k = j - 1;  // rescan after the moved op: live bytes changed
            liveMax = 0;
            continue;
          }
        }
        liveMax = std::max(liveMax, live[k]);
      }
    }
  }
  return moved;
}

enum class Goal { LeastMemory, FastestWithinHalf };

struct BlockSpec {
  const char* name;
  Goal goal;
  std::vector<BlockShape> candidates;
};

// Compare candidate blocks on evalMicrobatches (enough to reach their steady state, where the
// memory peak is, plus a few periods): v-min keeps the least memory (then the fastest), v-half
// the fastest within the paper's V-Half budget, (p+2)/2 microbatches (its table), in units of
// one microbatch's activation on a device (a whole number of microbatches: ⌊(p+2)/2⌋).
Expected<std::size_t> chooseBlock(const ScheduleInput& input, const std::vector<int>& chain,
                                  const std::vector<Block>& blocks, int evalMicrobatches, Goal goal) {
  const int halfBudgetMicrobatches = (input.shape.devices + 2) / 2;
  const double halfBudget = halfBudgetMicrobatches + 1e-9;
  std::size_t best = 0;
  OrderEstimate bestEstimate;
  for (std::size_t c = 0; c < blocks.size(); ++c) {
    if (blocks.size() == 1) break;
    PS_ASSIGN_OR_RETURN(auto trial, repeatBlock(blocks[c], evalMicrobatches, input.control));
    const OrderEstimate e = estimateOrder(input, chain, trial, evalMicrobatches);
    bool better = c == 0;
    if (!better && goal == Goal::LeastMemory) {
      better = e.peakRatio < bestEstimate.peakRatio - 1e-9 ||
               (e.peakRatio <= bestEstimate.peakRatio + 1e-9 && e.makespanMs < bestEstimate.makespanMs);
    } else if (!better) {
      const bool fits = e.peakRatio <= halfBudget;
      const bool bestFits = bestEstimate.peakRatio <= halfBudget;
      better = fits ? (!bestFits || e.makespanMs < bestEstimate.makespanMs)
                    : (!bestFits && e.peakRatio < bestEstimate.peakRatio);
    }
    if (better) {
      best = c;
      bestEstimate = e;
    }
  }
  return best;
}

// Reorder the warm-up on the short run, then carry its first ops over to `devices` (the block
// repeated m times): both orders agree up to where the short run's microbatches end, and the
// warm-up lies well before that.
Status reorderWarmUpOf(const ScheduleInput& input, const std::vector<int>& chain, const Block& block,
                       int evalMicrobatches, std::vector<std::vector<OrderedOp>>& devices) {
  const int m = input.shape.microbatches;
  PS_ASSIGN_OR_RETURN(auto trial, evalMicrobatches < m ? repeatBlock(block, evalMicrobatches, input.control) : devices);
  std::vector<std::size_t> common(devices.size(), 0);
  for (std::size_t d = 0; d < common.size(); ++d) {
    const auto& a = trial[d];
    const auto& b = devices[d];
    std::size_t& c = common[d];
    while (c < a.size() && c < b.size() && a[c].virtualStage == b[c].virtualStage && a[c].kind == b[c].kind &&
           a[c].microbatch == b[c].microbatch) {
      ++c;
    }
  }
  constexpr int kReorderRounds = 2;  // a third round moved nothing on p = 4…64
  for (int round = 0; round < kReorderRounds; ++round) {
    const OrderEstimate e = estimateOrder(input, chain, trial, evalMicrobatches, true);
    if (!reorderWarmUp(input, chain, e, common, trial)) break;
  }
  for (std::size_t d = 0; d < common.size(); ++d) {
    std::copy(trial[d].begin(), trial[d].begin() + static_cast<std::ptrdiff_t>(common[d]), devices[d].begin());
  }
  return {};
}

// On instances small enough, more candidates within the schedule's budget (the paper's table:
// v-half (p+2)/2 microbatches, v-min (p+4)/3, of each device's activation), every one timed as
// the simulator times it, the fastest kept: the authors' building-block search
// (BlockSearch.cpp, blockSearch); then zb-auto's critical-path moves within the budget (run).
class BudgetSearch {
 public:
  BudgetSearch(const ScheduleInput& input, Goal goal, ScheduleSkeleton& out)
      : m_input(input),
        m_out(out),
        m_budgetMicrobatches(
            std::max(1, goal == Goal::LeastMemory ? (input.shape.devices + 4) / 3 : (input.shape.devices + 2) / 2)) {
    for (const std::int64_t bytes : activationPerMicrobatch(input, 0)) m_caps.push_back(m_budgetMicrobatches * bytes);
    m_bestTiming = timeOrder(input, out.devices);
    m_bestFits = fits(out.devices);
  }

  Status run(double ops) {
    if (isSingleV(m_input)) blockSearch();
    if (m_input.control && m_input.control->cancelled()) return Error::cancelled();
    if (!m_bestFits) return {};  // no candidate keeps the budget: the block as built
    const int evaluations = static_cast<int>(std::min(2000.0, kSearchSteps / ops));
    auto improved = improveOrder(m_input, m_out, m_caps, evaluations);
    if (improved) m_out = std::move(*improved);
    return {};
  }

 private:
  bool fits(const std::vector<std::vector<OrderedOp>>& order) const {
    const auto peaks = orderPeakBytes(m_input, order);
    for (std::size_t d = 0; d < m_caps.size(); ++d) {
      if (peaks[d] > m_caps[d]) return false;
    }
    return true;
  }
  void consider(std::vector<std::vector<OrderedOp>>&& order) {
    if (!fits(order)) return;
    OrderTiming t = timeOrder(m_input, order);
    if (!m_bestFits || fasterThan(t, m_bestTiming)) {
      m_out.devices = std::move(order);
      m_bestTiming = std::move(t);
      m_bestFits = true;
    }
  }
  // The search on at most 2p microbatches (as many as the reference's own search builds its
  // blocks with); with more, its kSearchFinalists fastest blocks are built in full.
  void blockSearch() {
    const int p = m_input.shape.devices;
    const int m = m_input.shape.microbatches;
    const int units = 2 * m_budgetMicrobatches;
    const int searchMicrobatches = std::min(m, 2 * p);
    auto found = vBlockSearch(p, searchMicrobatches, units, kSearchCells, m_input.control);
    if (searchMicrobatches == m) {
      for (auto& c : found) consider(std::move(c.order));
      return;
    }
    ScheduleInput shortRun = m_input;
    shortRun.shape.microbatches = searchMicrobatches;
    std::vector<std::pair<OrderTiming, std::size_t>> ranked;
    for (std::size_t i = 0; i < found.size(); ++i) {
      OrderTiming t = timeOrder(shortRun, found[i].order);
      if (t.ok) ranked.emplace_back(std::move(t), i);
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return fasterThan(a.first, b.first); });
    for (std::size_t r = 0; r < ranked.size() && r < kSearchFinalists; ++r) {
      if (auto full = vBlockBuild(p, m, units, found[ranked[r].second].key)) consider(std::move(*full));
    }
  }

  const ScheduleInput& m_input;
  ScheduleSkeleton& m_out;
  const int m_budgetMicrobatches;
  std::vector<std::int64_t> m_caps;  // per device
  OrderTiming m_bestTiming;
  bool m_bestFits = false;
};

class BlockGenerator final : public ScheduleGenerator {
 public:
  explicit BlockGenerator(BlockSpec spec) : m_spec(std::move(spec)) {}
  std::string_view name() const override { return m_spec.name; }
  int defaultChunksPerDevice() const override { return 2; }
  bool splitsBackward() const override { return true; }

  Status validate(const ScheduleShape& shape) const override {
    const int v = shape.chunksPerDevice;
    return requireChunks(name(), shape, v >= 2 && v % 2 == 0, "an even number of chunks per device (V shape)");
  }

  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    return wavePlacement(shape.devices, shape.chunksPerDevice);
  }

  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int m = input.shape.microbatches;
    const auto chain = pipelineChains(input.virtualStages).front();
    std::vector<Block> blocks;
    int horizon = 0;
    for (const BlockShape& shape : m_spec.candidates) {
      blocks.push_back(buildBlock(input, chain, shape));
      horizon = std::max(horizon, blocks.back().lastWindow);
    }
    // The choice does not depend on m beyond the blocks' steady state plus a few periods.
    const int evalMicrobatches = std::min(m, horizon + 4);
    PS_ASSIGN_OR_RETURN(const std::size_t best, chooseBlock(input, chain, blocks, evalMicrobatches, m_spec.goal));
    PS_ASSIGN_OR_RETURN(auto devices, repeatBlock(blocks[best], m, input.control));
    PS_RETURN_IF_ERROR(reorderWarmUpOf(input, chain, blocks[best], evalMicrobatches, devices));
    ScheduleSkeleton out;
    out.virtualStages = input.virtualStages;
    out.devices = std::move(devices);
    const double ops = 3.0 * static_cast<double>(input.virtualStages.size()) * m;
    if (ops > kSearchMaxOps || (input.control && !input.control->refine)) return out;
    PS_RETURN_IF_ERROR(BudgetSearch(input, m_spec.goal, out).run(ops));
    return out;
  }

 private:
  BlockSpec m_spec;
};

}  // namespace

std::unique_ptr<ScheduleGenerator> makeVHalf() {
  return std::make_unique<BlockGenerator>(
      BlockSpec{"v-half",
                Goal::FastestWithinHalf,
                {{2, 1, false}, {1, 2, false}, {1.5, 1.5, false}, {2, 1, true}, {1, 2, true}, {1.5, 1.5, true}}});
}
std::unique_ptr<ScheduleGenerator> makeVMin() {
  return std::make_unique<BlockGenerator>(BlockSpec{"v-min", Goal::LeastMemory, {{1, 1, false}, {1, 1, true}}});
}

}  // namespace pipestudio::schedules
