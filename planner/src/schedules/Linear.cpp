// Schedules on the linear placement (one chunk per device unless interleaved): GPipe,
// 1F1B (PipeDream-Flush), interleaved 1F1B (Megatron-LM) and the handcrafted zero-bubble
// schedules ZB-H1 / ZB-H2 (Qi et al. 2023, §2).
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "schedules/Generators.hpp"
#include "schedules/OrderTiming.hpp"

namespace pipestudio::schedules {
namespace {

// Interleaved 1F1B times its two candidate orders in full up to this many ops.
constexpr double kExactChoiceOps = 1 << 17;
// zb-h2 grows ZB-H1 into its idle time with at most this much work (moves × timing steps).
constexpr double kGrowWork = 2e7;

// Per device, its op order.
using Lanes = IdVector<std::vector<OrderedOp>>;

ScheduleSkeleton skeleton(const ScheduleInput& input, Lanes&& lanes) {
  ScheduleSkeleton s;
  s.virtualStages = input.virtualStages;
  s.devices = std::move(lanes.values());
  return s;
}

Status requireOneChunk(std::string_view name, const ScheduleShape& shape) {
  return requireChunks(name, shape, shape.chunksPerDevice == 1, "one chunk per device");
}

// The schedules of one stage per device in Megatron's linear placement (gpipe, 1f1b, zb-h1,
// zb-h2): their shape check and placement.
class OneStagePerDevice : public ScheduleGenerator {
 public:
  OneStagePerDevice(std::string_view name, bool splitsBackward) : m_name(name), m_splitsBackward(splitsBackward) {}
  std::string_view name() const override { return m_name; }
  bool splitsBackward() const override { return m_splitsBackward; }
  int defaultChunksPerDevice() const override { return 1; }
  Status validate(const ScheduleShape& shape) const override { return requireOneChunk(name(), shape); }
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    return linearPlacement(shape.devices, 1);
  }

 private:
  std::string_view m_name;
  bool m_splitsBackward;
};

class Gpipe final : public OneStagePerDevice {
 public:
  Gpipe() : OneStagePerDevice("gpipe", false) {}
  // Huang et al. 2019: all forwards, then all backwards (fused BW).
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int m = input.shape.microbatches;
    Lanes lanes(input.shape.devices);
    for (int d = 0; d < input.shape.devices; ++d) {
      auto& ops = lanes[d];
      ops.reserve(2 * static_cast<std::size_t>(m));
      for (int mb = 0; mb < m; ++mb) ops.push_back(orderedOp(d, OpKind::F, mb));
      for (int mb = 0; mb < m; ++mb) ops.push_back(orderedOp(d, OpKind::BW, mb));
    }
    return skeleton(input, std::move(lanes));
  }
};

// 1F1B with the backward optionally split and W deferred by `lag[d]` backwards. With
// lag 0 and no split this is PipeDream-Flush (Narayanan et al. 2021): warm-up p−d−1
// forwards, then alternate F/B, then drain the backwards.
ScheduleSkeleton oneFOneB(const ScheduleInput& input, const IdVector<int>& warmup, bool split,
                          const IdVector<int>& lag) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  Lanes lanes(p);
  for (int d = 0; d < p; ++d) {
    auto& ops = lanes[d];
    ops.reserve((split ? 3U : 2U) * static_cast<std::size_t>(m));
    const int w = std::min(warmup[d], m);
    const int wlag = split ? lag[d] : 0;
    int nextF = 0;
    int nextW = 0;
    for (; nextF < w; ++nextF) ops.push_back(orderedOp(d, OpKind::F, nextF));
    for (int b = 0; b < m; ++b) {
      if (nextF < m) ops.push_back(orderedOp(d, OpKind::F, nextF++));
      ops.push_back(orderedOp(d, split ? OpKind::B : OpKind::BW, b));
      if (split && b - nextW >= wlag) ops.push_back(orderedOp(d, OpKind::W, nextW++));
    }
    for (; split && nextW < m; ++nextW) ops.push_back(orderedOp(d, OpKind::W, nextW));
  }
  return skeleton(input, std::move(lanes));
}

