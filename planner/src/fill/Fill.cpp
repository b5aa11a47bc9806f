// Bubble filling with frozen components (issue 4; DiffusionPipe, Tian et al., MLSys 2024,
// §4.3 "greedy filling of non-trainable parts", partial batches and cross-iteration overlap).
//
// Work unit: one frozen component for one microbatch, computed on one device group by group
// (a group is a contiguous range of its layers). Keeping a (component, microbatch) on one
// device means its groups need no transfers and the device order alone carries their
// dependencies, which is exactly what the simulator re-derives from a plan (a frozen stage
// chains only to stages that ran the same microbatch).
#include "pipestudio/planner/Fill.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEpsMs = 1e-9;
// Layer groups per frozen component: finer groups pack bubbles tighter, coarser ones keep the
// plan small. Four is enough for the encoders of the bundled examples.
constexpr int kMaxGroups = 4;

struct Group {
  int component = 0;
  int firstLayer = 0;
  int lastLayer = 0;
  IdVector<double> forwardMs;  // per device, whole microbatch
  double activationBytes = 0;  // whole microbatch, live while the op runs
  double weightBytes = 0;      // frozen parameters (bf16), resident on every device that runs it
};

struct Idle {
  double startMs = 0;
  double endMs = kInf;
  double levelBytes = 0;  // memory in use on the device during this gap (static + live)
};

struct Piece {
  int device = 0;
  std::size_t group = 0;  // index into groups
  int microbatch = 0;
  int samples = 0;
  double startMs = 0;
  double endMs = 0;
};

double limitOf(const Plan& plan, int device) {
  if (plan.config.memoryLimitBytes) return static_cast<double>(*plan.config.memoryLimitBytes);
  const auto bytes = static_cast<double>(deviceGpu(plan.cluster, plan.config, device).memoryBytes());
  return bytes > 0 ? bytes : kInf;
}

// Frozen components in topological order of `feeds` (the model lists them in data-flow
// order already; this only guards against a feeder listed after its consumer).
std::vector<int> frozenOrder(const ModelSpec& model) {
  std::vector<int> frozen = model.frozenComponents();
  std::vector<int> out;
  IdVector<char> placed(model.components.size(), 0);
  for (std::size_t round = 0; round < frozen.size() && out.size() < frozen.size(); ++round) {
    for (int c : frozen) {
      if (placed[c]) continue;
      bool ready = true;
      for (int f : frozen) {
        if (f == c || placed[f]) continue;
        const auto& feeds = model.component(f).feeds;
        if (std::find(feeds.begin(), feeds.end(), model.component(c).name) != feeds.end()) {
          ready = false;
        }
      }
      if (ready) {
        placed[c] = 1;
        out.push_back(c);
      }
    }
  }
  for (int c : frozen) {
    if (!placed[c]) out.push_back(c);  // a feeds cycle: keep model order
  }
  return out;
}

// The frozen feeder of component c whose device a microbatch must share (first one listed).
int feederOf(const ModelSpec& model, int c) {
  for (int f : model.frozenComponents()) {
    const auto& feeds = model.component(f).feeds;
    if (f != c && std::find(feeds.begin(), feeds.end(), model.component(c).name) != feeds.end()) {
      return f;
    }
  }
  return -1;
}

