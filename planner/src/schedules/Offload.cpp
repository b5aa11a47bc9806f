// Activation offloading on a complete order (PipeOffload, Wan et al. 2025, §3–4; the authors'
// offloading pass, sail-sg/zero-bubble-pipeline-parallelism @ 39f2c18,
// megatron/core/pipeline_parallel/zerobubble/scheduler/offloading.py): after its forward, a
// (stage, microbatch)'s activations go to host memory over the device's host link and come back
// before its backward, so they hold no GPU memory in between. The copies share one lane per
// device (one copy at a time, as the authors' runtime runs them without --offload-overlap-sr).
//
// The order is timed first (the simulator, no copies); then per device:
//   1. candidates: every (stage, microbatch) whose stage has an offload share
//      (offloadFraction: PlanConfig::offloadRatio of the device's chunks, chunk 0 first), whose
//      time between its forward's end and its backward's start holds both copies;
//   2. peak first: while the device's highest live memory can be lowered, the candidate with
//      the most bytes that can be away (offloaded before, reloaded after) for the whole first
//      interval at that height, with its reload as late and its offload as early as the lane
//      allows;
//   3. the others longest-lived first (the most memory-time per copy), each reload as late as
//      the lane allows before its backward (the activations come back just in time, as the
//      authors place their receives backwards from the end), then its offload as early as the
//      lane allows after its forward and before that reload; a candidate for which either does
//      not fit keeps its activations (the authors drop an offload whose window is too short);
//   4. each copy goes into the device's order after the last compute op that ends by its
//      planned start (where the device issues it);
//   5. where a device's highest live memory starts with a forward while one of its offloads is
//      still under way, the forward waits for that offload, if the step gets no longer
//      (gateForwards).
// Up to step 4 the compute ops never wait for a copy longer than planned (a copy is issued no
// later than its planned start and the lane runs copies in planned order), so the order's timing
// is unchanged and its live activations are, at every instant, at most what they were without
// offloading; step 5 makes forwards wait only where the step does not get longer.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

constexpr std::int32_t kNone = -1;

// At most this many rounds of the peak-first phase per device (each sweeps the device's memory
// curve); the longest-lived-first phase takes the rest.
constexpr int kPeakRounds = 512;

struct Candidate {
  std::int32_t stage = 0;
  std::int32_t microbatch = 0;
  double forwardEndMs = 0;
  double backwardStartMs = 0;
  double copyMs = 0;
  std::int64_t bytes = 0;
  double offloadStartMs = 0;
  double reloadStartMs = 0;
  bool kept = true;
};

struct Busy {
  double startMs;
  double endMs;
};

// The earliest start ≥ fromMs of a gap of `lengthMs` among `busy` (sorted, disjoint) that ends
// by `byMs`; a negative value when there is none.
double firstGap(const std::vector<Busy>& busy, double fromMs, double lengthMs, double byMs) {
  double at = fromMs;
  for (const Busy& b : busy) {
    if (b.endMs <= at) continue;
    if (at + lengthMs <= b.startMs) break;
    at = std::max(at, b.endMs);
  }
  return at + lengthMs <= byMs ? at : -1.0;
}

// The latest start ≥ notBeforeMs of a gap of `lengthMs` among `busy` that ends by `byMs`; a
// negative value when there is none.
double lastGap(const std::vector<Busy>& busy, double notBeforeMs, double lengthMs, double byMs) {
  double end = byMs;
  for (std::size_t i = busy.size(); i-- > 0;) {
    const Busy& b = busy[i];
    if (b.startMs >= end) continue;
    if (b.endMs + lengthMs <= end) break;
    end = std::min(end, b.startMs);
  }
  return end - lengthMs >= notBeforeMs ? end - lengthMs : -1.0;
}

