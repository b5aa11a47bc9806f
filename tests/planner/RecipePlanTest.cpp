// Today's recipes in the planner (issue 25): the recipe's settings refused with the flag and
// the numbers when they cannot apply, exposed communication in the metrics, NVIDIA's published
// recipes fitting in memory, and the configurator finding them.
#include <gtest/gtest.h>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Configurator.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

using test::bundledRequest;

// NVIDIA's Llama 3 70B FP8 pre-training recipe on 64 H100s (Megatron-Bridge 26.04.01: TP 4,
// PP 8, VP 5, micro batch 1, global batch 256, distributed optimizer, no recomputation).
PlanRequest llama70bRecipe() {
  PlanRequest r = bundledRequest("llama3-70b", "h100-8x8-ib");
  r.config.schedule = "interleaved-1f1b";
  r.config.devices = 8;
  r.config.chunksPerDevice = 5;
  r.config.precision = Precision::Fp8;
  r.config.parallel.tensor = 4;
  r.config.parallel.data = 2;
  r.config.parallel.sequenceParallel = true;
  r.config.parallel.zeroStage = 1;
  r.config.globalBatch = 256;
  r.config.microBatchSize = 1;
  return r;
}

TEST(RecipePlan, APrecisionTheGpuLacksIsRefusedWithWhatItHas) {
  PlanRequest r = bundledRequest("llama3-8b", "a100-4x8-ib", "1f1b", 4, 8);
  r.config.precision = Precision::Fp8;
  auto plan = makePlan(r);
  EXPECT_THAT(plan, HasError("--precision fp8"));
  EXPECT_THAT(plan, HasError("A100-SXM4-80GB"));
  EXPECT_THAT(plan, HasError("bf16, fp16"));
}

TEST(RecipePlan, RecomputeModulesTheModelLacksAreRefused) {
  PlanRequest r = bundledRequest("llama3-8b", "h100-4x8-ib", "1f1b", 4, 8);
  r.config.parallel.recompute = Recompute::Selective;
  r.config.parallel.recomputeModules = kRecomputeMoeAct;
  auto plan = makePlan(r);
  EXPECT_THAT(plan, HasError("--recompute-modules moe_act"));
  EXPECT_THAT(plan, HasError("mixture-of-experts"));
}

TEST(RecipePlan, RecomputeLayersBeyondAVirtualStageAreRefusedWithTheNumbers) {
  PlanRequest r = bundledRequest("llama3-8b", "h100-4x8-ib", "1f1b", 4, 8);
  r.config.parallel.recompute = Recompute::Full;
  r.config.parallel.recomputeNumLayers = 9;  // 32 blocks over 4 stages: 8 each
  auto plan = makePlan(r);
  EXPECT_THAT(plan, HasError("--recompute-num-layers 9 exceeds the 8"));
}

// The recipe fits on 80 GB in our breakdown (it ran), every device reports the communication
// its ops expose and hide, and FP8 is faster than bf16 but by less than its 2x GEMM peak.
TEST(RecipePlan, NvidiasLlama70bRecipeFitsAndReportsItsCommunication) {
  PlanRequest r = llama70bRecipe();
  auto fp8 = makePlan(r);
  ASSERT_THAT(fp8, HasValue());
  for (const DeviceMetrics& d : fp8->metrics.devices) {
    EXPECT_LE(d.peakMemoryBytes + d.memory.marginBytes(), r.cluster.gpu.memoryBytes());
    EXPECT_GT(d.memory.lowPrecisionWeightBytes, 0);
    EXPECT_GT(d.exposedCommMs, 0);
    EXPECT_GT(d.hiddenCommMs, 0);
  }
  // The same layout in bf16 (NVIDIA's bf16 recipe adds CP 2 to fit; here the memory is not
  // enforced, only the time compared).
  r.config.precision = Precision::Bf16;
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  auto bf16 = makePlan(r);
  ASSERT_THAT(bf16, HasValue());
  EXPECT_LT(fp8->metrics.iterationMs, bf16->metrics.iterationMs);
  EXPECT_GT(fp8->metrics.iterationMs, 0.5 * bf16->metrics.iterationMs);
}

// Llama 3 8B on three H100s with 1F1B: the most even split of `balanced` overflows device 0
// (its budgets, which add up every stage's own peak, rule out every split at the bottleneck),
// so the planner plans again with splits that lean less on the budgets and keeps the fastest
// that fits. The configurator's screening (repairMemory off) takes the first split as it is.
TEST(RecipePlan, BalancedSplitThatDoesNotFitIsPlannedAgainWithinMemory) {
  PlanRequest r = bundledRequest("llama3-8b", "h100-4x8-ib", "1f1b", 3, 6);
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  for (const DeviceMetrics& d : plan->metrics.devices) {
    EXPECT_LE(d.peakMemoryBytes + d.memory.marginBytes(), r.cluster.gpu.memoryBytes());
  }
  auto again = makePlan(r);
  ASSERT_TRUE(again.hasValue());
  EXPECT_EQ(again->metrics.iterationMs, plan->metrics.iterationMs);  // the same plan, always
  SolveControl screening;
  screening.repairMemory = false;
  auto first = makePlan(r, screening);
  EXPECT_THAT(first, HasError("does not fit in memory"));
}

