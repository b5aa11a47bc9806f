// Dependencies a plan implies beyond the simulator's data flow (issue 4), derived from the plan
// alone (config, model, virtual stages, per-device op order). The plan format (DESIGN.md §2)
// stores no dependency list, so makePlan and resimulate must derive the same edges from the
// same plan: both call derivedDependencies.
#include <algorithm>
#include <cmath>
#include <map>

#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Vocab.hpp"

namespace pipestudio {
namespace {

bool validStage(const Plan& shell, int stage) {
  if (stage < 0 || static_cast<std::size_t>(stage) >= shell.virtualStages.size()) return false;
  const int c = shell.virtualStages[static_cast<std::size_t>(stage)].component;
  return c >= 0 && static_cast<std::size_t>(c) < shell.model.components.size();
}

bool isSequenceKind(const std::string& kind) { return kind == "transformer" || kind == "embedding"; }

}  // namespace

std::vector<int> frozenConsumerStages(const Plan& shell, int feeder, int consumer) {
  std::vector<int> out;
  const auto& comps = shell.model.components;
  if (feeder < 0 || consumer < 0 || static_cast<std::size_t>(feeder) >= comps.size() ||
      static_cast<std::size_t>(consumer) >= comps.size()) {
    return out;
  }
  const Component& f = comps[static_cast<std::size_t>(feeder)];
  const Component& c = comps[static_cast<std::size_t>(consumer)];
  // A token-sequence output (text encoder) is the cross-attention context: every consumer
  // stage with an attention layer reads it (Rombach et al. 2022, §3.3, conditioning through
  // cross-attention in every transformer block of the UNet).
  if (!f.layers.empty() && isSequenceKind(f.layers.back().kind)) {
    for (const VirtualStage& vs : shell.virtualStages) {
      if (vs.component != consumer) continue;
      for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && static_cast<std::size_t>(l) < c.layers.size(); ++l) {
        if (c.layers[static_cast<std::size_t>(l)].kind == "attention") {
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
  if (component < 0 || static_cast<std::size_t>(component) >= model.components.size()) return 0;
  const Component& c = model.components[static_cast<std::size_t>(component)];
  if (c.layers.empty()) return 0;
  // Output size does not depend on the GPU; device 0's spec serves for all.
  return layerCosts(c.layers.back(), cluster.gpuOfDevice(0), model.samplesPerMicrobatch, false).outputBytes;
}

std::vector<int> frozenConsumerStagesOf(const Plan& shell, int feeder) {
  std::vector<int> out;
  const ModelSpec& model = shell.model;
  if (feeder < 0 || static_cast<std::size_t>(feeder) >= model.components.size()) return out;
  for (const std::string& name : model.components[static_cast<std::size_t>(feeder)].feeds) {
    const int k = model.componentIndex(name);
    if (k < 0 || k == feeder || !model.components[static_cast<std::size_t>(k)].trainable) continue;
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

  // Producers: the last N op (lane order) of a component's final layer group, per
  // (component, microbatch, device), with the samples that device computed.
  struct Producer {
    std::int32_t index = -1;
    double samples = 0;
  };
  std::map<std::tuple<int, int, int>, Producer> producers;
  std::vector<std::int32_t> fIndex(shell.virtualStages.size() * mu, -1);  // F per (stage, microbatch)
  for (int d = 0; d < devices; ++d) {
    const auto& lane = lanes[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const OrderedOp& o = lane[i];
      if (!validStage(shell, o.virtualStage) || o.microbatch < 0 || o.microbatch >= m) continue;
      const VirtualStage& vs = shell.virtualStages[static_cast<std::size_t>(o.virtualStage)];
      const Component& comp = model.components[static_cast<std::size_t>(vs.component)];
      if (o.kind == OpKind::F) {
        auto& slot = fIndex[static_cast<std::size_t>(o.virtualStage) * mu + static_cast<std::size_t>(o.microbatch)];
        if (slot < 0) slot = static_cast<std::int32_t>(i);
      }
      if (o.kind != OpKind::N || comp.trainable || vs.lastLayer + 1 != static_cast<int>(comp.layers.size())) continue;
      Producer& p = producers[{vs.component, o.microbatch, d}];
      p.index = static_cast<std::int32_t>(i);
      p.samples += o.samples > 0 ? o.samples : samplesPerMb;
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
        const int dc = shell.virtualStages[static_cast<std::size_t>(s)].device;
        const std::int32_t t = fIndex[static_cast<std::size_t>(s) * mu + static_cast<std::size_t>(mb)];
        if (dc < 0 || dc >= devices || t < 0) continue;
        auto it = targets.find(dc);
        if (it == targets.end()) targets.emplace(dc, t);
        else it->second = std::min(it->second, t);
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

FrozenTransfers frozenTransfers(const Plan& timed) {
  FrozenTransfers out;
  const ModelSpec& model = timed.model;
  const std::vector<int> frozen = model.frozenComponents();
  const int m = timed.config.microbatches;
  const int devices = timed.config.devices;
  if (frozen.empty() || timed.config.fill == "none" || m <= 0 || devices <= 0 || timed.ops.empty()) return out;
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, model.samplesPerMicrobatch));
  const auto mu = static_cast<std::size_t>(m);
  double firstMs = timed.ops.front().startMs;
  double lastMs = timed.ops.front().endMs;
  for (const Op& op : timed.ops) {
    firstMs = std::min(firstMs, op.startMs);
    lastMs = std::max(lastMs, op.endMs);
  }
  const double periodMs = lastMs - firstMs;  // steady state: iteration k+1 is this one shifted by it

  struct Producer {
    int stage = 0;
    double endMs = -1;
    double samples = 0;
  };
  std::map<std::tuple<int, int, int>, Producer> producers;  // (component, microbatch, device)
  std::vector<double> fStart(timed.virtualStages.size() * mu, -1);
  for (const Op& op : timed.ops) {
    if (!validStage(timed, op.virtualStage) || op.microbatch < 0 || op.microbatch >= m) continue;
    if (op.device < 0 || op.device >= devices) continue;
    const VirtualStage& vs = timed.virtualStages[static_cast<std::size_t>(op.virtualStage)];
    const Component& comp = model.components[static_cast<std::size_t>(vs.component)];
    if (op.kind == OpKind::F) {
      fStart[static_cast<std::size_t>(op.virtualStage) * mu + static_cast<std::size_t>(op.microbatch)] = op.startMs;
    }
    if (op.kind != OpKind::N || comp.trainable || vs.lastLayer + 1 != static_cast<int>(comp.layers.size())) continue;
    Producer& p = producers[{vs.component, op.microbatch, op.device}];
    if (op.endMs >= p.endMs) {
      p.endMs = op.endMs;
      p.stage = op.virtualStage;
    }
    p.samples += op.samples > 0 ? op.samples : samplesPerMb;
  }
  if (producers.empty()) return out;

  // Link occupancy of the backbone's own transfers (the simulator's, first come first
  // served); frozen transfers take the first idle window after their data is ready, so they
  // never delay backbone traffic (they are off the iteration's critical path).
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> busy;
  // (Kind N comms are this function's own output when the plan already carries them.)
  for (const Comm& c : timed.comms) {
    if (c.kind != OpKind::N) busy[{c.fromDevice, c.toDevice}].emplace_back(c.startMs, c.endMs);
  }
  for (auto& [link, iv] : busy) std::sort(iv.begin(), iv.end());

  struct Pending {
    double readyMs;
    int component;
    int microbatch;
    int from;
    int to;
    int stage;
    std::int64_t bytes;
    double deadlineMs;
  };
  std::vector<Pending> pending;
  for (int c : frozen) {
    const std::vector<int> consumerStages = frozenConsumerStagesOf(timed, c);
    const std::int64_t bytes = frozenOutputBytes(model, timed.cluster, c);
    for (const auto& [key, p] : producers) {
      if (std::get<0>(key) != c) continue;
      const int mb = std::get<1>(key);
      const int pd = std::get<2>(key);
      std::map<int, double> firstUse;  // consumer device → earliest F start of this microbatch
      for (int s : consumerStages) {
        const int dc = timed.virtualStages[static_cast<std::size_t>(s)].device;
        const double t = fStart[static_cast<std::size_t>(s) * mu + static_cast<std::size_t>(mb)];
        if (dc < 0 || dc >= devices || t < 0) continue;
        auto it = firstUse.find(dc);
        if (it == firstUse.end()) firstUse.emplace(dc, t);
        else it->second = std::min(it->second, t);
      }
      const auto share = static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * p.samples / samplesPerMb));
      for (const auto& [dc, useMs] : firstUse) {
        const double deadlineMs = useMs + periodMs;  // the consumer's F in the next iteration
        if (dc == pd) {
          out.latenessMs = std::max(out.latenessMs, p.endMs - deadlineMs);
          continue;
        }
        pending.push_back({p.endMs, c, mb, pd, dc, p.stage, share, deadlineMs});
      }
    }
  }
  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.readyMs, a.component, a.microbatch, a.from, a.to) <
           std::tie(b.readyMs, b.component, b.microbatch, b.from, b.to);
  });
  for (const Pending& t : pending) {
    auto& iv = busy[{t.from, t.to}];
    const double durMs = timed.cluster.transferMs(t.from, t.to, static_cast<double>(t.bytes));
    double startMs = t.readyMs;
    std::size_t pos = 0;
    for (; pos < iv.size(); ++pos) {
      if (iv[pos].second <= startMs) continue;
      if (iv[pos].first >= startMs + durMs) break;  // fits in the window before this transfer
      startMs = iv[pos].second;
    }
    iv.insert(iv.begin() + static_cast<std::ptrdiff_t>(pos), {startMs, startMs + durMs});
    Comm c;
    c.fromDevice = t.from;
    c.toDevice = t.to;
    c.microbatch = t.microbatch;
    c.kind = OpKind::N;
    c.virtualStage = t.stage;
    c.startMs = startMs;
    c.endMs = startMs + durMs;
    c.bytes = t.bytes;
    out.comms.push_back(c);
    out.latenessMs = std::max(out.latenessMs, c.endMs - t.deadlineMs);
  }
  return out;
}

void appendFrozenTransfers(Plan& timed) {
  if (timed.model.frozenComponents().empty()) return;  // the common case: nothing to name or add
  // The simulator names a transfer F or B; one leaving a frozen stage carries N output.
  for (Comm& c : timed.comms) {
    if (!validStage(timed, c.virtualStage)) continue;
    const int comp = timed.virtualStages[static_cast<std::size_t>(c.virtualStage)].component;
    if (!timed.model.components[static_cast<std::size_t>(comp)].trainable) c.kind = OpKind::N;
  }
  FrozenTransfers t = frozenTransfers(timed);
  timed.comms.insert(timed.comms.end(), t.comms.begin(), t.comms.end());
}

std::vector<OpDependency> derivedDependencies(const Plan& shell, const std::vector<std::vector<OrderedOp>>& lanes) {
  std::vector<OpDependency> out = frozenDependencies(shell, lanes);
  std::vector<OpDependency> vocab = vocabDependencies(shell, lanes);
  out.insert(out.end(), vocab.begin(), vocab.end());
  return out;
}

}  // namespace pipestudio