// 1. Candidates: every (stage, unit) of the device whose stage offloads (copy time > 0) and
// whose time between its forward's end and its backward's start holds both copies.
std::vector<Candidate> offloadCandidates(const Plan& timed, const std::vector<std::int32_t>& ops,
                                         const IdVector<double>& copyMsByUnit,
                                         const IdVector<std::int64_t>& bytesByUnit, int splits) {
  const int m = timed.config.microbatches;
  std::vector<Candidate> candidates;
  std::vector<std::int32_t> forward, backward;
  const auto key = [&](const Op& op) { return static_cast<std::size_t>(op.virtualStage) * m + op.microbatch; };
  forward.assign(timed.virtualStages.size() * static_cast<std::size_t>(m), kNone);
  backward.assign(forward.size(), kNone);
  for (const std::int32_t i : ops) {
    const Op& op = timed.op(i);
    if (op.samples > 0 || op.microbatch < 0 || op.microbatch >= m) continue;
    if (op.kind == OpKind::F) forward[key(op)] = i;
    if (op.kind == OpKind::B || op.kind == OpKind::BW) backward[key(op)] = i;
  }
  for (const std::int32_t i : ops) {
    const Op& f = timed.op(i);
    if (f.kind != OpKind::F || forward[key(f)] != i || backward[key(f)] == kNone) continue;
    const int unit = f.virtualStage * splits + seqChunkOf(timed.config, f.microbatch);
    const double copy = copyMsByUnit[unit];
    if (!(copy > 0) || !std::isfinite(copy)) continue;
    const Op& b = timed.op(backward[key(f)]);
    if (b.startMs - f.endMs < 2.0 * copy) continue;  // no room for both copies
    Candidate c;
    c.stage = f.virtualStage;
    c.microbatch = f.microbatch;
    c.forwardEndMs = f.endMs;
    c.backwardStartMs = b.startMs;
    c.copyMs = copy;
    c.bytes = bytesByUnit[unit];
    candidates.push_back(c);
  }
  return candidates;
}

// The device's host link: copies reserved so far, sorted by start, disjoint.
struct HostLink {
  std::vector<Busy> busy;
  void commit(Candidate& c, double offload, double reload) {
    c.kept = true;
    c.reloadStartMs = reload;
    c.offloadStartMs = offload;
    reserve(reload, c.copyMs);
    reserve(offload, c.copyMs);
  }

 private:
  void reserve(double at, double length) {
    busy.insert(std::upper_bound(busy.begin(), busy.end(), at, [](double t, const Busy& x) { return t < x.startMs; }),
                Busy{at, at + length});
  }
};

// When no one candidate can be away for the whole peak interval [fromMs, toMs): several in turn,
// each offloaded by the time the one before comes back, the one that stays away longest first.
// Committed only if together they cover the whole interval (a partial cover would spend the
// host link without lowering the peak).
bool coverInTurns(std::vector<Candidate>& candidates, HostLink& link, double fromMs, double toMs) {
  std::vector<Candidate> trial = candidates;
  HostLink trialLink = link;
  double at = fromMs;
  while (at < toMs) {
    Candidate* best = nullptr;
    double bestOffload = 0, bestReload = 0, bestReach = at;
    for (Candidate& c : trial) {
      if (c.kept || c.forwardEndMs > at || c.backwardStartMs <= at) continue;
      const double reload = lastGap(trialLink.busy, at, c.copyMs, c.backwardStartMs);
      if (reload < 0) continue;
      const double offload = firstGap(trialLink.busy, c.forwardEndMs, c.copyMs, at);
      if (offload < 0) continue;
      const double reach = std::min(reload, toMs);
      if (reach > bestReach || (best && reach == bestReach && c.bytes > best->bytes)) {
        best = &c;
        bestOffload = offload;
        bestReload = reload;
        bestReach = reach;
      }
    }
    if (!best) return false;
    trialLink.commit(*best, bestOffload, bestReload);
    at = bestReach;
  }
  candidates = std::move(trial);
  link = std::move(trialLink);
  return true;
}

