// The ZB-V construction of the Zero Bubble authors (Qi et al. 2023 §6), after the reference
// implementation sail-sg/zero-bubble-pipeline-parallelism @ 39f2c18,
// megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py, PipelineGraph.try_v_schedule and
// create_schedule. Generalised from one F/B/W time and one transfer time to per-stage times,
// per-link transfers and per-device activation bytes and budgets; with equal stages it builds
// the reference's orders op for op.
//
// One V per device: device d holds virtual stage d (chunk 0, data flows to d+1) and stage
// 2p−1−d (chunk 1, flows back to d−1). Six kinds of pass per device, in the order one
// microbatch meets them there: F0 (forward of chunk 0), F1, B1 (input gradient of chunk 1,
// which comes first going backwards), B0, W1, W0. F0 and B1 receive their input from device
// d−1, F1 and B0 from d+1 (transfers as StageEstimate::sendMs says). The construction
// appends passes device by device while keeping its own timeline (each pass as early as its
// input and its device allow) and each device's live activation bytes, which never exceed the
// device's budget: before a forward that would, pending W passes run first (a W frees its
// weight-gradient bytes), and when none is pending the construction gives up.
//   1. Warm-up: one F0 per device; then from the last device up, each device fills the wait
//      for its first F1 with F0 passes (of every device up to it) while its memory leaves room
//      for the microbatches still to come, and runs F1.
//   2. Count balancing: each device catches up with the forward count of the device before it
//      (as far as its budget allows).
//   3. Steady state, 2m rounds: every device runs one backward (B0 when its B1 count is ahead,
//      else B1 once its input is there), then one forward (F1 when its input is there, else F0)
//      (with unequal stages, a device whose pass lacks its input skips the round, where the
//      reference stops on an assertion, and rounds go on until every pass is placed);
//      before each, pending W passes fill the wait for its input when they fit in it, and one
//      more W goes in when the wait exceeds the largest device bubble so far (for B0 always;
//      for B1 and forwards when the fill policy says so).
//   4. The remaining W passes.
// Each of the four fill policies (fill before B1, fill before a forward: on/off) is run, then
// re-run with the bubbles of its previous run "approved" (a device may take as much bubble as
// the worst device already has) while that lowers its worst device bubble.
#include <algorithm>
#include <array>
#include <deque>
#include <limits>

#include "pipestudio/common/Index.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::schedules {
namespace {

// Pass kinds on a device, in the reference's numbering (category · 2 + direction).
constexpr int kF0 = 0;
constexpr int kF1 = 1;
constexpr int kB1 = 2;  // first backward of a microbatch on the device: the chunk-1 stage
constexpr int kB0 = 3;
constexpr int kW1 = 4;
constexpr int kW0 = 5;
constexpr int kKinds = 6;

class VBuilder {
 public:
  VBuilder(const ScheduleInput& input, const VConstructionOptions& options)
      : m_p(input.shape.devices),
        m_m(input.shape.microbatches),
        m_options(options),
        m_pass(kKinds, input.shape.devices) {
    const int p = m_p;
    for (int d = 0; d < p; ++d) {
      const int down = d;            // chunk 0
      const int up = 2 * p - 1 - d;  // chunk 1
      const std::array<int, kKinds> stages = {down, up, up, down, up, down};
      for (int k = 0; k < kKinds; ++k) {
        const StageEstimate& e = input.estimate(stages[k]);
        Pass& pass = m_pass(k, d);
        pass.stage = stages[k];
        pass.durationMs = k < 2 ? e.forwardMs : k < 4 ? e.backwardInputMs : e.backwardWeightMs;
        pass.memoryBytes = k < 2   ? e.activationBytes
                           : k < 4 ? -(e.activationBytes - e.weightGradBytes)
                                   : -e.weightGradBytes;
      }
      // The transfer into a pass from the neighbouring device (0 where there is none): F0 from
      // stage d−1, F1 from stage 2p−2−d, B1 from stage 2p−d (the gradient of stage 2p−1−d's
      // output), B0 from stage d+1 (the gradient of stage d's output).
      if (options.withTransfers) {
        auto send = [&](int stage) { return input.estimate(stage).sendMs; };
        if (d > 0) {
          m_pass(kF0, d).sendInMs = send(d - 1);
          m_pass(kB1, d).sendInMs = send(up);
        }
        if (d + 1 < p) {
          m_pass(kF1, d).sendInMs = send(up - 1);
          m_pass(kB0, d).sendInMs = send(down);
        }
      }
    }
  }

