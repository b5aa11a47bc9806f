#pragma once
// Plans for the executor tests, made by a small greedy list scheduler so the suite does not
// depend on the planner: unit-time rounds, every device takes the highest-priority ready op
// (dependencies as docs/formats.md defines them). Orders come out like the named schedules:
// "1f1b" (F + fused BW, in-flight cap p − d), "zb-h1" (B before F before W, Qi et al. 2023
// ZB-H1's cap p − d), "zb-v" (two chunks per device in a V, Qi et al. 2024), "fill" (1F1B
// plus a frozen two-stage encoder whose half-batch N ops fill idle slots).

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "support/PlanBuilder.hpp"

namespace pipestudio::test {

/// The executor tests' layer sizes: 1 MiB of activations and weights, 64 KiB of output.
inline LayerBytes testLayerBytes() { return LayerBytes{1 << 20, std::nullopt, 1 << 20, 64 << 10}; }

/// The executor tests' layer: F = B = W = `ms`.
inline Layer testLayer(const std::string& name, double ms) {
  return trainableLayer(name, ms, ms, ms, testLayerBytes());
}

/// The plan before its ops: the stages of `schedule` (a V of two chunks per device for zb-v),
/// with the frozen encoder's two stages for "fill".
inline Plan testPlanShell(const std::string& schedule, int devices, int microbatches) {
  const bool v = schedule == "zb-v";
  const bool fill = schedule == "fill";
  const int stages = v ? 2 * devices : devices;
  PlanBuilder builder(schedule, devices, microbatches);
  builder.samplesPerMicrobatch(2).cluster(testCluster(devices, {100, 5}, {25, 10}));
  if (fill) {
    Component enc{"encoder", false, {"backbone"}, {}};
    for (int l = 0; l < 2; ++l) enc.layers.push_back(frozenLayer("enc" + std::to_string(l), 0.5, testLayerBytes()));
    builder.component(enc);
  }
  Component bb{"backbone", true, {}, {}};
  for (int l = 0; l < stages; ++l) bb.layers.push_back(testLayer("layer" + std::to_string(l), 1));
  builder.component(bb);
  const int backbone = fill ? 1 : 0;
  for (int s = 0; s < stages; ++s) {
    const int d = v ? (s < devices ? s : 2 * devices - 1 - s) : s;
    builder.stage(d, backbone, s, s, v ? s / devices : 0);
  }
  if (fill) {
    for (int s = 0; s < 2; ++s) builder.stage(s % devices, 0, s, s, 1);
  }
  Plan plan = builder.plan();
  plan.config.chunksPerDevice = v ? 2 : 1;
  plan.config.fill = fill ? "greedy" : "none";
  return plan;
}

/// The greedy list scheduler of makeTestPlan: unit-time rounds, in each every device runs its
/// highest-priority ready op (pick) within its in-flight cap.
class TestListScheduler {
 public:
  TestListScheduler(Plan& plan, const std::string& schedule)
      : m_plan(plan),
        m_devices(plan.config.devices),
        m_v(schedule == "zb-v"),
        m_split(schedule != "1f1b" && schedule != "fill"),
        m_backbone(schedule == "fill" ? 1 : 0),
        m_stages(m_v ? 2 * m_devices : m_devices),
        m_todo(static_cast<std::size_t>(m_devices)),
        m_inFlight(static_cast<std::size_t>(m_devices), 0) {
    for (const auto& vs : plan.virtualStages) {
      auto& list = m_todo[static_cast<std::size_t>(vs.device)];
      for (int mb = 0; mb < plan.config.microbatches; ++mb) {
        if (vs.component == m_backbone) {
          list.push_back({static_cast<int>(OpKind::F), vs.id, mb, 0});
          list.push_back({static_cast<int>(m_split ? OpKind::B : OpKind::BW), vs.id, mb, 0});
          if (m_split) list.push_back({static_cast<int>(OpKind::W), vs.id, mb, 0});
        } else {
          list.push_back({static_cast<int>(OpKind::N), vs.id, mb, 0});
          list.push_back({static_cast<int>(OpKind::N), vs.id, mb, 1});
        }
      }
    }
  }

