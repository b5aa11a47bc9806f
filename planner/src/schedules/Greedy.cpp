// Greedy list construction of a per-device order from stage estimates (see Generators.hpp).
// Flat arrays indexed by stage·m + microbatch; one monotone event queue; no maps.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <deque>
#include <queue>
#include <tuple>

#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

// 16 bytes. All events of one instant are applied before any device picks its next op, and
// applying them commutes (ready heaps are keyed, byte counts are sums, a device completes
// at most one op per instant), so events are ordered by time alone.
// payload = stage << 35 | microbatch << 3 | kind << 2 | op code; kind 0: op done on its
// device, 1: an input of the op arrived (stage < 2^29, microbatch < 2^32).
struct Event {
  double timeMs;
  std::uint64_t payload;
};
struct EventLater {
  bool operator()(const Event& a, const Event& b) const { return a.timeMs > b.timeMs; }
};
// The pending events, popped one instant at a time. Event times never decrease when every
// stage time is a non-negative finite number (each event is `now` plus such a time), and
// then a radix heap over the bit patterns of the times (non-negative doubles order like
// their bits as unsigned integers) replaces the binary heap: a push appends to a bucket,
// and the elements of a bucket move down a few times at most before they come out.
// Bucket 0 holds the events of the current instant (key equal to the last minimum);
// bucket i > 0 those whose key first differs from it in bit i − 1 (Ahuja, Mehlhorn, Orlin
// and Tarjan, "Faster algorithms for the shortest path problem", J. ACM 37(2), 1990).
// Stage times that could make time go backwards (negative, NaN) keep the binary heap.
// The order of events within one instant does not matter (see Event), so both give the
// same construction.
class EventQueue {
 public:
  explicit EventQueue(bool monotone) : m_monotone(monotone) {}
  bool empty() const { return m_monotone ? m_size == 0 : m_heap.empty(); }
  void push(double timeMs, std::uint64_t payload) {
    if (!m_monotone) {
      m_heap.push_back({timeMs, payload});
      std::push_heap(m_heap.begin(), m_heap.end(), EventLater{});
      return;
    }
    const std::uint64_t key = std::bit_cast<std::uint64_t>(timeMs + 0.0);  // −0 → +0
    const std::size_t b = bucketOf(key);
    m_buckets[b].push_back({key, payload});
    m_occupied |= bit(b);
    ++m_size;
  }
  // The earliest pending instant. Precondition: !empty() and the previous instant drained.
  double advance() {
    if (!m_monotone) return m_heap.front().timeMs;
    if (m_buckets[0].empty()) {
      // Bit i − 1 of m_occupied: bucket i is not empty (bucket 0 is tracked by its size).
      const auto i = static_cast<std::size_t>(std::countr_zero(m_occupied)) + 1;
      std::vector<Keyed>& from = m_buckets[i];
      std::uint64_t least = from.front().key;
      for (const Keyed& e : from) least = std::min(least, e.key);
      m_last = least;
      m_occupied &= ~bit(i);
      for (const Keyed& e : from) {
        const std::size_t b = bucketOf(e.key);
        m_buckets[b].push_back(e);
        m_occupied |= bit(b);
      }
      from.clear();
    }
    return std::bit_cast<double>(m_last);
  }
  // Pops an event at instant nowMs (what advance() returned) into payload; false when none is left.
  bool popAt(double nowMs, std::uint64_t& payload) {
    if (!m_monotone) {
      if (m_heap.empty() || m_heap.front().timeMs != nowMs) return false;
      std::pop_heap(m_heap.begin(), m_heap.end(), EventLater{});
      payload = m_heap.back().payload;
      m_heap.pop_back();
      return true;
    }
    std::vector<Keyed>& now = m_buckets[0];
    if (now.empty()) return false;
    payload = now.back().payload;
    now.pop_back();
    --m_size;
    return true;
  }

 private:
  struct Keyed {
    std::uint64_t key;
    std::uint64_t payload;
  };
  static std::uint64_t bit(std::size_t bucket) { return bucket == 0 ? 0 : std::uint64_t{1} << (bucket - 1); }
  std::size_t bucketOf(std::uint64_t key) const {
    return key == m_last ? 0 : 64 - static_cast<std::size_t>(std::countl_zero(key ^ m_last));
  }
  bool m_monotone;
  std::vector<Event> m_heap;
  std::array<std::vector<Keyed>, 65> m_buckets;
  std::uint64_t m_last = 0;  // bits of +0.0
  std::uint64_t m_occupied = 0;
  std::size_t m_size = 0;
};