void offloadAtPeaks(std::vector<Candidate>& candidates, const std::vector<MemoryPoint>& curve, HostLink& link) {
  const std::vector<Busy>& busy = link.busy;
  // 2. Peak first: while the device's highest live memory can be lowered, the candidate with
  // the most bytes whose activations can be away for the whole first interval at that height.
  for (int round = 0; round < kPeakRounds && !candidates.empty(); ++round) {
    struct Event {
      double timeMs;
      std::int64_t delta;
    };
    std::vector<Event> events;
    events.reserve(curve.size() + 2 * candidates.size());
    std::int64_t previous = 0;
    for (const MemoryPoint& point : curve) {
      events.push_back({point.timeMs, point.bytes - previous});
      previous = point.bytes;
    }
    for (const Candidate& c : candidates) {
      if (!c.kept) continue;
      events.push_back({c.offloadStartMs + c.copyMs, -c.bytes});
      events.push_back({c.reloadStartMs, c.bytes});
    }
    std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return a.timeMs != b.timeMs ? a.timeMs < b.timeMs : a.delta < b.delta;
    });
    std::int64_t live = 0, peak = std::numeric_limits<std::int64_t>::min();
    double fromMs = 0, toMs = 0;
    bool open = false;
    for (std::size_t e = 0; e < events.size(); ++e) {
      live += events[e].delta;
      if (e + 1 < events.size() && events[e + 1].timeMs == events[e].timeMs) continue;  // one instant
      if (live > peak) {
        peak = live;
        fromMs = events[e].timeMs;
        open = true;
      } else if (open && live < peak) {
        toMs = events[e].timeMs;
        open = false;
      }
    }
    if (open) break;  // the peak lasts to the end: nothing to offload there
    Candidate* chosen = nullptr;
    double chosenOffload = 0, chosenReload = 0;
    for (Candidate& c : candidates) {
      if (c.kept || c.forwardEndMs > fromMs || c.backwardStartMs < toMs) continue;
      if (chosen && (c.bytes < chosen->bytes ||
                     (c.bytes == chosen->bytes &&
                      c.backwardStartMs - c.forwardEndMs <= chosen->backwardStartMs - chosen->forwardEndMs))) {
        continue;
      }
      const double reload = lastGap(busy, toMs, c.copyMs, c.backwardStartMs);
      if (reload < 0) continue;
      const double offload = firstGap(busy, c.forwardEndMs, c.copyMs, fromMs);
      if (offload < 0) continue;
      chosen = &c;
      chosenOffload = offload;
      chosenReload = reload;
    }
    if (chosen) {
      link.commit(*chosen, chosenOffload, chosenReload);
    } else if (!coverInTurns(candidates, link, fromMs, toMs)) {
      break;
    }
  }
}

void offloadLongestLived(std::vector<Candidate>& candidates, HostLink& link) {
  const std::vector<Busy>& busy = link.busy;
  // 3. The rest longest-lived first (the most memory-time per copy): the reload as late as the
  // lane allows before the backward, the offload as early as it allows after the forward and
  // before that reload; a candidate for which either does not fit keeps its activations.
  std::vector<std::size_t> byLife(candidates.size());
  for (std::size_t i = 0; i < byLife.size(); ++i) byLife[i] = i;
  std::stable_sort(byLife.begin(), byLife.end(), [&](std::size_t a, std::size_t b) {
    return candidates[a].backwardStartMs - candidates[a].forwardEndMs >
           candidates[b].backwardStartMs - candidates[b].forwardEndMs;
  });
  for (const std::size_t i : byLife) {
    Candidate& c = candidates[i];
    if (c.kept) continue;
    const double reload = lastGap(busy, c.forwardEndMs + c.copyMs, c.copyMs, c.backwardStartMs);
    if (reload < 0) continue;
    const double offload = firstGap(busy, c.forwardEndMs, c.copyMs, reload);
    if (offload < 0) continue;
    link.commit(c, offload, reload);
  }
}