  struct Run {
    bool ok = false;
    std::vector<std::vector<OrderedOp>> order;
    IdVector<double> bubbleMs;  // per device
    double maxBubbleMs = 0;
    double makespanMs = 0;
    bool usedFillForward = false;   // a decision depended on the forward fill policy
    bool usedFillBackward = false;  // … on the backward one
  };

  Run run(bool fillForward, bool fillBackward, const IdVector<double>& approved) {
    reset(approved);
    m_ok = warmUp() && balanceCounts() && steadyState(fillForward, fillBackward) && drainW();
    Run r;
    r.ok = m_ok;
    r.order = std::move(m_order.values());
    r.bubbleMs = m_bubble;
    r.maxBubbleMs = m_maxBubble;
    r.makespanMs = m_cur.empty() ? 0.0 : *std::max_element(m_cur.begin(), m_cur.end());
    r.usedFillForward = m_usedFillForward;
    r.usedFillBackward = m_usedFillBackward;
    return r;
  }

 private:
  // One kind of pass on one device: its stage, duration, change of the device's live bytes
  // and the transfer time of its input from the neighbouring device.
  struct Pass {
    int stage = 0;
    double durationMs = 0;
    std::int64_t memoryBytes = 0;
    double sendInMs = 0;
  };

  int& count(int d, int kind) { return m_count[d][kind]; }
  // m_end's row of (kind, device).
  int endRow(int kind, int device) const { return kind * m_p + device; }
  double endMs(int kind, int device, int mb) const { return m_end(endRow(kind, device), mb); }

  void reset(const IdVector<double>& approved) {
    const int p = m_p;
    m_count.assign(p, {});
    m_end.assign(kKinds * p, m_m, -1.0);
    m_cur.assign(p, 0.0);
    m_mem.assign(p, 0);
    m_bubble.assign(p, 0.0);
    m_maxBubble = 0;
    m_pendingW.assign(p, {});
    m_order.assign(p, {});
    for (auto& o : m_order) o.reserve(6 * static_cast<std::size_t>(m_m));
    m_approved = approved;
    m_usedFillForward = m_usedFillBackward = false;
    m_maxApproved = approved.empty() ? -1.0 : *std::max_element(approved.begin(), approved.end());
  }

  // zbv.py get_max_stage_bubble(stage).
  double maxStageBubble(int d) const {
    double b = m_maxBubble;
    if (!m_approved.empty()) b = std::max(b, m_maxApproved - m_approved[d]);
    return b;
  }

  // The producer of a pass on another device (kind, device), or {-1, -1}.
  std::pair<int, int> crossProducer(int kind, int d) const {
    if ((kind == kF0 || kind == kB1) && d > 0) return {kind, d - 1};
    if ((kind == kF1 || kind == kB0) && d + 1 < m_p) return {kind, d + 1};
    return {-1, -1};
  }

  // Arrival of the input of the next `kind` pass on d from its neighbour; -1: not produced yet
  // (or no neighbour: `exists` false).
  double arrivalMs(int kind, int d, int mb, bool& exists) const {
    const auto [k, from] = crossProducer(kind, d);
    exists = k >= 0;
    if (!exists) return -1;
    const double e = endMs(k, from, mb);
    return e < 0 ? -1 : e + m_pass(kind, d).sendInMs;
  }

