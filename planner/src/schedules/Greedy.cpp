// Greedy list construction of a per-device order from stage estimates (see Generators.hpp).
// Flat arrays indexed by stage·m + microbatch; one monotone event queue; no maps.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <deque>
#include <queue>
#include <tuple>

#include "pipestudio/common/Index.hpp"
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
    const auto key = std::bit_cast<std::uint64_t>(timeMs + 0.0);  // −0 → +0
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

constexpr std::array<OpKind, 4> kOpOfCode = {OpKind::F, OpKind::B, OpKind::BW, OpKind::W};
int opCode(OpKind k) {
  switch (k) {
    case OpKind::B:
      return 1;
    case OpKind::BW:
      return 2;
    case OpKind::W:
      return 3;
    default:
      return 0;
  }
}

// Ready ops in one 64-bit key, smallest first: earliest microbatch, then deepest chain
// position, then lowest stage (microbatch << 32 | (0xffff − chain position) << 16 | stage;
// stages and chain positions < 2^16, checked on entry).
using Key = std::uint64_t;
using MinHeap = std::priority_queue<Key, std::vector<Key>, std::greater<>>;
constexpr int kMaxStages = 0xffff;
Key makeKey(int microbatch, int chainPos, int stage) {
  return (static_cast<Key>(microbatch) << 32) | (static_cast<Key>(kMaxStages - chainPos) << 16) |
         static_cast<Key>(stage);
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

// The op a device runs next (stage < 0: none) and its duration on the construction's timeline.
struct Choice {
  int stage = -1;
  int microbatch = 0;
  OpKind kind = OpKind::F;
  double durationMs = 0;
};

bool allStageTimesFinite(const ScheduleInput& input) {
  return std::all_of(input.stages.begin(), input.stages.end(), [](const StageEstimate& c) {
    auto fine = [](double ms) { return std::isfinite(ms) && ms >= 0; };
    return fine(c.forwardMs) && fine(c.backwardInputMs) && fine(c.backwardWeightMs) && fine(c.sendMs);
  });
}

// A transfer under a millionth of the mean pass time is taken as none: it would only make
// an input arrive an instant after its device frees up and so change a decision, where
// the simulator merely shifts the order by it (a 1e-12 ms transfer must not turn a
// zero-bubble pattern into another one).
double negligibleTransferMs(const ScheduleInput& input) {
  double meanPassMs = 0;
  for (const StageEstimate& c : input.stages) meanPassMs += (c.forwardMs + c.backwardInputMs + c.backwardWeightMs) / 3;
  meanPassMs /= static_cast<double>(std::max<std::size_t>(1, input.stages.size()));
  return 1e-6 * meanPassMs;
}

// One run of greedyOrder: the chain tables (constructor), the initial arrivals (seed), then
// the event loop (run): apply every event of an instant (applyEvent), then let each device
// touched by them pick its next op (startNext, choose, chooseForwardOrW).
class GreedyConstruction {
 public:
  GreedyConstruction(const ScheduleInput& input, const GreedyOptions& options);
  Expected<ScheduleSkeleton> run(GreedyEstimate* estimate);

 private:
  void seed();
  double sendOf(int stage) const {
    const double ms = m_input.estimate(stage).sendMs;
    return ms <= m_negligibleMs ? 0.0 : ms;
  }
  void push(double t, int kind, OpKind op, int stage, int mb) {
    const std::uint64_t key = (static_cast<std::uint64_t>(stage) << 32) | static_cast<std::uint32_t>(mb);
    m_events.push(t, (key * 2 + static_cast<std::uint64_t>(kind)) * 4 + static_cast<std::uint64_t>(opCode(op)));
  }
  void markDirty(int d) {
    if (!m_isDirty[d]) {
      m_isDirty[d] = 1;
      m_dirty.push_back(d);
    }
  }
  void applyEvent(std::uint64_t payload);
  void startNext(int d);
  Choice choose(int d, DeviceState& ds);
  Choice chooseForwardOrW(int d, DeviceState& ds);
  void fillEstimate(GreedyEstimate& estimate) const;

  const ScheduleInput& m_input;
  const GreedyOptions& m_options;
  const int m_p;
  const int m_m;
  const int m_n;
  const bool m_split;
  const IdVector<std::vector<int>> m_chains;  // per pipeline: its stages in data-flow order
  const int m_pipelines;
  IdVector<int> m_chainPos, m_nextStage, m_prevStage, m_deviceOf;  // per stage
  // First chain position of each pipeline on each device: an F there admits a microbatch.
  Grid<int> m_firstPos;
  IdVector<IdVector<std::int64_t>> m_need;  // activation per microbatch, per pipeline and device
  ScheduleSkeleton m_out;
  IdVector<std::vector<OrderedOp>> m_lanes;  // per device: the order built so far
  IdVector<DeviceState> m_dev;
  EventQueue m_events;
  const double m_negligibleMs;
  std::size_t m_expected = 0;
  std::size_t m_emitted = 0;
  std::vector<int> m_dirty;
  IdVector<char> m_isDirty;
  std::int64_t m_processed = 0;
  double m_now = 0;
  // When every device waits on its activation budget while holding microbatches that need
  // another device's admission (the two directions of bitpipe/dualpipe on few devices), no
  // event is left. Then the oldest waiting microbatch is admitted over budget rather than
  // failing; the plan's memory check still judges the result against the real limit.
  bool m_forceAdmit = false;
};

GreedyConstruction::GreedyConstruction(const ScheduleInput& input, const GreedyOptions& options)
    : m_input(input),
      m_options(options),
      m_p(input.shape.devices),
      m_m(input.shape.microbatches),
      m_n(static_cast<int>(input.virtualStages.size())),
      m_split(options.splitBackward),
      m_chains(pipelineChains(input.virtualStages)),
      m_pipelines(m_chains.size()),
      m_events(allStageTimesFinite(input)),
      m_negligibleMs(negligibleTransferMs(input)) {
  m_chainPos.assign(m_n, 0);
  m_nextStage.assign(m_n, -1);
  m_prevStage.assign(m_n, -1);
  m_deviceOf.assign(m_n, 0);
  for (const auto& chain : m_chains) {
    for (std::size_t i = 0; i < chain.size(); ++i) {
      const int s = chain[i];
      m_chainPos[s] = static_cast<int>(i);
      if (i > 0) m_prevStage[s] = chain[i - 1];
      if (i + 1 < chain.size()) m_nextStage[s] = chain[i + 1];
    }
  }
  m_firstPos.assign(m_pipelines, m_p, 1 << 30);
  for (int s = 0; s < m_n; ++s) {
    const VirtualStage& vs = input.stage(s);
    m_deviceOf[s] = vs.device;
    int& f = m_firstPos(vs.pipeline, vs.device);
    f = std::min(f, m_chainPos[s]);
  }
  for (int pl = 0; pl < m_pipelines; ++pl) m_need.push_back(activationPerMicrobatch(input, pl));
  m_out.virtualStages = input.virtualStages;
  m_lanes.resize(m_p);
  m_dev.resize(m_p);
  m_isDirty.assign(m_p, 0);
}

// Every microbatch's first forward is ready at 0; lanes reserved for their share of ops.
void GreedyConstruction::seed() {
  for (int mb = 0; mb < m_m; ++mb) {
    const int pl = m_options.microbatchPipeline.empty() ? 0 : m_options.microbatchPipeline[mb];
    push(0.0, 1, OpKind::F, m_chains[pl].front(), mb);
  }
  // Every stage runs every microbatch of its pipeline, two or three passes each.
  m_expected = static_cast<std::size_t>(m_n) * static_cast<std::size_t>(m_m) * (m_split ? 3U : 2U) /
               static_cast<std::size_t>(m_pipelines);
  for (std::vector<OrderedOp>& lane : m_lanes) lane.reserve(m_expected / static_cast<std::size_t>(m_p) + 16);
}

Expected<ScheduleSkeleton> GreedyConstruction::run(GreedyEstimate* estimate) {
  seed();
  while (true) {
    if (m_input.control && (++m_processed & 4095) == 0 && m_input.control->cancelled()) return Error::cancelled();
    if (m_events.empty()) {
      if (m_emitted >= m_expected || m_forceAdmit) break;
      m_forceAdmit = true;
      for (int d = 0; d < m_p; ++d) markDirty(d);
    } else {
      m_forceAdmit = false;
      m_now = m_events.advance();
    }
    std::uint64_t payload = 0;
    while (m_events.popAt(m_now, payload)) applyEvent(payload);
    for (int d : m_dirty) {
      m_isDirty[d] = 0;
      startNext(d);
    }
    m_dirty.clear();
  }
  if (m_emitted != m_expected) {
    return Error{"internal: the greedy construction stalled after " + std::to_string(m_emitted) + " of " +
                 std::to_string(m_expected) + " ops (activation budget too small for one microbatch?)"};
  }
  if (estimate) fillEstimate(*estimate);
  m_out.devices = std::move(m_lanes.values());
  return std::move(m_out);
}

// An arrival puts the op in its device's ready heap; a completion frees the device, sends
// the op's output on and releases the bytes the op's end frees.
void GreedyConstruction::applyEvent(std::uint64_t payload) {
  const int kind = static_cast<int>((payload >> 2) & 1U);
  const OpKind op = kOpOfCode[payload & 3U];
  const int stage = static_cast<int>(payload >> 35);
  const int microbatch = static_cast<int>((payload >> 3) & 0xffffffffU);
  const int d = m_deviceOf[stage];
  DeviceState& ds = m_dev[d];
  markDirty(d);
  const StageEstimate& c = m_input.estimate(stage);
  if (kind == 1) {
    const Key key = makeKey(microbatch, m_chainPos[stage], stage);
    if (op == OpKind::F) {
      const bool enters = m_chainPos[stage] == m_firstPos(m_input.stage(stage).pipeline, d);
      (enters ? ds.readyEnter : ds.readyContinue).push(key);
    } else {
      ds.readyB.push(key);
    }
    return;
  }
  ds.busy = false;
  switch (op) {
    case OpKind::F:
      if (m_nextStage[stage] >= 0) {
        push(m_now + sendOf(stage), 1, OpKind::F, m_nextStage[stage], microbatch);
      } else {
        ds.readyB.push(makeKey(microbatch, m_chainPos[stage], stage));
      }
      break;
    case OpKind::B:
    case OpKind::BW:
      if (op == OpKind::B) {
        ds.committedBytes -= c.activationBytes - c.weightGradBytes;
        ds.pendingW.emplace_back(stage, microbatch);
      } else {
        ds.committedBytes -= c.activationBytes;
      }
      if (m_prevStage[stage] >= 0)
        push(m_now + sendOf(m_prevStage[stage]), 1, OpKind::B, m_prevStage[stage], microbatch);
      break;
    case OpKind::W:
      ds.committedBytes -= c.weightGradBytes;
      break;
    default:
      break;
  }
}

// A ready B first; else a forward or a pending W (chooseForwardOrW).
Choice GreedyConstruction::choose(int d, DeviceState& ds) {
  if (ds.readyB.empty()) return chooseForwardOrW(d, ds);
  Choice ch;
  ch.microbatch = keyMicrobatch(ds.readyB.top());
  ch.stage = keyStage(ds.readyB.top());
  ds.readyB.pop();
  ch.kind = m_split ? OpKind::B : OpKind::BW;
  const StageEstimate& c = m_input.estimate(ch.stage);
  ch.durationMs = m_split ? c.backwardInputMs : c.backwardInputMs + c.backwardWeightMs;
  return ch;
}

// A forward that continues an admitted microbatch, or one that admits a new microbatch
// under the activation budget, else a pending W.
Choice GreedyConstruction::chooseForwardOrW(int d, DeviceState& ds) {
  Choice ch;
  const int pl = ds.readyEnter.empty() ? 0 : m_input.stage(keyStage(ds.readyEnter.top())).pipeline;
  const std::int64_t needBytes = m_need[pl][d];
  bool admit = !ds.readyEnter.empty() &&
               (ds.committedBytes == 0 || m_forceAdmit || ds.committedBytes + needBytes <= m_options.capBytes[d]);
  bool cont = !ds.readyContinue.empty();
  // Budget on every forward (zb-v): a forward that would lift the live bytes over the
  // budget waits while a pending W can free weight-gradient bytes first.
  const bool wFirst = m_options.boundEveryForward && !ds.pendingW.empty() &&
                      ds.committedBytes + (cont ? m_input.estimate(keyStage(ds.readyContinue.top())).activationBytes
                                                : std::int64_t{0}) >
                          m_options.capBytes[d];
  if (wFirst) {
    cont = false;
    admit = false;
  }
  const bool takeContinue = cont && (m_options.preferContinuing || !admit ||
                                     keyMicrobatch(ds.readyContinue.top()) <= keyMicrobatch(ds.readyEnter.top()));
  if (takeContinue) {
    ch.microbatch = keyMicrobatch(ds.readyContinue.top());
    ch.stage = keyStage(ds.readyContinue.top());
    ds.readyContinue.pop();
    ch.kind = OpKind::F;
  } else if (admit) {
    ch.microbatch = keyMicrobatch(ds.readyEnter.top());
    ch.stage = keyStage(ds.readyEnter.top());
    ds.readyEnter.pop();
    if (m_options.reserveWholeMicrobatch) ds.committedBytes += needBytes;
    ch.kind = OpKind::F;
  } else if (!ds.pendingW.empty()) {
    std::tie(ch.stage, ch.microbatch) = ds.pendingW.front();
    ds.pendingW.pop_front();
    ch.kind = OpKind::W;
  }
  if (ch.stage < 0) return ch;
  const StageEstimate& c = m_input.estimate(ch.stage);
  ch.durationMs = ch.kind == OpKind::F ? c.forwardMs : c.backwardWeightMs;
  // Live activations (docs/formats.md: from F start); admission compares live bytes
  // plus the whole need of a new microbatch against the budget.
  if (ch.kind == OpKind::F && !m_options.reserveWholeMicrobatch) ds.committedBytes += c.activationBytes;
  return ch;
}

// An idle device picks its next op, if any, and runs it on the construction's timeline.
void GreedyConstruction::startNext(int d) {
  DeviceState& ds = m_dev[d];
  if (ds.busy) return;
  const Choice ch = choose(d, ds);
  if (ch.stage < 0) return;
  m_forceAdmit = false;  // one over-budget admission per stall
  OrderedOp o;
  o.virtualStage = ch.stage;
  o.kind = ch.kind;
  o.microbatch = ch.microbatch;
  m_lanes[d].push_back(o);
  ++m_emitted;
  ds.busy = true;
  if (ds.firstStartMs < 0) ds.firstStartMs = m_now;
  ds.lastEndMs = m_now + ch.durationMs;
  ds.busyMs += ch.durationMs;
  push(m_now + ch.durationMs, 0, ch.kind, ch.stage, ch.microbatch);
}

void GreedyConstruction::fillEstimate(GreedyEstimate& estimate) const {
  estimate.makespanMs = 0;
  estimate.maxDeviceBubbleMs = 0;
  for (const DeviceState& ds : m_dev) {
    estimate.makespanMs = std::max(estimate.makespanMs, ds.lastEndMs);
    if (ds.firstStartMs >= 0) {
      estimate.maxDeviceBubbleMs = std::max(estimate.maxDeviceBubbleMs, ds.lastEndMs - ds.firstStartMs - ds.busyMs);
    }
  }
}

}  // namespace

Expected<ScheduleSkeleton> greedyOrder(const ScheduleInput& input, const GreedyOptions& options,
                                       GreedyEstimate* estimate) {
  const int n = static_cast<int>(input.virtualStages.size());
  if (n > kMaxStages) {
    return Error{"the greedy construction handles at most " + std::to_string(kMaxStages) + " virtual stages, got " +
                 std::to_string(n)};
  }
  GreedyConstruction construction(input, options);
  return construction.run(estimate);
}

}  // namespace pipestudio::schedules