// PipeDream-Flush's warm-up: device d runs p−d−1 forwards before its first backward.
IdVector<int> flushWarmup(int p) {
  IdVector<int> warmup(p);
  for (int d = 0; d < p; ++d) warmup[d] = p - d - 1;
  return warmup;
}

class OneFOneB final : public OneStagePerDevice {
 public:
  OneFOneB() : OneStagePerDevice("1f1b", false) {}
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int p = input.shape.devices;
    return oneFOneB(input, flushWarmup(p), false, IdVector<int>(p, 0));
  }
};

class Interleaved final : public ScheduleGenerator {
 public:
  std::string_view name() const override { return "interleaved-1f1b"; }
  int defaultChunksPerDevice() const override { return 2; }
  bool splitsBackward() const override { return false; }
  Status validate(const ScheduleShape& shape) const override {
    if (auto st = requireChunks(name(), shape, shape.chunksPerDevice >= 1, "at least one chunk per device"); !st) {
      return st;
    }
    return requireMicrobatchesAtLeast(name(), shape, shape.devices,
                                      "(one group of microbatches per device count goes round the devices)");
  }
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    return linearPlacement(shape.devices, shape.chunksPerDevice);
  }
  // Narayanan et al. 2021 §2.2 / Megatron-LM forward_backward_pipelining_with_interleaving:
  // the k-th forward of a device runs chunk (k mod pv) / p on microbatch (k / pv)·p + k mod p;
  // backwards walk the chunks in reverse; warm-up 2(p−d−1) + (v−1)·p forwards.
  //
  // With transfers that order has a full microbatch's round trip, 2pv − 2 transfers, on its
  // critical path, where the Zero Bubble paper's 1F1B-I calculation counts 2pv − p − 2: after
  // its warm-up a device runs the first microbatch's next chunk, whose input is still going
  // round the whole pipeline (p transfers after the device sent it on), and the device has
  // nothing else to do meanwhile. Taking the next group's first chunk-0 forward into the
  // warm-up (one more forward, one more chunk's activation per device) hides that lap: the
  // paper's 2pv − p − 2. That order is used when it is faster on the stage estimates and the
  // extra activation fits the memory limit; otherwise (no transfers, one group, a tight limit,
  // unequal stages where the extra microbatch in flight costs more than it hides) Megatron-LM's.
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    ScheduleSkeleton megatron = build(input, 0);
    if (input.shape.microbatches % input.shape.devices != 0) return megatron;
    const int p = input.shape.devices;
    const bool anyTransfer =
        std::any_of(input.stages.begin(), input.stages.end(), [](const StageEstimate& e) { return e.sendMs > 0; });
    if (!anyTransfer || input.shape.microbatches < 2 * p || input.shape.chunksPerDevice < 2) return megatron;
    ScheduleSkeleton ahead = build(input, 1);
    const auto peaks = orderPeakBytes(input, ahead.devices);
    for (std::size_t d = 0; d < peaks.size(); ++d) {
      const std::int64_t limit = deviceMemoryLimit(input, static_cast<int>(d));
      const std::int64_t staticBytes = d < input.staticBytes.size() ? input.staticBytes[d] : 0;
      if (limit > 0 && staticBytes + peaks[d] > limit) return megatron;
    }
    if (input.control && input.control->cancelled()) return Error::cancelled();
    // With unequal stages the extra forward can also cost more than it hides (one more
    // microbatch in flight shifts every later pairing): both orders are timed, in full up to
    // 2^17 ops, else on their first two groups of microbatches.
    ScheduleInput shortRun = input;
    const double ops = 2.0 * static_cast<double>(input.virtualStages.size()) * input.shape.microbatches;
    if (ops > kExactChoiceOps) shortRun.shape.microbatches = std::min(input.shape.microbatches, 2 * p);
    if (shortRun.shape.microbatches == input.shape.microbatches) {
      return fasterThan(timeOrder(input, ahead.devices), timeOrder(input, megatron.devices)) ? ahead : megatron;
    }
    const ScheduleSkeleton shortAhead = build(shortRun, 1);
    const ScheduleSkeleton shortMegatron = build(shortRun, 0);
    return fasterThan(timeOrder(shortRun, shortAhead.devices), timeOrder(shortRun, shortMegatron.devices)) ? ahead
                                                                                                           : megatron;
  }

 private:
  static ScheduleSkeleton build(const ScheduleInput& input, int ahead) {
    return skeleton(input, Lanes(interleavedOrder(input, input.shape.devices, ahead)));
  }
};

