// Dependencies a plan implies beyond the data flow of its virtual stages, derived from the plan
// alone (config, model, virtual stages, per-device op order). The plan format (docs/formats.md)
// stores no dependency list, so the planner (makePlan, resimulate) and the executor derive the
// same edges from the same plan through these functions (issues 4 and 7).
#include "pipestudio/plan/Dependencies.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/plan/Memory.hpp"

namespace pipestudio {
namespace {

bool isSequenceKind(const std::string& kind) { return kind == "transformer" || kind == "embedding"; }

// The last N op (lane order) of a frozen component's final layer group, per (component,
// microbatch, device), with the samples that device computed: what leaves that device.
struct Producer {
  std::int32_t index = -1;
  double samples = 0;
};
std::map<std::tuple<int, int, int>, Producer> frozenProducers(const Plan& shell,
                                                              const std::vector<std::vector<OrderedOp>>& lanes) {
  std::map<std::tuple<int, int, int>, Producer> producers;
  const ModelSpec& model = shell.model;
  const int m = shell.config.microbatches;
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, model.samplesPerMicrobatch));
  for (std::size_t d = 0; d < lanes.size(); ++d) {
    const auto& lane = lanes[d];
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const OrderedOp& o = lane[i];
      if (o.kind != OpKind::N || !validStage(shell, o.virtualStage) || o.microbatch < 0 || o.microbatch >= m) continue;
      const VirtualStage& vs = shell.stage(o.virtualStage);
      const Component& comp = model.component(vs.component);
      if (comp.trainable || vs.lastLayer + 1 != static_cast<int>(comp.layers.size())) continue;
      Producer& p = producers[{vs.component, o.microbatch, static_cast<int>(d)}];
      p.index = static_cast<std::int32_t>(i);
      p.samples += o.samples > 0 ? o.samples : samplesPerMb;
    }
  }
  return producers;
}

}  // namespace

std::vector<int> frozenConsumerStages(const Plan& shell, int feeder, int consumer) {
  std::vector<int> out;
  const auto& comps = shell.model.components;
  if (!inRange(comps, feeder) || !inRange(comps, consumer)) return out;
  const Component& f = shell.model.component(feeder);
  const Component& c = shell.model.component(consumer);
  // A token-sequence output (text encoder) is the cross-attention context: every consumer
  // stage with an attention layer reads it (Rombach et al. 2022, §3.3, conditioning through
  // cross-attention in every transformer block of the UNet).
  if (!f.layers.empty() && isSequenceKind(f.layers.back().kind)) {
    for (const VirtualStage& vs : shell.virtualStages) {
      if (vs.component != consumer) continue;
      for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && inRange(c.layers, l); ++l) {
        if (c.layer(l).kind == "attention") {
          out.push_back(vs.id);
          break;
        }
      }
    }
    if (!out.empty()) return out;
  }
  // Anything else (latents) enters at the consumer's first layer: its first stage in each
  // pipeline.
  for (const VirtualStage& vs : shell.virtualStages) {
    if (vs.component == consumer && vs.firstLayer == 0) out.push_back(vs.id);
  }
  return out;
}

std::int64_t frozenOutputBytes(const ModelSpec& model, const ClusterSpec& cluster, int component) {
  if (!inRange(model.components, component)) return 0;
  const Component& c = model.component(component);
  if (c.layers.empty()) return 0;
  // Output size does not depend on the GPU; device 0's spec serves for all.
  // Frozen components run whole on one GPU of a pipeline rank (not split by TP).
  return layerCosts(c.layers.back(), cluster.gpuOfDevice(0), model.samplesPerMicrobatch, false).outputBytes;
}

