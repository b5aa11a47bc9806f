// The greedy heuristic of the Zero Bubble authors' automatic scheduler (Qi et al. 2023 §3),
// after the reference implementation sail-sg/zero-bubble-pipeline-parallelism @ 39f2c18,
// megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py, Graph.manual_order and
// initial_solution. Generalised from one transfer time to one per link (StageEstimate::sendMs
// of the sending stage); per-stage times and memory as the reference takes them. With equal
// transfers it builds the reference's orders op for op.
//
// manual_order keeps its own timeline (each pass ends at max(device free, input end +
// transfer) + its time) and per-device activation bytes, and builds the order microbatch by
// microbatch:
//   * microbatch 0: one F per device; then, from the last device up, each device plans as
//     many extra F passes as fit in memory while the first B comes back (with
//     allow_bubble_before_first_b: as long as they end before it; else: as long as the device
//     is not yet past it); a device never plans more than the one before it; then the Fs and
//     the first B of every device (last device first).
//   * microbatch i > 0: each device runs one more F unless it is done, except (with
//     prioritize_b) a device two or more F ahead of the next one, which skips it when the
//     next device's F + B would be waited for; a device runs an F only if every later
//     device does. Before an F: W passes while memory does not allow it, then W passes that
//     fit in the wait for the F's input, then one more W when the wait is longer than the
//     bubble the device may still take (always, or with no_bubble_greedy only when it may
//     not take it). Then the B of microbatch i on every device, last device first, with the
//     same W filling (device 0 runs all pending W once its Fs are done).
//   * the remaining W passes.
// A variant that needs a W to make room and has none fails (the reference raises
// "Cannot fit memory" and stops).
#include "autosched/PublishedGreedy.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "pipestudio/common/Index.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::autosched {
namespace {

class ZbGreedy {
 public:
  explicit ZbGreedy(const Instance& inst) : m_inst(inst), m_s(inst.stages), m_m(inst.microbatches) {}

  PublishedRun run(bool allowBubbleBeforeFirstB, bool prioritizeB, bool noBubbleGreedy) {
    reset();
    PublishedRun r;
    r.ok = build(allowBubbleBeforeFirstB, prioritizeB, noBubbleGreedy);
    if (!r.ok) return r;
    for (int j = 0; j < m_s; ++j) {
      const double span = t(j, kW, m_m - 1) - t(j, kF, 0) + cost(j, kF, 0);
      r.criterionMs = std::max(r.criterionMs, span);
    }
    r.orders = std::move(m_orders.values());
    return r;
  }

 private:
  double cost(int j, int kind, int /*mb*/) const { return m_inst.durationOf(kind, j); }
  std::int64_t mem(int j, int kind) const {
    if (kind == kF) return m_inst.activationBytesOf(j);
    if (kind == kB) return -(m_inst.activationBytesOf(j) - m_inst.weightGradBytesOf(j));
    return -m_inst.weightGradBytesOf(j);
  }
  // Transfer into stage j's F (from j−1) or B (from j+1); the reference's cost_comm.
  double commF(int j) const { return m_inst.sendMsOf(j - 1); }
  double commB(int j) const { return m_inst.sendMsOf(j); }
  double t(int j, int kind, int mb) const { return m_t[m_inst.opId(j, kind, mb)]; }
  std::int64_t maxMem(int j) const { return m_inst.budgetBytesOf(j); }  // stage j is on device j

  void reset() {
    m_f.assign(m_s, 0);
    m_b.assign(m_s, 0);
    m_w.assign(m_s, 0);
    m_e.assign(m_s, 0.0);
    m_mem.assign(m_s, 0);
    m_bubble.assign(m_s, 0.0);
    m_maxBubble = 0;
    m_t.assign(m_inst.opCount(), 0.0);  // the reference starts every time at 0
    m_orders.assign(m_s, {});
  }

  void put(int j, int kind) {
    int& count = kind == kF ? m_f[j] : kind == kB ? m_b[j] : m_w[j];
    const int i = count;
    const double c = cost(j, kind, i);
    const double noBubble = m_e[j] + c;
    double end = noBubble;
    if (j > 0 && kind == kF) end = std::max(end, t(j - 1, kF, i) + commF(j) + c);
    if (j + 1 < m_s && kind == kB) end = std::max(end, t(j + 1, kB, i) + commB(j) + c);
    if (m_f[j] > 0) {
      m_bubble[j] += end - noBubble;
      m_maxBubble = std::max(m_maxBubble, m_bubble[j]);
    }
    m_e[j] = end;
    const int op = m_inst.opId(j, kind, i);
    m_t[op] = end;
    m_mem[j] += mem(j, kind);
    m_orders[j].push_back(op);
    ++count;
  }

