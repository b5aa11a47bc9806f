// The optimized simulator (flat arrays, CSR of consumers, winner tree of running ops, no
// arrival events) against a straightforward reference written from the rules of issue 3:
// an op starts when its device has finished the previous op and every input has arrived;
// an input from another device arrives after a transfer of bytes / bandwidth + latency on
// the directed link (the latency alone when the stage states no output size), transfers of one
// link served in the order their producers finish; and
// DualPipe's overlapped F&B groups (Dependencies.hpp) start and end together.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "PlannerFixtures.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/MustPlan.hpp"

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

struct RefTimes {
  std::vector<double> startMs, endMs;
  std::vector<std::tuple<int, int, int, int, double, double>> comms;  // from, to, microbatch, stage, start, end
};

// The passes an op runs, as weights of its stage's forward, input-gradient and weight-gradient
// parts (BW fuses the last two): its duration and its collective share both follow from them.
struct Passes {
  double forward = 0, backwardInput = 0, backwardWeight = 0;
};

Passes passesOf(OpKind kind) {
  switch (kind) {
    case OpKind::B:
      return {0, 1, 0};
    case OpKind::W:
      return {0, 0, 1};
    case OpKind::BW:
      return {0, 1, 1};
    default:
      return {1, 0, 0};
  }
}

double durationOf(const Op& op, const std::vector<StageCosts>& costs) {
  const StageCosts& c = costs[static_cast<std::size_t>(op.virtualStage)];
  const Passes p = passesOf(op.kind);
  return p.forward * c.forwardMs + p.backwardInput * c.backwardInputMs + p.backwardWeight * c.backwardWeightMs;
}

double collectiveOf(const Op& op, const std::vector<StageCosts>& costs) {
  const StageCosts& c = costs[static_cast<std::size_t>(op.virtualStage)];
  const Passes p = passesOf(op.kind);
  return p.forward * c.forwardCommMs + p.backwardInput * c.backwardInputCommMs +
         p.backwardWeight * c.backwardWeightCommMs;
}

// Producers of each op, in the simulator's documented order.
std::vector<std::vector<std::size_t>> referenceProducers(const Plan& plan) {
  // Chain neighbours: stages of one pipeline in id order (single trainable component here).
  std::map<int, int> prev, next;
  std::map<int, int> lastOfPipeline;
  for (const VirtualStage& vs : plan.virtualStages) {
    auto it = lastOfPipeline.find(vs.pipeline);
    if (it != lastOfPipeline.end()) {
      prev[vs.id] = it->second;
      next[it->second] = vs.id;
    }
    lastOfPipeline[vs.pipeline] = vs.id;
  }
  const auto n = plan.ops.size();
  std::map<std::tuple<int, OpKind, int>, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    const OpKind k = op.kind == OpKind::BW ? OpKind::B : op.kind;
    index[{op.virtualStage, k, op.microbatch}] = i;
  }
  std::vector<std::vector<std::size_t>> producers(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    switch (op.kind) {
      case OpKind::F:
        if (prev.count(op.virtualStage))
          producers[i].push_back(index.at({prev[op.virtualStage], OpKind::F, op.microbatch}));
        break;
      case OpKind::B:
      case OpKind::BW:
        producers[i].push_back(index.at({op.virtualStage, OpKind::F, op.microbatch}));
        if (next.count(op.virtualStage))
          producers[i].push_back(index.at({next[op.virtualStage], OpKind::B, op.microbatch}));
        break;
      case OpKind::W:
        producers[i].push_back(index.at({op.virtualStage, OpKind::B, op.microbatch}));
        break;
      default:
        break;
    }
  }
  return producers;
}

// Overlapped F&B groups (DualPipe): per op, the size of the group it leads; 0 for a later member.
std::vector<int> overlapGroupSizes(const Plan& plan) {
  std::vector<int> groupOf(plan.ops.size(), 1);
  std::vector<std::vector<std::int32_t>> opIndex;
  const auto lanes = planLanes(plan, &opIndex);
  for (const OverlapGroup& g : overlappedGroups(plan, lanes)) {
    const auto& idx = opIndex[static_cast<std::size_t>(g.device)];
    groupOf[static_cast<std::size_t>(idx[static_cast<std::size_t>(g.first)])] = g.size;
    for (int k = 1; k < g.size; ++k)
      groupOf[static_cast<std::size_t>(idx[static_cast<std::size_t>(g.first) + static_cast<std::size_t>(k)])] = 0;
  }
  return groupOf;
}

