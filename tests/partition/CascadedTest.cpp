// Independent trainable backbones (cascaded models): detection, the opposed-direction layout
// of diffusionpipe, its dependencies and its makespan against the chain layouts (issue 4).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <string>

#include "PartitionFixtures.hpp"
#include "partition/Partitioners.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

using test::forEachSplit;
using test::layer;

// A frozen encoder feeding two trainable backbones with no `feeds` between them (a base UNet
// and a super-resolution UNet trained together); the second is costlier per layer and has
// unequal layers so partitions matter.
ModelSpec cascaded(int layersPerBackbone = 12) {
  ModelSpec m;
  m.name = "cascaded";
  m.samplesPerMicrobatch = 2;
  Component encoder{"encoder", false, {"base", "sr"}, {}};
  for (int i = 0; i < 3; ++i)
    encoder.layers.push_back(layer("e" + std::to_string(i), "conv", 0.4, 0, 0, 1 << 20, 1 << 20));
  Component base{"base", true, {}, {}};
  Component sr{"sr", true, {}, {}};
  for (int i = 0; i < layersPerBackbone; ++i) {
    const double f = 1.0 + 0.5 * (i % 3);
    base.layers.push_back(layer("b" + std::to_string(i), "conv", f, f, 0.8 * f, 4 << 20, 1 << 20));
    sr.layers.push_back(layer("s" + std::to_string(i), "conv", 1.6 * f, 1.6 * f, 1.3 * f, 8 << 20, 2 << 20));
  }
  m.components = {encoder, base, sr};
  return m;
}

PlanRequest request(const ModelSpec& model, int devices, int mbs, const std::string& schedule,
                    const std::string& partition, const std::string& fill) {
  auto cluster = loadCluster(std::string(PIPESTUDIO_RESOURCES) + "/clusters/a100-1x8-nvlink.json");
  EXPECT_THAT(cluster, HasValue());
  return test::partitionRequest(model, cluster ? *cluster : ClusterSpec{}, devices, mbs, schedule, partition, fill);
}

TEST(Cascaded, IndependentBackbonesAreDetectedThroughFeedsPaths) {
  ModelSpec m = cascaded();
  EXPECT_EQ(partition::dependentBackboneGroups(m).size(), 2U);
  EXPECT_TRUE(partition::independentBackbonePair(m));
  // A direct hand-off (ControlNet → UNet) joins them.
  m.components[1].feeds = {"sr"};
  EXPECT_EQ(partition::dependentBackboneGroups(m).size(), 1U);
  EXPECT_FALSE(partition::independentBackbonePair(m));
  // So does a path through a frozen component (base → frozen → sr), in either direction.
  m = cascaded();
  Component mid{"mid", false, {"base"}, {layer("m0", "conv", 0.1, 0, 0, 1, 1)}};
  m.components[2].feeds = {"mid"};
  m.components.push_back(mid);
  EXPECT_EQ(partition::dependentBackboneGroups(m).size(), 1U);
  // Three independent backbones: no pair, the chain layouts only.
  m = cascaded();
  Component third{"third", true, {}, m.components[1].layers};
  m.components.push_back(third);
  EXPECT_EQ(partition::dependentBackboneGroups(m).size(), 3U);
  EXPECT_FALSE(partition::independentBackbonePair(m));
  auto refused = partition::solveOpposedBackbones(request(m, 4, 8, "zb-v", "diffusionpipe", "none"), {});
  EXPECT_FALSE(refused.hasValue());
  // The bundled ControlNet: controlnet feeds unet, one group, no opposed candidate.
  auto controlnet = loadModel(std::string(PIPESTUDIO_RESOURCES) + "/models/controlnet.json");
  ASSERT_THAT(controlnet, HasValue());
  EXPECT_EQ(partition::dependentBackboneGroups(*controlnet).size(), 1U);
  EXPECT_FALSE(partition::independentBackbonePair(*controlnet));
}

// Σ samples of N ops per (frozen stage's component and first layer, microbatch): every frozen
// layer group runs once per microbatch, whole or as partial batches adding up.
void expectFrozenConserved(const Plan& plan) {
  std::map<std::tuple<int, int, int>, int> samples;
  std::map<std::pair<int, int>, int> groups;
  for (const VirtualStage& vs : plan.virtualStages) {
    if (!plan.model.component(vs.component).trainable) groups[{vs.component, vs.firstLayer}] = 1;
  }
  for (const Op& op : plan.ops) {
    if (op.kind != OpKind::N) continue;
    const VirtualStage& vs = plan.stage(op.virtualStage);
    samples[{vs.component, vs.firstLayer, op.microbatch}] +=
        op.samples > 0 ? op.samples : plan.model.samplesPerMicrobatch;
  }
  EXPECT_EQ(samples.size(), groups.size() * static_cast<std::size_t>(plan.config.microbatches));
  for (const auto& [key, n] : samples) EXPECT_EQ(n, plan.model.samplesPerMicrobatch);
}