std::vector<int> frozenConsumerStagesOf(const Plan& shell, int feeder) {
  std::vector<int> out;
  const ModelSpec& model = shell.model;
  if (!inRange(model.components, feeder)) return out;
  for (const std::string& name : model.component(feeder).feeds) {
    const int k = model.componentIndex(name);
    if (k < 0 || k == feeder || !model.component(k).trainable) continue;
    for (int s : frozenConsumerStages(shell, feeder, k)) out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<OpDependency> frozenDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<OpDependency> out;
  const ModelSpec& model = shell.model;
  const std::vector<int> frozen = model.frozenComponents();
  // Cross-iteration overlap (every mode but `none`): the outputs are for the next iteration;
  // their transfers are timed after the simulation (appendFrozenTransfers), not as edges.
  if (frozen.empty() || shell.config.fill != "none") return out;
  const int m = shell.config.microbatches;
  const int devices = static_cast<int>(lanes.size());
  if (m <= 0) return out;
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, model.samplesPerMicrobatch));
  const auto mu = static_cast<std::size_t>(m);

  const auto producers = frozenProducers(shell, lanes);
  std::vector<std::int32_t> fIndex(shell.virtualStages.size() * mu, -1);  // F per (stage, microbatch)
  for (int d = 0; d < devices; ++d) {
    const auto& lane = lanes[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const OrderedOp& o = lane[i];
      if (o.kind != OpKind::F || !validStage(shell, o.virtualStage) || o.microbatch < 0 || o.microbatch >= m) continue;
      auto& slot = fIndex[static_cast<std::size_t>(o.virtualStage) * mu + static_cast<std::size_t>(o.microbatch)];
      if (slot < 0) slot = static_cast<std::int32_t>(i);
    }
  }
  if (producers.empty()) return out;

  for (int c : frozen) {
    const std::vector<int> consumerStages = frozenConsumerStagesOf(shell, c);
    if (consumerStages.empty()) continue;
    const std::int64_t bytes = frozenOutputBytes(model, shell.cluster, c);
    for (int mb = 0; mb < m; ++mb) {
      // Per consumer device, its first F (lane order) that reads this output: later ones on
      // the same device follow it in the device order.
      std::map<int, std::int32_t> targets;
      for (int s : consumerStages) {
        const int dc = shell.stage(s).device;
        const std::int32_t t = fIndex[static_cast<std::size_t>(s) * mu + static_cast<std::size_t>(mb)];
        if (dc < 0 || dc >= devices || t < 0) continue;
        auto it = targets.find(dc);
        if (it == targets.end())
          targets.emplace(dc, t);
        else
          it->second = std::min(it->second, t);
      }
      for (int pd = 0; pd < devices; ++pd) {
        auto it = producers.find({c, mb, pd});
        if (it == producers.end()) continue;
        const auto share =
            static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * it->second.samples / samplesPerMb));
        // Same device: no transfer, but the order must still put N first (an edited plan
        // that does not is reported as a deadlock by the simulator).
        for (const auto& [dc, t] : targets) out.push_back({{pd, it->second.index}, {dc, t}, dc == pd ? 0 : share});
      }
    }
  }
  return out;
}