// Quadratic and map-based on purpose: small plans only. Sweeps the devices until none can start
// its next op (or group).
class ReferenceRun {
 public:
  explicit ReferenceRun(const Plan& plan)
      : m_plan(plan),
        m_costs(stageCosts(plan)),
        m_n(plan.ops.size()),
        m_producers(referenceProducers(plan)),
        m_groupOf(overlapGroupSizes(plan)),
        m_arrival(m_n * m_n, -1),
        m_lanes(static_cast<std::size_t>(plan.config.devices)),
        m_pos(m_lanes.size(), 0),
        m_free(m_lanes.size(), 0.0) {
    m_t.startMs.assign(m_n, -1);
    m_t.endMs.assign(m_n, -1);
    for (std::size_t i = 0; i < m_n; ++i) m_lanes[static_cast<std::size_t>(plan.ops[i].device)].push_back(i);
  }

  RefTimes run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (std::size_t d = 0; d < m_lanes.size(); ++d) {
        while (m_pos[d] < m_lanes[d].size() && startGroup(d)) progress = true;
      }
    }
    std::sort(m_t.comms.begin(), m_t.comms.end());
    return m_t;
  }

 private:
  // The ops of a group start together once every member's inputs are there and last
  // max(Σ computation, Σ collectives), shown back to back in proportion to their own durations;
  // their outputs leave when the group ends. False when an input is missing.
  bool startGroup(std::size_t d) {
    const std::size_t lead = m_lanes[d][m_pos[d]];
    const auto members = static_cast<std::size_t>(std::max(1, m_groupOf[lead]));
    const auto first = m_lanes[d].begin() + static_cast<std::ptrdiff_t>(m_pos[d]);
    const auto last = first + static_cast<std::ptrdiff_t>(members);
    double start = m_free[d];
    double own = 0, compute = 0, comm = 0;
    for (auto it = first; it != last; ++it) {
      const std::size_t i = *it;
      for (std::size_t pr : m_producers[i]) {
        if (std::find(first, last, pr) != last) continue;  // inside the group
        if (m_t.endMs[pr] < 0) return false;
        start = std::max(start, m_arrival[i * m_n + pr] >= 0 ? m_arrival[i * m_n + pr] : m_t.endMs[pr]);
      }
      const double dur = durationOf(m_plan.ops[i], m_costs);
      const double c = std::min(dur, collectiveOf(m_plan.ops[i], m_costs));
      own += dur;
      compute += dur - c;
      comm += c;
    }
    const double span = members > 1 ? std::max(compute, comm) : own;
    double at = start;
    for (std::size_t k = 0; k < members; ++k) {
      const std::size_t i = m_lanes[d][m_pos[d] + k];
      m_t.startMs[i] = at;
      at += own > 0 ? span * durationOf(m_plan.ops[i], m_costs) / own : 0.0;
      m_t.endMs[i] = k + 1 == members ? start + span : at;
    }
    m_free[d] = start + span;
    m_pos[d] += members;
    for (std::size_t k = 0; k < members; ++k) sendOutputs(m_lanes[d][m_pos[d] - members + k], start + span);
    return true;
  }

  // Outgoing transfers of op i, consumers by op index, each queued on its directed link.
  void sendOutputs(std::size_t i, double leaves) {
    const Op& op = m_plan.ops[i];
    for (std::size_t c = 0; c < m_n; ++c) {
      if (std::find(m_producers[c].begin(), m_producers[c].end(), i) == m_producers[c].end()) continue;
      const Op& to = m_plan.ops[c];
      if (to.device == op.device) continue;
      const int lower = std::min(op.virtualStage, to.virtualStage);
      const auto bytes = static_cast<double>(m_costs[static_cast<std::size_t>(lower)].outputBytes);
      double& link = m_linkFree[{op.device, to.device}];
      const double s = std::max(leaves, link);
      const double e = s + (bytes > 0 ? m_plan.cluster.transferMs(op.device, to.device, bytes)
                                      : m_plan.cluster.latencyMs(op.device, to.device));
      link = e;
      m_arrival[c * m_n + i] = e;
      m_t.comms.emplace_back(op.device, to.device, op.microbatch, op.virtualStage, s, e);
    }
  }

  const Plan& m_plan;
  const std::vector<StageCosts> m_costs;
  const std::size_t m_n;
  const std::vector<std::vector<std::size_t>> m_producers;
  const std::vector<int> m_groupOf;
  RefTimes m_t;
  std::vector<double> m_arrival;  // arrival[consumer * n + producer]
  std::map<std::pair<int, int>, double> m_linkFree;
  std::vector<std::vector<std::size_t>> m_lanes;
  std::vector<std::size_t> m_pos;
  std::vector<double> m_free;
};