std::vector<OrderedOp> orderWithCopies(const Plan& timed, const std::vector<std::int32_t>& ops,
                                       const std::vector<Candidate>& candidates, std::vector<std::int32_t>& newIndex) {
  // 4. Copies into the order, after the last compute op that ends by their planned start, in
  // the order of their planned starts (the lane's order).
  struct Copy {
    double startMs;
    OrderedOp op;
  };
  std::vector<Copy> copies;
  for (const Candidate& c : candidates) {
    if (!c.kept) continue;
    copies.push_back({c.offloadStartMs, OrderedOp{c.stage, OpKind::D2H, c.microbatch, 0}});
    copies.push_back({c.reloadStartMs, OrderedOp{c.stage, OpKind::H2D, c.microbatch, 0}});
  }
  std::stable_sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) { return a.startMs < b.startMs; });
  std::vector<OrderedOp> out;
  out.reserve(ops.size() + copies.size());
  std::size_t next = 0;
  newIndex.clear();
  for (const std::int32_t i : ops) {
    const Op& op = timed.op(i);
    // Copies planned before this op ends are issued before it (after the op before it).
    while (next < copies.size() && copies[next].startMs < op.endMs) out.push_back(copies[next++].op);
    newIndex.push_back(static_cast<std::int32_t>(out.size()));
    out.push_back(OrderedOp{op.virtualStage, op.kind, op.microbatch, op.samples});
  }
  while (next < copies.size()) out.push_back(copies[next++].op);
  return out;
}

// One device: its timed ops (plan order) in, its order with the copies out; newIndex[i] is
// where the device's op i went.
std::vector<OrderedOp> offloadDevice(const Plan& timed, const std::vector<std::int32_t>& ops,
                                     const IdVector<double>& copyMsByUnit, const IdVector<std::int64_t>& bytesByUnit,
                                     int splits, const std::vector<MemoryPoint>& curve,
                                     std::vector<std::int32_t>& newIndex) {
  std::vector<Candidate> candidates = offloadCandidates(timed, ops, copyMsByUnit, bytesByUnit, splits);
  for (Candidate& c : candidates) c.kept = false;
  HostLink link;
  offloadAtPeaks(candidates, curve, link);
  offloadLongestLived(candidates, link);
  return orderWithCopies(timed, ops, candidates, newIndex);
}

// The first instant at which `curve` reaches `peak`.
double firstPeakMs(const std::vector<MemoryPoint>& curve, std::int64_t peak) {
  for (const MemoryPoint& point : curve) {
    if (point.bytes >= peak) return point.timeMs;
  }
  return -1.0;
}

struct Timed {
  double makespanMs = 0;
  MemoryTimeline memory;
  std::vector<std::vector<std::int32_t>> perDevice;  ///< op indices, device order
  Plan plan;
};

Expected<Timed> timeSkeleton(const Plan& base, const CostedModel& costs, const ScheduleSkeleton& skeleton) {
  SimulationOptions timing;
  timing.recordComms = false;
  timing.computeMetrics = false;
  timing.costs = &costs;
  PS_ASSIGN_OR_RETURN(auto plan, simulateSkeleton(base, skeleton, timing));
  Timed t;
  t.perDevice.resize(skeleton.devices.size());
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    t.makespanMs = std::max(t.makespanMs, op.endMs);
    if (inRange(t.perDevice, op.device))
      t.perDevice[static_cast<std::size_t>(op.device)].push_back(static_cast<std::int32_t>(i));
  }
  t.memory = memoryTimeline(plan, costs);
  t.plan = std::move(plan);
  return t;
}

// Whether `next` timed at all, with a step no longer than `now`'s and no device's peak higher.
bool noWorse(const Expected<Timed>& next, const Timed& now) {
  if (!next || next->makespanMs > now.makespanMs * (1 + 1e-12)) return false;
  for (std::size_t d = 0; d < now.memory.peakBytes.size(); ++d) {
    if (next->memory.peakBytes[d] > now.memory.peakBytes[d]) return false;
  }
  return true;
}