// --overlap-param-gather hides the distributed optimizer's all-gather under the next forward
// passes; without it the gather follows the step, exposed.
TEST(RecipePlan, ParameterGatherOverlapShortensTheStep) {
  PlanRequest r = llama70bRecipe();
  auto overlapped = makePlan(r);
  r.config.parallel.overlapParamGather = false;
  auto exposed = makePlan(r);
  ASSERT_THAT(overlapped, HasValue());
  ASSERT_THAT(exposed, HasValue());
  EXPECT_LT(overlapped->metrics.optimizerMs, exposed->metrics.optimizerMs);
  EXPECT_LT(overlapped->metrics.iterationMs, exposed->metrics.iterationMs);
}

// Llama 3 8B on 512 GB200s (seven NVL72 racks and part of an eighth), T 1, D 512, one
// microbatch per data-parallel rank (global batch 512): the distributed optimizer's gradient
// reduce-scatter runs bucket by bucket under the backward and only the last bucket is exposed
// (Megatron's overlap_grad_reduce), as NCCL's hierarchical ring (72 ranks per rack, on NVLink,
// 64 channels' NICs between racks). Hand-computed: a bucket is max(40M, 1M · 512) = 512M
// parameters, 1.024 GB of bf16 gradients; each GPU sends 511/512 of it, 71/72 on NVLink at
// 700 GB/s; latency 504 NVLink steps of 4 µs and 7 network steps of 12 µs. The parameter
// all-gather of the first bucket is exposed the same way before the next forward.
TEST(RecipePlan, RackScaleDataParallelExposesOnlyTheLastBucket) {
  PlanRequest r = bundledRequest("llama3-8b", "gb200-nvl72-4racks");
  r.cluster.nodes.assign(128, NodeSpec{"tray", 4, std::nullopt, std::nullopt});
  r.config.schedule = "1f1b";
  r.config.devices = 1;
  r.config.parallel.data = 512;
  r.config.parallel.zeroStage = 1;
  r.config.globalBatch = 512;
  r.config.microBatchSize = 1;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  const double bucketBytes = 2.0 * 512e6;
  const double bucketMs = 511.0 / 512.0 * bucketBytes * 71.0 / 72.0 / 700e6 + (504 * 4.0 + 7 * 12.0) / 1000.0;
  EXPECT_NEAR(plan->metrics.gradientSyncMs, bucketMs, 1e-6);
  // The whole sync (16 GB) hid under the backward of the one microbatch: the step is the
  // pipeline, the last bucket, the Adam step over a 1/512 shard and the first bucket's gather.
  const DeviceMetrics& d = plan->metrics.devices[0];
  EXPECT_NEAR(d.exposedCommMs, 2.0 * bucketMs, 1e-6);
  EXPECT_GT(d.hiddenCommMs, 10 * bucketMs);
}

// Blocks per virtual stage of pipeline 0, and whether the first holds the embedding and the last
// the output layer.
struct SplitShape {
  std::vector<int> blocks;
  bool embeddingFirst = false;
  bool headLast = false;
};
SplitShape splitOf(const Plan& plan) {
  SplitShape out;
  for (const VirtualStage& vs : plan.virtualStages) {
    if (vs.pipeline != 0) continue;
    const auto& layers = plan.model.component(vs.component).layers;
    int blocks = 0;
    for (int l = vs.firstLayer; l <= vs.lastLayer; ++l) {
      const std::string& kind = layers[static_cast<std::size_t>(l)].kind;
      if (kind == "embedding") out.embeddingFirst = out.blocks.empty();
      if (kind == "lm_head") out.headLast = true;
      if (kind != "embedding" && kind != "lm_head") ++blocks;
    }
    out.blocks.push_back(blocks);
  }
  return out;
}

// --partition megatron is the split Megatron-LM runs: Llama 3 70B at PP 8 × VP 5 gets 2 blocks
// per virtual stage, the embedding on the first and the head on the last.
TEST(RecipePlan, MegatronPartitionPutsBlocksEvenlyAndTheEmbeddingAndHeadAtTheEnds) {
  PlanRequest r = llama70bRecipe();
  r.config.partition = "megatron";
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  const SplitShape split = splitOf(*plan);
  ASSERT_EQ(split.blocks.size(), 40U);
  for (const int b : split.blocks) EXPECT_EQ(b, 2);
  EXPECT_TRUE(split.embeddingFirst);
  EXPECT_TRUE(split.headLast);
  EXPECT_EQ(plan->virtualStages.back().lastLayer,
            static_cast<int>(plan->model.component(plan->virtualStages.back().component).layers.size()) - 1);
}