// ZB-H1 (Qi et al. 2023 §2.1): 1F1B's warm-up and in-flight count, backward split; device d
// defers its W passes by d backwards, so B passes run back-to-back along the critical path
// and the deferred W fill the drain. Device bubble (p−1)(F+B−W) with equal stages.
class ZbH1 final : public OneStagePerDevice {
 public:
  ZbH1() : OneStagePerDevice("zb-h1", true) {}
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int p = input.shape.devices;
    IdVector<int> lag(p);
    for (int d = 0; d < p; ++d) lag[d] = d;
    return oneFOneB(input, flushWarmup(p), true, lag);
  }
};

// ZB-H2's counts, per device d: at most 2(p−d)−1 forwards ahead of the backwards, and W
// deferred by 2d backwards (W right after the backward that lets it run, the rest at the end).
int zbH2Ahead(int p, int m, int d) { return std::min(2 * (p - d) - 1, m); }
int zbH2Lag(int d) { return 2 * d; }

// Whether every stage has the same estimates: the setting the handcrafted schedules are made
// for (Qi et al. 2023 assume equal F, B, W and transfers across stages).
bool equalStages(const ScheduleInput& input) {
  const auto same = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, a, b}); };
  const StageEstimate& first = input.stages.front();
  return std::all_of(input.stages.begin(), input.stages.end(), [&](const StageEstimate& e) {
    return same(e.forwardMs, first.forwardMs) && same(e.backwardInputMs, first.backwardInputMs) &&
           same(e.backwardWeightMs, first.backwardWeightMs) && same(e.sendMs, first.sendMs);
  });
}

// ZB-H2's order built on the stage estimates: the counts above, and a device takes its next
// backward before its next forward when the backward's input arrives first. The handcrafted
// order runs the forwards first; with uneven stages that holds the backward chain, the critical
// path of the drain, behind a forward a slower upstream device has yet to send (a device waits
// with the backward it could run). Ops are placed in time order (list scheduling): the device
// whose next op can start first decides, so an input that is not yet known arrives later than
// any start decided before it. Transfers take StageEstimate::sendMs (links not serialised: the
// order is timed by the simulator).
std::vector<std::vector<OrderedOp>> timedZbH2Order(const ScheduleInput& input) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  Grid<double> endF(p, m, kUnknown), endB(p, m, kUnknown);
  struct Device {
    int f = 0, b = 0, w = 0;  // next forward, backward, weight pass (microbatch)
    int forcedW = -1;         // a W that runs next (the handcrafted order puts it right after its B)
    double freeMs = 0;
  };
  std::vector<Device> dev(static_cast<std::size_t>(p));
  std::vector<std::vector<OrderedOp>> lanes(static_cast<std::size_t>(p));
  const auto readyF = [&](int d, int mb) { return d == 0 ? 0.0 : endF(d - 1, mb) + input.estimate(d - 1).sendMs; };
  const auto readyB = [&](int d, int mb) {
    const double own = endF(d, mb);
    return d == p - 1 ? own : std::max(own, endB(d + 1, mb) + input.estimate(d).sendMs);
  };
  for (std::int64_t placed = 0, total = 3LL * p * m; placed < total; ++placed) {
    int best = -1;
    OpKind bestKind = OpKind::F;
    int bestMb = 0;
    double bestStart = kUnknown;
    for (int d = 0; d < p; ++d) {
      const Device& s = dev[static_cast<std::size_t>(d)];
      OpKind kind = OpKind::W;
      int mb = 0;
      double start = kUnknown;
      const bool canF = s.f < m && s.f - s.b < zbH2Ahead(p, m, d);
      const bool canB = s.b < s.f;
      if (s.forcedW >= 0 || (!canF && !canB && s.b == m && s.w < m)) {
        mb = s.forcedW >= 0 ? s.forcedW : s.w;
        start = std::max(s.freeMs, endB(d, mb));
      } else if (canF || canB) {
        const double rF = canF ? readyF(d, s.f) : kUnknown;
        const double rB = canB ? readyB(d, s.b) : kUnknown;
        const bool backwardFirst = canB && (!canF || (rF > s.freeMs && rB < rF));
        kind = backwardFirst ? OpKind::B : OpKind::F;
        mb = backwardFirst ? s.b : s.f;
        start = std::max(s.freeMs, backwardFirst ? rB : rF);
      }
      if (start < bestStart) {
        best = d;
        bestKind = kind;
        bestMb = mb;
        bestStart = start;
      }
    }
    if (best < 0) break;  // cannot happen: some device's next input is always known
    Device& s = dev[static_cast<std::size_t>(best)];
    const StageEstimate& e = input.estimate(best);
    lanes[static_cast<std::size_t>(best)].push_back(orderedOp(best, bestKind, bestMb));
    if (bestKind == OpKind::F) {
      s.freeMs = bestStart + e.forwardMs;
      endF(best, bestMb) = s.freeMs;
      ++s.f;
    } else if (bestKind == OpKind::B) {
      s.freeMs = bestStart + e.backwardInputMs;
      endB(best, bestMb) = s.freeMs;
      if (s.b++ - s.w >= zbH2Lag(best)) s.forcedW = s.w++;
    } else {
      s.freeMs = bestStart + e.backwardWeightMs;
      if (s.forcedW >= 0) {
        s.forcedW = -1;
      } else {
        ++s.w;
      }
    }
  }
  return lanes;
}

