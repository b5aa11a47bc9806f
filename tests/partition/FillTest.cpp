// Bubble filling (issue 4): frozen work conserved, bounds against the baselines, examples.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "PartitionFixtures.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

ClusterSpec testCluster(int gpus) {
  ClusterSpec c;
  c.name = "test";
  c.gpu = {"test-gpu", 100, 80, 0.5};
  c.nodes = {NodeSpec{"node0", gpus, std::nullopt, std::nullopt}};
  c.intraNode = {100, 5};
  c.interNode = {10, 10};
  return c;
}

Layer measured(const std::string& name, double f, double b, double w, std::int64_t act, std::int64_t params) {
  Layer l;
  l.name = name;
  l.forwardMs = f;
  l.backwardInputMs = b;
  l.backwardWeightMs = w;
  l.activationBytes = act;
  l.parameterBytes = params;
  l.outputBytes = act / 4;
  return l;
}

// A backbone of `layers` equal layers plus two frozen encoders of `frozenMs` forward each
// (per microbatch, spread over their layers).
ModelSpec diffusionLike(int layers, double frozenMs, int samples, std::mt19937* rng = nullptr) {
  ModelSpec m;
  m.name = "diffusion-like";
  m.samplesPerMicrobatch = samples;
  Component text{"text", false, {"backbone"}, {}};
  Component vae{"vae", false, {"backbone"}, {}};
  for (int i = 0; i < 3; ++i)
    text.layers.push_back(measured("t" + std::to_string(i), frozenMs / 3, 0, 0, 1 << 20, 1 << 20));
  for (int i = 0; i < 5; ++i)
    vae.layers.push_back(measured("v" + std::to_string(i), frozenMs / 5, 0, 0, 1 << 22, 1 << 20));
  Component bb{"backbone", true, {}, {}};
  for (int i = 0; i < layers; ++i) {
    const double jitter = rng ? std::uniform_real_distribution<double>(0.7, 1.3)(*rng) : 1.0;
    bb.layers.push_back(measured("l" + std::to_string(i), 1.0 * jitter, 1.0 * jitter, 0.8 * jitter, 1 << 24, 1 << 22));
  }
  m.components = {text, vae, bb};
  return m;
}

ModelSpec backboneOnly(ModelSpec m) {
  std::vector<Component> keep;
  for (auto& c : m.components) {
    if (c.trainable) keep.push_back(c);
  }
  m.components = keep;
  return m;
}

PlanRequest request(const ModelSpec& model, int devices, int mbs, const std::string& schedule, const std::string& fill,
                    const std::string& partition = "uniform") {
  return test::partitionRequest(model, testCluster(devices), devices, mbs, schedule, partition, fill);
}

// Σ samples of N ops per (component, first layer of its stage, microbatch).
std::map<std::tuple<int, int, int>, int> frozenSamples(const Plan& plan) {
  std::map<std::tuple<int, int, int>, int> out;
  for (const Op& op : plan.ops) {
    if (op.kind != OpKind::N) continue;
    const VirtualStage& vs = plan.stage(op.virtualStage);
    out[{vs.component, vs.firstLayer, op.microbatch}] +=
        op.samples > 0 ? op.samples : static_cast<int>(plan.model.samplesPerMicrobatch);
  }
  return out;
}

void expectConserved(const Plan& plan) {
  const auto got = frozenSamples(plan);
  // Every layer of every frozen component is covered once per microbatch: groups partition
  // the layers, so Σ over groups of layer counts must equal the component's layers.
  std::map<int, int> layersCovered;
  std::map<std::pair<int, int>, bool> seen;
  for (const VirtualStage& vs : plan.virtualStages) {
    const Component& c = plan.model.component(vs.component);
    if (c.trainable) continue;
    if (seen[{vs.component, vs.firstLayer}]) continue;
    seen[{vs.component, vs.firstLayer}] = true;
    layersCovered[vs.component] += vs.lastLayer - vs.firstLayer + 1;
  }
  for (int c : plan.model.frozenComponents()) {
    EXPECT_EQ(layersCovered[c], static_cast<int>(plan.model.component(c).layers.size())) << "component " << c;
  }
  for (const auto& [key, samples] : got) {
    EXPECT_EQ(samples, plan.model.samplesPerMicrobatch)
        << "component " << std::get<0>(key) << " group@" << std::get<1>(key) << " microbatch " << std::get<2>(key);
  }
  // Every (component, group, microbatch) appears.
  std::size_t groups = 0;
  for (const auto& [k, v] : seen) groups += v ? 1 : 0;
  EXPECT_EQ(got.size(), groups * static_cast<std::size_t>(plan.config.microbatches));
}