constexpr OpKind kOpOfCode[4] = {OpKind::F, OpKind::B, OpKind::BW, OpKind::W};
int opCode(OpKind k) {
  switch (k) {
    case OpKind::B: return 1;
    case OpKind::BW: return 2;
    case OpKind::W: return 3;
    default: return 0;
  }
}

// Ready ops in one 64-bit key, smallest first: earliest microbatch, then deepest chain
// position, then lowest stage (microbatch << 32 | (0xffff − chain position) << 16 | stage;
// stages and chain positions < 2^16, checked on entry).
using Key = std::uint64_t;
using MinHeap = std::priority_queue<Key, std::vector<Key>, std::greater<>>;
constexpr int kMaxStages = 0xffff;
Key makeKey(int microbatch, int chainPos, int stage) {
  return (static_cast<Key>(microbatch) << 32) | (static_cast<Key>(kMaxStages - chainPos) << 16) | static_cast<Key>(stage);
}
int keyMicrobatch(Key k) { return static_cast<int>(k >> 32); }
int keyStage(Key k) { return static_cast<int>(k & 0xffffU); }

struct DeviceState {
  bool busy = false;
  std::int64_t committedBytes = 0;
  // The construction's own timeline (stage estimates, transfers not serialised).
  double firstStartMs = -1;
  double lastEndMs = 0;
  double busyMs = 0;
  MinHeap readyB;
  MinHeap readyContinue;
  MinHeap readyEnter;
  std::deque<std::pair<int, int>> pendingW;  // (stage, microbatch) in B completion order
};

}  // namespace

