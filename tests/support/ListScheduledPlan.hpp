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

inline Plan makeTestPlan(const std::string& schedule, int devices, int microbatches) {
  const bool v = schedule == "zb-v";
  const bool split = schedule != "1f1b" && schedule != "fill";
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

  // Pending ops: (kind, stage, microbatch, part). Done set with the round they finished in.
  using Key = std::tuple<int, int, int, int>;
  std::map<Key, int> doneRound;
  auto done = [&](OpKind k, int s, int mb, int part, int round) {
    auto it = doneRound.find({static_cast<int>(k), s, mb, part});
    return it != doneRound.end() && it->second < round;
  };
  std::vector<std::vector<Key>> todo(static_cast<std::size_t>(devices));
  for (const auto& vs : plan.virtualStages) {
    auto& list = todo[static_cast<std::size_t>(vs.device)];
    for (int mb = 0; mb < microbatches; ++mb) {
      if (vs.component == backbone) {
        list.push_back({static_cast<int>(OpKind::F), vs.id, mb, 0});
        list.push_back({static_cast<int>(split ? OpKind::B : OpKind::BW), vs.id, mb, 0});
        if (split) list.push_back({static_cast<int>(OpKind::W), vs.id, mb, 0});
      } else {
        list.push_back({static_cast<int>(OpKind::N), vs.id, mb, 0});
        list.push_back({static_cast<int>(OpKind::N), vs.id, mb, 1});
      }
    }
  }
  auto ready = [&](const Key& k, int round) {
    const auto [kind, s, mb, part] = k;
    const auto ok = static_cast<OpKind>(kind);
    const VirtualStage& vs = plan.stage(s);
    const bool first = vs.component == backbone ? s == 0 : s == stages;
    const bool last = vs.component == backbone ? s == stages - 1 : s == stages + 1;
    switch (ok) {
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
  };
  auto priority = [&](const Key& k) {
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
  };
  std::vector<int> inFlight(static_cast<std::size_t>(devices), 0);
  const double slotMs = 1.0;
  for (int round = 0; round < 100000; ++round) {
    bool any = false;
    for (int d = 0; d < devices; ++d) {
      auto& list = todo[static_cast<std::size_t>(d)];
      if (list.empty()) continue;
      any = true;
      const int cap = v ? 2 * (devices - d) : devices - d;
      auto best = list.end();
      for (auto it = list.begin(); it != list.end(); ++it) {
        if (!ready(*it, round)) continue;
        // The cap holds back new microbatches only: a V's second chunk (the way back) always
        // runs, or a device that filled its cap with first-chunk forwards would wait forever.
        const bool newMicrobatch = !v || std::get<1>(*it) < devices;
        if (static_cast<OpKind>(std::get<0>(*it)) == OpKind::F && newMicrobatch &&
            inFlight[static_cast<std::size_t>(d)] >= cap)
          continue;
        if (best == list.end() || priority(*it) < priority(*best)) best = it;
      }
      if (best == list.end()) continue;
      const auto [kind, s, mb, part] = *best;
      const auto ok = static_cast<OpKind>(kind);
      if (ok == OpKind::F) ++inFlight[static_cast<std::size_t>(d)];
      if (ok == OpKind::B || ok == OpKind::BW) --inFlight[static_cast<std::size_t>(d)];
      doneRound[*best] = round;
      Op op;
      op.device = d;
      op.virtualStage = s;
      op.kind = ok;
      op.microbatch = mb;
      op.samples = ok == OpKind::N ? 1 : 0;
      op.startMs = round * slotMs;
      op.endMs = op.startMs + (ok == OpKind::N ? 0.5 : (ok == OpKind::BW ? 0.9 : 0.6)) * slotMs;
      plan.ops.push_back(op);
      list.erase(best);
    }
    if (!any) break;
  }
  // Plan order is per device in execution order; a stable sort by device keeps each order.
  std::stable_sort(plan.ops.begin(), plan.ops.end(), [](const Op& a, const Op& b) { return a.device < b.device; });
  plan.metrics = computeMetrics(plan);
  return plan;
}

}  // namespace pipestudio::test