std::vector<OpDependency> vocabDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<OpDependency> out;
  const int m = shell.config.microbatches;
  const int p = static_cast<int>(lanes.size());
  const auto nStages = shell.virtualStages.size();
  if (m <= 0 || p <= 0) return out;
  const auto mu = static_cast<std::size_t>(m);
  const auto pu = static_cast<std::size_t>(p);
  auto okStage = [&](int s) { return inRange(shell.virtualStages, s); };
  // Shards: the stages running S/T; their indices per (device, microbatch).
  std::vector<char> shard(nStages, 0);
  std::vector<std::int32_t> sIndex(pu * mu, -1), tIndex(pu * mu, -1);
  bool any = false;
  for (std::size_t d = 0; d < pu; ++d) {
    for (std::size_t i = 0; i < lanes[d].size(); ++i) {
      const OrderedOp& o = lanes[d][i];
      if ((o.kind != OpKind::S && o.kind != OpKind::T) || !okStage(o.virtualStage) || o.microbatch < 0 ||
          o.microbatch >= m)
        continue;
      any = true;
      shard[static_cast<std::size_t>(o.virtualStage)] = 1;
      auto& slot = (o.kind == OpKind::S ? sIndex : tIndex)[d * mu + static_cast<std::size_t>(o.microbatch)];
      if (slot < 0) slot = static_cast<std::int32_t>(i);
    }
  }
  if (!any) return out;
  // The last trainable stage of pipeline 0 that is not a shard feeds the output layer.
  int last = -1;
  for (const VirtualStage& vs : shell.virtualStages) {
    const std::size_t id = inRange(shard, vs.id) ? static_cast<std::size_t>(vs.id) : 0;
    if (vs.pipeline != 0 || shard[id]) continue;
    if (!inRange(shell.model.components, vs.component)) continue;
    if (!shell.model.component(vs.component).trainable) continue;
    last = std::max(last, vs.id);
  }
  if (!okStage(last)) return out;
  const int lastDevice = shell.stage(last).device;
  if (lastDevice < 0 || lastDevice >= p) return out;
  std::vector<std::int32_t> fLast(mu, -1), bLast(mu, -1);
  const auto& lane = lanes[static_cast<std::size_t>(lastDevice)];
  for (std::size_t i = 0; i < lane.size(); ++i) {
    const OrderedOp& o = lane[i];
    if (o.virtualStage != last || o.microbatch < 0 || o.microbatch >= m) continue;
    if (o.kind == OpKind::F) fLast[static_cast<std::size_t>(o.microbatch)] = static_cast<std::int32_t>(i);
    if (o.kind == OpKind::B || o.kind == OpKind::BW)
      bLast[static_cast<std::size_t>(o.microbatch)] = static_cast<std::int32_t>(i);
  }
  const auto costs = stageCosts(shell);
  const std::int64_t hiddenBytes = inRange(costs, last) ? costs[static_cast<std::size_t>(last)].outputBytes : 0;
  // Softmax statistics: max and sum per token (fp32), for the shards' LM head sequence.
  std::int64_t seq = 1;
  for (std::size_t s = 0; s < nStages && seq == 1; ++s) {
    if (!shard[s]) continue;
    const int c = shell.virtualStages[s].component;
    if (!inRange(shell.model.components, c)) continue;
    for (const Layer& l : shell.model.component(c).layers) {
      if (l.kind == "lm_head") {
        if (l.transformer) seq = l.transformer->seq;
        break;
      }
    }
  }
  const std::int64_t statsBytes = 8 * shell.model.samplesPerMicrobatch * seq;
  const bool oneBarrier = shell.config.vocabBarriers == 1;
  for (std::size_t mb = 0; mb < mu; ++mb) {
    for (std::size_t d = 0; d < pu; ++d) {
      const std::int32_t sI = sIndex[d * mu + mb];
      const std::int32_t tI = tIndex[d * mu + mb];
      const int dev = static_cast<int>(d);
      if (fLast[mb] >= 0 && sI >= 0) out.push_back({{lastDevice, fLast[mb]}, {dev, sI}, hiddenBytes});
      for (std::size_t e = 0; e < pu && tI >= 0; ++e) {
        const std::int32_t sE = sIndex[e * mu + mb];
        if (sE >= 0) out.push_back({{static_cast<int>(e), sE}, {dev, tI}, statsBytes});
      }
      // The input-gradient partial sums: with one barrier they travel with the statistics'
      // all-reduce right after S (as fp32 partial sums, plus the statistics).
      const std::int32_t gradFrom = oneBarrier ? sI : tI;
      if (bLast[mb] >= 0 && gradFrom >= 0) {
        out.push_back(
            {{dev, gradFrom}, {lastDevice, bLast[mb]}, oneBarrier ? 2 * hiddenBytes + statsBytes : hiddenBytes});
      }
    }
  }
  return out;
}