std::vector<Group> makeGroups(const Plan& shell, const CostedModel& costs, int component) {
  const ModelSpec& model = shell.model;
  const Component& comp = model.component(component);
  const int layers = static_cast<int>(comp.layers.size());
  std::vector<Group> out;
  if (layers == 0) return out;
  const int devices = shell.config.devices;
  // Groups of balanced forward time (device 0's GPU): the `balanced` partitioner.
  const int k = std::min(kMaxGroups, layers);
  std::vector<double> forwardMs;
  forwardMs.reserve(comp.layers.size());
  for (int l = 0; l < layers; ++l) forwardMs.push_back(costs.layer(component, l, 0).forwardMs);
  PartitionProblem p;
  p.layers = layers;
  p.stages.assign(static_cast<std::size_t>(k), PartitionStage{});
  p.computeMs.assign(p.stages.size(), forwardMs);
  p.sendMs.assign(p.stages.size(), std::vector<double>(forwardMs.size(), 0.0));
  p.activationBytes.assign(forwardMs.size(), 0.0);
  p.staticBytes.assign(forwardMs.size(), 0.0);
  IdVector<int> first;  // per group
  if (auto r = balancedPartition(p)) {
    first = IdVector<int>(std::move(r->firstLayer));
  } else {
    for (int s = 0; s < k; ++s) first.push_back(s * layers / k);
  }
  for (int g = 0; g < k; ++g) {
    Group grp;
    grp.component = component;
    grp.firstLayer = first[g];
    grp.lastLayer = (g + 1 < k ? first[g + 1] : layers) - 1;
    grp.forwardMs.assign(devices, 0.0);
    for (int l = grp.firstLayer; l <= grp.lastLayer; ++l) {
      for (int d = 0; d < devices; ++d) grp.forwardMs[d] += costs.layer(component, l, d).forwardMs;
      const LayerCosts& c = costs.layer(component, l, 0);
      // Frozen forward: only one layer's activations are live at a time (no backward keeps
      // them); the largest layer bounds the op's footprint.
      grp.activationBytes = std::max(grp.activationBytes, static_cast<double>(c.activationBytes));
      grp.weightBytes += 2.0 * c.parameterCount();
    }
    out.push_back(std::move(grp));
  }
  return out;
}

// Idle gaps of every device in a timed backbone plan, with the memory level during each.
IdVector<std::vector<Idle>> idleGaps(const Plan& plan) {
  IdVector<std::vector<std::pair<double, double>>> busy(plan.config.devices);
  for (const Op& op : plan.ops) {
    if (busy.contains(op.device)) busy[op.device].emplace_back(op.startMs, op.endMs);
  }
  const MemoryTimeline mem = memoryTimeline(plan);
  IdVector<std::vector<Idle>> out;
  for (std::size_t d = 0; auto& b : busy) {
    std::sort(b.begin(), b.end());
    const auto& curve = mem.devices[d];
    const auto staticBytes = static_cast<double>(mem.staticBytes[d]);
    auto& gaps = out.emplace_back();
    ++d;
    auto levelAt = [&](double t) {
      double level = staticBytes;
      for (const MemoryPoint& pt : curve) {  // few hundred points per device
        if (pt.timeMs <= t + kEpsMs)
          level = static_cast<double>(pt.bytes);
        else
          break;
      }
      return level;
    };
    double cursor = 0;
    for (const auto& [s, e] : b) {
      if (s > cursor + kEpsMs) gaps.push_back({cursor, s, levelAt(cursor)});
      cursor = std::max(cursor, e);
    }
    gaps.push_back({cursor, kInf, staticBytes});
  }
  return out;
}

// Places `samples` of group g (per-sample time t, per-sample activation a) on a device's gaps
// from `readyMs` on; carves the gaps; appends pieces. Returns the end of the last piece, or
// +inf when memory never allows one sample.
double placeGroup(std::vector<Idle>& gaps, double readyMs, int samples, double perSampleMs, double perSampleBytes,
                  double headroomBase, int device, std::size_t group, int microbatch, std::vector<Piece>& out) {
  int remaining = samples;
  double endMs = readyMs;
  for (std::size_t i = 0; i < gaps.size() && remaining > 0; ++i) {
    Idle& gap = gaps[i];
    if (gap.endMs <= readyMs + kEpsMs) continue;
    const double start = std::max(gap.startMs, readyMs);
    const double room = gap.endMs - start;
    int k = remaining;
    if (perSampleMs > 0 && !std::isinf(room)) k = std::min(k, static_cast<int>(std::floor(room / perSampleMs + 1e-9)));
    if (perSampleBytes > 0) {
      const double head = headroomBase - gap.levelBytes;
      k = std::min(k, head <= 0 ? 0 : static_cast<int>(std::min(1e9, std::floor(head / perSampleBytes))));
    }
    if (k <= 0) continue;
    Piece pc{device, group, microbatch, k, start, start + perSampleMs * k};
    out.push_back(pc);
    remaining -= k;
    endMs = pc.endMs;
    readyMs = pc.endMs;
    // Carve [start, end) out of the gap.
    const Idle before{gap.startMs, start, gap.levelBytes};
    gap.startMs = pc.endMs;
    if (before.endMs - before.startMs > kEpsMs) {
      gaps.insert(gaps.begin() + static_cast<std::ptrdiff_t>(i), before);
      ++i;
    }
  }
  return remaining > 0 ? kInf : endMs;
}

