// Vocabulary parallelism (issues 4 and 20; Yeung et al. 2024, "Balancing Pipeline Parallelism
// with Vocabulary Parallelism", §3–4). See Vocab.hpp.
//
// Where the S and T passes go. A barrier (the all-reduce of the softmax statistics, and with
// two barriers the reduction of the input gradient) is a point every device must have passed
// for a microbatch before the last stage can run that microbatch's backward. Placed naively,
// right after the last stage's forward with S and T back to back, every device waits at each
// barrier and the last stage waits for both: a quarter of the time is bubble at p = 8. The
// paper moves the passes into the steady state instead (its Algorithms 1/2 and Figure 10; the
// authors' `vocab_parallel_schedule.py` builds 1F1B that way): every device starts one more
// microbatch in its warm-up per barrier (activation memory p + 1 with one barrier, p + 2 with
// two), so the last stage's backward of a microbatch comes one or two rounds after its
// forward, and each device runs S and T in between its transformer passes, where the
// all-reduce overlaps the next pass. We build that for any base schedule: (1) the base order
// with every backward moved k forwards later on every device (k extra warm-up forwards,
// k = 0 … barriers), (2) S and T inserted by a timed list schedule that starts a device's
// next vocabulary pass as soon as its inputs are there, between two base passes, (3) the
// simulator times the result; the fastest k within the memory limit is the plan.
#include "pipestudio/planner/Vocab.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>

#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio {
namespace {

bool isVocabLayer(const Layer& l) {
  return (l.kind == "lm_head" || l.kind == "embedding") && l.transformer && l.transformer->vocab;
}

double imbalance(const Plan& plan) {
  double maxBusy = 0, sum = 0;
  for (const auto& d : plan.metrics.devices) {
    maxBusy = std::max(maxBusy, d.busyMs);
    sum += d.busyMs;
  }
  const double mean = plan.metrics.devices.empty() ? 0 : sum / static_cast<double>(plan.metrics.devices.size());
  return mean > 0 ? maxBusy / mean : 1.0;
}

using Lanes = std::vector<std::vector<OrderedOp>>;

// Every op but the forwards moves `k` forwards later in its device's order (relative orders
// of forwards and of the rest kept): 1F1B gets k more warm-up forwards on every device.
Lanes delayBackwards(const Lanes& lanes, int k) {
  Lanes out(lanes.size());
  for (std::size_t d = 0; d < lanes.size(); ++d) {
    const auto& lane = lanes[d];
    const auto forwards = static_cast<int>(
        std::count_if(lane.begin(), lane.end(), [](const OrderedOp& o) { return o.kind == OpKind::F; }));
    std::vector<OrderedOp> rest;
    std::vector<int> after;  // forwards that precede each rest op in the new order
    int seen = 0;
    for (const OrderedOp& o : lane) {
      if (o.kind == OpKind::F) {
        ++seen;
      } else {
        rest.push_back(o);
        after.push_back(std::min(forwards, seen + k));
      }
    }
    auto& dst = out[d];
    dst.reserve(lane.size());
    std::size_t r = 0;
    int emitted = 0;
    for (const OrderedOp& o : lane) {
      if (o.kind != OpKind::F) continue;
      while (r < rest.size() && after[r] <= emitted) dst.push_back(rest[r++]);
      dst.push_back(o);
      ++emitted;
    }
    while (r < rest.size()) dst.push_back(rest[r++]);
  }
  return out;
}

// A timed list schedule that inserts S and T into fixed base orders. Base ops run in their
// device's order; a device that is between two base ops starts a vocabulary pass whose
// inputs have arrived before its next base op (the lower microbatch first, S before T), so
// the passes run as soon as they can, in the steady state, and the barriers overlap the
// transformer passes around them. Transfers are taken as delays (no link contention): this
// only decides the order; the simulator times the plan.
class VocabPlacer {
 public:
  VocabPlacer(const Plan& shell, const Lanes& base, const std::vector<int>& shardStage, int lastStage)
      : m_shell(shell), m_base(base), m_shard(shardStage), m_last(lastStage) {}

  Expected<Lanes> place(const SolveControl& control) {
    build();
    return run(control);
  }

 private:
  struct Node {
    int device = 0;
    OrderedOp op;
    double durationMs = 0;
    double readyMs = 0;
    int pending = 0;
    std::vector<std::pair<int, double>> consumers;  // (node, transfer delay)
  };