Expected<ScheduleSkeleton> greedyOrder(const ScheduleInput& input, const GreedyOptions& options, GreedyEstimate* estimate) {
  const int p = input.shape.devices;
  const int m = input.shape.microbatches;
  const int n = static_cast<int>(input.virtualStages.size());
  if (n > kMaxStages) {
    return Error{"the greedy construction handles at most " + std::to_string(kMaxStages) + " virtual stages, got " +
                 std::to_string(n)};
  }
  const auto chains = pipelineChains(input.virtualStages);
  const int pipelines = static_cast<int>(chains.size());

  std::vector<int> chainPos(static_cast<std::size_t>(n)), nextStage(static_cast<std::size_t>(n), -1),
      prevStage(static_cast<std::size_t>(n), -1), deviceOf(static_cast<std::size_t>(n));
  for (const auto& chain : chains) {
    for (std::size_t i = 0; i < chain.size(); ++i) {
      const auto s = static_cast<std::size_t>(chain[i]);
      chainPos[s] = static_cast<int>(i);
      if (i > 0) prevStage[s] = chain[i - 1];
      if (i + 1 < chain.size()) nextStage[s] = chain[i + 1];
    }
  }
  for (int s = 0; s < n; ++s) deviceOf[static_cast<std::size_t>(s)] = input.virtualStages[static_cast<std::size_t>(s)].device;
  // First chain position of each pipeline on each device: an F there admits a microbatch.
  std::vector<int> firstPos(static_cast<std::size_t>(pipelines * p), 1 << 30);
  for (int s = 0; s < n; ++s) {
    const auto& vs = input.virtualStages[static_cast<std::size_t>(s)];
    int& f = firstPos[static_cast<std::size_t>(vs.pipeline * p + vs.device)];
    f = std::min(f, chainPos[static_cast<std::size_t>(s)]);
  }
  std::vector<std::vector<std::int64_t>> need;
  for (int pl = 0; pl < pipelines; ++pl) need.push_back(activationPerMicrobatch(input, pl));

  ScheduleSkeleton out;
  out.virtualStages = input.virtualStages;
  out.devices.resize(static_cast<std::size_t>(p));
  std::vector<DeviceState> dev(static_cast<std::size_t>(p));
  const bool monotone = std::all_of(input.stages.begin(), input.stages.end(), [](const StageEstimate& c) {
    auto fine = [](double ms) { return std::isfinite(ms) && ms >= 0; };
    return fine(c.forwardMs) && fine(c.backwardInputMs) && fine(c.backwardWeightMs) && fine(c.sendMs);
  });
  EventQueue events(monotone);
  // A transfer under a millionth of the mean pass time is taken as none: it would only make
  // an input arrive an instant after its device frees up and so change a decision, where
  // the simulator merely shifts the order by it (a 1e-12 ms transfer must not turn a
  // zero-bubble pattern into another one).
  double meanPassMs = 0;
  for (const StageEstimate& c : input.stages) meanPassMs += (c.forwardMs + c.backwardInputMs + c.backwardWeightMs) / 3;
  meanPassMs /= static_cast<double>(std::max<std::size_t>(1, input.stages.size()));
  const double negligibleMs = 1e-6 * meanPassMs;
  auto sendOf = [&](int stage) {
    const double ms = input.stages[static_cast<std::size_t>(stage)].sendMs;
    return ms <= negligibleMs ? 0.0 : ms;
  };
  auto push = [&](double t, int kind, OpKind op, int stage, int mb) {
    const std::uint64_t key = (static_cast<std::uint64_t>(stage) << 32) | static_cast<std::uint32_t>(mb);
    events.push(t, (key * 2 + static_cast<std::uint64_t>(kind)) * 4 + static_cast<std::uint64_t>(opCode(op)));
  };

  for (int mb = 0; mb < m; ++mb) {
    const int pl = options.microbatchPipeline.empty() ? 0 : options.microbatchPipeline[static_cast<std::size_t>(mb)];
    push(0.0, 1, OpKind::F, chains[static_cast<std::size_t>(pl)].front(), mb);
  }
  const bool split = options.splitBackward;
  for (std::size_t d = 0; d < static_cast<std::size_t>(p); ++d) {
    out.devices[d].reserve(static_cast<std::size_t>(m) * (split ? 3U : 2U) * static_cast<std::size_t>(n) /
                           static_cast<std::size_t>(p * pipelines) + 16);
  }
  const std::size_t expected = static_cast<std::size_t>(n) * static_cast<std::size_t>(m) * (split ? 3U : 2U) /
                               static_cast<std::size_t>(pipelines);
  std::size_t emitted = 0;
  std::vector<int> dirty;
  std::vector<char> isDirty(static_cast<std::size_t>(p), 0);
  auto markDirty = [&](int d) {
    if (!isDirty[static_cast<std::size_t>(d)]) {
      isDirty[static_cast<std::size_t>(d)] = 1;
      dirty.push_back(d);
    }
  };
  auto stageCost = [&](int s) -> const StageEstimate& { return input.stages[static_cast<std::size_t>(s)]; };
  std::int64_t processed = 0;

  double now = 0;
  // When every device waits on its activation budget while holding microbatches that need
  // another device's admission (the two directions of bitpipe/dualpipe on few devices), no
  // event is left. Then the oldest waiting microbatch is admitted over budget rather than
  // failing; the plan's memory check still judges the result against the real limit.
  bool forceAdmit = false;
  while (true) {
    if (input.control && (++processed & 4095) == 0 && input.control->cancelled()) return Error{"cancelled"};
    if (events.empty()) {
      if (emitted >= expected || forceAdmit) break;
      forceAdmit = true;
      for (int d = 0; d < p; ++d) markDirty(d);
    } else {
      forceAdmit = false;
      now = events.advance();
    }
    std::uint64_t payload = 0;
    while (events.popAt(now, payload)) {
      struct {
        int kind;
        OpKind op;
        int stage;
        int microbatch;
      } e{static_cast<int>((payload >> 2) & 1U), kOpOfCode[payload & 3U], static_cast<int>(payload >> 35),
          static_cast<int>((payload >> 3) & 0xffffffffU)};
      const auto s = static_cast<std::size_t>(e.stage);
      const int d = deviceOf[s];
      DeviceState& ds = dev[static_cast<std::size_t>(d)];
      markDirty(d);
      const StageEstimate& c = stageCost(e.stage);
      if (e.kind == 1) {
        const Key key = makeKey(e.microbatch, chainPos[s], e.stage);
        if (e.op == OpKind::F) {
          const auto& vs = input.virtualStages[s];
          const bool enters = chainPos[s] == firstPos[static_cast<std::size_t>(vs.pipeline * p + d)];
          (enters ? ds.readyEnter : ds.readyContinue).push(key);
        } else {
          ds.readyB.push(key);
        }
        continue;
      }
      ds.busy = false;
      switch (e.op) {
        case OpKind::F:
          if (nextStage[s] >= 0) {
            push(now + sendOf(e.stage), 1, OpKind::F, nextStage[s], e.microbatch);
          } else {
            ds.readyB.push(makeKey(e.microbatch, chainPos[s], e.stage));
          }
          break;
        case OpKind::B:
        case OpKind::BW:
          if (e.op == OpKind::B) {
            ds.committedBytes -= c.activationBytes - c.weightGradBytes;
            ds.pendingW.emplace_back(e.stage, e.microbatch);
          } else {
            ds.committedBytes -= c.activationBytes;
          }
          if (prevStage[s] >= 0) push(now + sendOf(prevStage[s]), 1, OpKind::B, prevStage[s], e.microbatch);
          break;
        case OpKind::W:
          ds.committedBytes -= c.weightGradBytes;
          break;
        default:
          break;
      }
    }
    for (int d : dirty) {
      isDirty[static_cast<std::size_t>(d)] = 0;
      DeviceState& ds = dev[static_cast<std::size_t>(d)];
      if (ds.busy) continue;
      int stage = -1;
      int mb = 0;
      OpKind kind = OpKind::F;
      double durationMs = 0;
      if (!ds.readyB.empty()) {
        mb = keyMicrobatch(ds.readyB.top());
        stage = keyStage(ds.readyB.top());
        ds.readyB.pop();
        kind = split ? OpKind::B : OpKind::BW;
        const StageEstimate& c = stageCost(stage);
        durationMs = split ? c.backwardInputMs : c.backwardInputMs + c.backwardWeightMs;
      } else {
        const int pl = ds.readyEnter.empty() ? 0
                                             : input.virtualStages[static_cast<std::size_t>(keyStage(ds.readyEnter.top()))].pipeline;
        const std::int64_t needBytes = need[static_cast<std::size_t>(pl)][static_cast<std::size_t>(d)];
        bool admit = !ds.readyEnter.empty() &&
                           (ds.committedBytes == 0 || forceAdmit ||
                            ds.committedBytes + needBytes <= options.capBytes[static_cast<std::size_t>(d)]);
        bool cont = !ds.readyContinue.empty();
        // Budget on every forward (zb-v): a forward that would lift the live bytes over the
        // budget waits while a pending W can free weight-gradient bytes first.
        const bool wFirst = options.boundEveryForward && !ds.pendingW.empty() &&
                            ds.committedBytes + (cont ? stageCost(keyStage(ds.readyContinue.top())).activationBytes
                                                      : std::int64_t{0}) >
                                options.capBytes[static_cast<std::size_t>(d)];
        if (wFirst) {
          cont = false;
          admit = false;
        }
        bool takeContinue = cont && (options.preferContinuing || !admit ||
                                     keyMicrobatch(ds.readyContinue.top()) <= keyMicrobatch(ds.readyEnter.top()));
        if (takeContinue) {
          mb = keyMicrobatch(ds.readyContinue.top());
          stage = keyStage(ds.readyContinue.top());
          ds.readyContinue.pop();
          kind = OpKind::F;
        } else if (admit) {
          mb = keyMicrobatch(ds.readyEnter.top());
          stage = keyStage(ds.readyEnter.top());
          ds.readyEnter.pop();
          if (options.reserveWholeMicrobatch) ds.committedBytes += needBytes;
          kind = OpKind::F;
        } else if (!ds.pendingW.empty()) {
          std::tie(stage, mb) = ds.pendingW.front();
          ds.pendingW.pop_front();
          kind = OpKind::W;
        }
        if (stage >= 0) {
          const StageEstimate& c = stageCost(stage);
          durationMs = kind == OpKind::F ? c.forwardMs : c.backwardWeightMs;
          // Live activations (DESIGN.md §2: from F start); admission compares live bytes
          // plus the whole need of a new microbatch against the budget.
          if (kind == OpKind::F && !options.reserveWholeMicrobatch) ds.committedBytes += c.activationBytes;
        }
      }
      if (stage < 0) continue;
      forceAdmit = false;  // one over-budget admission per stall
      OrderedOp o;
      o.virtualStage = stage;
      o.kind = kind;
      o.microbatch = mb;
      out.devices[static_cast<std::size_t>(d)].push_back(o);
      ++emitted;
      ds.busy = true;
      if (ds.firstStartMs < 0) ds.firstStartMs = now;
      ds.lastEndMs = now + durationMs;
      ds.busyMs += durationMs;
      push(now + durationMs, 0, kind, stage, mb);
    }
    dirty.clear();
  }
  if (emitted != expected) {
    return Error{"internal: the greedy construction stalled after " + std::to_string(emitted) + " of " +
                 std::to_string(expected) + " ops (activation budget too small for one microbatch?)"};
  }
  if (estimate) {
    estimate->makespanMs = 0;
    estimate->maxDeviceBubbleMs = 0;
    for (const DeviceState& ds : dev) {
      estimate->makespanMs = std::max(estimate->makespanMs, ds.lastEndMs);
      if (ds.firstStartMs >= 0) {
        estimate->maxDeviceBubbleMs = std::max(estimate->maxDeviceBubbleMs, ds.lastEndMs - ds.firstStartMs - ds.busyMs);
      }
    }
  }
  return out;
}

}  // namespace pipestudio::schedules