struct Layout {
  std::vector<Group> groups;
  std::vector<Piece> pieces;
  IdVector<double> extraStaticBytes;  // frozen weights per device
};

// Rebuilds the skeleton: frozen virtual stages for every used (group, device), N ops merged
// into each device's order by time (`before` true: all N ops first), the base skeleton's extra
// dependencies re-indexed.
ScheduleSkeleton assemble(const ScheduleSkeleton& base, const Plan& timed, const Layout& layout, bool before) {
  ScheduleSkeleton out;
  out.virtualStages = base.virtualStages;
  const int devices = static_cast<int>(base.devices.size());
  IdVector<int> chunkCount(devices, 0);
  for (const auto& vs : out.virtualStages) {
    if (!chunkCount.contains(vs.device)) continue;
    int& count = chunkCount[vs.device];
    count = std::max(count, vs.chunk + 1);
  }
  // Stage ids ordered (component, device, group) so a frozen chain only links stages that
  // share a device (Simulator: chains per frozen component in id order).
  std::map<std::tuple<int, int, std::size_t>, int> stageOf;
  std::vector<std::tuple<int, int, std::size_t>> keys;
  for (const Piece& pc : layout.pieces) keys.emplace_back(layout.groups[pc.group].component, pc.device, pc.group);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const auto& key : keys) {
    const auto& [component, device, group] = key;
    const Group& g = layout.groups[group];
    VirtualStage vs;
    vs.id = static_cast<int>(out.virtualStages.size());
    vs.device = device;
    vs.chunk = chunkCount[device]++;
    vs.component = component;
    vs.firstLayer = g.firstLayer;
    vs.lastLayer = g.lastLayer;
    stageOf[key] = vs.id;
    out.virtualStages.push_back(vs);
  }
  // Backbone op start times per device, in lane order (plan.ops is per device in order).
  IdVector<std::vector<double>> startOf(devices);
  for (const Op& op : timed.ops) startOf[op.device].push_back(op.startMs);
  IdVector<std::vector<Piece>> perDevice(devices);
  for (const Piece& pc : layout.pieces) perDevice[pc.device].push_back(pc);
  // Per device, the new index of each base op.
  IdVector<IdVector<std::int32_t>> remap(devices);
  out.devices.reserve(base.devices.size());
  for (int d = 0; const auto& lane : base.devices) {
    auto& pcs = perDevice[d];
    std::stable_sort(pcs.begin(), pcs.end(), [](const Piece& a, const Piece& b) { return a.startMs < b.startMs; });
    auto& dst = out.devices.emplace_back();  // device d
    const auto& starts = startOf[d];
    auto& laneRemap = remap[d];
    std::size_t k = 0;
    auto emit = [&](const Piece& pc) {
      const Group& g = layout.groups[pc.group];
      OrderedOp o;
      o.virtualStage = stageOf[{g.component, pc.device, pc.group}];
      o.kind = OpKind::N;
      o.microbatch = pc.microbatch;
      o.samples = pc.samples;
      dst.push_back(o);
    };
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const double s = i < starts.size() ? starts[i] : kInf;
      while (k < pcs.size() && (before || pcs[k].startMs < s - kEpsMs || pcs[k].endMs <= s + kEpsMs)) emit(pcs[k++]);
      laneRemap.push_back(static_cast<std::int32_t>(dst.size()));
      dst.push_back(lane[i]);
    }
    while (k < pcs.size()) emit(pcs[k++]);
    ++d;
  }
  for (OpDependency dep : base.extraDependencies) {
    dep.from.index = remap[dep.from.device][dep.from.index];
    dep.to.index = remap[dep.to.device][dep.to.index];
    out.extraDependencies.push_back(dep);
  }
  // Frozen outputs reach their consumers through derived dependencies (fill none) or timed
  // cross-iteration transfers (greedy), both computed from the plan itself (Dependencies.cpp).
  return out;
}