// Blocks that do not divide but blocks + embedding + loss do: Megatron's
// --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split (30 blocks + 2
// over 8 virtual stages: 4 layers each, so the first and last stages hold 3 blocks).
TEST(RecipePlan, MegatronPartitionAccountsForEmbeddingAndLossWhenOnlyThatDivides) {
  PlanRequest r = bundledRequest("llama3-8b", "h100-4x8-ib");
  auto& layers = r.model.components[0].layers;
  ASSERT_GT(layers.size(), 4U);
  layers.erase(layers.begin() + 1, layers.begin() + 3);  // 30 blocks
  r.config.schedule = "interleaved-1f1b";
  r.config.devices = 4;
  r.config.chunksPerDevice = 2;
  r.config.microbatches = 8;
  r.config.partition = "megatron";
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  const SplitShape split = splitOf(*plan);
  EXPECT_EQ(split.blocks, (std::vector<int>{3, 4, 4, 4, 4, 4, 4, 3}));
  // Too few blocks for the stages: refused with the numbers.
  layers.erase(layers.begin() + 1, layers.begin() + 27);  // 4 blocks
  auto refused = makePlan(r);
  EXPECT_THAT(refused, HasError("the decoder has 4"));
}

// The configurator tries every virtual-stage count Megatron allows (VP 5 at PP 8 is one) and,
// among what Megatron-LM runs, ranks NVIDIA's recipe within 3 % of its best in the same
// precision.
TEST(RecipePlan, ConfigureRanksNvidiasRecipeNearItsBest) {
  const PlanRequest recipe = llama70bRecipe();
  ConfigureOptions options;
  options.globalBatch = 256;
  options.recipe.precision = Precision::Fp8;
  options.keep = 200;
  const auto megatron = frameworkSpace("megatron");
  ASSERT_TRUE(megatron.has_value());
  options.schedules = megatron->schedules;
  options.zeroStages = megatron->zeroStages;
  // Context parallelism is searched too: with the attention kernel NeMo's runs used, its model
  // holds NeMo's long-sequence table (CP 1 to 32, 4k to 1M tokens) within 6 % per row
  // (fidelity table nemo-long).
  auto result = configure(recipe.model, recipe.cluster, options);
  ASSERT_THAT(result, HasValue());
  ASSERT_FALSE(result->feasible.empty());
  const double best = result->feasible.front().throughputSamplesPerS;
  auto plan = makePlan(recipe);
  ASSERT_THAT(plan, HasValue());
  // Issue 25's 3 %. The recipe is planned with the default balanced partition, as the
  // configurator's candidates are (Megatron-LM runs any split with a layout string). Its
  // prediction depends on which of several near-equal splits of 82 layers over 40 virtual
  // stages that partition picks (docs/fidelity.md): at other tie-breaks the recipe's bubble has
  // come out 11 % instead of 8 % and the recipe 7 % behind. A failure here is worth a look at
  // the split before the cost model.
  // Issue 42 moved the best: with the FP8 weights kept only in FP8 (--fp8-param-gather, as the
  // recipes run), PP 4 × TP 4 × DP 4 with VP 4 fits (73.9 GiB of 77.4 usable) and is predicted
  // 5 % faster than the recipe, for its smaller bubble. NVIDIA publishes no run of it, so whether
  // it fits on a real H100 is open; the bound is 6 % until one does.
  EXPECT_GE(plan->metrics.throughputSamplesPerS, 0.94 * best)
      << "recipe " << plan->metrics.throughputSamplesPerS << " samples/s, best " << best;
  bool triedVp5 = false;
  for (const ConfigCandidate& c : result->feasible) {
    if (c.config.devices == 8 && c.config.chunksPerDevice == 5) triedVp5 = true;
  }
  EXPECT_TRUE(triedVp5);
}

// Screening does not hide better plans: doubling the simulation budget leaves the top five of the
// bundled examples as they were.
TEST(RecipePlan, DoublingTheScreeningBudgetKeepsTheTopFive) {
  for (const auto& [model, cluster] : {std::pair{"llama3-70b", "h100-8x8-ib"}, std::pair{"llama3-8b", "h100-4x8-ib"},
                                       std::pair{"gpt3-1.3b", "a100-4x8-ib"}}) {
    const PlanRequest r = bundledRequest(model, cluster);
    ConfigureOptions once;
    ConfigureOptions twice = once;
    twice.maxSimulations = 2 * once.maxSimulations;
    auto a = configure(r.model, r.cluster, once);
    auto b = configure(r.model, r.cluster, twice);
    ASSERT_THAT(a, HasValue());
    ASSERT_THAT(b, HasValue());
    for (std::size_t i = 0; i < 5 && i < a->feasible.size(); ++i) {
      ASSERT_LT(i, b->feasible.size());
      EXPECT_DOUBLE_EQ(a->feasible[i].throughputSamplesPerS, b->feasible[i].throughputSamplesPerS)
          << model << " rank " << i + 1;
    }
  }
}

}  // namespace
}  // namespace pipestudio
