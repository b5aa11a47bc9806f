// Hybrid parallelism in the planner (issue 13): requests resolved and refused with the flag's
// name, the bundled modern models planned as NVIDIA's recipes train them, the training step
// around the pipeline (gradient synchronisation, optimizer, steady state), the configurator.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Configurator.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

using test::bundledRequest;

// Issue 13: Llama-2-70B must plan on the bundled 4×8 H100 cluster as NVIDIA trains it (TP 8 ×
// PP 4, FlashAttention, the distributed optimizer, recomputation).
TEST(HybridPlan, Llama2SeventyBPlansOnFourH100Nodes) {
  PlanRequest r = bundledRequest("llama2-70b", "h100-4x8-ib");
  r.config.schedule = "1f1b";
  r.config.devices = 4;
  r.config.parallel.tensor = 8;
  r.config.parallel.sequenceParallel = true;
  r.config.parallel.recompute = Recompute::Selective;
  r.config.parallel.zeroStage = 1;
  r.config.globalBatch = 128;
  r.config.microBatchSize = 1;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->config.microbatches, 128);
  EXPECT_EQ(plan->config.totalGpus(), 32);
  const Metrics& m = plan->metrics;
  EXPECT_GT(m.mfu, 0.2);
  EXPECT_LT(m.mfu, 0.8);
  EXPECT_GT(m.tokensPerS, 0);
  EXPECT_NEAR(m.tokensPerS, m.throughputSamplesPerS * 4096, 1e-6 * m.tokensPerS);
  for (const DeviceMetrics& d : m.devices) {
    const MemoryBreakdown& b = d.memory;
    std::int64_t allocated = 0;
    for (const MemoryPart& part : memoryParts()) allocated += part.keptBack ? 0 : b.*part.bytes;
    EXPECT_EQ(d.peakMemoryBytes, allocated);
    EXPECT_GT(b.userbufferBytes, 0);  // TP 8 with its communication overlap
    EXPECT_GT(b.workspaceBytes, 0);
    EXPECT_LE(d.peakMemoryBytes + b.marginBytes(), r.cluster.gpu.memoryBytes());
  }
}

// Without tensor parallelism the same model cannot fit 4 pipeline ranks: the message says what
// is over and by how much.
TEST(HybridPlan, OutOfMemorySaysWhichPartIsOver) {
  PlanRequest r = bundledRequest("llama2-70b", "h100-4x8-ib", "1f1b", 4, 8);
  auto plan = makePlan(r);
  EXPECT_THAT(plan, HasError("over by"));
  EXPECT_THAT(plan, HasError("largest part"));
}

TEST(HybridPlan, DegreesThatDoNotDivideAreRefusedWithTheFlag) {
  PlanRequest r = bundledRequest("llama2-70b", "h100-4x8-ib", "1f1b", 2, 4);
  r.config.parallel.tensor = 3;
  auto bad = resolveRequest(r);
  EXPECT_THAT(bad, HasError("--tp 3"));
  EXPECT_THAT(bad, HasError("64 attention heads"));

  r.config.parallel.tensor = 16;  // divides 64 heads, not 8 key/value heads
  bad = resolveRequest(r);
  EXPECT_THAT(bad, HasError("key/value heads"));

  r.config.parallel.tensor = 1;
  r.config.parallel.expert = 2;
  r.config.parallel.data = 2;
  bad = resolveRequest(r);
  EXPECT_THAT(bad, HasError("--ep 2 needs a mixture-of-experts model"));

  r.config.parallel.expert = 1;
  r.config.parallel.context = 3;
  bad = resolveRequest(r);
  EXPECT_THAT(bad, HasError("--cp 3"));

  r.config.parallel.context = 1;
  r.config.globalBatch = 7;  // not a multiple of B·D = 2
  bad = resolveRequest(r);
  EXPECT_THAT(bad, HasError("--global-batch 7"));

  r.config.globalBatch.reset();
  r.config.parallel.tensor = 8;
  r.config.devices = 4;
  r.config.parallel.data = 2;  // 64 GPUs on a 32-GPU cluster
  bad = resolveRequest(r);
  EXPECT_THAT(bad, HasError("= 64 GPUs"));
}

TEST(HybridPlan, ExpertParallelNeedsADivisor) {
  PlanRequest r = bundledRequest("mixtral-8x7b", "h100-8x8-ib", "1f1b", 2, 4);
  r.config.parallel.data = 6;
  r.config.parallel.expert = 3;  // divides D, not the 8 experts
  auto bad = resolveRequest(r);
  EXPECT_THAT(bad, HasError("8 experts"));
}

// The MoE block of a bundled model (its first layer with experts).
const Layer* firstMoeLayer(const ModelSpec& m) {
  for (const Component& c : m.components) {
    for (const Layer& l : c.layers) {
      if (l.transformer && l.transformer->isMoe() && l.kind == "transformer") return &l;
    }
  }
  return nullptr;
}