struct Frozen {
  std::vector<int> order;                       // components
  IdVector<std::vector<std::size_t>> groupsOf;  // per component index → indices into groups
  std::vector<Group> groups;
};

Frozen frozenGroups(const Plan& shell) {
  Frozen f;
  f.order = frozenOrder(shell.model);
  f.groupsOf.resize(shell.model.components.size());
  const CostedModel costs(shell);
  for (int c : f.order) {
    for (Group& g : makeGroups(shell, costs, c)) {
      f.groupsOf[c].push_back(f.groups.size());
      f.groups.push_back(std::move(g));
    }
  }
  return f;
}

// Greedy: each (component, microbatch) in topological order goes to the device where all its
// groups finish earliest, filling that device's gaps first (partial batches) and running past
// the backbone's end only when the gaps are full. The state (constructor), the order of the
// components (placementOrder), one (component, microbatch) placed (placeUnit) after trying it
// on each device (tryDevice).
class GreedyFill {
 public:
  GreedyFill(const Plan& timed, const Frozen& frozen, bool useGaps);
  Expected<Layout> run(bool largestFirst);

 private:
  // One (component, microbatch) placed on one device: where it ends, when its output reaches
  // every consumer, whether it misses the next iteration's deadline, and the device's gaps after.
  struct Trial {
    double endMs = kInf;
    double arrivalMs = kInf;
    bool late = true;
    std::vector<Piece> pieces;
    std::vector<Idle> gaps;
  };
  std::vector<int> placementOrder(bool largestFirst) const;
  std::map<int, double> consumersOf(const std::vector<int>& consumerStages, int mb) const;
  std::optional<Trial> tryDevice(int d, const std::vector<std::size_t>& gs, int mb, double ready,
                                 const std::map<int, double>& consumers, double outputBytes) const;
  Status placeUnit(int c, int mb, const std::vector<int>& consumerStages, double outputBytes);

  const Plan& m_timed;
  const Frozen& m_frozen;
  const bool m_useGaps;
  const int m_devices;
  const int m_samples;
  const double m_periodMs;
  Layout m_layout;
  IdVector<std::vector<Idle>> m_gaps;
  IdVector<double> m_peak;  // per device, as are the memory timeline's and the metrics' lists
  IdVector<std::vector<char>> m_hasGroup;
  // Where each frozen output goes: per microbatch the consumer's first F start (the
  // cross-iteration deadline is that start plus the iteration period).
  Grid<double> m_fStart;  // per (stage, microbatch)
  // device and completion per (component, microbatch)
  std::map<std::pair<int, int>, std::pair<int, double>> m_done;
};

GreedyFill::GreedyFill(const Plan& timed, const Frozen& frozen, bool useGaps)
    : m_timed(timed),
      m_frozen(frozen),
      m_useGaps(useGaps),
      m_devices(timed.config.devices),
      m_samples(static_cast<int>(std::max<std::int64_t>(1, timed.model.samplesPerMicrobatch))),
      m_periodMs(timed.metrics.makespanMs),
      m_hasGroup(m_devices, std::vector<char>(frozen.groups.size(), 0)),
      m_fStart(static_cast<int>(timed.virtualStages.size()), timed.config.microbatches, kInf) {
  m_layout.groups = frozen.groups;
  m_layout.extraStaticBytes.assign(m_devices, 0.0);
  if (useGaps) {
    m_gaps = idleGaps(timed);
  } else {
    // `none`: a prologue before the pipeline; each device is free from 0 on, at static memory.
    const MemoryTimeline mem = memoryTimeline(timed);
    for (const std::int64_t bytes : mem.staticBytes) m_gaps.push_back({Idle{0, kInf, static_cast<double>(bytes)}});
  }
  for (const DeviceMetrics& dm : timed.metrics.devices) m_peak.push_back(static_cast<double>(dm.peakMemoryBytes));
  for (const Op& op : timed.ops) {
    if (op.kind == OpKind::F) m_fStart(op.virtualStage, op.microbatch) = op.startMs;
  }
}

