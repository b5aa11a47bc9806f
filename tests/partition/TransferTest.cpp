// Frozen outputs reach the devices that consume them, and the dependencies a plan implies
// (frozen transfers, vocabulary S/T) survive save → load → resimulate (issue 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "PartitionFixtures.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Vocab.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

constexpr double kEps = 1e-6;

// Two nodes of two GPUs with slow links, so transfers take as long as layers.
ClusterSpec slowCluster(int gpus) {
  ClusterSpec c;
  c.name = "slow";
  c.gpu = {"test-gpu", 100, 80, 0.5};
  c.nodes = {NodeSpec{"node0", (gpus + 1) / 2, std::nullopt, std::nullopt},
             NodeSpec{"node1", gpus / 2, std::nullopt, std::nullopt}};
  c.intraNode = {4, 5};
  c.interNode = {1, 20};
  return c;
}

using test::layer;

// A text encoder (token sequence: read by the backbone's attention stages) and a VAE
// (latents: read by the backbone's first stage); attention layers only in the first half of
// the backbone, so the text encoder's consumers are a strict subset of the stages.
ModelSpec conditionedModel(int layers, double frozenMs, int samples, std::mt19937& rng) {
  ModelSpec m;
  m.name = "conditioned";
  m.samplesPerMicrobatch = samples;
  Component text{"text", false, {"backbone"}, {}};
  Component vae{"vae", false, {"backbone"}, {}};
  for (int i = 0; i < 3; ++i) {
    text.layers.push_back(layer("t" + std::to_string(i), "transformer", frozenMs / 3, 0, 0, 1 << 20, 1 << 20));
  }
  for (int i = 0; i < 4; ++i)
    vae.layers.push_back(layer("v" + std::to_string(i), "conv", frozenMs / 4, 0, 0, 1 << 22, 3 << 20));
  Component bb{"backbone", true, {}, {}};
  for (int i = 0; i < layers; ++i) {
    const double j = std::uniform_real_distribution<double>(0.7, 1.3)(rng);
    const bool attention = i < layers / 2 && i % 2 == 1;
    bb.layers.push_back(
        layer("l" + std::to_string(i), attention ? "attention" : "conv", j, j, 0.8 * j, 1 << 24, 1 << 21));
  }
  m.components = {text, vae, bb};
  return m;
}

PlanRequest request(const ModelSpec& model, int devices, int mbs, const std::string& schedule,
                    const std::string& fill) {
  PlanRequest r;
  r.model = model;
  r.cluster = slowCluster(devices);
  r.config.schedule = schedule;
  r.config.devices = devices;
  r.config.microbatches = mbs;
  r.config.fill = fill;
  if (const auto* g = findScheduleGenerator(schedule)) r.config.chunksPerDevice = g->defaultChunksPerDevice();
  return r;
}

Plan saveAndLoad(const Plan& plan) {
  const std::string text = planToJson(plan).dump();
  auto doc = parseJson(text, "plan.json");
  EXPECT_THAT(doc, HasValue());
  JsonReader reader(*doc);
  auto loaded = readPlan(reader, reader.root());
  EXPECT_TRUE(loaded.has_value()) << (reader.errors().empty() ? std::string() : reader.errors().front());
  return loaded ? *loaded : Plan{};
}

void expectSameTiming(const Plan& a, const Plan& b) {
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_NEAR(a.ops[i].startMs, b.ops[i].startMs, kEps) << "op " << i;
    EXPECT_NEAR(a.ops[i].endMs, b.ops[i].endMs, kEps) << "op " << i;
  }
  ASSERT_EQ(a.comms.size(), b.comms.size());
  for (std::size_t i = 0; i < a.comms.size(); ++i) {
    EXPECT_EQ(a.comms[i].kind, b.comms[i].kind) << "comm " << i;
    EXPECT_NEAR(a.comms[i].endMs, b.comms[i].endMs, kEps) << "comm " << i;
  }
  EXPECT_NEAR(a.metrics.makespanMs, b.metrics.makespanMs, kEps);
}

