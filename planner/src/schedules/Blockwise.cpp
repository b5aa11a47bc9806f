// Blockwise schedules on the looping placement (stage s on device s mod p, chunk s / p):
//   zeropp        (Tang et al. 2024, "Adaptive Blockwise Task-interleaved Pipeline
//                 Parallelism"): the microbatches go through the pipeline in units of U
//                 (PlanConfig::unitMicrobatches, `--unit`, default p). A device runs the
//                 forwards of one unit on one chunk as a block, then the next chunk's block, and
//                 once warm, alternates forward blocks with backward blocks (the unit's chunks in
//                 reverse); the backward is split and the weight-gradient passes fill the time a
//                 device would wait for its next block's input (task interleaving). Under ZeRO-3
//                 a block gathers its chunk's parameters once (the simulator charges the gather
//                 to the first pass of a run, Simulator.cpp), not once per microbatch.
//   breadth-first (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"): one unit of all
//                 m microbatches: every chunk's forwards for all microbatches, then every chunk's
//                 fused backwards in reverse; one gather per chunk and direction, GPipe memory.
// Both orders are built by a list construction timed on the stage estimates (transfers as
// delays); the simulator times the plan.
#include <algorithm>
#include <deque>
#include <limits>
#include <queue>

#include "pipestudio/common/Index.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

struct Pass {
  int stage = 0;
  int microbatch = 0;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// The list construction of a blockwise order, timed on the stage estimates (transfers as
// delays): a device runs its blocks (a unit's passes of one chunk) in order, each pass once its
// input is ready; weight-gradient passes fill the waits.
struct BlockwiseBuilder {
  struct DeviceState {
    std::size_t fPos = 0, bPos = 0;
    int inflight = 0;
    bool inBackward = false;  // the current block's direction
    int blockEnd = 0;         // position where the current block ends (0: pick a new block)
    bool busy = false;
    double wakeMs = std::numeric_limits<double>::infinity();  // a wake-up already queued
    std::deque<Pass> weights;
  };
  // Events: a pass ends (kind 0 F, 1 B, 2 W) or an idle device wakes for an arrival (3).
  struct Event {
    double atMs;
    int device;
    int kind;
    Pass pass;
    bool operator>(const Event& o) const {
      if (atMs != o.atMs) return atMs > o.atMs;
      if (kind != o.kind) return (kind == 3) > (o.kind == 3);  // completions first
      return device > o.device;
    }
  };

  BlockwiseBuilder(const ScheduleInput& scheduleInput, bool breadth, int unitMicrobatches)
      : input(scheduleInput),
        breadthFirst(breadth),
        p(scheduleInput.shape.devices),
        v(scheduleInput.shape.chunksPerDevice),
        m(scheduleInput.shape.microbatches),
        n(p * v),
        unit(unitMicrobatches),
        fSeq(p),
        bSeq(p),
        fEnd(p),
        bEnd(p),
        limit(p),
        fDone(n, m, kInf),
        bDone(n, m, kInf),
        st(p),
        out(p),
        total(static_cast<std::size_t>(n) * static_cast<std::size_t>(m) * (breadth ? 2 : 3)) {
    buildSequences();
    // Forwards a device may hold (chunk activations): Megatron-LM's interleaved warm-up with
    // the unit in place of its group of p, plus the unit's block (breadth-first: all).
    for (int d = 0; d < p; ++d) limit[d] = breadthFirst ? v * m : std::min(v * m, v * unit + 2 * (p - d - 1));
  }

  // Per device: the forward and backward sequences, block by block (unit, chunk), and where
  // each block ends.
  void buildSequences() {
    for (int d = 0; d < p; ++d) {
      auto& fs = fSeq[d];
      auto& bs = bSeq[d];
      auto& fe = fEnd[d];
      auto& be = bEnd[d];
      for (int first = 0; first < m; first += unit) {
        const int last = std::min(m, first + unit);
        for (int c = 0; c < v; ++c) {
          for (int mb = first; mb < last; ++mb) fs.push_back({c * p + d, mb});
          fe.resize(fs.size(), static_cast<int>(fs.size()));
        }
        for (int c = v - 1; c >= 0; --c) {
          for (int mb = first; mb < last; ++mb) bs.push_back({c * p + d, mb});
          be.resize(bs.size(), static_cast<int>(bs.size()));
        }
      }
    }
  }