// Per-op start and end of a one-chunk linear order on the stage estimates (transfers as
// delays, links not serialised, as timedZbH2Order builds); ok false when the order waits for
// itself.
struct LinearTiming {
  bool ok = false;
  std::vector<std::vector<double>> startMs, endMs;  // per device, per position
  Grid<double> endF, endB;                          // per device, per microbatch
};

LinearTiming timeLinear(const ScheduleInput& input, const std::vector<std::vector<OrderedOp>>& lanes) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  constexpr double kUnknown = -1;
  LinearTiming t;
  t.endF = Grid<double>(p, m, kUnknown);
  t.endB = Grid<double>(p, m, kUnknown);
  t.startMs.resize(lanes.size());
  t.endMs.resize(lanes.size());
  std::vector<std::size_t> next(lanes.size(), 0);
  std::vector<double> freeMs(lanes.size(), 0.0);
  std::size_t left = 0;
  for (const auto& lane : lanes) left += lane.size();
  for (bool progress = true; progress && left > 0;) {
    progress = false;
    for (int d = 0; d < p; ++d) {
      const auto du = static_cast<std::size_t>(d);
      const StageEstimate& e = input.estimate(d);
      for (; next[du] < lanes[du].size(); ++next[du], --left, progress = true) {
        const OrderedOp& o = lanes[du][next[du]];
        const int mb = o.microbatch;
        double ready = 0, duration = 0;
        if (o.kind == OpKind::F) {
          if (d > 0 && t.endF(d - 1, mb) < 0) break;
          ready = d > 0 ? t.endF(d - 1, mb) + input.estimate(d - 1).sendMs : 0.0;
          duration = e.forwardMs;
        } else if (o.kind == OpKind::B) {
          if (t.endF(d, mb) < 0 || (d + 1 < p && t.endB(d + 1, mb) < 0)) break;
          ready = std::max(t.endF(d, mb), d + 1 < p ? t.endB(d + 1, mb) + e.sendMs : 0.0);
          duration = e.backwardInputMs;
        } else {
          if (t.endB(d, mb) < 0) break;
          ready = t.endB(d, mb);
          duration = e.backwardWeightMs;
        }
        const double start = std::max(freeMs[du], ready);
        freeMs[du] = start + duration;
        t.startMs[du].push_back(start);
        t.endMs[du].push_back(freeMs[du]);
        if (o.kind == OpKind::F) t.endF(d, mb) = freeMs[du];
        if (o.kind == OpKind::B) t.endB(d, mb) = freeMs[du];
      }
    }
  }
  t.ok = left == 0;
  return t;
}