RefTimes referenceSimulate(const Plan& plan) { return ReferenceRun(plan).run(); }

TEST(SimulatorReference, RandomPlansMatchTheStraightforwardSimulator) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> ms(0.1, 3.0);
  int compared = 0;
  for (const ScheduleGenerator* g : scheduleGenerators()) {
    const std::string name(g->name());
    if (name == "zb-auto" || name == "custom") continue;
    for (int trial = 0; trial < 6; ++trial) {
      const int p = name == "dualpipe" ? 2 * std::uniform_int_distribution<int>(1, 2)(rng)
                                       : std::uniform_int_distribution<int>(1, 5)(rng);
      const int chunks = g->defaultChunksPerDevice();
      int m = p * std::uniform_int_distribution<int>(1, 3)(rng);
      if (g->pipelines() == 2) m += m % 2;
      const int stagesPerPipeline = p * chunks / g->pipelines();
      ModelSpec model = test::equalLayers(stagesPerPipeline * std::uniform_int_distribution<int>(1, 2)(rng), 1, 1, 1);
      for (auto& l : model.components[0].layers) {
        l.forwardMs = ms(rng);
        l.backwardInputMs = ms(rng);
        l.backwardWeightMs = ms(rng);
        l.outputBytes = std::uniform_int_distribution<std::int64_t>(0, 4)(rng) * 1'000'000;
      }
      // Two nodes with slow links on odd trials: transfers queue on links.
      const ClusterSpec cluster = test::slowCluster(p, trial % 2 == 1);
      if (!g->validate({p, m, chunks})) continue;
      auto plan = makePlan(test::request(model, cluster, name, p, m, chunks));
      ASSERT_THAT(plan, HasValue()) << name;
      const std::string what = name + " p=" + std::to_string(p) + " m=" + std::to_string(m);
      const RefTimes ref = referenceSimulate(*plan);
      ASSERT_EQ(ref.startMs.size(), plan->ops.size());
      for (std::size_t i = 0; i < plan->ops.size(); ++i) {
        ASSERT_GE(ref.startMs[i], 0.0) << what << ": the reference could not run op " << i;
        // Same operations in the same order (max, +): equal to the last bit.
        EXPECT_EQ(plan->ops[i].startMs, ref.startMs[i]) << what << " op " << i;
        EXPECT_EQ(plan->ops[i].endMs, ref.endMs[i]) << what << " op " << i;
      }
      std::vector<std::tuple<int, int, int, int, double, double>> got;
      for (const Comm& c : plan->comms)
        got.emplace_back(c.fromDevice, c.toDevice, c.microbatch, c.virtualStage, c.startMs, c.endMs);
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, ref.comms) << what;
      ++compared;
    }
  }
  EXPECT_GT(compared, 40);
}

// A stage boundary always sends (the next stage needs its input): a measured layer that states
// no output size pays the link's latency. p = 2, m = 1, F = B = W = 1 ms, latency 5 ms: F, c, F,
// then B+W, c, B+W (1F1B fuses B and W) is 2 + 5 + 4 + 5 = 16 ms; a stated size adds its bytes.
TEST(SimulatorReference, AStageWithoutAnOutputSizeStillPaysTheLatency) {
  const ClusterSpec latencyOnly = test::freeCluster(2, 0, 5000);
  const Plan unsized =
      test::mustPlan(test::request(test::equalLayers(2, 1, 1, 1, 1000, 400, 0), latencyOnly, "1f1b", 2, 1, 1));
  EXPECT_DOUBLE_EQ(unsized.metrics.makespanMs, 16.0);
  ASSERT_EQ(unsized.comms.size(), 2U);
  for (const Comm& c : unsized.comms) EXPECT_DOUBLE_EQ(c.endMs - c.startMs, 5.0);
  EXPECT_DOUBLE_EQ(stageSendMs(latencyOnly, unsized.config, 0, 1, 0), 5.0);
  EXPECT_DOUBLE_EQ(stageSendMs(latencyOnly, unsized.config, 1, 1, 0), 0.0);
  // 1 MB over 1 GB/s is 1 ms more per hop.
  const Plan sized = test::mustPlan(test::request(test::equalLayers(2, 1, 1, 1, 1000, 400, 1'000'000),
                                                  test::freeCluster(2, 1, 5000), "1f1b", 2, 1, 1));
  EXPECT_DOUBLE_EQ(sized.metrics.makespanMs, 18.0);
}

}  // namespace
}  // namespace pipestudio