// Every (frozen component, microbatch) output travels once from each device that computed
// its last layer group to each other device with a consuming stage, with its share of the
// output bytes, and arrives before the consumer's F: in this iteration (fill none) or in the
// next one (cross-iteration overlap).
void expectTransfers(const Plan& plan) {
  const bool sameIteration = plan.config.fill == "none";
  const auto samplesPerMb = static_cast<double>(plan.model.samplesPerMicrobatch);
  std::map<std::tuple<int, int, int>, double> produced;  // (component, microbatch, device) → samples
  std::map<std::tuple<int, int, int>, double> producedEnd;
  std::map<std::pair<int, int>, double> fStart;  // (stage, microbatch)
  for (const Op& op : plan.ops) {
    const VirtualStage& vs = plan.stage(op.virtualStage);
    const Component& c = plan.model.component(vs.component);
    if (op.kind == OpKind::F) fStart[{op.virtualStage, op.microbatch}] = op.startMs;
    if (op.kind != OpKind::N || vs.lastLayer + 1 != static_cast<int>(c.layers.size())) continue;
    produced[{vs.component, op.microbatch, op.device}] += op.samples > 0 ? op.samples : samplesPerMb;
    auto& end = producedEnd[{vs.component, op.microbatch, op.device}];
    end = std::max(end, op.endMs);
  }
  ASSERT_FALSE(produced.empty());
  std::map<std::tuple<int, int, int, int>, const Comm*> comms;  // (component, microbatch, from, to)
  for (const Comm& cm : plan.comms) {
    if (cm.kind != OpKind::N) continue;
    const int comp = plan.stage(cm.virtualStage).component;
    EXPECT_FALSE(plan.model.component(comp).trainable);
    const auto key = std::make_tuple(comp, cm.microbatch, cm.fromDevice, cm.toDevice);
    EXPECT_EQ(comms.count(key), 0u) << "duplicate transfer";
    comms[key] = &cm;
  }
  std::size_t expected = 0;
  for (const auto& [key, samples] : produced) {
    const auto [comp, mb, pd] = key;
    const std::vector<int> stages = frozenConsumerStagesOf(plan, comp);
    ASSERT_FALSE(stages.empty());
    const std::int64_t bytes = frozenOutputBytes(plan.model, plan.cluster, comp);
    // Devices running a consuming stage for this microbatch (with two pipelines a
    // microbatch passes through only one of them).
    std::set<int> consumerDevices;
    for (int s : stages) {
      if (fStart.count({s, mb})) consumerDevices.insert(plan.stage(s).device);
    }
    EXPECT_FALSE(consumerDevices.empty());
    for (int dc : consumerDevices) {
      // The data is on the consumer device no later than `ready`.
      double ready = producedEnd[key];
      if (dc != pd) {
        ++expected;
        auto it = comms.find({comp, mb, pd, dc});
        ASSERT_NE(it, comms.end()) << "no transfer of component " << comp << " microbatch " << mb << " from device "
                                   << pd << " to device " << dc;
        const Comm& cm = *it->second;
        EXPECT_EQ(cm.bytes,
                  static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * samples / samplesPerMb)));
        EXPECT_GE(cm.startMs, producedEnd[key] - kEps);
        EXPECT_NEAR(cm.endMs - cm.startMs, plan.cluster.transferMs(pd, dc, static_cast<double>(cm.bytes)), 1e-9);
        ready = cm.endMs;
      }
      for (int s : stages) {
        if (plan.stage(s).device != dc || !fStart.count({s, mb})) continue;
        const double use = fStart.at({s, mb}) + (sameIteration ? 0.0 : plan.metrics.makespanMs);
        EXPECT_GE(use, ready - kEps) << plan.config.fill << ": stage " << s << " microbatch " << mb
                                     << " reads component " << comp << " before it arrives";
      }
    }
  }
  EXPECT_EQ(comms.size(), expected);
}