  int addNode(int device, const OrderedOp& op) {
    Node n;
    n.device = device;
    n.op = op;
    n.durationMs =
        passDurationMs(op.kind, m_costs[static_cast<std::size_t>(op.virtualStage)], m_shell.config.vocabBarriers);
    if (op.samples > 0) {
      n.durationMs *= static_cast<double>(op.samples) /
                      static_cast<double>(std::max<std::int64_t>(1, m_shell.model.samplesPerMicrobatch));
    }
    m_nodes.push_back(std::move(n));
    return static_cast<int>(m_nodes.size()) - 1;
  }
  // Node ids are ints: -1 stands for "no such node" in the (stage, microbatch) tables.
  Node& node(int id) { return m_nodes[static_cast<std::size_t>(id)]; }
  const Node& node(int id) const { return m_nodes[static_cast<std::size_t>(id)]; }
  void edge(int from, int to, double delayMs) {
    if (from < 0 || to < 0) return;
    node(from).consumers.emplace_back(to, delayMs);
    ++node(to).pending;
  }
  double transferMs(int from, int to, std::int64_t bytes) const {
    return deviceTransferMs(m_shell.cluster, m_shell.config, from, to, static_cast<double>(bytes));
  }

  void build() {
    const int p = m_shell.config.devices;
    const int m = m_shell.config.microbatches;
    m_costs = stageCosts(m_shell);
    const auto n = m_shell.virtualStages.size();
    const auto pu = static_cast<std::size_t>(p);
    const auto mu = static_cast<std::size_t>(m);
    // The slot of (stage, microbatch) in fNode and bNode; both are valid ids.
    auto key = [mu](int stage, int microbatch) {
      return static_cast<std::size_t>(stage) * mu + static_cast<std::size_t>(microbatch);
    };
    m_baseNode.assign(pu, {});
    std::vector<int> fNode(n * mu, -1), bNode(n * mu, -1);
    for (int d = 0; d < p; ++d) {
      const auto du = static_cast<std::size_t>(d);
      for (const OrderedOp& o : m_base[du]) {
        const int id = addNode(d, o);
        m_baseNode[du].push_back(id);
        const std::size_t k = key(o.virtualStage, o.microbatch);
        if (o.kind == OpKind::F) fNode[k] = id;
        if (o.kind == OpKind::B || o.kind == OpKind::BW) bNode[k] = id;
      }
    }
    // Data flow between base ops (the simulator's rules, StageNeighbours), with transfers.
    const StageNeighbours chain = stageNeighbours(m_shell);
    for (const auto& ids : m_baseNode) {
      for (int id : ids) {
        const OrderedOp o = node(id).op;
        const auto s = static_cast<std::size_t>(o.virtualStage);
        const std::size_t own = key(o.virtualStage, o.microbatch);
        auto cross = [&](int stage) {
          const int from = m_shell.stage(stage).device;
          const int to = m_shell.virtualStages[s].device;
          const std::int64_t bytes =
              m_costs[static_cast<std::size_t>(std::min<int>(stage, o.virtualStage))].outputBytes;
          return from == to ? 0.0 : transferMs(from, to, bytes);
        };
        if (o.kind == OpKind::F && chain.previous[s] >= 0) {
          edge(fNode[key(chain.previous[s], o.microbatch)], id, cross(chain.previous[s]));
        } else if (o.kind == OpKind::B || o.kind == OpKind::BW) {
          edge(fNode[own], id, 0);
          if (chain.next[s] >= 0) edge(bNode[key(chain.next[s], o.microbatch)], id, cross(chain.next[s]));
        } else if (o.kind == OpKind::W) {
          edge(bNode[own], id, 0);
        }
      }
    }
    // Frozen outputs of a filled backbone (the backbone's own derived dependencies).
    auto baseNode = [&](const OpRef& r) {
      return m_baseNode[static_cast<std::size_t>(r.device)][static_cast<std::size_t>(r.index)];
    };
    for (const OpDependency& dep : derivedDependencies(m_shell, m_base)) {
      edge(baseNode(dep.from), baseNode(dep.to), transferMs(dep.from.device, dep.to.device, dep.bytes));
    }
    // The vocabulary passes and their barriers (vocabDependencies' rules and bytes).
    const std::int64_t hiddenBytes = m_costs[static_cast<std::size_t>(m_last)].outputBytes;
    std::int64_t seq = 1;
    for (const Layer& l : m_shell.model.components.back().layers) {
      if (l.kind == "lm_head" && l.transformer) seq = l.transformer->seq;
    }
    const std::int64_t statsBytes = 8 * m_shell.model.samplesPerMicrobatch * seq;
    const int lastDevice = m_shell.stage(m_last).device;
    const bool oneBarrier = m_shell.config.vocabBarriers == 1;
    m_sNode.assign(pu, std::vector<int>(mu, -1));
    m_tNode.assign(pu, std::vector<int>(mu, -1));
    for (int mb = 0; mb < m; ++mb) {
      const auto mbu = static_cast<std::size_t>(mb);
      for (int d = 0; d < p; ++d) {
        const auto du = static_cast<std::size_t>(d);
        const int shard = m_shard[du];
        m_sNode[du][mbu] = addNode(d, {shard, OpKind::S, mb, 0});
        m_tNode[du][mbu] = addNode(d, {shard, OpKind::T, mb, 0});
      }
      const int fLast = fNode[key(m_last, mb)];
      const int bLast = bNode[key(m_last, mb)];
      for (int d = 0; d < p; ++d) {
        const auto du = static_cast<std::size_t>(d);
        const int sId = m_sNode[du][mbu];
        const int tId = m_tNode[du][mbu];
        edge(fLast, sId, lastDevice == d ? 0.0 : transferMs(lastDevice, d, hiddenBytes));
        for (int e = 0; e < p; ++e) {
          edge(m_sNode[static_cast<std::size_t>(e)][mbu], tId, e == d ? 0.0 : transferMs(e, d, statsBytes));
        }
        const std::int64_t gradBytes = oneBarrier ? 2 * hiddenBytes + statsBytes : hiddenBytes;
        edge(oneBarrier ? sId : tId, bLast, d == lastDevice ? 0.0 : transferMs(d, lastDevice, gradBytes));
      }
    }
  }