  const StageEstimate& est(int s) const { return input.estimate(s); }
  int device(int s) const { return s % p; }
  double fReady(const Pass& x) const {
    if (x.stage == 0) return 0.0;
    const double up = fDone(x.stage - 1, x.microbatch);
    return up + (device(x.stage - 1) != device(x.stage) ? est(x.stage - 1).sendMs : 0.0);
  }
  double bReady(const Pass& x) const {
    const double own = fDone(x.stage, x.microbatch);
    if (x.stage == n - 1) return own;
    const double down = bDone(x.stage + 1, x.microbatch);
    return std::max(own, down + (device(x.stage + 1) != device(x.stage) ? est(x.stage).sendMs : 0.0));
  }

  void start(int d, int kind, const Pass& x, double now) {
    const StageEstimate& e = est(x.stage);
    const double dur = kind == 0   ? e.forwardMs
                       : kind == 1 ? e.backwardInputMs + (breadthFirst ? e.backwardWeightMs : 0.0)
                                   : e.backwardWeightMs;
    OrderedOp o;
    o.virtualStage = x.stage;
    o.microbatch = x.microbatch;
    o.kind = kind == 0 ? OpKind::F : kind == 1 ? (breadthFirst ? OpKind::BW : OpKind::B) : OpKind::W;
    out[d].push_back(o);
    ++placed;
    st[d].busy = true;
    events.push({now + dur, d, kind, x});
  }

  bool weight(int d, double now) {
    DeviceState& s = st[d];
    if (s.weights.empty()) return false;
    const Pass w = s.weights.front();
    s.weights.pop_front();
    start(d, 2, w, now);
    return true;
  }

  // Tries to start something on idle device d at `now`; `force` lets a forward go over the
  // limit (the way out when every device waits). Schedules a wake-up when it waits for an
  // input in flight.
  bool tryStart(int d, double now, bool force) {
    DeviceState& s = st[d];
    if (s.busy) return false;
    const auto& fs = fSeq[d];
    const auto& bs = bSeq[d];
    const bool fLeft = s.fPos < fs.size();
    const bool bLeft = s.bPos < bs.size();
    const bool blockDone = s.blockEnd == 0 || static_cast<int>(s.inBackward ? s.bPos : s.fPos) >= s.blockEnd;
    if (blockDone) {
      // Weight passes beyond one unit's worth run first (they hold activation memory).
      if (!breadthFirst && s.weights.size() > static_cast<std::size_t>(unit)) return weight(d, now);
      const bool ownForwardDone = bLeft && fDone(bs[s.bPos].stage, bs[s.bPos].microbatch) < kInf;
      const bool canForward = fLeft && (s.inflight < limit[d] || force);
      if (ownForwardDone && (bReady(bs[s.bPos]) <= now || !canForward)) {
        s.inBackward = true;
        s.blockEnd = bEnd[d][s.bPos];
      } else if (canForward) {
        s.inBackward = false;
        s.blockEnd = fEnd[d][s.fPos];
      } else {
        s.blockEnd = 0;
        return weight(d, now);
      }
    }
    double wake = kInf;
    if (s.inBackward) {
      const Pass& x = bs[s.bPos];
      const double ready = bReady(x);
      if (ready <= now) {
        ++s.bPos;
        --s.inflight;
        start(d, 1, x, now);
        return true;
      }
      wake = ready;
    } else {
      const Pass& x = fs[s.fPos];
      const double ready = fReady(x);
      if (s.inflight >= limit[d] && !force) {
        s.blockEnd = 0;  // the block ends at the limit
        return weight(d, now);
      }
      if (ready <= now) {
        ++s.fPos;
        ++s.inflight;
        start(d, 0, x, now);
        return true;
      }
      wake = ready;
    }
    // The block's next pass waits for its input: a weight-gradient pass fills the wait.
    if (weight(d, now)) return true;
    if (wake < kInf && (wake < s.wakeMs || s.wakeMs <= now)) {
      s.wakeMs = wake;
      events.push({wake, d, 3, {}});
    }
    return false;
  }