  void run() {
    for (int round = 0; round < 100000; ++round) {
      bool any = false;
      for (int d = 0; d < m_devices; ++d) {
        auto& list = m_todo[static_cast<std::size_t>(d)];
        if (list.empty()) continue;
        any = true;
        const auto best = pick(d, round);
        if (best == list.end()) continue;
        runOp(d, *best, round);
        list.erase(best);
      }
      if (!any) break;
    }
  }

 private:
  // Pending ops: (kind, stage, microbatch, part).
  using Key = std::tuple<int, int, int, int>;

  bool done(OpKind k, int s, int mb, int part, int round) const {
    auto it = m_doneRound.find({static_cast<int>(k), s, mb, part});
    return it != m_doneRound.end() && it->second < round;
  }
  bool ready(const Key& k, int round) const {
    const auto [kind, s, mb, part] = k;
    const VirtualStage& vs = m_plan.stage(s);
    const bool first = vs.component == m_backbone ? s == 0 : s == m_stages;
    const bool last = vs.component == m_backbone ? s == m_stages - 1 : s == m_stages + 1;
    switch (static_cast<OpKind>(kind)) {
      case OpKind::F:
        return first || done(OpKind::F, s - 1, mb, 0, round);
      case OpKind::N:
        return first || done(OpKind::N, s - 1, mb, part, round);
      case OpKind::B:
      case OpKind::BW:
        return done(OpKind::F, s, mb, 0, round) &&
               (last || done(OpKind::B, s + 1, mb, 0, round) || done(OpKind::BW, s + 1, mb, 0, round));
      case OpKind::W:
        return done(OpKind::B, s, mb, 0, round);
      default:
        return false;
    }
  }
  static int priority(const Key& k) {
    switch (static_cast<OpKind>(std::get<0>(k))) {
      case OpKind::B:
      case OpKind::BW:
        return 0;
      case OpKind::F:
        return 1;
      case OpKind::W:
        return 2;
      default:
        return 3;
    }
  }
  // Device d's highest-priority ready op this round (end: none).
  std::vector<Key>::iterator pick(int d, int round) {
    auto& list = m_todo[static_cast<std::size_t>(d)];
    const int cap = m_v ? 2 * (m_devices - d) : m_devices - d;
    auto best = list.end();
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (!ready(*it, round)) continue;
      // The cap holds back new microbatches only: a V's second chunk (the way back) always
      // runs, or a device that filled its cap with first-chunk forwards would wait forever.
      const bool newMicrobatch = !m_v || std::get<1>(*it) < m_devices;
      if (static_cast<OpKind>(std::get<0>(*it)) == OpKind::F && newMicrobatch &&
          m_inFlight[static_cast<std::size_t>(d)] >= cap)
        continue;
      if (best == list.end() || priority(*it) < priority(*best)) best = it;
    }
    return best;
  }
  void runOp(int d, const Key& key, int round) {
    constexpr double kSlotMs = 1.0;
    const auto [kind, s, mb, part] = key;
    const auto ok = static_cast<OpKind>(kind);
    if (ok == OpKind::F) ++m_inFlight[static_cast<std::size_t>(d)];
    if (ok == OpKind::B || ok == OpKind::BW) --m_inFlight[static_cast<std::size_t>(d)];
    m_doneRound[key] = round;
    Op op;
    op.device = d;
    op.virtualStage = s;
    op.kind = ok;
    op.microbatch = mb;
    op.samples = ok == OpKind::N ? 1 : 0;
    op.startMs = round * kSlotMs;
    op.endMs = op.startMs + (ok == OpKind::N ? 0.5 : (ok == OpKind::BW ? 0.9 : 0.6)) * kSlotMs;
    m_plan.ops.push_back(op);
  }

  Plan& m_plan;
  const int m_devices;
  const bool m_v;
  const bool m_split;
  const int m_backbone;
  const int m_stages;
  std::map<Key, int> m_doneRound;  // with the round each op finished in
  std::vector<std::vector<Key>> m_todo;
  std::vector<int> m_inFlight;
};

inline Plan makeTestPlan(const std::string& schedule, int devices, int microbatches) {
  Plan plan = testPlanShell(schedule, devices, microbatches);
  TestListScheduler(plan, schedule).run();
  // Plan order is per device in execution order; a stable sort by device keeps each order.
  std::stable_sort(plan.ops.begin(), plan.ops.end(), [](const Op& a, const Op& b) { return a.device < b.device; });
  plan.metrics = computeMetrics(plan);
  return plan;
}

}  // namespace pipestudio::test