  // W passes before a pass whose input ends at `inputEnd` (+ transfer `comm`); false when
  // memory needs a W and none is pending.
  void fillWait(int j, double inputEnd, double comm, bool noBubbleGreedy) {
    while (m_w[j] < m_b[j] && m_e[j] + cost(j, kW, m_w[j]) <= inputEnd + comm) put(j, kW);
    if (m_w[j] < m_b[j] && m_e[j] < inputEnd + comm) {
      if (inputEnd + comm - m_e[j] <= m_maxBubble - m_bubble[j]) {
        if (noBubbleGreedy) put(j, kW);
      } else {
        put(j, kW);
      }
    }
  }

  bool makeRoom(int j, std::int64_t need) {
    while (m_mem[j] + need > maxMem(j)) {
      if (m_w[j] >= m_b[j]) return false;  // "Cannot fit memory"
      put(j, kW);
    }
    return true;
  }

  bool build(bool allowBubbleBeforeFirstB, bool prioritizeB, bool noBubbleGreedy) {
    const int S = m_s;
    IdVector<int> fRequired(S);
    for (int i = 0; i < m_m; ++i) {
      if (i == 0) {
        for (int j = 0; j < S; ++j) put(j, kF);
        std::fill(fRequired.begin(), fRequired.end(), 0);
        double lastT = 0;
        for (int j = S - 1; j >= 0; --j) {
          if (j == S - 1) {
            lastT = t(j, kF, i) + cost(j, kB, i);
            continue;
          }
          std::int64_t memory = m_mem[j];
          double time = m_e[j];
          const double comm = commB(j);
          while (true) {
            const int next = m_f[j] + fRequired[j];
            if (next < m_m && memory + mem(j, kF) <= maxMem(j)) {
              if (allowBubbleBeforeFirstB ? time + cost(j, kF, next) > lastT + comm : time >= lastT + comm) break;
              memory += mem(j, kF);
              time += cost(j, kF, next);
              ++fRequired[j];
            } else {
              break;
            }
          }
          lastT = std::max(time, lastT + comm) + cost(j, kB, i);
        }
        for (int j = 1; j < S; ++j) {
          while (fRequired[j] > 0 && fRequired[j] >= fRequired[j - 1] && m_f[j] + fRequired[j] < m_m) {
            --fRequired[j];
          }
        }
        for (int j = 0; j < S; ++j) {
          for (int k = 0; k < fRequired[j]; ++k) put(j, kF);
        }
        for (int j = S - 1; j >= 0; --j) put(j, kB);
        continue;
      }
      std::fill(fRequired.begin(), fRequired.end(), 0);
      for (int j = 0; j < S; ++j) {
        if (m_f[j] >= m_m) continue;
        if (j + 1 < S && m_f[j] >= m_f[j + 1] + 2 && prioritizeB) {
          const double nextPlusFw = m_e[j + 1] + cost(j + 1, kF, m_f[j + 1]) + cost(j + 1, kB, m_b[j + 1]) + commB(j);
          if (m_e[j] >= nextPlusFw) continue;
          double wCost = 0;
          int wCount = 0;
          std::int64_t memWithW = m_mem[j] + mem(j, kF);
          while (memWithW > maxMem(j) && m_w[j] + wCount < m_b[j]) {
            wCost += cost(j, kW, m_w[j] + wCount);
            memWithW += mem(j, kW);
            ++wCount;
          }
          if (m_e[j] + cost(j, kF, m_f[j]) + wCost <= nextPlusFw) {
            fRequired[j] = 1;
            continue;
          }
          if (nextPlusFw - m_e[j] <= m_maxBubble - m_bubble[j]) continue;
        }
        fRequired[j] = 1;
      }
      for (int j = S - 2; j >= 0; --j) fRequired[j] = std::min(fRequired[j], fRequired[j + 1]);
      for (int j = 0; j < S; ++j) {
        if (fRequired[j] == 0) continue;
        if (!makeRoom(j, mem(j, kF))) return false;
        if (j > 0) fillWait(j, t(j - 1, kF, m_f[j]), commF(j), noBubbleGreedy);
        put(j, kF);
      }
      for (int j = S - 1; j >= 0; --j) {
        if (m_b[j] != i) return false;  // the reference asserts this
        if (!makeRoom(j, mem(j, kB))) return false;
        if (j + 1 < S) fillWait(j, t(j + 1, kB, i), commB(j), noBubbleGreedy);
        if (j == 0 && m_f[j] == m_m) {
          while (m_w[j] < m_b[j]) put(j, kW);
        }
        put(j, kB);
      }
    }
    for (int j = 0; j < S; ++j) {
      while (m_w[j] < m_m) {
        if (m_w[j] >= m_b[j]) return false;
        put(j, kW);
      }
    }
    // Every F and B placed once (a stage whose Fs ran out before its Bs is not a schedule).
    for (int j = 0; j < S; ++j) {
      if (m_f[j] != m_m || m_b[j] != m_m) return false;
    }
    return true;
  }