  Expected<Lanes> run(const SolveControl& control) {
    const int p = m_shell.config.devices;
    const auto pu = static_cast<std::size_t>(p);
    Lanes out(pu);
    std::vector<std::size_t> nextBase(pu, 0), nextS(pu, 0), nextT(pu, 0);
    std::vector<double> freeMs(pu, 0.0);
    std::vector<char> busy(pu, 0);
    // Events: (time, payload): payload >= 0 a node completes; payload < 0 device −payload−1 wakes.
    using Event = std::pair<double, int>;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
    std::size_t placed = 0;
    // The microbatch order of S and T on every device: the order of the last stage's forwards.
    std::vector<std::size_t> order;
    for (const OrderedOp& o : m_base[static_cast<std::size_t>(m_shell.stage(m_last).device)]) {
      if (o.kind == OpKind::F && o.virtualStage == m_last) order.push_back(static_cast<std::size_t>(o.microbatch));
    }
    if (order.size() != static_cast<std::size_t>(m_shell.config.microbatches)) {
      return Error{"the last stage does not run every microbatch's forward once"};
    }
    auto ready = [&](int id, double now) {
      const Node& n = node(id);
      return n.pending == 0 && n.readyMs <= now;
    };
    // Starts something on device d at `now` if it can; schedules a wake-up otherwise.
    auto tryStart = [&](std::size_t d, double now) {
      if (busy[d]) return;
      int pick = -1;
      const int sNode = nextS[d] < order.size() ? m_sNode[d][order[nextS[d]]] : -1;
      const int tNode = nextT[d] < nextS[d] ? m_tNode[d][order[nextT[d]]] : -1;
      // The lower microbatch first (T of an earlier microbatch before S of a later one).
      if (tNode >= 0 && ready(tNode, now)) pick = tNode;
      if (pick < 0 && sNode >= 0 && ready(sNode, now)) pick = sNode;
      const int baseNode = nextBase[d] < m_baseNode[d].size() ? m_baseNode[d][nextBase[d]] : -1;
      if (pick < 0 && baseNode >= 0 && ready(baseNode, now)) pick = baseNode;
      if (pick < 0) {
        // Wake when the earliest known input arrives (nodes still waiting on a producer wake
        // the device when that producer completes).
        double wake = std::numeric_limits<double>::infinity();
        for (int c : {tNode, sNode, baseNode}) {
          if (c >= 0 && node(c).pending == 0) wake = std::min(wake, node(c).readyMs);
        }
        if (std::isfinite(wake)) events.emplace(wake, -static_cast<int>(d) - 1);
        return;
      }
      if (pick == tNode) {
        ++nextT[d];
      } else if (pick == sNode) {
        ++nextS[d];
      } else {
        ++nextBase[d];
      }
      const Node& n = node(pick);
      out[d].push_back(n.op);
      ++placed;
      busy[d] = 1;
      const double start = std::max(now, freeMs[d]);
      events.emplace(start + n.durationMs, pick);
    };
    for (std::size_t d = 0; d < pu; ++d) tryStart(d, 0.0);
    std::size_t steps = 0;
    while (!events.empty()) {
      if ((++steps & 4095) == 0 && control.cancelled()) return Error::cancelled();
      const auto [now, payload] = events.top();
      events.pop();
      if (payload < 0) {
        tryStart(static_cast<std::size_t>(-payload - 1), now);
        continue;
      }
      const Node& n = node(payload);
      const auto d = static_cast<std::size_t>(n.device);
      busy[d] = 0;
      freeMs[d] = now;
      for (const auto& [to, delayMs] : n.consumers) {
        Node& c = node(to);
        c.readyMs = std::max(c.readyMs, now + delayMs);
        if (--c.pending == 0) events.emplace(c.readyMs, -c.device - 1);
      }
      tryStart(d, now);
    }
    if (placed != m_nodes.size()) {
      return Error{"the base schedule's order cannot run with the vocabulary passes (" + std::to_string(placed) +
                   " of " + std::to_string(m_nodes.size()) + " ops placed)"};
    }
    return out;
  }