TEST(Transfers, FrozenOutputsReachTheirConsumers) {
  std::mt19937 rng(7);
  const std::vector<std::string> schedules = {"1f1b", "zb-h1", "gpipe", "zb-v", "dualpipe"};
  for (int trial = 0; trial < 20; ++trial) {
    const std::string& schedule = schedules[static_cast<std::size_t>(trial) % schedules.size()];
    int devices = std::uniform_int_distribution<int>(2, 4)(rng);
    if (schedule == "dualpipe" && devices % 2 != 0) ++devices;  // pairs devices d and p−1−d
    const int mbs = devices * std::uniform_int_distribution<int>(1, 3)(rng);
    const int samples = std::uniform_int_distribution<int>(1, 5)(rng);
    const double frozenMs = std::uniform_real_distribution<double>(0.5, 10.0)(rng);
    const ModelSpec model = conditionedModel(4 * devices, frozenMs, samples, rng);
    for (const char* fill : {"none", "greedy"}) {
      SCOPED_TRACE(schedule + " " + fill + " trial " + std::to_string(trial));
      auto plan = makePlan(request(model, devices, mbs, schedule, fill));
      ASSERT_THAT(plan, HasValue());
      expectTransfers(*plan);
      if (std::string(fill) == "greedy") {
        EXPECT_LE(frozenTransfers(*plan).latenessMs, kEps);
      }
      // `simulate` of the saved plan derives the same dependencies and transfers.
      auto again = resimulate(saveAndLoad(*plan));
      ASSERT_THAT(again, HasValue());
      expectSameTiming(*plan, *again);
    }
  }
}

TEST(Transfers, ConsumerStagesFollowTheKindOfOutput) {
  std::mt19937 rng(3);
  const ModelSpec model = conditionedModel(16, 2.0, 2, rng);
  auto plan = makePlan(request(model, 4, 4, "1f1b", "none"));
  ASSERT_THAT(plan, HasValue());
  const int text = plan->model.componentIndex("text");
  const int vae = plan->model.componentIndex("vae");
  const int bb = plan->model.componentIndex("backbone");
  // Uniform 4 × 4 layers: attention layers 1, 3, 5, 7 sit in stages 0 and 1.
  EXPECT_EQ(frozenConsumerStages(*plan, text, bb), (std::vector<int>{0, 1}));
  EXPECT_EQ(frozenConsumerStages(*plan, vae, bb), (std::vector<int>{0}));
  EXPECT_EQ(frozenOutputBytes(plan->model, plan->cluster, vae), 3 << 20);
}

TEST(Transfers, GreedyPrefersTheConsumerWhenTransfersAreExpensive) {
  // One tiny frozen component with a huge output: computing it anywhere but on the consumer
  // costs a long transfer, so every microbatch goes to the consumer's device.
  ModelSpec m;
  m.name = "big-output";
  m.samplesPerMicrobatch = 1;
  Component enc{"enc", false, {"backbone"}, {layer("e", "conv", 0.1, 0, 0, 1 << 20, std::int64_t{1} << 32)}};
  Component bb{"backbone", true, {}, {}};
  for (int i = 0; i < 8; ++i) bb.layers.push_back(layer("l" + std::to_string(i), "conv", 1, 1, 1, 1 << 24, 1 << 20));
  m.components = {enc, bb};
  for (const char* fill : {"none", "greedy"}) {
    auto plan = makePlan(request(m, 4, 8, "1f1b", fill));
    ASSERT_THAT(plan, HasValue());
    for (const Op& op : plan->ops) {
      if (op.kind == OpKind::N) {
        EXPECT_EQ(op.device, plan->virtualStages[0].device) << fill;
      }
    }
    expectTransfers(*plan);
  }
}