// The wait that would lower device d's peak: the forward that starts at its first peak instant
// waits for the end of the device's offload that ends first after that instant (issued before
// the forward). Empty when the peak does not start with a forward or no such offload exists.
std::optional<OpDependency> gateAtPeak(const Timed& t, std::size_t d) {
  const double at = firstPeakMs(t.memory.devices[d], t.memory.peakBytes[d]);
  if (at < 0) return std::nullopt;
  std::optional<std::int32_t> forward, offload;
  double offloadEnd = std::numeric_limits<double>::infinity();
  const auto& ops = t.perDevice[d];
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const Op& op = t.plan.ops[static_cast<std::size_t>(ops[k])];
    if (op.kind == OpKind::F && op.startMs == at && !forward) forward = static_cast<std::int32_t>(k);
  }
  if (!forward) return std::nullopt;
  // The offload that ends first after `at`, issued before the forward (a later one would wait
  // for the forward itself).
  for (std::int32_t k = 0; k < *forward; ++k) {
    const Op& op = t.plan.ops[static_cast<std::size_t>(ops[static_cast<std::size_t>(k)])];
    if (op.kind == OpKind::D2H && op.endMs > at && op.endMs < offloadEnd) {
      offload = k;
      offloadEnd = op.endMs;
    }
  }
  if (!offload) return std::nullopt;
  const auto dev = static_cast<std::int32_t>(d);
  return OpDependency{OpRef{dev, *offload}, OpRef{dev, *forward}, 0};
}

// 5. Forwards that wait for an offload. The authors' runtime holds a forward until the copy
// that frees its room has ended (OFFLOAD_BARRIER), and their schedule starts warm-up forwards
// as late as the first backward allows (offloading.py postpone_forward_in_warmup): on the
// orders where that matters, their peak with offloading is two chunk activations lower than
// with every forward as early as it can go. Here, while a device's highest live memory starts
// with a forward during one of its offloads, that forward waits for the offload's end; a wait
// is kept only if the step is not longer and no device's peak is higher, and the device's peak
// is lower or comes later; in the end, the waits no peak needs are dropped again.
Status gateForwards(const Plan& base, const CostedModel& costs, ScheduleSkeleton& skeleton) {
  PS_ASSIGN_OR_RETURN(auto timed, timeSkeleton(base, costs, skeleton));
  const std::size_t devices = skeleton.devices.size();
  // Bounded: each try is one simulation of the plan.
  const std::size_t ops = std::max<std::size_t>(1, timed.plan.ops.size());
  int tries = static_cast<int>(std::min<std::size_t>(4 * devices + 8, std::max<std::size_t>(8, 1'000'000 / ops)));
  std::vector<bool> done(devices, false);
  while (tries-- > 0) {
    std::size_t d = devices;
    for (std::size_t i = 0; i < devices; ++i) {
      if (!done[i] && (d == devices || timed.memory.peakBytes[i] > timed.memory.peakBytes[d])) d = i;
    }
    if (d == devices) break;
    const auto gate = gateAtPeak(timed, d);
    if (!gate) {
      done[d] = true;
      continue;
    }
    skeleton.offloadWaits.push_back(*gate);
    auto next = timeSkeleton(base, costs, skeleton);
    bool better = noWorse(next, timed);
    if (better) {
      better = next->memory.peakBytes[d] < timed.memory.peakBytes[d] ||
               firstPeakMs(next->memory.devices[d], next->memory.peakBytes[d]) >
                   firstPeakMs(timed.memory.devices[d], timed.memory.peakBytes[d]);
    }
    if (!better) {
      skeleton.offloadWaits.pop_back();
      done[d] = true;
      continue;
    }
    timed = std::move(*next);
  }
  // A wait that only moved a peak later, with no lower peak in the end, is not needed: each is
  // dropped where the plan without it is no longer and no device holds more.
  for (std::size_t i = skeleton.offloadWaits.size(); i-- > 0;) {
    const OpDependency wait = skeleton.offloadWaits[i];
    skeleton.offloadWaits.erase(skeleton.offloadWaits.begin() + static_cast<std::ptrdiff_t>(i));
    auto without = timeSkeleton(base, costs, skeleton);
    if (noWorse(without, timed)) {
      timed = std::move(*without);
    } else {
      skeleton.offloadWaits.insert(skeleton.offloadWaits.begin() + static_cast<std::ptrdiff_t>(i), wait);
    }
  }
  return {};
}

}  // namespace