  bool put(int kind, int d) {
    int& c = count(d, kind);
    if (c >= m_m) return false;
    const Pass& pass = m_pass(kind, d);
    if (m_mem[d] + pass.memoryBytes > m_options.budgetBytes[d]) return false;
    // Same-device order: F1 after F0, B1 after F1, B0 after B1 of the microbatch (as the
    // reference asserts); W after its B (guaranteed by the pending queue).
    if (kind >= kF1 && kind <= kB0 && endMs(kind - 1, d, c) < 0) return false;
    const double noBubble = m_cur[d] + pass.durationMs;
    double end = noBubble;
    if (kind < kW1) {
      const auto [k, from] = crossProducer(kind, d);
      if (k >= 0) {
        const double e = endMs(k, from, c);
        if (e < 0) return false;
        end = std::max(end, e + pass.sendInMs + pass.durationMs);
      }
    }
    if (count(d, kF0) > 0) {
      m_bubble[d] += end - noBubble;
      m_maxBubble = std::max(m_maxBubble, m_bubble[d]);
    }
    m_end(endRow(kind, d), c) = end;
    m_cur[d] = end;
    m_mem[d] += pass.memoryBytes;
    OrderedOp o;
    o.virtualStage = pass.stage;
    o.kind = kind < 2 ? OpKind::F : kind < 4 ? OpKind::B : OpKind::W;
    o.microbatch = c;
    m_order[d].push_back(o);
    if (kind == kB1 || kind == kB0) m_pendingW[d].push_back(kind + 2);
    ++c;
    return true;
  }

  bool fits(int kind, int d) const { return m_mem[d] + m_pass(kind, d).memoryBytes <= m_options.budgetBytes[d]; }

  bool putW(int d) {
    auto& q = m_pendingW[d];
    if (q.empty()) return false;
    const int kind = q.front();
    q.pop_front();
    return put(kind, d);
  }
  double nextWMs(int d) const { return m_pass(m_pendingW[d].front(), d).durationMs; }

  bool warmUp() {
    const int p = m_p;
    for (int d = 0; d < p; ++d) {
      if (!put(kF0, d)) return false;
    }
    for (int i = p - 1; i >= 0; --i) {
      if (i == p - 1) {
        if (!put(kF1, i)) return false;
        continue;
      }
      const double firstF1 = endMs(kF1, i + 1, 0) + m_pass(kF1, i).sendInMs;
      // Room for the microbatches still to come: i+1 of them, both chunks (the reference:
      // f_mem · (2 + 2i)).
      const std::int64_t room =
          static_cast<std::int64_t>(i + 1) * (m_pass(kF0, i).memoryBytes + m_pass(kF1, i).memoryBytes);
      while (m_mem[i] + room <= m_options.budgetBytes[i] && m_cur[i] + m_pass(kF0, i).durationMs <= firstF1 &&
             count(i, kF0) < m_m) {
        for (int j = 0; j <= i; ++j) {
          if (!put(kF0, j)) return false;
        }
      }
      if (!put(kF1, i)) return false;
    }
    return true;
  }

  bool balanceCounts() {
    int chunk = kF0;
    for (int i = 1; i < m_p; ++i) {
      int idle = 0;
      while (count(i, kF0) + count(i, kF1) < count(i - 1, kF0) + count(i - 1, kF1) ||
             (count(i, kF1) <= count(i - 1, kF1) && count(i - 1, kF1) < m_m)) {
        bool any = false;
        for (int j = m_p - 1; j >= i; --j) {
          // A pass over the budget (possible only with unequal stages, where the reference
          // stops on an assertion) is left to the steady state.
          if (count(j, chunk) < m_m && fits(chunk, j)) {
            if (!put(chunk, j)) return false;
            any = true;
          }
        }
        chunk = 1 - chunk;
        idle = any ? 0 : idle + 1;
        if (idle >= 2) break;  // nothing more fits: the steady state takes over
      }
    }
    return true;
  }

  // Pending W passes before a pass whose input arrives at `arrival` (the reference's bubble
  // filling): those that fit entirely in the wait, then one more when the wait is longer
  // than the bubble the device may still take and the policy allows it.
  // `policy`: which fill policy decides the extra W (0: none, it always goes in; 1: forward;
  // 2: backward), so that runs whose policy never decided anything can be recognised.
  bool fillWait(int d, bool exists, double arrival, bool allowExtra, int policy) {
    while (!m_pendingW[d].empty() && exists && arrival >= 0 && arrival >= m_cur[d] + nextWMs(d)) {
      if (!putW(d)) return false;
    }
    if (!m_pendingW[d].empty() && exists && arrival >= 0 && arrival - m_cur[d] > maxStageBubble(d) - m_bubble[d]) {
      if (policy == 1) m_usedFillForward = true;
      if (policy == 2) m_usedFillBackward = true;
      if (allowExtra && !putW(d)) return false;
    }
    return true;
  }