TEST(Cascaded, OpposedLayoutRunsBothBackbonesOverAllDevicesIndependently) {
  for (const int devices : {2, 4}) {
    for (const char* fill : {"none", "greedy"}) {
      SCOPED_TRACE(std::to_string(devices) + " devices, fill " + fill);
      const int mbs = 2 * devices;
      auto plan =
          partition::solveOpposedBackbones(request(cascaded(), devices, mbs, "zb-v", "diffusionpipe", fill), {});
      ASSERT_THAT(plan, HasValue());
      // Base down the V (devices 0 → p−1), sr up it (p−1 → 0), each over all devices.
      std::map<int, std::vector<int>> devicesOf;
      std::map<int, int> nextLayer;
      for (const VirtualStage& vs : plan->virtualStages) {
        if (!plan->model.component(vs.component).trainable) continue;
        devicesOf[vs.component].push_back(vs.device);
        EXPECT_EQ(vs.firstLayer, nextLayer[vs.component]);
        nextLayer[vs.component] = vs.lastLayer + 1;
      }
      ASSERT_EQ(devicesOf.size(), 2U);
      for (int d = 0; d < devices; ++d) {
        EXPECT_EQ(devicesOf[1][static_cast<std::size_t>(d)], d);
        EXPECT_EQ(devicesOf[2][static_cast<std::size_t>(d)], devices - 1 - d);
      }
      EXPECT_EQ(nextLayer[1], 12);
      EXPECT_EQ(nextLayer[2], 12);
      // sr's first stage continues nothing of base; every trainable stage continues its own.
      const auto neighbours = stageNeighbours(*plan);
      for (std::size_t i = 0; i < plan->virtualStages.size(); ++i) {
        const VirtualStage& vs = plan->virtualStages[i];
        if (!plan->model.component(vs.component).trainable) continue;
        const int prev = neighbours.previous[i];
        if (vs.firstLayer == 0) {
          EXPECT_EQ(prev, -1) << "stage " << i;
        } else {
          ASSERT_GE(prev, 0) << "stage " << i;
          EXPECT_EQ(plan->stage(prev).component, vs.component);
        }
      }
      // Every microbatch runs F, B and W of every trainable stage exactly once.
      std::map<std::tuple<int, int, int>, int> count;
      for (const Op& op : plan->ops) {
        if (op.kind == OpKind::F || op.kind == OpKind::B || op.kind == OpKind::W) {
          ++count[{op.virtualStage, static_cast<int>(op.kind), op.microbatch}];
        }
      }
      EXPECT_EQ(count.size(), static_cast<std::size_t>(2 * devices * 3 * mbs));
      for (const auto& [key, n] : count) EXPECT_EQ(n, 1);
      expectFrozenConserved(*plan);
      // The plan re-times to itself (executor and `simulate` see the same iteration).
      auto again = resimulate(*plan);
      ASSERT_THAT(again, HasValue());
      EXPECT_NEAR(again->metrics.makespanMs, plan->metrics.makespanMs, 1e-6);
    }
  }
}

// The opposed order lets sr start before base reaches the V's turn: its first forward on
// device p−1 does not wait for base's last stage.
TEST(Cascaded, SecondBackboneStartsWithoutWaitingForTheFirst) {
  const int devices = 4;
  auto plan = partition::solveOpposedBackbones(request(cascaded(), devices, 8, "zb-v", "diffusionpipe", "none"), {});
  ASSERT_THAT(plan, HasValue());
  double baseLastF0End = -1;
  double srFirstF0Start = -1;
  for (const Op& op : plan->ops) {
    if (op.kind != OpKind::F || op.microbatch != 0) continue;
    if (op.virtualStage == devices - 1) baseLastF0End = op.endMs;
    if (op.virtualStage == devices) srFirstF0Start = op.startMs;
  }
  ASSERT_GE(baseLastF0End, 0);
  ASSERT_GE(srFirstF0Start, 0);
  EXPECT_LT(srFirstF0Start, baseLastF0End);
}