// Moves into the idle gap of device d's `lane` before position `at` the first op after it that
// fits the gap whole on `t`'s times: the device's next forward (its input there in time, and at
// most `held` microbatches between a forward and its W at every position it passes) or its next
// W (its B already run). Every other op then starts no later than on `t` (an op only moves into
// time its device had idle, and nothing it feeds waits longer), so the step and every device's
// span can only shrink. True when an op moved.
bool fillGap(const ScheduleInput& input, const LinearTiming& t, int d, int held, std::vector<OrderedOp>& lane,
             std::size_t at) {
  const auto du = static_cast<std::size_t>(d);
  const double gapStart = at == 0 ? 0.0 : t.endMs[du][at - 1];
  const double gapEnd = t.startMs[du][at];
  if (gapEnd - gapStart <= 1e-9 * std::max(1.0, gapEnd)) return false;
  const StageEstimate& e = input.estimate(d);
  const auto fits = [&](double ready, double duration) {
    return std::max(gapStart, ready) + duration <= gapEnd + 1e-12 * std::max(1.0, gapEnd);
  };
  // Microbatches held (F run, W not yet) after each position, the highest from `at` on.
  int live = 0;
  for (std::size_t i = 0; i < at; ++i) live += lane[i].kind == OpKind::F ? 1 : lane[i].kind == OpKind::W ? -1 : 0;
  int highest = live;
  bool forwardSeen = false, weightSeen = false;
  for (std::size_t j = at; j < lane.size(); ++j) {
    const OrderedOp& o = lane[j];
    if (j > at && o.kind == OpKind::F && !forwardSeen) {
      forwardSeen = true;
      const double ready = d > 0 ? t.endF(d - 1, o.microbatch) + input.estimate(d - 1).sendMs : 0.0;
      if (highest + 1 <= held && fits(ready, e.forwardMs)) {
        const OrderedOp moved = o;
        lane.erase(lane.begin() + static_cast<std::ptrdiff_t>(j));
        lane.insert(lane.begin() + static_cast<std::ptrdiff_t>(at), moved);
        return true;
      }
    }
    if (j > at && o.kind == OpKind::W && !weightSeen) {
      weightSeen = true;
      const double ready = t.endB(d, o.microbatch);
      // Its B must come before the gap in the order (a B after it would wait for the W).
      if (ready >= 0 && ready <= gapStart + 1e-12 * std::max(1.0, gapStart) && fits(ready, e.backwardWeightMs)) {
        const OrderedOp moved = o;
        lane.erase(lane.begin() + static_cast<std::ptrdiff_t>(j));
        lane.insert(lane.begin() + static_cast<std::ptrdiff_t>(at), moved);
        return true;
      }
    }
    if (forwardSeen && weightSeen) break;
    live += o.kind == OpKind::F ? 1 : o.kind == OpKind::W ? -1 : 0;
    highest = std::max(highest, live);
  }
  return false;
}

// ZB-H2 grown from ZB-H1 (Qi et al. 2023 §2.2: ZB-H2 is ZB-H1 with more warm-up forwards and its
// W moved into the drain): while a device has idle time that its next forward (within ZB-H2's
// 2(p−d)−1 microbatches) or its next W fills whole, that op moves there. Nothing waits longer
// for it (fillGap), so the order is never slower than ZB-H1's in its step or any device's span,
// whatever the stages, and holds at most ZB-H2's microbatches. Bounded: at most `maxMoves`
// moves, each a timing of the order. Timing ignores link contention (the simulator does not):
// the caller checks the result against ZB-H1.
std::vector<std::vector<OrderedOp>> zbH2FromZbH1(const ScheduleInput& input, std::vector<std::vector<OrderedOp>> lanes,
                                                 int maxMoves) {
  const int p = input.shape.devices;
  for (int moves = 0; moves < maxMoves;) {
    const LinearTiming t = timeLinear(input, lanes);
    if (!t.ok) break;
    bool moved = false;
    for (int d = 0; d < p && !moved; ++d) {
      auto& lane = lanes[static_cast<std::size_t>(d)];
      const int held = zbH2Ahead(p, input.shape.microbatches, d);
      for (std::size_t at = 0; at < lane.size() && !moved; ++at) moved = fillGap(input, t, d, held, lane, at);
    }
    if (!moved) break;
    ++moves;
  }
  return lanes;
}

