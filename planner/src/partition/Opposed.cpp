// Independent trainable backbones in opposite directions (issue 4; DiffusionPipe, Tian et al.,
// MLSys 2024, §4.2: several backbones share the devices, the second running the other way so
// one's warm-up and cool-down overlap the other's steady phase).
//
// Two trainable components with no `feeds` path between them (cascaded models trained
// together: a base UNet and a super-resolution UNet) need not wait on each other: the
// simulator and the executor time them as independent chains (plan/Dependencies.hpp
// stageNeighbours). The V placement (2 chunks per device) then holds backbone A on its down
// leg (virtual stages 0..p−1 on devices 0..p−1) and backbone B on its up leg (p..2p−1 on
// devices p−1..0): every device holds one chunk of each, A flows 0 → p−1 while B flows
// p−1 → 0, and both start at time 0.
//
// The order: the V schedules' greedy construction (zb-v's rules, Qi et al. 2023 §6) walks one
// chain per pipeline, so the two legs are handed to it as two pipelines with 2m
// pseudo-microbatches (even ones through A, odd ones through B); every pseudo-microbatch 2k+l
// is then renamed back to microbatch k. The plan itself keeps one pipeline (each microbatch
// runs both backbones, docs/formats.md), and stageNeighbours gives it the same two chains.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "partition/Partitioners.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::partition {

std::vector<std::vector<int>> dependentBackboneGroups(const ModelSpec& model) {
  const auto n = model.components.size();
  // reach[i][j]: a `feeds` path from component i to component j (through any components).
  std::vector<std::vector<char>> reach(n, std::vector<char>(n, 0));
  for (std::size_t i = 0; i < n; ++i) {
    for (const std::string& name : model.components[i].feeds) {
      for (std::size_t j = 0; j < n; ++j) {
        if (model.components[j].name == name) reach[i][j] = 1;
      }
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!reach[i][k]) continue;
      for (std::size_t j = 0; j < n; ++j) reach[i][j] = static_cast<char>(reach[i][j] | reach[k][j]);
    }
  }
  std::vector<std::vector<int>> groups;
  for (int c : model.trainableComponents()) {
    const auto uc = static_cast<std::size_t>(c);
    std::vector<std::size_t> joined;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (int o : groups[g]) {
        const auto uo = static_cast<std::size_t>(o);
        if (reach[uc][uo] || reach[uo][uc]) {
          joined.push_back(g);
          break;
        }
      }
    }
    if (joined.empty()) {
      groups.push_back({c});
      continue;
    }
    // c links several groups: merge them into the first.
    auto& into = groups[joined.front()];
    into.push_back(c);
    for (std::size_t k = joined.size(); k-- > 1;) {
      auto& from = groups[joined[k]];
      into.insert(into.end(), from.begin(), from.end());
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(joined[k]));
    }
    std::sort(into.begin(), into.end());
  }
  return groups;
}

namespace {

// Per stage of q, the prefix sums of its layers' compute times (c[s][l]: layers [0, l)).
std::vector<std::vector<double>> computePrefix(const PartitionProblem& q) {
  const auto layers = static_cast<std::size_t>(q.layers);
  std::vector<std::vector<double>> c(q.stages.size(), std::vector<double>(layers + 1, 0.0));
  for (std::size_t s = 0; s < q.stages.size(); ++s) {
    for (std::size_t l = 0; l < layers; ++l) c[s][l + 1] = c[s][l] + std::max(0.0, q.computeMs[s][l]);
  }
  return c;
}

// Stage s of q ends with layer end−1: its send to the next stage (none for the last one).
double legSendMs(const PartitionProblem& q, std::size_t s, std::size_t end) {
  return s + 1 < q.stages.size() ? std::max(0.0, q.sendMs[s][end - 1]) : 0.0;
}

// The feasibility DP of balanceOpposedLegs over the (A prefix placed, B suffix placed) states,
// and the walk back that turns its last feasible bound into stages.
class OpposedLegSplit {
 public:
  OpposedLegSplit(const PartitionProblem& a, const PartitionProblem& b, std::size_t devices)
      : m_a(a),
        m_b(b),
        m_ca(computePrefix(a)),
        m_cb(computePrefix(b)),
        m_pu(devices),
        m_na(static_cast<std::size_t>(a.layers)),
        m_nb(static_cast<std::size_t>(b.layers)),
        m_ub(m_nb + 1),
        m_reach(devices, std::vector<char>((m_na + 1) * m_ub, 0)) {}