// Issue 43: expert layouts at scale on the bundled models. DeepSeek-V3 with EP 64 on GB200 NVL72
// racks: the expert group stays inside a rack's NVLink domain (72 GPUs over 18 trays), so its
// dispatch is an NVLink all-to-all; EP 128 spans two racks and takes the NICs, and the same layer
// spends longer in its all-to-alls. The plan of the recipe (TP 1, PP 4 × VP 4, EP 64 over DP 64)
// fits the GB200's memory.
TEST(HybridPlan, ExpertParallelismOverAnNvl72Rack) {
  PlanRequest r = bundledRequest("deepseek-v3-moe", "gb200-nvl72-4racks");
  r.config.parallel.data = 64;
  r.config.parallel.expert = 64;
  r.config.parallel.moeFlexDispatcher = true;
  r.config.parallel.moeFlexBackend = FlexBackend::HybridEp;
  const CollectiveLinks rack = collectiveLinks(r.cluster, r.config.parallel);
  EXPECT_FALSE(rack.expert.crossesNodes);
  EXPECT_DOUBLE_EQ(rack.expert.bandwidthGBps, r.cluster.intraNode.bandwidthGBps);
  const Layer* moe = firstMoeLayer(r.model);
  ASSERT_NE(moe, nullptr);
  const double inRack = layerCosts(*moe, costContext(r.cluster, r.config, 1, 0, true)).forwardCommMs;
  PlanConfig wider = r.config;
  wider.parallel.data = 128;
  wider.parallel.expert = 128;
  EXPECT_TRUE(collectiveLinks(r.cluster, wider.parallel).expert.crossesNodes);
  EXPECT_GT(layerCosts(*moe, costContext(r.cluster, wider, 1, 0, true)).forwardCommMs, 2 * inRack);

  r.config.schedule = "interleaved-1f1b";
  r.config.devices = 4;
  r.config.chunksPerDevice = 4;
  r.config.partition = "megatron";
  r.config.precision = Precision::Mxfp8;
  r.config.parallel.zeroStage = 1;
  r.config.parallel.moeA2aOverlap = true;
  r.config.globalBatch = 256;
  r.config.microBatchSize = 1;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->config.parallel.expertData(), 1);
}

// EP beyond DP (Qwen3-235B-A22B's H100 recipe: TP 2 × DP 16 GPUs per pipeline rank hold EP 32,
// every expert once) and ETP apart from TP (GPT-OSS-120B with TP 2: ETP 1 keeps each expert whole
// on its GPU, twice the expert weights of ETP 2, and needs no gather of the routed rows over ETP).
TEST(HybridPlan, ExpertParallelismBeyondDataAndExpertTensorApartFromTensor) {
  PlanRequest r = bundledRequest("qwen3-235b-a22b", "h100-2048x8-ib");
  r.config.schedule = "interleaved-1f1b";
  r.config.devices = 8;
  r.config.chunksPerDevice = 4;
  r.config.partition = "megatron";
  r.config.parallel.tensor = 2;
  r.config.parallel.sequenceParallel = true;
  r.config.parallel.data = 16;
  r.config.parallel.expert = 32;
  r.config.parallel.expertTensor = 1;
  r.config.parallel.zeroStage = 1;
  r.config.globalBatch = 128;
  r.config.microBatchSize = 1;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->config.parallel.expertData(), 1);

  PlanRequest g = bundledRequest("gpt-oss-120b", "h100-8x8-ib");
  const Layer* moe = firstMoeLayer(g.model);
  ASSERT_NE(moe, nullptr);
  g.config.parallel.tensor = 2;
  g.config.parallel.sequenceParallel = true;
  g.config.parallel.data = 8;
  g.config.parallel.expert = 8;
  g.config.parallel.expertTensor = 1;
  const LayerCosts whole = layerCosts(*moe, costContext(g.cluster, g.config, 1, 0, true));
  g.config.parallel.expertTensor = 2;
  const LayerCosts split = layerCosts(*moe, costContext(g.cluster, g.config, 1, 0, true));
  EXPECT_EQ(whole.expertParameterBytes, 2 * split.expertParameterBytes);
  EXPECT_LT(whole.forwardCommMs, split.forwardCommMs);
}