// ZB-H2 (Qi et al. 2023 §2.2): extra warm-up forwards fill the bubble before the first B
// (device d runs 2(p−d)−1 forwards before its first B, about 2p activations on device 0) and
// W are deferred by 2d backwards so the drain is filled too: zero device bubble when F=B=W.
// The handcrafted order assumes equal stages; with uneven ones it can be slower than ZB-H1
// (issue 28: 189 against 186), which holds fewer microbatches: its extra warm-up forwards sit
// at fixed places and hold up the backward chain behind a forward a slower upstream device has
// yet to send. There ZB-H2 is grown from ZB-H1 instead (zbH2FromZbH1: forwards and Ws moved only
// into idle time, never making anything wait), which is within ZB-H1's step and every device's
// span by construction; the handcrafted order and the one built on the estimates
// (timedZbH2Order) replace it only where faster and within ZB-H1's step and longest span.
class ZbH2 final : public OneStagePerDevice {
 public:
  ZbH2() : OneStagePerDevice("zb-h2", true) {}
  Status validate(const ScheduleShape& shape) const override {
    PS_RETURN_IF_ERROR(OneStagePerDevice::validate(shape));
    return requireMicrobatchesAtLeast(name(), shape, shape.devices, "(one per device, to fill its warm-up)");
  }
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int p = input.shape.devices;
    IdVector<int> warmup(p), lag(p);
    for (int d = 0; d < p; ++d) {
      warmup[d] = 2 * (p - d) - 2;  // and one more forward before the first B: zbH2Ahead
      lag[d] = zbH2Lag(d);
    }
    ScheduleSkeleton handcrafted = oneFOneB(input, warmup, true, lag);
    if (input.stages.empty() || equalStages(input)) return handcrafted;
    if (input.control && input.control->cancelled()) return Error::cancelled();
    IdVector<int> h1Warmup(p), h1Lag(p);
    for (int d = 0; d < p; ++d) {
      h1Warmup[d] = p - d - 1;
      h1Lag[d] = d;
    }
    ScheduleSkeleton h1 = oneFOneB(input, h1Warmup, true, h1Lag);
    const OrderTiming h1Timing = timeOrder(input, h1.devices);
    const auto within = [&](const OrderTiming& t) {
      const double tolerance = 1e-9 * std::max({1.0, t.makespanMs, h1Timing.makespanMs});
      return t.ok && t.makespanMs <= h1Timing.makespanMs + tolerance &&
             t.maxDeviceSpanMs <= h1Timing.maxDeviceSpanMs + tolerance;
    };
    // ZB-H2 grown from ZB-H1 into its idle time: within ZB-H1's step and spans by construction
    // (the check guards what its timing leaves out, link contention).
    const double ops = 3.0 * p * input.shape.microbatches;
    const int maxMoves = static_cast<int>(std::min(ops, kGrowWork / (ops * (p + 3.0 * input.shape.microbatches))));
    ScheduleSkeleton grown = skeleton(input, Lanes(zbH2FromZbH1(input, h1.devices, maxMoves)));
    const OrderTiming grownTiming = timeOrder(input, grown.devices);
    const bool grownFits = within(grownTiming) && !fasterThan(h1Timing, grownTiming);
    ScheduleSkeleton& base = grownFits ? grown : h1;
    const OrderTiming& baseTiming = grownFits ? grownTiming : h1Timing;
    // The handcrafted order and the one built on the estimates where they are faster still; ties
    // go to the grown order.
    const OrderTiming handcraftedTiming = timeOrder(input, handcrafted.devices);
    const bool handcraftedWins = within(handcraftedTiming) && fasterThan(handcraftedTiming, baseTiming);
    ScheduleSkeleton timed = skeleton(input, Lanes(timedZbH2Order(input)));
    const OrderTiming timedTiming = timeOrder(input, timed.devices);
    const OrderTiming& incumbent = handcraftedWins ? handcraftedTiming : baseTiming;
    if (within(timedTiming) && fasterThan(timedTiming, incumbent)) return timed;
    return handcraftedWins ? handcrafted : std::move(base);
  }
};

}  // namespace