TEST(Fill, ConservesFrozenWorkAndRespectsBounds) {
  std::mt19937 rng(42);
  const std::vector<std::string> schedules = {"1f1b", "gpipe", "zb-h1", "interleaved-1f1b", "zb-v"};
  int trials = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const std::string& schedule = schedules[static_cast<std::size_t>(trial) % schedules.size()];
    const int devices = std::uniform_int_distribution<int>(2, 4)(rng);
    const int mbs = devices * std::uniform_int_distribution<int>(1, 3)(rng);
    const int samples = std::uniform_int_distribution<int>(1, 6)(rng);
    const double frozenMs = std::uniform_real_distribution<double>(0.5, 12.0)(rng);
    const ModelSpec model = diffusionLike(4 * devices, frozenMs, samples, &rng);
    auto greedy = makePlan(request(model, devices, mbs, schedule, "greedy"));
    ASSERT_THAT(greedy, HasValue()) << schedule;
    auto none = makePlan(request(model, devices, mbs, schedule, "none"));
    ASSERT_THAT(none, HasValue());
    auto bare = makePlan(request(backboneOnly(model), devices, mbs, schedule, "greedy"));
    ASSERT_THAT(bare, HasValue());
    expectConserved(*greedy);
    expectConserved(*none);
    const double eps = 1e-6;
    EXPECT_GE(greedy->metrics.makespanMs, bare->metrics.makespanMs - eps) << schedule << " trial " << trial;
    EXPECT_LE(greedy->metrics.makespanMs, none->metrics.makespanMs + eps) << schedule << " trial " << trial;
    // The plan re-times to itself (the executor and `simulate` see the same iteration).
    auto again = resimulate(*greedy);
    ASSERT_THAT(again, HasValue());
    EXPECT_NEAR(again->metrics.makespanMs, greedy->metrics.makespanMs, 1e-6);
    ++trials;
  }
  EXPECT_EQ(trials, 24);
}

TEST(Fill, SmallFrozenWorkHidesInBubbles) {
  // 1F1B, 4 devices, 8 microbatches: each device idles (p−1)·(F+B+W) ≈ 3 × 2.8 ms·layers; the
  // frozen work (8 microbatches × 2 × 0.6 ms) is far below that.
  const ModelSpec model = diffusionLike(16, 0.6, 4);
  auto greedy = makePlan(request(model, 4, 8, "1f1b", "greedy"));
  ASSERT_THAT(greedy, HasValue());
  auto bare = makePlan(request(backboneOnly(model), 4, 8, "1f1b", "none"));
  ASSERT_TRUE(bare.hasValue());
  EXPECT_LE(greedy->metrics.makespanMs, 1.02 * bare->metrics.makespanMs);
  auto none = makePlan(request(model, 4, 8, "1f1b", "none"));
  ASSERT_TRUE(none.hasValue());
  EXPECT_GT(none->metrics.makespanMs, greedy->metrics.makespanMs);
  expectConserved(*greedy);
}

TEST(Fill, LargeFrozenWorkOverflowsButIsNeverDropped) {
  const ModelSpec model = diffusionLike(8, 40.0, 3);
  auto filled = makeFilledPlan(request(model, 2, 4, "1f1b", "greedy"));
  ASSERT_THAT(filled, HasValue());
  expectConserved(filled->plan);
  const FillReport& r = filled->report;
  EXPECT_GT(r.iterationMs, r.backboneOnlyMs);
  EXPECT_LE(r.iterationMs, r.noFillMs + 1e-6);
  double overflow = 0;
  for (const auto& d : r.devices) overflow += d.overflowMs;
  EXPECT_GT(overflow, 0.0);
  EXPECT_EQ(r.frozenSamples, 2 * 4 * 3);  // two components × 4 microbatches × 3 samples
}

TEST(Fill, ReportHasPerDeviceNumbers) {
  const ModelSpec model = diffusionLike(16, 2.0, 4);
  auto filled = makeFilledPlan(request(model, 4, 8, "1f1b", "greedy"));
  ASSERT_THAT(filled, HasValue());
  const FillReport& r = filled->report;
  ASSERT_EQ(r.devices.size(), 4u);
  double filledMs = 0;
  for (const auto& d : r.devices) {
    EXPECT_GE(d.bubbleMs, 0.0);
    EXPECT_LE(d.filledMs, d.bubbleMs + 1e-6);
    filledMs += d.filledMs + d.overflowMs;
  }
  EXPECT_NEAR(filledMs, r.frozenWorkMs, 1e-6);
  EXPECT_GE(r.speedupOverNoFill, 1.0);
  ASSERT_TRUE(r.dataParallelMs.has_value()) << r.dataParallelNote;
  EXPECT_GT(r.speedupOverDataParallel, 0.0);
}

TEST(Fill, UnknownModeIsAnError) {
  auto r = makePlan(request(diffusionLike(8, 1.0, 2), 2, 4, "1f1b", "magic"));
  EXPECT_THAT(r, HasError("greedy"));
}

TEST(Fill, DataParallelRefusesWhatDoesNotFit) {
  ModelSpec model = diffusionLike(8, 1.0, 2);
  for (auto& l : model.components.back().layers) l.parameterBytes = std::int64_t{20} << 30;  // 10G params/layer
  auto dp = dataParallelIterationMs(model, testCluster(4), 4, 8);
  EXPECT_THAT(dp, HasError("replica needs"));
}

class Examples : public ::testing::TestWithParam<std::string> {};

TEST_P(Examples, DiffusionExamplesSolve) {
  for (const std::string partition : {"dp", "diffusionpipe"}) {
    PlanRequest r = test::bundledRequest(GetParam(), "a100-1x8-nvlink", "1f1b", 8, 16);
    r.config.partition = partition;
    r.config.fill = "greedy";
    auto filled = makeFilledPlan(r);
    ASSERT_THAT(filled, HasValue()) << partition;
    expectConserved(filled->plan);
    EXPECT_GE(filled->report.speedupOverNoFill, 1.0);
    EXPECT_GE(filled->plan.metrics.makespanMs, filled->report.backboneOnlyMs - 1e-6);
  }
}
INSTANTIATE_TEST_SUITE_P(Fill, Examples, ::testing::Values("stable-diffusion-2.1", "controlnet"));

}  // namespace
}  // namespace pipestudio