// A pure pipeline has no data-parallel synchronisation; with D replicas and no overlap the
// reduction is exposed after the drain, and the step is pipeline + sync + optimizer.
TEST(HybridPlan, TheTrainingStepAroundThePipeline) {
  PlanRequest r = bundledRequest("gpt3-1.3b", "a100-1x8-nvlink", "1f1b", 4, 8);
  auto pure = makePlan(r);
  ASSERT_THAT(pure, HasValue());
  EXPECT_EQ(pure->metrics.gradientSyncMs, 0);
  EXPECT_GT(pure->metrics.optimizerMs, 0);
  EXPECT_NEAR(pure->metrics.iterationMs, pure->metrics.makespanMs + pure->metrics.optimizerMs, 1e-9);

  r.config.parallel.data = 2;
  r.config.parallel.overlapGradReduce = false;
  auto replicated = makePlan(r);
  ASSERT_THAT(replicated, HasValue());
  const Metrics& m = replicated->metrics;
  EXPECT_GT(m.gradientSyncMs, 0);
  EXPECT_NEAR(m.iterationMs, m.makespanMs + m.gradientSyncMs + m.optimizerMs, 1e-9);
  // D replicas train D times the samples.
  EXPECT_NEAR(m.throughputSamplesPerS, 2.0 * 8 * r.model.samplesPerMicrobatch / (m.iterationMs / 1000.0), 1e-6);

  r.config.parallel.overlapGradReduce = true;
  auto overlapped = makePlan(r);
  ASSERT_TRUE(overlapped.hasValue());
  EXPECT_LT(overlapped->metrics.gradientSyncMs, m.gradientSyncMs);

  // Zero Bubble's optimizer post-validation: iterations overlap, the period is the longest
  // device span (plus that device's own synchronisation and step).
  r.config.optimizerSync = "post-validation";
  auto steady = makePlan(r);
  ASSERT_TRUE(steady.hasValue());
  double longest = 0;
  for (const auto& d : steady->metrics.devices) longest = std::max(longest, d.spanMs);
  EXPECT_GE(steady->metrics.iterationMs, longest);
  EXPECT_LE(steady->metrics.iterationMs, overlapped->metrics.iterationMs + 1e-9);
}

// ZeRO shards the static memory over the data-parallel replicas, stage by stage.
TEST(HybridPlan, ZeroStagesShrinkTheStaticMemory) {
  PlanRequest r = bundledRequest("gpt3-1.3b", "a100-1x8-nvlink", "1f1b", 2, 4);
  r.config.parallel.data = 4;
  std::int64_t previous = -1;
  for (int zero = 0; zero <= 3; ++zero) {
    r.config.parallel.zeroStage = zero;
    auto plan = makePlan(r);
    ASSERT_THAT(plan, HasValue());
    const MemoryBreakdown& b = plan->metrics.devices[0].memory;
    const std::int64_t statics = b.parameterBytes + b.gradientBytes + b.optimizerBytes;
    if (previous >= 0) {
      EXPECT_LT(statics, previous) << "ZeRO-" << zero;
    }
    previous = statics;
  }
}

// The plan document carries the parallelism and reloads to the same metrics.
TEST(HybridPlan, PlanDocumentRoundTripsTheParallelism) {
  PlanRequest r = bundledRequest("llama3-8b", "h100-4x8-ib");
  r.config.schedule = "interleaved-1f1b";
  r.config.chunksPerDevice = 2;
  r.config.devices = 2;
  r.config.parallel.tensor = 4;
  r.config.parallel.sequenceParallel = true;
  r.config.parallel.context = 2;
  r.config.parallel.data = 2;
  r.config.parallel.recompute = Recompute::Full;
  r.config.parallel.zeroStage = 1;
  r.config.globalBatch = 32;
  r.config.microBatchSize = 2;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  const Json doc = planToJson(*plan);
  EXPECT_EQ(doc["config"]["tp"], 4);
  EXPECT_EQ(doc["config"]["cp"], 2);
  EXPECT_EQ(doc["config"]["dp"], 2);
  EXPECT_EQ(doc["config"]["recompute"], "full");
  EXPECT_EQ(doc["config"]["zero"], 1);
  EXPECT_EQ(doc["config"]["global_batch"], 32);
  EXPECT_EQ(doc["config"]["micro_batch_size"], 2);
  EXPECT_TRUE(doc["metrics"].contains("mfu"));
  EXPECT_TRUE(doc["metrics"]["devices"][0].contains("memory"));
  auto again = resimulate(*plan);
  ASSERT_THAT(again, HasValue());
  EXPECT_DOUBLE_EQ(again->metrics.iterationMs, plan->metrics.iterationMs);
}