  // Upper bound: the per-leg dp split's busiest device.
  double perLegBound(const std::vector<VirtualStage>& legs) const {
    std::vector<double> device(m_pu, 0.0);
    for (std::size_t k = 0; k < legs.size(); ++k) {
      const VirtualStage& vs = legs[k];
      const bool isA = k < m_pu;
      const PartitionProblem& q = isA ? m_a : m_b;
      const auto& c = isA ? m_ca : m_cb;
      const std::size_t s = isA ? k : k - m_pu;
      const auto first = static_cast<std::size_t>(vs.firstLayer);
      const auto end = static_cast<std::size_t>(vs.lastLayer) + 1;
      device[static_cast<std::size_t>(vs.device)] += c[s][end] - c[s][first] + legSendMs(q, s, end);
    }
    return *std::max_element(device.begin(), device.end()) * (1 + 1e-9) + 1e-12;
  }

  bool feasible(double bound);
  std::optional<std::vector<VirtualStage>> layout(const std::vector<VirtualStage>& legs, double bound) const;

 private:
  double timeA(std::size_t d, std::size_t i, std::size_t i2) const {
    return m_ca[d][i2] - m_ca[d][i] + legSendMs(m_a, d, i2);
  }
  double timeB(std::size_t k, std::size_t j2, std::size_t j) const {
    return m_cb[k][j] - m_cb[k][j2] + legSendMs(m_b, k, j);
  }

  const PartitionProblem& m_a;
  const PartitionProblem& m_b;
  const std::vector<std::vector<double>> m_ca, m_cb;
  const std::size_t m_pu;
  const std::size_t m_na, m_nb;  // layer counts (la, lb >= p >= 0 here)
  const std::size_t m_ub;        // the state dimension of B's end
  // m_reach[d][i·ub + j]: after devices 0..d, A's first i layers and B's layers from j on are
  // placed (of the last feasible() call).
  std::vector<std::vector<char>> m_reach;
};

// Given A's stage d = [i, i2) and B's end j, B's stage k = [j2, j) fits the bound for every j2
// from the smallest allowed one up to j − 1 (its send depends on j only), so the new states form
// an interval per i2, marked with a difference array.
bool OpposedLegSplit::feasible(double bound) {
  std::vector<char> cur((m_na + 1) * m_ub, 0);
  cur[m_nb] = 1;  // i = 0, j = lb
  std::vector<int> diff(m_ub + 1);
  for (std::size_t d = 0; d < m_pu; ++d) {
    const std::size_t k = m_pu - 1 - d;  // B's stage on device d
    const auto& row = m_cb[k];
    auto& next = m_reach[d];
    std::fill(next.begin(), next.end(), 0);
    const std::size_t iHi = m_na - k;  // A's later stages keep a layer each
    for (std::size_t i2 = d + 1; i2 <= iHi; ++i2) {
      std::fill(diff.begin(), diff.end(), 0);
      bool any = false;
      for (std::size_t i = i2; i-- > d;) {  // i = i2 − 1 down to d
        const double ta = timeA(d, i, i2);
        if (ta > bound) break;  // A's stage only grows as it starts earlier
        for (std::size_t j = k + 1; j <= m_nb; ++j) {
          if (!cur[i * m_ub + j]) continue;
          // Smallest j2 ≥ k (B's earlier stages keep a layer; stage 0 starts at 0).
          const double need = row[j] + legSendMs(m_b, k, j) - (bound - ta);
          auto lo = static_cast<std::size_t>(std::lower_bound(row.data() + k, row.data() + j, need) - row.data());
          if (k == 0) lo = lo == 0 ? 0 : j;
          const std::size_t hi = k == 0 ? std::min<std::size_t>(j, 1) : j;  // stage 0 must start at layer 0
          if (lo >= hi) continue;
          ++diff[lo];
          --diff[hi];
          any = true;
        }
      }
      if (!any) continue;
      int run = 0;
      for (std::size_t j2 = 0; j2 < m_ub; ++j2) {
        run += diff[j2];
        if (run > 0) next[i2 * m_ub + j2] = 1;
      }
    }
    cur = next;
  }
  return cur[m_na * m_ub] != 0;
}

// Walk back from (la, 0) after the last device: any reachable predecessor whose two stages fit
// the bound of the last feasible() call.
std::optional<std::vector<VirtualStage>> OpposedLegSplit::layout(const std::vector<VirtualStage>& legs,
                                                                 double bound) const {
  std::vector<VirtualStage> out = legs;
  std::vector<int> firstA(m_pu), firstB(m_pu);
  std::size_t i2 = m_na;
  std::size_t j2 = 0;
  for (std::size_t d = m_pu; d-- > 0;) {  // d = p − 1 down to 0
    const std::size_t k = m_pu - 1 - d;
    firstB[k] = static_cast<int>(j2);
    bool found = false;
    for (std::size_t i = d; i < i2 && !found; ++i) {
      for (std::size_t j = j2 + 1; j <= m_nb && !found; ++j) {
        const bool reachable = d == 0 ? (i == 0 && j == m_nb) : m_reach[d - 1][i * m_ub + j] != 0;
        if (!reachable || timeA(d, i, i2) + timeB(k, j2, j) > bound * (1 + 1e-9)) continue;
        firstA[d] = static_cast<int>(i);
        i2 = i;
        j2 = j;
        found = true;
      }
    }
    if (!found) return std::nullopt;  // cannot happen after feasible(bound)
  }
  const auto la = static_cast<int>(m_na);
  const auto lb = static_cast<int>(m_nb);
  for (std::size_t k = 0; k < m_pu; ++k) {
    VirtualStage& va = out[k];
    va.firstLayer = firstA[k];
    va.lastLayer = (k + 1 < m_pu ? firstA[k + 1] : la) - 1;
    VirtualStage& vb = out[m_pu + k];
    vb.firstLayer = firstB[k];
    vb.lastLayer = (k + 1 < m_pu ? firstB[k + 1] : lb) - 1;
  }
  return out;
}

}  // namespace