// Largest units first (LPT, Graham 1969): a (component, microbatch) is indivisible across
// devices, so placing the big ones (VAE) while many gaps are free and the small ones (text
// encoder) last packs the bubbles and balances the overflow better than model order. Only
// when no frozen component feeds another (otherwise the topological order stays).
std::vector<int> GreedyFill::placementOrder(bool largestFirst) const {
  std::vector<int> order = m_frozen.order;
  bool independent = true;
  for (int c : order) independent = independent && feederOf(m_timed.model, c) < 0;
  if (independent && largestFirst) {
    auto workOf = [&](int c) {
      double ms = 0;
      for (std::size_t g : m_frozen.groupsOf[c]) ms += m_frozen.groups[g].forwardMs[0];
      return ms;
    };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return workOf(a) > workOf(b); });
  }
  return order;
}

// (consumer device, deadline) for microbatch mb; the deadline only binds cross-iteration fill
// (useGaps), `none` minimises the arrival itself.
std::map<int, double> GreedyFill::consumersOf(const std::vector<int>& consumerStages, int mb) const {
  std::map<int, double> consumers;
  for (int s : consumerStages) {
    const int dc = m_timed.stage(s).device;
    const double f = m_fStart(s, mb);
    if (std::isinf(f)) continue;  // this microbatch does not pass through s (the other pipeline)
    auto it = consumers.find(dc);
    if (it == consumers.end())
      consumers.emplace(dc, f);
    else
      it->second = std::min(it->second, f);
  }
  return consumers;
}

std::optional<GreedyFill::Trial> GreedyFill::tryDevice(int d, const std::vector<std::size_t>& gs, int mb, double ready,
                                                       const std::map<int, double>& consumers,
                                                       double outputBytes) const {
  const double limit = limitOf(m_timed, d);
  // Weights of groups this device does not hold yet raise its static memory for the
  // whole iteration.
  double newWeights = 0;
  for (std::size_t g : gs) {
    if (!m_hasGroup[d][g]) newWeights += m_frozen.groups[g].weightBytes;
  }
  if (m_peak[d] + m_layout.extraStaticBytes[d] + newWeights > limit) return std::nullopt;
  Trial trial;
  trial.gaps = m_gaps[d];
  double t = ready;
  for (std::size_t g : gs) {
    const Group& grp = m_frozen.groups[g];
    const double perSampleMs = grp.forwardMs[d] / m_samples;
    const double perSampleBytes = grp.activationBytes / m_samples;
    t = placeGroup(trial.gaps, t, m_samples, perSampleMs, perSampleBytes,
                   limit - m_layout.extraStaticBytes[d] - newWeights, d, g, mb, trial.pieces);
    if (std::isinf(t)) break;
  }
  if (std::isinf(t)) return std::nullopt;
  // Prefer the device whose output reaches every consumer first (computing next to the
  // consumer saves the transfer), and one that meets the next iteration's deadline.
  trial.endMs = t;
  trial.arrivalMs = t;
  trial.late = false;
  for (const auto& [dc, firstF] : consumers) {
    const double at = dc == d ? t : t + deviceTransferMs(m_timed.cluster, m_timed.config, d, dc, outputBytes);
    trial.arrivalMs = std::max(trial.arrivalMs, at);
    trial.late = trial.late || (m_useGaps && at > m_periodMs + firstF + kEpsMs);
  }
  return trial;
}