// Issue 13: configure returns feasible, ranked configurations for every bundled model on a
// cluster large enough to hold it, and the same request ranks the same way every time.
TEST(HybridPlan, ConfigureFindsFeasibleConfigurationsForTheBundledModels) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"llama2-70b", "h100-4x8-ib"},   {"llama3-8b", "h100-8x8-ib"},         {"llama3-70b", "h100-8x8-ib"},
      {"mixtral-8x7b", "h100-8x8-ib"}, {"deepseek-v3-moe", "h100-128x8-ib"}, {"gpt3-175b", "h100-8x8-ib"}};
  for (const auto& [modelFile, clusterFile] : cases) {
    PlanRequest r = bundledRequest(modelFile, clusterFile);
    ConfigureOptions options;
    options.schedules = {"1f1b", "interleaved-1f1b", "zb-h1"};
    options.keep = 5;
    auto result = configure(r.model, r.cluster, options);
    ASSERT_THAT(result, HasValue()) << modelFile;
    EXPECT_FALSE(result->feasible.empty()) << modelFile << " on " << clusterFile;
    for (const auto& c : result->feasible) EXPECT_GT(c.metrics.mfu, 0.05) << modelFile;
  }
}

TEST(HybridPlan, ConfigureIsDeterministic) {
  PlanRequest r = bundledRequest("llama3-8b", "h100-4x8-ib");
  ConfigureOptions options;
  options.schedules = {"1f1b", "zb-h1"};
  options.keep = 8;
  auto a = configure(r.model, r.cluster, options);
  auto b = configure(r.model, r.cluster, options);
  ASSERT_TRUE(a.hasValue() && b.hasValue());
  ASSERT_EQ(a->feasible.size(), b->feasible.size());
  for (std::size_t i = 0; i < a->feasible.size(); ++i) {
    EXPECT_EQ(planToJson(Plan{a->feasible[i].config, {}, {}, {}, {}, {}, {}})["config"],
              planToJson(Plan{b->feasible[i].config, {}, {}, {}, {}, {}, {}})["config"]);
    EXPECT_DOUBLE_EQ(a->feasible[i].iterationMs, b->feasible[i].iterationMs);
  }
}

// The configurator profiles a candidate's schedule only when the candidate's estimate without
// the schedule's idle time reaches the top of the screening queue. That must not change what it
// screens, ranks or rejects: the same searches with every candidate profiled as it is
// enumerated (the greedy bidirectional schedules included, and a cluster where families fail on
// their activations, so the rejections' memory reasons are exercised).
TEST(HybridPlan, LazyProfilesRankAndRejectAsProfilingEveryCandidate) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"llama3-8b", "h100-4x8-ib"}, {"cascaded-sd", "workstation-2gpu"}, {"mixtral-8x7b", "h100-8x8-ib"}};
  bool anyMemoryRejection = false;
  for (const auto& [modelFile, clusterFile] : cases) {
    PlanRequest r = bundledRequest(modelFile, clusterFile);
    ConfigureOptions options;
    options.schedules = {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v", "v-half"};
    options.keep = 8;
    auto lazy = configure(r.model, r.cluster, options);
    options.lazyProfiles = false;
    auto eager = configure(r.model, r.cluster, options);
    ASSERT_THAT(lazy, HasValue());
    ASSERT_THAT(eager, HasValue());
    EXPECT_EQ(lazy->evaluated, eager->evaluated) << modelFile;
    EXPECT_EQ(lazy->simulatedInFull, eager->simulatedInFull) << modelFile;
    EXPECT_EQ(lazy->enumerated, eager->enumerated) << modelFile;
    EXPECT_EQ(lazy->prunedByMemory + lazy->boundedOut, eager->prunedByMemory + eager->boundedOut) << modelFile;
    EXPECT_LE(lazy->prunedByMemory, eager->prunedByMemory) << modelFile;
    ASSERT_EQ(lazy->feasible.size(), eager->feasible.size()) << modelFile;
    for (std::size_t i = 0; i < lazy->feasible.size(); ++i) {
      EXPECT_EQ(planToJson(Plan{lazy->feasible[i].config, {}, {}, {}, {}, {}, {}})["config"],
                planToJson(Plan{eager->feasible[i].config, {}, {}, {}, {}, {}, {}})["config"])
          << modelFile << " #" << i;
      EXPECT_DOUBLE_EQ(lazy->feasible[i].iterationMs, eager->feasible[i].iterationMs) << modelFile << " #" << i;
    }
    ASSERT_EQ(lazy->rejected.size(), eager->rejected.size()) << modelFile;
    for (std::size_t i = 0; i < lazy->rejected.size(); ++i) {
      const ConfigRejection& a = lazy->rejected[i];
      const ConfigRejection& b = eager->rejected[i];
      EXPECT_EQ(std::tie(a.pipelineDegree, a.dataParallel, a.schedule, a.reason),
                std::tie(b.pipelineDegree, b.dataParallel, b.schedule, b.reason))
          << modelFile;
      anyMemoryRejection = anyMemoryRejection || a.reason.find("in-flight microbatches") != std::string::npos;
    }
  }
  EXPECT_TRUE(anyMemoryRejection) << "no family was rejected on its activations: the test does not reach that path";
}

}  // namespace
}  // namespace pipestudio