std::vector<OverlapGroup> overlappedGroups(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<OverlapGroup> out;
  if (!shell.config.overlapForwardBackward) return out;
  for (std::size_t d = 0; d < lanes.size(); ++d) {
    const auto& lane = lanes[d];
    for (std::size_t i = 0; i + 1 < lane.size(); ++i) {
      const OrderedOp& f = lane[i];
      const OrderedOp& b = lane[i + 1];
      if (f.kind != OpKind::F || (b.kind != OpKind::B && b.kind != OpKind::BW) || f.microbatch == b.microbatch ||
          f.virtualStage == b.virtualStage || f.samples != 0 || b.samples != 0) {
        continue;
      }
      std::int32_t size = 2;
      if (b.kind == OpKind::B && i + 2 < lane.size()) {
        const OrderedOp& w = lane[i + 2];
        if (w.kind == OpKind::W && w.virtualStage == b.virtualStage && w.microbatch == b.microbatch) size = 3;
      }
      out.push_back({static_cast<std::int32_t>(d), static_cast<std::int32_t>(i), size});
      i += static_cast<std::size_t>(size) - 1;
    }
  }
  return out;
}

std::vector<OpDependency> sequenceDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<OpDependency> out;
  const int k = shell.config.seqSplits;
  const int m = shell.config.microbatches;
  if (k <= 1 || m <= 0) return out;
  // Lane positions of F and of the backward (B or BW) per (stage, unit).
  const auto stages = shell.virtualStages.size();
  std::vector<OpRef> forward(stages * static_cast<std::size_t>(m), OpRef{-1, -1});
  std::vector<OpRef> backward(forward.size(), OpRef{-1, -1});
  for (std::size_t d = 0; d < lanes.size(); ++d) {
    for (std::size_t i = 0; i < lanes[d].size(); ++i) {
      const OrderedOp& o = lanes[d][i];
      if (!inRange(shell.virtualStages, o.virtualStage) || o.microbatch < 0 || o.microbatch >= m) continue;
      const std::size_t at = static_cast<std::size_t>(o.virtualStage) * static_cast<std::size_t>(m) +
                             static_cast<std::size_t>(o.microbatch);
      const OpRef ref{static_cast<std::int32_t>(d), static_cast<std::int32_t>(i)};
      if (o.kind == OpKind::F) forward[at] = ref;
      if (o.kind == OpKind::B || o.kind == OpKind::BW) backward[at] = ref;
    }
  }
  for (std::size_t s = 0; s < stages; ++s) {
    for (int u = 0; u < m; ++u) {
      if (u % k == 0) continue;
      const std::size_t at = s * static_cast<std::size_t>(m) + static_cast<std::size_t>(u);
      // Chunk u − 1's keys and values before chunk u's forward; chunk u's backward hands
      // chunk u − 1 the gradients of its keys and values.
      if (forward[at - 1].index >= 0 && forward[at].index >= 0) out.push_back({forward[at - 1], forward[at], 0});
      if (backward[at].index >= 0 && backward[at - 1].index >= 0) out.push_back({backward[at], backward[at - 1], 0});
    }
  }
  return out;
}

std::vector<OpDependency> derivedDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<OpDependency> out = frozenDependencies(shell, lanes);
  std::vector<OpDependency> vocab = vocabDependencies(shell, lanes);
  out.insert(out.end(), vocab.begin(), vocab.end());
  std::vector<OpDependency> sequence = sequenceDependencies(shell, lanes);
  out.insert(out.end(), sequence.begin(), sequence.end());
  return out;
}

bool validStage(const Plan& shell, int stage) {
  if (!inRange(shell.virtualStages, stage)) return false;
  const int c = shell.stage(stage).component;
  return inRange(shell.model.components, c);
}