Status GreedyFill::placeUnit(int c, int mb, const std::vector<int>& consumerStages, double outputBytes) {
  const auto& gs = m_frozen.groupsOf[c];
  const std::map<int, double> consumers = consumersOf(consumerStages, mb);
  const int feeder = feederOf(m_timed.model, c);
  int forced = -1;
  double ready = 0;
  if (feeder >= 0) {
    auto it = m_done.find({feeder, mb});
    if (it != m_done.end()) {
      forced = it->second.first;
      ready = it->second.second;
    }
  }
  Trial best;
  int bestDevice = -1;
  for (int d = 0; d < m_devices; ++d) {
    if (forced >= 0 && d != forced) continue;
    std::optional<Trial> trial = tryDevice(d, gs, mb, ready, consumers, outputBytes);
    if (!trial) continue;
    if ((!trial->late && best.late) || (trial->late == best.late && trial->arrivalMs < best.arrivalMs - kEpsMs)) {
      best = std::move(*trial);
      bestDevice = d;
    }
  }
  if (bestDevice < 0) {
    const Component& comp = m_timed.model.component(c);
    return Error{
        "fill: frozen component '" + excerpt(comp.name) +
        "' fits on no device: its weights and one sample's "
        "activations exceed the memory left next to the backbone on every device" +
        (forced >= 0 ? " (it must share a device with its feeder, device " + std::to_string(forced) + ")" : "")};
  }
  for (std::size_t g : gs) {
    if (!m_hasGroup[bestDevice][g]) {
      m_hasGroup[bestDevice][g] = 1;
      m_layout.extraStaticBytes[bestDevice] += m_frozen.groups[g].weightBytes;
    }
  }
  m_gaps[bestDevice] = std::move(best.gaps);
  m_done[{c, mb}] = {bestDevice, best.endMs};
  m_layout.pieces.insert(m_layout.pieces.end(), best.pieces.begin(), best.pieces.end());
  return {};
}

Expected<Layout> GreedyFill::run(bool largestFirst) {
  for (int c : placementOrder(largestFirst)) {
    if (m_frozen.groupsOf[c].empty()) continue;
    const std::vector<int> consumerStages = frozenConsumerStagesOf(m_timed, c);
    const auto outputBytes = static_cast<double>(frozenOutputBytes(m_timed.model, m_timed.cluster, c));
    for (int mb = 0; mb < m_timed.config.microbatches; ++mb)
      PS_RETURN_IF_ERROR(placeUnit(c, mb, consumerStages, outputBytes));
  }
  return std::move(m_layout);
}

Expected<Layout> greedyLayout(const Plan& timed, const Frozen& frozen, bool useGaps, bool largestFirst = true) {
  return GreedyFill(timed, frozen, useGaps).run(largestFirst);
}

Plan shellOf(const PlanRequest& request, const ScheduleSkeleton& skeleton) {
  return planShell(request, skeleton.virtualStages);
}

// Appends the dependencies the filled plan implies (the same ones resimulate derives).
void withFrozenDependencies(const PlanRequest& request, ScheduleSkeleton& sk) {
  const std::vector<OpDependency> deps = frozenDependencies(shellOf(request, sk), sk.devices);
  sk.extraDependencies.insert(sk.extraDependencies.end(), deps.begin(), deps.end());
}

}  // namespace

std::vector<std::string> fillModeNames() { return {"none", "greedy"}; }

namespace {

// What the fill did (FillReport): per device, the frozen work inside the backbone's bubbles and
// past its end, and the speedups over --fill none and data parallelism.
FillReport fillReport(const PlanRequest& request, const Plan& backbone, const Layout& layout, bool usedNone,
                      double noneMs, double iterationMs) {
  FillReport r;
  r.mode = request.config.fill;
  r.backboneOnlyMs = backbone.metrics.makespanMs;
  r.noFillMs = noneMs;
  r.iterationMs = iterationMs;
  r.usedNoFillLayout = usedNone && request.config.fill == "greedy";
  const int devices = request.config.devices;
  const double t0 = backbone.metrics.makespanMs;
  IdVector<DeviceFill> perDevice;  // the backbone's devices are the request's
  for (const DeviceMetrics& dm : backbone.metrics.devices) perDevice.emplace_back().bubbleMs = t0 - dm.busyMs;
  for (const Piece& pc : layout.pieces) {
    auto& df = perDevice[pc.device];
    const double dur = pc.endMs - pc.startMs;
    r.frozenWorkMs += dur;
    if (usedNone) {
      df.overflowMs += dur;
      continue;
    }
    const double inside = std::clamp(t0 - pc.startMs, 0.0, dur);
    df.filledMs += inside;
    df.overflowMs += dur - inside;
  }
  r.devices = std::move(perDevice.values());
  for (const Piece& pc : layout.pieces) {
    const Group& g = layout.groups[pc.group];
    if (g.firstLayer == 0) r.frozenSamples += pc.samples;
  }
  r.speedupOverNoFill = iterationMs > 0 ? noneMs / iterationMs : 1.0;
  auto dp = dataParallelIterationMs(request.model, request.cluster, devices, request.config.microbatches);
  if (dp) {
    r.dataParallelMs = *dp;
    r.speedupOverDataParallel = iterationMs > 0 ? *dp / iterationMs : 0.0;
  } else {
    r.dataParallelNote = dp.message();
  }
  return r;
}

}  // namespace