  const Plan& m_shell;
  const Lanes& m_base;
  const std::vector<int>& m_shard;
  int m_last;
  std::vector<StageCosts> m_costs;
  std::vector<Node> m_nodes;
  std::vector<std::vector<int>> m_baseNode;        // per device, the base order's nodes
  std::vector<std::vector<int>> m_sNode, m_tNode;  // [device][microbatch]
};

// The request's backbone without its vocabulary layers, and those layers (embeddings, heads).
struct VocabSplit {
  PlanRequest backbone;
  std::vector<Layer> embeddings;
  std::vector<Layer> heads;
};

Expected<VocabSplit> splitVocabLayers(const PlanRequest& request) {
  VocabSplit split{request, {}, {}};
  for (Component& c : split.backbone.model.components) {
    if (!c.trainable) continue;
    std::vector<Layer> keep;
    for (Layer& l : c.layers) {
      if (!isVocabLayer(l)) {
        keep.push_back(l);
      } else {
        (l.kind == "lm_head" ? split.heads : split.embeddings).push_back(l);
      }
    }
    c.layers = std::move(keep);
  }
  if (split.heads.empty() && split.embeddings.empty()) {
    return Error{"vocabulary parallelism: model '" + excerpt(request.model.name) +
                 "' has no embedding or lm_head layer with a transformer shape and vocab"};
  }
  return split;
}

// The shards as one component: shard k holds every vocabulary layer with ⌈V/p⌉ or ⌊V/p⌋ rows
// (measured costs scale by 1/p).
Component vocabShards(const VocabSplit& split, int p) {
  Component vocab;
  vocab.name = "vocabulary";
  vocab.trainable = true;
  for (int k = 0; k < p; ++k) {
    for (const auto* group : {&split.embeddings, &split.heads}) {
      for (const Layer& l : *group) {
        Layer s = l;
        s.name = l.name + ".shard" + std::to_string(k);
        const std::int64_t v = *l.transformer->vocab;
        s.transformer->vocab = v / p + (k < v % p ? 1 : 0);
        const double share = static_cast<double>(*s.transformer->vocab) / static_cast<double>(v);
        auto scale = [share](auto& field) {
          if (field) field = static_cast<std::decay_t<decltype(*field)>>(static_cast<double>(*field) * share);
        };
        scale(s.forwardMs);
        scale(s.backwardInputMs);
        scale(s.backwardWeightMs);
        scale(s.parameterBytes);
        vocab.layers.push_back(std::move(s));
      }
    }
  }
  return vocab;
}

// One vocabulary stage per device (its own chain, pipeline 1, so the backbone's data flow is
// untouched; S/T carry their dependencies explicitly, Dependencies.hpp), after the backbone's
// stages; returns each device's vocabulary stage.
std::vector<int> addVocabStages(Plan& shell, const Plan& backbone, int p, int perShard) {
  const int vocabComponent = static_cast<int>(shell.model.components.size()) - 1;
  std::vector<VirtualStage> stages = backbone.virtualStages;
  const auto pu = static_cast<std::size_t>(p);
  std::vector<int> chunkCount(pu, 0);
  for (const auto& vs : stages) {
    int& count = chunkCount[static_cast<std::size_t>(vs.device)];
    count = std::max(count, vs.chunk + 1);
  }
  std::vector<int> vocabStage(pu);
  for (int d = 0; d < p; ++d) {
    const auto du = static_cast<std::size_t>(d);
    VirtualStage vs;
    vs.id = static_cast<int>(stages.size());
    vs.device = d;
    vs.chunk = chunkCount[du];
    vs.component = vocabComponent;
    vs.firstLayer = d * perShard;
    vs.lastLayer = d * perShard + perShard - 1;
    vs.pipeline = 1;
    vocabStage[du] = vs.id;
    stages.push_back(vs);
  }
  shell.virtualStages = stages;
  return vocabStage;
}

// k = 0 … barriers extra warm-up forwards; S/T placed into each; the fastest plan within memory.
Expected<Plan> placeVocabPasses(const Plan& shell, const Plan& backbone, const std::vector<int>& vocabStage, int last,
                                int barriers, const SolveControl& control) {
  const Lanes baseLanes = planLanes(backbone);
  std::optional<Plan> best;
  std::string lastError;
  for (int k = 0; k <= barriers; ++k) {
    const Lanes delayed = delayBackwards(baseLanes, k);
    VocabPlacer placer(shell, delayed, vocabStage, last);
    auto lanes = placer.place(control);
    if (!lanes) {
      if (control.cancelled()) return Error::cancelled();
      lastError = lanes.message();
      continue;
    }
    ScheduleSkeleton sk;
    sk.virtualStages = shell.virtualStages;
    sk.devices = std::move(*lanes);
    // The S/T edges (and any frozen-output edges of a filled backbone) come from the plan
    // itself, exactly as resimulate derives them.
    sk.extraDependencies = derivedDependencies(shell, sk.devices);
    auto plan = simulateSkeleton(shell, sk);
    if (!plan) {
      lastError = plan.message();
      continue;
    }
    if (auto st = checkMemory(*plan); !st) {
      lastError = st.message();
      continue;
    }
    const double tolerance = 1e-9 * std::max(1.0, plan->metrics.makespanMs);
    if (!best || plan->metrics.makespanMs < best->metrics.makespanMs - tolerance) best = std::move(*plan);
  }
  if (!best) return Error{"vocabulary parallelism: " + lastError};
  return std::move(*best);
}

}  // namespace