  const Instance& m_inst;
  int m_s;
  int m_m;
  // Per stage (one per device): passes placed, end of the last, memory, bubble so far.
  IdVector<int> m_f, m_b, m_w;
  IdVector<double> m_e;
  IdVector<std::int64_t> m_mem;
  IdVector<double> m_bubble;
  double m_maxBubble = 0;
  IdVector<double> m_t;  // per op: its end
  IdVector<std::vector<int>> m_orders;
};

}  // namespace

std::vector<PublishedRun> zbGreedyRuns(const Instance& inst, const PublishedSink& each) {
  std::vector<PublishedRun> out;
  if (inst.stages != inst.devices) return out;
  for (int s = 0; s < inst.stages; ++s) {
    if (inst.deviceOfStage(s) != s) return out;
  }
  ZbGreedy greedy(inst);
  // zb.py initial_solution: allow_bubble_before_first_b, prioritize_b, no_bubble_greedy, each
  // over (True, False).
  for (bool allowBubble : {true, false}) {
    for (bool prioritizeB : {true, false}) {
      for (bool noBubbleGreedy : {true, false}) {
        out.push_back(greedy.run(allowBubble, prioritizeB, noBubbleGreedy));
        if (each) each(out.back());
      }
    }
  }
  return out;
}

std::vector<PublishedRun> zbvRuns(const Instance& inst, const ScheduleInput& input, const PublishedSink& each,
                                  const PublishedSink& first) {
  std::vector<PublishedRun> out;
  if (!schedules::isSingleV(input)) return out;
  schedules::VConstructionOptions options;
  for (int d = 0; d < inst.devices; ++d) {
    const std::int64_t budget = inst.budgetBytesOf(d);
    // zbv.py's default max_mem without a limit: 1F1B's p microbatches (2p chunk activations).
    std::int64_t oneMicrobatch = 0;
    for (int s : inst.stagesOn(d)) oneMicrobatch += inst.activationBytesOf(s);
    options.budgetBytes.push_back(budget >= kUnlimited ? oneMicrobatch * inst.devices : budget);
  }
  auto toRun = [&](const schedules::VConstruction& c) {
    PublishedRun r;
    r.ok = true;
    r.criterionMs = c.maxBubbleMs;
    r.orders.resize(c.order.size());
    for (std::size_t d = 0; d < c.order.size(); ++d) {
      for (const OrderedOp& o : c.order[d]) {
        const int kind = o.kind == OpKind::F ? kF : o.kind == OpKind::B ? kB : kW;
        r.orders[d].push_back(inst.opId(o.virtualStage, kind, o.microbatch));
      }
    }
    return r;
  };
  schedules::VConstructionSink firstSink;
  if (first) firstSink = [&](const schedules::VConstruction& c) { first(toRun(c)); };
  schedules::vShapeConstructions(
      input, options,
      [&](const schedules::VConstruction& c) {
        out.push_back(toRun(c));
        if (each) each(out.back());
      },
      firstSink);
  if (out.empty()) out.emplace_back();  // it applies, but no policy keeps the budget
  return out;
}

int publishedChoice(const std::vector<PublishedRun>& runs) {
  int best = -1;
  double bestMs = 0;
  for (int i = 0; const PublishedRun& run : runs) {
    if (run.ok && (best < 0 || run.criterionMs < bestMs)) {
      best = i;
      bestMs = run.criterionMs;
    }
    ++i;
  }
  return best;
}

}  // namespace pipestudio::autosched