Status fillSkeleton(const PlanRequest& request, ScheduleSkeleton& skeleton, const SolveControl& control,
                    FillReport* report) {
  const std::string& mode = request.config.fill;
  const auto modes = fillModeNames();
  if (std::find(modes.begin(), modes.end(), mode) == modes.end()) {
    return Error{"fill '" + mode + "' is not available (known: none, greedy)"};
  }
  if (request.model.frozenComponents().empty()) return {};
  auto backbone = simulateSkeleton(shellOf(request, skeleton), skeleton);
  if (!backbone) return backbone.error().withPrefix("fill: the backbone schedule does not simulate: ");
  if (control.cancelled()) return Error::cancelled();
  const Frozen frozen = frozenGroups(*backbone);
  if (frozen.groups.empty()) return {};

  PS_ASSIGN_OR_RETURN(auto noneLayout, greedyLayout(*backbone, frozen, false));
  // `--fill none`: frozen work first, its outputs sent to the consuming F in this iteration.
  PlanRequest noneRequest = request;
  noneRequest.config.fill = "none";
  ScheduleSkeleton noneSkeleton = assemble(skeleton, *backbone, noneLayout, true);
  withFrozenDependencies(noneRequest, noneSkeleton);
  auto nonePlan = simulateSkeleton(shellOf(noneRequest, noneSkeleton), noneSkeleton, SimulationOptions{false, true});
  if (!nonePlan) return nonePlan.error().withPrefix("fill none: ");
  const double noneMs = nonePlan->metrics.makespanMs;
  ScheduleSkeleton chosen = noneSkeleton;
  const Layout* chosenLayout = &noneLayout;
  std::optional<Layout> greedy;
  bool usedNone = mode == "none";
  double iterationMs = noneMs;
  if (mode == "greedy") {
    PS_ASSIGN_OR_RETURN(auto g, greedyLayout(*backbone, frozen, true));
    greedy = std::move(g);
    // Two cross-iteration candidates: the greedy placement in the bubbles, and the `none`
    // layout (frozen work first) whose outputs also serve the next iteration. Each is timed
    // with its transfers; an output arriving after the next iteration needs it stretches the
    // period by that lateness.
    struct Candidate {
      ScheduleSkeleton skeleton;
      double periodMs = kInf;
      double makespanMs = kInf;
    };
    auto timeCandidate = [&](ScheduleSkeleton sk) -> Expected<Candidate> {
      withFrozenDependencies(request, sk);
      PS_ASSIGN_OR_RETURN(auto plan, simulateSkeleton(shellOf(request, sk), sk, SimulationOptions{true, true}));
      const FrozenTransfers t = frozenTransfers(plan);
      Candidate c;
      c.makespanMs = plan.metrics.makespanMs;
      c.periodMs = c.makespanMs + std::max(0.0, t.latenessMs);
      c.skeleton = std::move(sk);
      return c;
    };
    auto filled = timeCandidate(assemble(skeleton, *backbone, *greedy, false));
    if (!filled) return filled.error().withPrefix("fill greedy: ");
    // The same greedy in model order: LPT usually packs better, not always.
    if (auto modelOrder = greedyLayout(*backbone, frozen, true, false)) {
      auto alt = timeCandidate(assemble(skeleton, *backbone, *modelOrder, false));
      if (alt && alt->periodMs < filled->periodMs - kEpsMs) {
        filled = std::move(alt);
        greedy = std::move(*modelOrder);
      }
    }
    auto firstLayout = timeCandidate(assemble(skeleton, *backbone, noneLayout, true));
    if (!firstLayout) return firstLayout.error().withPrefix("fill greedy: ");
    if (filled->periodMs <= firstLayout->periodMs + kEpsMs) {
      chosen = std::move(filled->skeleton);
      chosenLayout = &*greedy;
      usedNone = false;
      iterationMs = filled->periodMs;
    } else {
      chosen = std::move(firstLayout->skeleton);
      usedNone = true;
      iterationMs = firstLayout->periodMs;
    }
  }
  if (report) *report = fillReport(request, *backbone, *chosenLayout, usedNone, noneMs, iterationMs);
  skeleton = std::move(chosen);
  return {};
}