  Expected<ScheduleSkeleton> build(std::string_view name) {
    for (int d = 0; d < p; ++d) tryStart(d, 0.0, false);
    double now = 0;
    std::size_t steps = 0;
    while (placed < total || !events.empty()) {
      if ((++steps & 4095) == 0 && input.control && input.control->cancelled()) return Error::cancelled();
      if (events.empty()) {
        // Every device waits with no input in flight: the first whose forward is ready goes
        // over its limit.
        bool progressed = false;
        for (int d = 0; d < p && !progressed; ++d) {
          st[d].blockEnd = 0;
          progressed = tryStart(d, now, true);
        }
        if (!progressed) {
          return Error{std::string(name) + ": the blockwise construction stalled (" + std::to_string(placed) + " of " +
                       std::to_string(total) + " passes placed)"};
        }
        continue;
      }
      const Event e = events.top();
      events.pop();
      now = e.atMs;
      if (e.kind == 3) {
        DeviceState& s = st[e.device];
        if (s.wakeMs == now) s.wakeMs = kInf;
        tryStart(e.device, now, false);
        continue;
      }
      st[e.device].busy = false;
      if (e.kind == 0) fDone(e.pass.stage, e.pass.microbatch) = now;
      if (e.kind == 1) {
        bDone(e.pass.stage, e.pass.microbatch) = now;
        if (!breadthFirst) st[e.device].weights.push_back(e.pass);
      }
      for (int d = 0; d < p; ++d) tryStart(d, now, false);
    }
    ScheduleSkeleton sk;
    sk.virtualStages = input.virtualStages;
    sk.devices = std::move(out.values());
    return sk;
  }

  const ScheduleInput& input;
  const bool breadthFirst;
  const int p, v, m;
  const int n;  // virtual stages
  const int unit;
  IdVector<std::vector<Pass>> fSeq, bSeq;
  IdVector<std::vector<int>> fEnd, bEnd;
  IdVector<int> limit;
  Grid<double> fDone, bDone;
  IdVector<DeviceState> st;
  IdVector<std::vector<OrderedOp>> out;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  const std::size_t total;
  std::size_t placed = 0;
};

class Blockwise final : public ScheduleGenerator {
 public:
  explicit Blockwise(bool breadthFirst) : m_breadthFirst(breadthFirst) {}
  std::string_view name() const override { return m_breadthFirst ? "breadth-first" : "zeropp"; }
  int defaultChunksPerDevice() const override { return 2; }
  bool splitsBackward() const override { return !m_breadthFirst; }
  void configure(PlanConfig& config) const override { config.unitMicrobatches = unitOf(config); }
  Status validate(const ScheduleShape& shape) const override {
    return requireChunks(name(), shape, shape.chunksPerDevice >= 1, "at least one chunk per device");
  }
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    return linearPlacement(shape.devices, shape.chunksPerDevice);
  }

  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const int p = input.shape.devices;
    const int m = input.shape.microbatches;
    int unit = m;
    if (!m_breadthFirst) {
      const int asked = input.request ? input.request->config.unitMicrobatches : 0;
      if (asked > m) {
        return Error{"zeropp: --unit " + std::to_string(asked) + " is more than the " + std::to_string(m) +
                     " microbatches (a unit is a block of microbatches)"};
      }
      unit = input.request ? unitOf(input.request->config) : std::min(p, m);
    }
    BlockwiseBuilder builder(input, m_breadthFirst, unit);
    return builder.build(name());
  }

 private:
  // The unit of microbatches: breadth-first all of them; zeropp the asked one, else p
  // (a unit fills the pipeline), never more than m.
  int unitOf(const PlanConfig& config) const {
    if (m_breadthFirst) return config.microbatches;
    const int asked = config.unitMicrobatches > 0 ? config.unitMicrobatches : config.devices;
    return std::max(1, std::min(asked, config.microbatches));
  }

  bool m_breadthFirst;
};

}  // namespace

std::unique_ptr<ScheduleGenerator> makeZeroPp() { return std::make_unique<Blockwise>(false); }
std::unique_ptr<ScheduleGenerator> makeBreadthFirst() { return std::make_unique<Blockwise>(true); }

}  // namespace pipestudio::schedules