// The joint split of the opposed legs minimises the busiest device (A's stage d plus B's
// stage p−1−d, sends included) against brute force over all pairs of splits.
TEST(Cascaded, BalancedLegsAreOptimalAgainstBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 5.0);
  for (int trial = 0; trial < 150; ++trial) {
    const int p = std::uniform_int_distribution<int>(2, 3)(rng);
    const int la = std::uniform_int_distribution<int>(p, 7)(rng);
    const int lb = std::uniform_int_distribution<int>(p, 7)(rng);
    ModelSpec m;
    m.name = "random-cascade";
    m.samplesPerMicrobatch = 1;
    Component a{"a", true, {}, {}};
    Component b{"b", true, {}, {}};
    for (int l = 0; l < la; ++l)
      a.layers.push_back(
          layer("a" + std::to_string(l), "conv", cost(rng), cost(rng), cost(rng), 1 << 20, (1 << 20) * (1 + l % 3)));
    for (int l = 0; l < lb; ++l)
      b.layers.push_back(
          layer("b" + std::to_string(l), "conv", cost(rng), cost(rng), cost(rng), 1 << 20, (1 << 22) * (1 + l % 2)));
    m.components = {a, b};
    const PlanRequest r = request(m, p, 4, "zb-v", "diffusionpipe", "none");
    std::vector<VirtualStage> legs;
    for (int k = 0; k < 2 * p; ++k) {
      VirtualStage vs;
      vs.id = k;
      vs.device = k < p ? k : 2 * p - 1 - k;
      vs.chunk = k < p ? 0 : 1;
      vs.component = k < p ? 0 : 1;
      const int s = k % p;
      const int n = k < p ? la : lb;
      vs.firstLayer = s * n / p;
      vs.lastLayer = (s + 1) * n / p - 1;
      legs.push_back(vs);
    }
    std::vector<PartitionStage> sa(static_cast<std::size_t>(p)), sb(static_cast<std::size_t>(p));
    for (int k = 0; k < p; ++k) {
      sa[static_cast<std::size_t>(k)].device = k;
      sb[static_cast<std::size_t>(k)].device = p - 1 - k;
    }
    const PartitionProblem pa = buildPartitionProblem(r, 0, sa);
    const PartitionProblem pb = buildPartitionProblem(r, 1, sb);
    auto busiest = [&](const std::vector<int>& fa, const std::vector<int>& fb) {
      const auto ea = evaluatePartition(pa, fa);
      const auto eb = evaluatePartition(pb, fb);
      double worst = 0;
      for (int d = 0; d < p; ++d) {
        worst =
            std::max(worst, ea.stageMs[static_cast<std::size_t>(d)] + eb.stageMs[static_cast<std::size_t>(p - 1 - d)]);
      }
      return worst;
    };
    double brute = 1e300;
    forEachSplit(la, p, [&](const std::vector<int>& fa) {
      forEachSplit(lb, p, [&](const std::vector<int>& fb) { brute = std::min(brute, busiest(fa, fb)); });
    });
    auto joint = partition::balanceOpposedLegs(r, legs);
    ASSERT_TRUE(joint.has_value()) << "trial " << trial;
    std::vector<int> fa, fb;
    int nextA = 0, nextB = 0;
    for (int k = 0; k < 2 * p; ++k) {
      const VirtualStage& vs = (*joint)[static_cast<std::size_t>(k)];
      EXPECT_EQ(vs.device, legs[static_cast<std::size_t>(k)].device);
      EXPECT_LE(vs.firstLayer, vs.lastLayer);
      if (k < p) {
        EXPECT_EQ(vs.firstLayer, nextA);
        nextA = vs.lastLayer + 1;
        fa.push_back(vs.firstLayer);
      } else {
        EXPECT_EQ(vs.firstLayer, nextB);
        nextB = vs.lastLayer + 1;
        fb.push_back(vs.firstLayer);
      }
    }
    ASSERT_EQ(nextA, la);
    ASSERT_EQ(nextB, lb);
    EXPECT_NEAR(busiest(fa, fb), brute, 1e-6 * brute)
        << "trial " << trial << " p " << p << " layers " << la << "/" << lb;
  }
}

// diffusionpipe keeps the fastest plan: never slower than the opposed layout nor than any
// chain layout (dp with each of its candidate schedules).
TEST(Cascaded, DiffusionPipeIsNoSlowerThanChainOrOpposedLayouts) {
  for (const char* fill : {"none", "greedy"}) {
    SCOPED_TRACE(fill);
    const PlanRequest r = request(cascaded(), 4, 8, "1f1b", "diffusionpipe", fill);
    auto best = makePlan(r);
    ASSERT_THAT(best, HasValue());
    auto opposed = partition::solveOpposedBackbones(r, {});
    ASSERT_THAT(opposed, HasValue());
    EXPECT_LE(best->metrics.makespanMs, opposed->metrics.makespanMs + 1e-9);
    double bestChain = 1e300;
    for (const PlanConfig& c : partition::diffusionPipeCandidates(r)) {
      PlanRequest chain = r;
      chain.config = c;
      chain.config.partition = "dp";
      auto plan = makePlan(chain);
      if (!plan) continue;
      bestChain = std::min(bestChain, plan->metrics.makespanMs);
    }
    ASSERT_LT(bestChain, 1e300);
    EXPECT_LE(best->metrics.makespanMs, bestChain + 1e-9);
    // The opposed layout beats the same V (zb-v) walked as one chain.
    PlanRequest zbv = r;
    zbv.config.schedule = "zb-v";
    zbv.config.chunksPerDevice = 2;
    zbv.config.partition = "dp";
    auto chainV = makePlan(zbv);
    ASSERT_THAT(chainV, HasValue());
    EXPECT_LE(opposed->metrics.makespanMs, chainV->metrics.makespanMs + 1e-9);
  }
}

}  // namespace
}  // namespace pipestudio