TEST(Transfers, EditedPlanThatReadsBeforeComputingIsADeadlock) {
  std::mt19937 rng(5);
  auto plan = makePlan(request(conditionedModel(8, 2.0, 1, rng), 2, 2, "1f1b", "none"));
  ASSERT_THAT(plan, HasValue());
  // Move every N op of device 0 to the end of its order: its own F ops now wait for them.
  std::vector<Op> head, tail;
  for (const Op& op : plan->ops) (op.device == 0 && op.kind == OpKind::N ? tail : head).push_back(op);
  ASSERT_FALSE(tail.empty());
  std::vector<Op> reordered;
  for (const Op& op : head) {
    if (op.device == 0) reordered.push_back(op);
  }
  reordered.insert(reordered.end(), tail.begin(), tail.end());
  for (const Op& op : head) {
    if (op.device != 0) reordered.push_back(op);
  }
  plan->ops = reordered;
  auto again = resimulate(*plan);
  EXPECT_THAT(again, HasError("deadlock"));
}

TEST(Transfers, VocabularyPlanResimulatesToItself) {
  for (const char* schedule : {"1f1b", "v-half", "zb-h1"}) {
    PlanRequest r = test::bundledRequest("gpt3-1.3b", "a100-1x8-nvlink", schedule, 4, 8);
    if (const auto* g = findScheduleGenerator(schedule)) r.config.chunksPerDevice = g->defaultChunksPerDevice();
    if (r.config.chunksPerDevice > 1) r.config.partition = "balanced";  // uniform may not split evenly
    auto plan = makeVocabParallelPlan(r);
    ASSERT_THAT(plan, HasValue()) << schedule;
    const Plan loaded = saveAndLoad(*plan);
    // The S/T edges come back from the plan alone.
    std::vector<std::vector<OrderedOp>> lanes(4);
    for (const Op& op : loaded.ops)
      lanes[static_cast<std::size_t>(op.device)].push_back({op.virtualStage, op.kind, op.microbatch, op.samples});
    const auto deps = vocabDependencies(loaded, lanes);
    EXPECT_EQ(deps.size(), 8u * 4u * (1u + 4u + 1u)) << schedule;
    auto again = resimulate(loaded);
    ASSERT_THAT(again, HasValue()) << schedule;
    expectSameTiming(*plan, *again);
  }
}

TEST(Transfers, PlansWithoutFrozenOrVocabularyDeriveNothing) {
  std::mt19937 rng(1);
  ModelSpec m = conditionedModel(8, 1.0, 1, rng);
  m.components = {m.components[2]};
  auto plan = makePlan(request(m, 2, 4, "1f1b", "greedy"));
  ASSERT_THAT(plan, HasValue());
  std::vector<std::vector<OrderedOp>> lanes(2);
  for (const Op& op : plan->ops)
    lanes[static_cast<std::size_t>(op.device)].push_back({op.virtualStage, op.kind, op.microbatch, op.samples});
  EXPECT_TRUE(derivedDependencies(*plan, lanes).empty());
  for (const Comm& c : plan->comms) EXPECT_NE(c.kind, OpKind::N);
}

}  // namespace
}  // namespace pipestudio