Status addOffloadWaits(const Plan& shell, const CostedModel& costs, ScheduleSkeleton& skeleton) {
  if (shell.config.offloadRatio <= 0 || !skeleton.offloadWaits.empty()) return {};
  Plan base = shell;
  base.virtualStages = skeleton.virtualStages;
  return gateForwards(base, costs, skeleton);
}

bool hostCopiesShareSwitches(const Plan& shell) {
  for (int d = 0; d < shell.config.devices; ++d) {
    if (hostCopyGBps(shell.cluster, shell.config, d, true) < hostCopyGBps(shell.cluster, shell.config, d, false))
      return true;
  }
  return false;
}

Status addOffload(const Plan& shell, const CostedModel& costs, ScheduleSkeleton& skeleton, bool waits,
                  bool atSoloRate) {
  if (shell.config.offloadRatio <= 0) return {};
  for (const auto& lane : skeleton.devices) {
    for (const OrderedOp& o : lane) {
      if (isHostCopy(o.kind)) return {};  // the order offloads already
    }
  }
  Plan base = shell;
  base.virtualStages = skeleton.virtualStages;
  PS_ASSIGN_OR_RETURN(auto timed, timeSkeleton(base, costs, skeleton));
  const int splits = std::max(1, shell.config.seqSplits);
  const auto units = costs.unitStages(skeleton.virtualStages);
  IdVector<double> copyMs(static_cast<int>(skeleton.virtualStages.size()) * splits, 0.0);
  IdVector<std::int64_t> bytesByUnit(copyMs.size(), 0);
  for (std::size_t s = 0; s < skeleton.virtualStages.size(); ++s) {
    const VirtualStage& vs = skeleton.virtualStages[s];
    const double gbps = hostCopyGBps(shell.cluster, shell.config, vs.device, !atSoloRate);
    for (int k = 0; k < splits && k < static_cast<int>(units[s].size()); ++k) {
      const std::int64_t bytes = offloadBytes(shell.config, vs, units[s][static_cast<std::size_t>(k)]);
      bytesByUnit[static_cast<int>(s) * splits + k] = bytes;
      copyMs[static_cast<int>(s) * splits + k] =
          gbps > 0 && bytes > 0 ? static_cast<double>(bytes) / (gbps * 1e6) : 0.0;
    }
  }
  std::vector<std::vector<std::int32_t>> moved(skeleton.devices.size());
  for (std::size_t d = 0; d < skeleton.devices.size(); ++d) {
    skeleton.devices[d] =
        offloadDevice(timed.plan, timed.perDevice[d], copyMs, bytesByUnit, splits, timed.memory.devices[d], moved[d]);
  }
  // Dependencies name ops by their place in the device's order: the copies moved them.
  auto remap = [&](OpRef& r) {
    if (inRange(moved, r.device) && inRange(moved[static_cast<std::size_t>(r.device)], r.index)) {
      r.index = moved[static_cast<std::size_t>(r.device)][static_cast<std::size_t>(r.index)];
    }
  };
  for (OpDependency& dep : skeleton.extraDependencies) {
    remap(dep.from);
    remap(dep.to);
  }
  return waits ? gateForwards(base, costs, skeleton) : Status{};
}

}  // namespace pipestudio::schedules