  // Whether the input of the next `kind` pass on d has been produced (or needs none).
  bool inputReady(int kind, int d) const {
    const auto [k, from] = crossProducer(kind, d);
    return k < 0 || endMs(k, from, m_count[d][kind]) >= 0;
  }

  bool steadyState(bool fillForward, bool fillBackward) {
    const int p = m_p;
    std::vector<int> first, second;
    // The reference runs 2m rounds, one backward and one forward per device each. With
    // unequal stages a device's next pass can lack its input in its round (where the
    // reference stops on an assertion); it then skips the round, and rounds go on while
    // any pass is placed.
    for (int round = 0;; ++round) {
      bool pending = false;
      for (int i = 0; i < p && !pending; ++i) pending = count(i, kB0) < m_m || count(i, kF1) < m_m;
      if (!pending) break;
      if (round >= 2 * m_m + 2 * p) return false;
      bool progress = false;
      // One backward per device: B0 devices from the last up, then B1 devices from the first.
      first.clear();
      second.clear();
      for (int i = 0; i < p; ++i) {
        if (count(i, kB0) >= m_m) continue;
        // B0 next when B1 is ahead and B0's input is there (or no B1 is left), else B1.
        const bool b0Next = count(i, kB0) < count(i, kB1) &&
                            (i == p - 1 || endMs(kB0, i + 1, count(i, kB0)) >= 0 || count(i, kB1) >= m_m);
        (b0Next ? first : second).push_back(i);
      }
      auto backward = [&](int i, int kind) {
        // Its own forward chain must have reached it (same-device order) and its input be there.
        if (endMs(kind - 1, i, count(i, kind)) < 0 || !inputReady(kind, i)) return true;
        const int mb = count(i, kind);
        bool exists = false;
        const double arrival = arrivalMs(kind, i, mb, exists);
        if (!fillWait(i, exists, arrival, kind == kB0 || fillBackward, kind == kB0 ? 0 : 2)) return false;
        progress = true;
        return put(kind, i);
      };
      for (std::size_t j = first.size(); j-- > 0;) {  // B0 devices from the last up
        if (!backward(first[j], kB0)) return false;
      }
      for (int i : second) {
        if (!backward(i, kB1)) return false;
      }
      // One forward per device, from the first.
      for (int i = 0; i < p; ++i) {
        if (count(i, kF1) >= m_m) continue;
        // F1 when F0 is ahead and F1's input is there; else F0 when F1 caught up with it or
        // F0's input is there; else nothing this round.
        const bool f0Ahead = count(i, kF1) < count(i, kF0);
        int kind = -1;
        if (f0Ahead && (i == p - 1 || endMs(kF1, i + 1, count(i, kF1)) >= 0)) {
          kind = kF1;
        } else if (!f0Ahead || (count(i, kF0) < m_m && (i == 0 || endMs(kF0, i - 1, count(i, kF0)) >= 0))) {
          kind = kF0;
        }
        if (kind < 0 || count(i, kind) >= m_m || !inputReady(kind, i)) continue;
        while (m_mem[i] + m_pass(kind, i).memoryBytes > m_options.budgetBytes[i]) {
          if (!putW(i)) return false;  // over the budget and no W left to free memory
        }
        bool exists = false;
        const double arrival = arrivalMs(kind, i, count(i, kind), exists);
        if (!fillWait(i, exists, arrival, fillForward, 1)) return false;
        if (!put(kind, i)) return false;
        progress = true;
      }
      if (!progress) return false;
    }
    return true;
  }

  bool drainW() {
    for (int d = 0; d < m_p; ++d) {
      while (!m_pendingW[d].empty()) {
        if (!putW(d)) return false;
      }
    }
    for (int d = 0; d < m_p; ++d) {
      for (int k = 0; k < kKinds; ++k) {
        if (count(d, k) != m_m) return false;
      }
    }
    return true;
  }