// Joint split of the two legs that minimises the busiest device's time per microbatch. Device
// d holds backbone A's stage d and backbone B's stage p−1−d, so splitting each backbone alone
// balances its own stages but not their sums per device. Bisection on the bound T with an
// exact feasibility DP over the devices in order 0..p−1: A is consumed from its first layer,
// B from its last (device 0 holds B's last stage). The state is the pair (A prefix placed,
// B suffix placed); sends depend on where a stage ends, so no pair dominates another and all
// reachable pairs are kept. O(p · L_A² · L_B) per bound; memory is left to the simulator's
// check (the caller keeps the per-leg dp split when this one does not fit).
std::optional<std::vector<VirtualStage>> balanceOpposedLegs(const PlanRequest& request,
                                                            const std::vector<VirtualStage>& legs,
                                                            const SolveControl& control) {
  const int p = request.config.devices;
  const auto pu = static_cast<std::size_t>(p);
  const auto trainable = request.model.trainableComponents();
  std::vector<PartitionStage> stagesA(pu);
  std::vector<PartitionStage> stagesB(pu);
  for (int k = 0; k < p; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    stagesA[uk].device = k;
    stagesB[uk].device = p - 1 - k;
  }
  for (const int comp : {trainable[0], trainable[1]}) {
    const auto layers = static_cast<std::int64_t>(request.model.component(comp).layers.size());
    if (!checkPartitionSize(p, layers)) return std::nullopt;  // the per-leg split stands
  }
  const PartitionProblem a = buildPartitionProblem(request, trainable[0], stagesA);
  const PartitionProblem b = buildPartitionProblem(request, trainable[1], stagesB);
  const int la = a.layers;
  const int lb = b.layers;
  if (la < p || lb < p || legs.size() != 2 * pu) return std::nullopt;
  constexpr double kMaxWork = 2e7;  // transitions per bound; beyond it keep the per-leg split
  if (static_cast<double>(p) * la * la * lb > kMaxWork) return std::nullopt;
  OpposedLegSplit split(a, b, pu);
  double hi = split.perLegBound(legs);
  if (!split.feasible(hi)) return std::nullopt;
  double lo = 0;
  for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
    if (control.cancelled()) return std::nullopt;
    const double mid = 0.5 * (lo + hi);
    (split.feasible(mid) ? hi : lo) = mid;
  }
  if (!split.feasible(hi)) return std::nullopt;
  return split.layout(legs, hi);
}

bool independentBackbonePair(const ModelSpec& model) {
  return model.trainableComponents().size() == 2 && dependentBackboneGroups(model).size() == 2;
}