// Megatron-LM's interleaved order (forward_backward_pipelining_with_interleaving) on groups of
// microbatches: every device runs its forwards group by group, within a group chunk by chunk
// (all of the group's microbatches on chunk 0, then chunk 1, …), its backwards the same way
// with the chunks reversed; warm-up 2(p−d−1) + (v−1)·(first group) forwards, then one forward
// and one backward alternate. With m a multiple of `groupSize` the groups are that size (the
// paper's, Megatron-LM's default p); otherwise the m microbatches split into ⌊m / groupSize⌋
// groups whose sizes differ by at most one (PyTorch's rounds, Megatron-Core's
// --microbatch-group-size-per-virtual-stage), so no group is smaller than groupSize and every
// microbatch's chunk c−1 leaves the last device before the first needs its chunk c.
// `ahead` moves the first `ahead` chunk-0 forwards of the second group into the warm-up.
std::vector<std::vector<OrderedOp>> splitFusedBackward(std::vector<std::vector<OrderedOp>> order) {
  for (auto& lane : order) {
    std::vector<OrderedOp> split;
    split.reserve(lane.size() + lane.size() / 2);
    for (const OrderedOp& o : lane) {
      if (o.kind != OpKind::BW) {
        split.push_back(o);
        continue;
      }
      OrderedOp b = o;
      b.kind = OpKind::B;
      split.push_back(b);
      b.kind = OpKind::W;
      split.push_back(b);
    }
    lane = std::move(split);
  }
  return order;
}

std::vector<std::vector<OrderedOp>> interleavedOrder(const ScheduleInput& input, int groupSize, int ahead) {
  const int p = input.shape.devices;
  const int v = input.shape.chunksPerDevice;
  const int m = input.shape.microbatches;
  const int total = m * v;
  groupSize = std::clamp(groupSize, 1, std::max(1, m));
  const int groups = std::max(1, m / groupSize);
  // The k-th forward (backward) of every device: (chunk, microbatch).
  IdVector<std::pair<int, int>> forwards, backwards;
  forwards.reserve(total);
  backwards.reserve(total);
  int firstGroup = 0;
  for (int g = 0, first = 0; g < groups; ++g) {
    const int size = m / groups + (g < m % groups ? 1 : 0);
    if (g == 0) firstGroup = size;
    for (int chunk = 0; chunk < v; ++chunk) {
      for (int mb = first; mb < first + size; ++mb) {
        forwards.emplace_back(chunk, mb);
        backwards.emplace_back(v - 1 - chunk, mb);
      }
    }
    first += size;
  }
  ahead = std::min(ahead, std::max(0, m - firstGroup));
  if (ahead > 0) {
    // Chunk 0 of the second group's first `ahead` microbatches right after the first group's chunk 0.
    std::stable_partition(forwards.begin() + firstGroup, forwards.end(), [&](const std::pair<int, int>& f) {
      return f.first == 0 && f.second >= firstGroup && f.second < firstGroup + ahead;
    });
  }
  std::vector<std::vector<OrderedOp>> lanes(static_cast<std::size_t>(p));
  for (int d = 0; d < p; ++d) {
    auto& ops = lanes[static_cast<std::size_t>(d)];
    ops.reserve(2 * static_cast<std::size_t>(total));
    auto forward = [&](int k) {
      const auto [chunk, mb] = forwards[k];
      ops.push_back(orderedOp(chunk * p + d, OpKind::F, mb));
    };
    auto backward = [&](int k) {
      const auto [chunk, mb] = backwards[k];
      ops.push_back(orderedOp(chunk * p + d, OpKind::BW, mb));
    };
    const int warmup = std::min(2 * (p - d - 1) + (v - 1) * firstGroup + ahead, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return lanes;
}

std::unique_ptr<ScheduleGenerator> makeGpipe() { return std::make_unique<Gpipe>(); }
std::unique_ptr<ScheduleGenerator> makeOneFOneB() { return std::make_unique<OneFOneB>(); }
std::unique_ptr<ScheduleGenerator> makeInterleaved() { return std::make_unique<Interleaved>(); }
std::unique_ptr<ScheduleGenerator> makeZbH1() { return std::make_unique<ZbH1>(); }
std::unique_ptr<ScheduleGenerator> makeZbH2() { return std::make_unique<ZbH2>(); }

}  // namespace pipestudio::schedules