  int m_p;
  int m_m;
  const VConstructionOptions& m_options;
  Grid<Pass> m_pass;  // per (kind, device)
  // State of one run.
  bool m_ok = false;
  IdVector<std::array<int, kKinds>> m_count;  // passes placed per device and kind
  Grid<double> m_end;                         // end of each pass per (endRow(kind, device), microbatch); −1: not yet
  IdVector<double> m_cur;
  IdVector<std::int64_t> m_mem;
  IdVector<double> m_bubble;
  double m_maxBubble = 0;
  IdVector<std::deque<int>> m_pendingW;
  IdVector<std::vector<OrderedOp>> m_order;
  IdVector<double> m_approved;
  double m_maxApproved = -1;
  bool m_usedFillForward = false;
  bool m_usedFillBackward = false;
};

}  // namespace

bool isSingleV(const ScheduleInput& input) {
  const int p = input.shape.devices;
  if (static_cast<int>(input.virtualStages.size()) != 2 * p) return false;
  for (int s = 0; s < 2 * p; ++s) {
    const VirtualStage& vs = input.stage(s);
    if (vs.pipeline != 0 || vs.device != (s < p ? s : 2 * p - 1 - s)) return false;
  }
  return true;
}

std::vector<VConstruction> vShapeConstructions(const ScheduleInput& input, const VConstructionOptions& options,
                                               const VConstructionSink& each, const VConstructionSink& first) {
  std::vector<VConstruction> out;
  if (!isSingleV(input) || input.shape.microbatches < 1) return out;
  VBuilder builder(input, options);
  struct Chain {
    bool fillForward, fillBackward, usedForward, usedBackward;
  };
  std::vector<Chain> done;
  // zbv.py create_schedule: fill_b over (True, False), fill_f over (True, False).
  int policy = -1;
  for (bool fillBackward : {true, false}) {
    for (bool fillForward : {true, false}) {
      ++policy;
      if (options.onlyPolicy >= 0 && policy != options.onlyPolicy) continue;
      // A policy whose flags no decision of an earlier chain depended on builds that chain
      // again, op for op: skip it (the earlier one wins the tie anyway).
      const bool repeat = std::any_of(done.begin(), done.end(), [&](const Chain& c) {
        return (c.fillForward == fillForward || !c.usedForward) && (c.fillBackward == fillBackward || !c.usedBackward);
      });
      if (repeat) continue;
      auto best = builder.run(fillForward, fillBackward, {});
      if (first && best.ok && out.empty() && done.empty()) {
        first({best.order, best.maxBubbleMs, best.makespanMs, fillForward, fillBackward, policy});
      }
      Chain chain{fillForward, fillBackward, best.usedFillForward, best.usedFillBackward};
      if (!best.ok) {
        done.push_back(chain);
        continue;
      }
      // try_v_schedule's recursion: re-run with the last run's bubbles approved while that
      // lowers the worst device bubble. A bubble under refineAboveShare of the makespan is
      // left as it is (large instances, where a re-run costs as much as the plan's
      // simulation and gains less than that share).
      IdVector<double> approved = best.bubbleMs;
      double lastMax = best.maxBubbleMs;
      for (int refinement = 0; refinement < options.maxRefinements; ++refinement) {
        if (lastMax <= options.refineAboveShare * best.makespanMs) break;
        auto again = builder.run(fillForward, fillBackward, approved);
        chain.usedForward = chain.usedForward || again.usedFillForward;
        chain.usedBackward = chain.usedBackward || again.usedFillBackward;
        if (!again.ok || !(again.maxBubbleMs < lastMax)) break;
        lastMax = again.maxBubbleMs;
        approved = again.bubbleMs;
        best = std::move(again);
      }
      done.push_back(chain);
      out.push_back({std::move(best.order), best.maxBubbleMs, best.makespanMs, fillForward, fillBackward, policy});
      if (each) each(out.back());
    }
  }
  return out;
}

}  // namespace pipestudio::schedules