Expected<Plan> solveOpposedBackbones(const PlanRequest& request, const SolveControl& control) {
  if (!independentBackbonePair(request.model)) {
    return Error{"opposed backbones need exactly two trainable components with no 'feeds' path between them"};
  }
  PlanRequest r = request;
  r.config.schedule = "zb-v";
  r.config.chunksPerDevice = 2;
  const ScheduleGenerator* generator = findScheduleGenerator(r.config.schedule);
  if (!generator) return Error{"opposed backbones: schedule zb-v is not registered"};
  const int p = r.config.devices;
  const int m = r.config.microbatches;
  const auto pu = static_cast<std::size_t>(p);
  const ScheduleShape shape{p, m, 2};
  PS_RETURN_IF_ERROR(generator->validate(shape));

  // Partition: the V's legs (assignLegs), each backbone split over its leg by dp under zb-v's
  // live-activation counts; the shares stay the legs (keepBackboneShares).
  PS_ASSIGN_OR_RETURN(auto stages, partitionWithLegs(r, *generator, generator->placement(shape), control));
  const auto trainable = r.model.trainableComponents();
  if (stages.size() != 2 * pu) {
    return Error{"opposed backbones: the V placement did not split into one leg per backbone"};
  }
  for (int k = 0; k < 2 * p; ++k) {
    const VirtualStage& vs = stages[static_cast<std::size_t>(k)];
    const int expectedDevice = k < p ? k : 2 * p - 1 - k;
    if (vs.pipeline != 0 || vs.device != expectedDevice || vs.component != trainable[k < p ? 0 : 1]) {
      return Error{"opposed backbones: the V placement did not split into one leg per backbone"};
    }
  }

  // Two candidates: each backbone split by dp on its own leg, and the joint split that
  // balances the devices (each holds one stage of each backbone); the faster feasible wins.
  std::vector<std::vector<VirtualStage>> layouts{stages};
  if (auto joint = balanceOpposedLegs(r, stages, control)) layouts.push_back(std::move(*joint));
  auto finish = [&](const std::vector<VirtualStage>& layout) -> Expected<Plan> {
    Plan shell = planShell(r, layout);

    // The construction's view: two pipelines, one per leg, and 2m pseudo-microbatches.
    ScheduleInput input;
    input.shape = {p, 2 * m, 2};
    input.virtualStages = shell.virtualStages;
    for (std::size_t k = pu; k < input.virtualStages.size(); ++k) input.virtualStages[k].pipeline = 1;
    input.stages = stageEstimates(shell);
    input.staticBytes = staticMemoryPerDevice(shell, stageCosts(shell));
    input.memoryLimitBytes = r.config.memoryLimitBytes;
    input.request = &r;
    input.control = &control;
    schedules::GreedyOptions options;
    options.splitBackward = true;
    options.preferContinuing = true;
    options.boundEveryForward = true;
    for (int mb = 0; mb < 2 * m; ++mb) options.microbatchPipeline.push_back(mb % 2);
    // Activation budget: p microbatches of both backbones per device, zb-v's 1F1B-level peak
    // (each real microbatch is one pseudo-microbatch per leg).
    const auto a0 = schedules::activationPerMicrobatch(input, 0);
    const auto a1 = schedules::activationPerMicrobatch(input, 1);
    for (int d = 0; d < p; ++d)
      options.capBytes.push_back(std::max<std::int64_t>(1, std::int64_t{p} * (a0[d] + a1[d])));
    auto skeleton = schedules::greedyOrder(input, options);
    if (!skeleton) return skeleton.error().withPrefix("opposed backbones: ");
    skeleton->virtualStages = shell.virtualStages;
    for (auto& lane : skeleton->devices) {
      for (OrderedOp& op : lane) op.microbatch /= 2;
    }
    if (control.cancelled()) return Error::cancelled();
    PS_RETURN_IF_ERROR(fillSkeleton(r, *skeleton, control));
    auto plan = simulateSkeleton(std::move(shell), *skeleton);
    if (!plan) return plan.error().withPrefix("opposed backbones: ");
    PS_RETURN_IF_ERROR(checkMemory(*plan));
    return plan;
  };
  std::optional<Plan> best;
  std::string reason;
  for (const auto& layout : layouts) {
    if (control.cancelled()) return Error::cancelled();
    auto plan = finish(layout);
    if (!plan) {
      if (reason.empty()) reason = plan.message();
      continue;
    }
    if (!best || plan->metrics.makespanMs < best->metrics.makespanMs - 1e-9) best = std::move(*plan);
  }
  if (!best) return Error{reason};
  return std::move(*best);
}

}  // namespace pipestudio::partition