Expected<double> dataParallelIterationMs(const ModelSpec& model, const ClusterSpec& cluster, int devices,
                                         int microbatches) {
  if (devices < 1) return Error{"data parallel: needs at least one device"};
  double trainableParams = 0;
  double frozenParams = 0;
  double activationBytes = 0;
  double frozenActivationBytes = 0;
  double worstMbMs = 0;
  // A whole-model replica per device: the pure pipeline's costs of every layer on each device.
  PlanConfig replica;
  replica.devices = devices;
  const CostedModel costs(model, cluster, replica);
  for (int d = 0; d < devices; ++d) {
    const GpuSpec& gpu = cluster.gpuOfDevice(d);
    double mbMs = 0;
    double tp = 0, fp = 0, act = 0, fact = 0;
    for (int ci = 0; ci < static_cast<int>(model.components.size()); ++ci) {
      const Component& comp = model.component(ci);
      for (const LayerCosts& c : costs.component(ci, d)) {
        mbMs += c.forwardMs + c.backwardInputMs + c.backwardWeightMs;
        if (comp.trainable) {
          tp += c.parameterCount();
          act += static_cast<double>(c.activationBytes);
        } else {
          fp += c.parameterCount();
          fact = std::max(fact, static_cast<double>(c.activationBytes));
        }
      }
    }
    worstMbMs = std::max(worstMbMs, mbMs);
    trainableParams = tp;
    frozenParams = fp;
    activationBytes = act;
    frozenActivationBytes = fact;
    // A replica holds every parameter with its optimizer state plus one microbatch's
    // activations (gradient accumulation runs microbatches one after another).
    const double need = staticMemoryBytes(tp, fp, model.optimizer, devices) + std::max(act, fact);
    const auto have = static_cast<double>(gpu.memoryBytes());
    if (have > 0 && need > have) {
      return Error{"a whole-model replica needs " + formatBytes(need) + " on device " + std::to_string(d) +
                   ", which has " + formatBytes(have)};
    }
  }
  (void)frozenParams;
  (void)activationBytes;
  (void)frozenActivationBytes;
  // m·b samples split evenly over the replicas (microbatch time scales with samples).
  const double computeMs = worstMbMs * static_cast<double>(microbatches) / static_cast<double>(devices);
  // Ring all-reduce of bf16 gradients: 2(p−1)/p of the bytes over the slowest link plus
  // 2(p−1) latency steps (Patarasuk & Yuan 2009; NCCL's ring algorithm).
  double allReduceMs = 0;
  if (devices > 1) {
    const double gradBytes = 2.0 * trainableParams;
    bool multiNode = false;
    for (int d = 1; d < devices; ++d) multiNode = multiNode || cluster.nodeOfDevice(d) != cluster.nodeOfDevice(0);
    const LinkSpec& link = multiNode ? cluster.interNode : cluster.intraNode;
    const auto p = static_cast<double>(devices);
    const double bw = link.bandwidthGBps > 0 ? link.bandwidthGBps : kInf;
    allReduceMs = 2.0 * (p - 1.0) / p * gradBytes / (bw * 1e6) + 2.0 * (p - 1.0) * link.latencyUs / 1000.0;
  }
  return computeMs + allReduceMs;
}

}  // namespace pipestudio