Expected<Plan> makeVocabParallelPlan(const PlanRequest& request, const SolveControl& control) {
  const int p = request.config.devices;
  if (p < 1) return Error{"vocabulary parallelism: needs at least one device"};
  const int barriers = request.config.vocabBarriers;
  if (barriers != 1 && barriers != 2) {
    return Error{"vocabulary parallelism: --vocab-barriers must be 1 or 2, got " + std::to_string(barriers)};
  }
  // 1. The backbone without its vocabulary layers; the shards form their own component.
  PS_ASSIGN_OR_RETURN(const VocabSplit split, splitVocabLayers(request));
  PS_ASSIGN_OR_RETURN(auto backbone, makePlan(split.backbone, control));
  if (control.cancelled()) return Error::cancelled();
  // S and T of a microbatch follow the last stage's forward of it: one pipeline direction.
  for (const VirtualStage& vs : backbone.virtualStages) {
    if (vs.pipeline != 0) {
      return Error{"vocabulary parallelism: schedule '" + request.config.schedule +
                   "' runs two pipelines in opposite directions, and the vocabulary passes follow the forwards "
                   "of one last stage: use a schedule with one direction"};
    }
  }
  // 2. The shards; 3. one vocabulary stage per device.
  Plan shell;
  shell.config = backbone.config;  // the resolved request (global batch → microbatches)
  shell.model = backbone.model;
  shell.cluster = request.cluster;
  shell.model.components.push_back(vocabShards(split, p));
  const auto perShard = static_cast<int>(split.embeddings.size() + split.heads.size());
  const std::vector<int> vocabStage = addVocabStages(shell, backbone, p, perShard);
  // The last trainable stage of pipeline 0 (it feeds the output layer; frozen stages of a
  // filled backbone come after it in id order).
  int last = -1;
  for (const auto& vs : backbone.virtualStages) {
    if (vs.pipeline == 0 && backbone.model.component(vs.component).trainable) last = std::max(last, vs.id);
  }
  if (last < 0) return Error{"vocabulary parallelism: the backbone has no stage"};
  // 4. The vocabulary passes placed into the backbone's order.
  return placeVocabPasses(shell, backbone, vocabStage, last, barriers, control);
}

Expected<VocabComparison> compareVocabParallel(const PlanRequest& request, const SolveControl& control) {
  PS_ASSIGN_OR_RETURN(auto baseline, makePlan(request, control));
  PS_ASSIGN_OR_RETURN(auto vocab, makeVocabParallelPlan(request, control));
  VocabComparison out;
  out.baselineImbalance = imbalance(baseline);
  out.vocabImbalance = imbalance(vocab);
  out.baseline = std::move(baseline);
  out.vocabParallel = std::move(vocab);
  return out;
}

}  // namespace pipestudio