StageNeighbours stageNeighbours(const Plan& shell) {
  const auto n = shell.virtualStages.size();
  StageNeighbours c{std::vector<int>(n, -1), std::vector<int>(n, -1)};
  const auto& comps = shell.model.components;
  auto componentOf = [&](std::size_t i) { return shell.virtualStages[i].component; };
  auto trainable = [&](int component) {
    return !inRange(comps, component) || shell.model.component(component).trainable;
  };
  auto feeds = [&](int from, int to) {
    if (!inRange(comps, from) || !inRange(comps, to)) return false;
    const auto& names = shell.model.component(from).feeds;
    return std::find(names.begin(), names.end(), shell.model.component(to).name) != names.end();
  };
  auto link = [&](std::size_t from, std::size_t to) {
    c.previous[to] = static_cast<int>(from);
    if (c.next[from] < 0) c.next[from] = static_cast<int>(to);
  };
  for (std::size_t i = 0; i < n; ++i) {
    const VirtualStage& vs = shell.virtualStages[i];
    if (!trainable(vs.component)) {
      if (vs.firstLayer == 0) continue;
      std::size_t best = n;
      for (std::size_t k = i; k-- > 0;) {
        const VirtualStage& o = shell.virtualStages[k];
        if (o.component != vs.component || o.lastLayer + 1 != vs.firstLayer) continue;
        if (o.device == vs.device) {
          best = k;
          break;
        }
        if (best == n) best = k;
      }
      if (best < n) link(best, i);
      continue;
    }
    // The nearest earlier trainable stage of this pipeline continues into this one when it
    // is of the same component or its component feeds this one; otherwise this stage
    // continues the last earlier stage of its own component, if any.
    std::size_t candidate = n, sameComponent = n;
    for (std::size_t k = i; k-- > 0;) {
      const VirtualStage& o = shell.virtualStages[k];
      if (o.pipeline != vs.pipeline || !trainable(o.component)) continue;
      if (candidate == n) candidate = k;
      if (o.component == vs.component) {
        sameComponent = k;
        break;
      }
    }
    if (candidate < n && (componentOf(candidate) == vs.component || feeds(componentOf(candidate), vs.component))) {
      link(candidate, i);
    } else if (sameComponent < n) {
      link(sameComponent, i);
    }
  }
  return c;
}

std::vector<std::vector<OrderedOp>> planLanes(const Plan& plan, std::vector<std::vector<std::int32_t>>* opIndex) {
  const auto devices = static_cast<std::size_t>(std::max(0, plan.config.devices));
  std::vector<std::vector<OrderedOp>> lanes(devices);
  if (opIndex != nullptr) opIndex->assign(devices, {});
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (!inRange(lanes, op.device)) continue;
    const auto d = static_cast<std::size_t>(op.device);
    lanes[d].push_back({op.virtualStage, op.kind, op.microbatch, op.samples});
    if (opIndex != nullptr) (*opIndex)[d].push_back(static_cast<std::int32_t>(i));
  }
  return lanes;
}

std::vector<FrozenHandoff> crossIterationFrozenOutputs(const Plan& plan,
                                                       const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<FrozenHandoff> out;
  const ModelSpec& model = plan.model;
  if (plan.config.fill == "none" || model.frozenComponents().empty()) return out;
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, model.samplesPerMicrobatch));
  std::map<int, std::vector<int>> consumerDevices;  // frozen component → devices reading its output
  for (const auto& [key, p] : frozenProducers(plan, lanes)) {
    const int c = std::get<0>(key);
    const int pd = std::get<2>(key);
    auto it = consumerDevices.find(c);
    if (it == consumerDevices.end()) {
      std::vector<int> devices;
      for (int s : frozenConsumerStagesOf(plan, c)) devices.push_back(plan.stage(s).device);
      std::sort(devices.begin(), devices.end());
      devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
      it = consumerDevices.emplace(c, std::move(devices)).first;
    }
    const std::int64_t bytes = frozenOutputBytes(model, plan.cluster, c);
    const auto share = static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * p.samples / samplesPerMb));
    for (int dc : it->second) {
      if (dc != pd) out.push_back({{pd, p.index}, dc, share});
    }
  }
  return out;
}

}  // namespace pipestudio