namespace pipestudio {
namespace {

// Two trainable backbones of equal layer counts, the second 4× costlier per layer: uniform
// gives them the same number of stages; dp searches the shares and gives the second more.
TEST(BackboneShares, CostlierBackboneGetsMoreStages) {
  ModelSpec m;
  m.name = "two-backbones";
  m.samplesPerMicrobatch = 1;
  Component a{"control", true, {"main"}, {}};
  Component b{"main", true, {}, {}};
  for (int i = 0; i < 16; ++i) {
    a.layers.push_back(layer("a" + std::to_string(i), "conv", 0.25, 0.25, 0.2, 1 << 20, 1 << 20));
    b.layers.push_back(layer("b" + std::to_string(i), "conv", 1.0, 1.0, 0.8, 1 << 20, 1 << 20));
  }
  m.components = {a, b};
  PlanRequest r = request(m, 8, 16, "1f1b", "none");
  r.config.partition = "uniform";
  auto uniform = makePlan(r);
  ASSERT_THAT(uniform, HasValue());
  r.config.partition = "dp";
  auto dp = makePlan(r);
  ASSERT_THAT(dp, HasValue());
  auto stagesOf = [](const Plan& plan, int component) {
    int n = 0;
    for (const VirtualStage& vs : plan.virtualStages) n += vs.component == component ? 1 : 0;
    return n;
  };
  EXPECT_EQ(stagesOf(*uniform, 0), stagesOf(*uniform, 1));
  EXPECT_GT(stagesOf(*dp, 1), stagesOf(*dp, 0));
  EXPECT_LT(dp->metrics.makespanMs, uniform->metrics.makespanMs);
  // Each component's stages are consecutive in the chain and cover its layers exactly once.
  for (int c = 0; c < 2; ++c) {
    int next = 0;
    for (const VirtualStage& vs : dp->virtualStages) {
      if (vs.component != c) continue;
      EXPECT_EQ(vs.firstLayer, next);
      next = vs.lastLayer + 1;
    }
    EXPECT_EQ(next, 16);
  }
}

// The bundled diffusion examples (cascaded-sd: two independent backbones): every frozen
// output reaches its consumers in time, and the saved plan re-times to itself.
TEST(Transfers, DiffusionExamples) {
  for (const char* name : {"stable-diffusion-2.1", "controlnet", "cascaded-sd"}) {
    for (const char* fill : {"none", "greedy"}) {
      SCOPED_TRACE(std::string(name) + " " + fill);
      const Plan plan = test::diffusionPlan(name, fill, 8, 16);
      ASSERT_FALSE(plan.ops.empty());
      expectTransfers(plan);
      if (std::string(fill) == "greedy") {
        EXPECT_LE(frozenTransfers(plan).latenessMs, kEps);
      }
      auto again = resimulate(saveAndLoad(plan));
      ASSERT_THAT(again, HasValue());
      expectSameTiming(plan, *again);
    }
  }
}

// Edited vocabulary plans: the derived S/T edges never crash the resimulation; a T moved
// before the S it needs deadlocks with a message, and a pass on an unknown stage or
// microbatch is reported by the simulator.
TEST(Transfers, EditedVocabularyPlansAreReportedNotCrashed) {
  const PlanRequest r = test::bundledRequest("gpt3-1.3b", "a100-1x8-nvlink", "1f1b", 2, 2);
  auto plan = makeVocabParallelPlan(r);
  ASSERT_THAT(plan, HasValue());
  {
    // Move device 1's T of its first S's microbatch right before that S (the passes sit
    // apart in the steady state, other work between them).
    Plan edited = *plan;
    bool moved = false;
    for (std::size_t i = 0; i < edited.ops.size() && !moved; ++i) {
      if (edited.ops[i].device != 1 || edited.ops[i].kind != OpKind::S) continue;
      for (std::size_t j = i + 1; j < edited.ops.size(); ++j) {
        if (edited.ops[j].device == 1 && edited.ops[j].kind == OpKind::T &&
            edited.ops[j].microbatch == edited.ops[i].microbatch) {
          std::rotate(edited.ops.begin() + static_cast<std::ptrdiff_t>(i),
                      edited.ops.begin() + static_cast<std::ptrdiff_t>(j),
                      edited.ops.begin() + static_cast<std::ptrdiff_t>(j) + 1);
          moved = true;
          break;
        }
      }
    }
    ASSERT_TRUE(moved);
    auto again = resimulate(edited);
    EXPECT_THAT(again, HasError("deadlock"));
  }
  for (int field = 0; field < 3; ++field) {
    Plan edited = *plan;
    for (Op& op : edited.ops) {
      if (op.kind != OpKind::S) continue;
      if (field == 0) op.microbatch = 99;
      if (field == 1) op.virtualStage = 999;
      if (field == 2) op.virtualStage = 0;  // an S on a backbone stage
      break;
    }
    auto again = resimulate(edited);
    if (field < 2) {
      ASSERT_FALSE(again.hasValue()) << field;
      EXPECT_FALSE(again.message().empty());
    }
  }
}

}  // namespace
}  // namespace pipestudio
