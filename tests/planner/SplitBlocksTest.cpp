// Partitions that end a stage between a block's attention and its MLP (issue 46). Megatron-LM's
// HybridModel builds a GPT block as two layers (`*-`, `*E`), so a pipeline segment may end between
// them; `--partition balanced-split` / `dp-split` partition over the halves as well as over whole
// blocks and keep the halves only where they are faster or fit. The cost model costs a half as its
// share of the block: the halves add up to the block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "PlannerFixtures.hpp"
#include "pipestudio/model/BlockHalves.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Configurator.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/MustPlan.hpp"

namespace pipestudio {
namespace {

ClusterSpec h100() {
  auto cluster = loadCluster(std::string(PIPESTUDIO_RESOURCES) + "/clusters/h100-4x8-ib.json");
  EXPECT_TRUE(cluster.hasValue());
  return cluster ? *cluster : ClusterSpec{};
}

TransformerShape denseShape() {
  TransformerShape t = test::swiGluShape(4096, 4096, 32, 14336);
  t.kvHeads = 8;
  return t;
}

TransformerShape moeMlaShape() {
  TransformerShape t = test::withExperts(denseShape(), 64, 4, 1536, 1);
  t.mla = TransformerShape::Mla{1536, 512, 128, 64, 128};
  t.kvHeads = 0;
  return t;
}

Layer layerOf(const TransformerShape& t, std::string_view kind) {
  Layer l;
  l.name = "block";
  l.kind = std::string(kind);
  l.transformer = t;
  return l;
}

// attention + MLP = block, field by field; each half's own constraints hold.
void expectHalvesAddUp(const TransformerShape& t, const CostContext& ctx, const std::string& what) {
  const LayerCosts whole = layerCosts(layerOf(t, "transformer"), ctx);
  const LayerCosts a = layerCosts(layerOf(t, kAttentionHalfKind), ctx);
  const LayerCosts m = layerCosts(layerOf(t, kMlpHalfKind), ctx);
  const auto sum = [&](double x, double y, double w, const char* field) {
    EXPECT_NEAR(x + y, w, 1e-12 * std::max(1.0, std::abs(w))) << what << ": " << field;
    EXPECT_GE(x, 0) << what << ": attention " << field;
    EXPECT_GE(y, 0) << what << ": MLP " << field;
  };
  sum(a.forwardMs, m.forwardMs, whole.forwardMs, "forwardMs");
  sum(a.backwardInputMs, m.backwardInputMs, whole.backwardInputMs, "backwardInputMs");
  sum(a.backwardWeightMs, m.backwardWeightMs, whole.backwardWeightMs, "backwardWeightMs");
  sum(a.forwardCommMs, m.forwardCommMs, whole.forwardCommMs, "forwardCommMs");
  sum(a.backwardInputCommMs, m.backwardInputCommMs, whole.backwardInputCommMs, "backwardInputCommMs");
  sum(a.backwardWeightCommMs, m.backwardWeightCommMs, whole.backwardWeightCommMs, "backwardWeightCommMs");
  sum(a.forwardHiddenCommMs, m.forwardHiddenCommMs, whole.forwardHiddenCommMs, "forwardHiddenCommMs");
  sum(a.backwardInputHiddenCommMs, m.backwardInputHiddenCommMs, whole.backwardInputHiddenCommMs,
      "backwardInputHiddenCommMs");
  sum(a.modelFlopsForward, m.modelFlopsForward, whole.modelFlopsForward, "modelFlopsForward");
  sum(a.modelParameters, m.modelParameters, whole.modelParameters, "modelParameters");
  sum(a.quantizedParameters, m.quantizedParameters, whole.quantizedParameters, "quantizedParameters");
  EXPECT_EQ(a.activationBytes + m.activationBytes, whole.activationBytes) << what;
  EXPECT_EQ(a.weightGradBytes + m.weightGradBytes, whole.weightGradBytes) << what;
  EXPECT_EQ(a.parameterBytes + m.parameterBytes, whole.parameterBytes) << what;
  EXPECT_EQ(a.expertParameterBytes + m.expertParameterBytes, whole.expertParameterBytes) << what;
  EXPECT_EQ(a.lowPrecisionWeightBytes + m.lowPrecisionWeightBytes, whole.lowPrecisionWeightBytes) << what;
  EXPECT_EQ(a.recomputeBytes + m.recomputeBytes, whole.recomputeBytes) << what;
  for (std::size_t i = 0; i < whole.offloadGroupBytes.size(); ++i) {
    EXPECT_EQ(a.offloadGroupBytes[i] + m.offloadGroupBytes[i], whole.offloadGroupBytes[i]) << what << ": group " << i;
  }
  for (const LayerCosts* half : {&a, &m}) {
    EXPECT_GT(half->forwardMs, 0) << what;
    EXPECT_GE(half->activationBytes, half->weightGradBytes) << what;
    EXPECT_GE(half->activationBytes, 0) << what;
    EXPECT_GE(half->forwardMs, half->forwardCommMs) << what;
    EXPECT_GE(half->backwardInputMs, half->backwardInputCommMs) << what;
    EXPECT_EQ(half->outputBytes, whole.outputBytes) << what;  // both halves send the hidden state
    EXPECT_EQ(half->workspaceBytes, whole.workspaceBytes) << what;
  }
  // A pass's buffers go with the module that needs them: the block needs the larger.
  EXPECT_EQ(std::max(a.communicationBytes, m.communicationBytes), whole.communicationBytes) << what;
  EXPECT_GT(a.parameterBytes, 0) << what;
  EXPECT_GT(m.parameterBytes, 0) << what;
}

// A model of `blocks` blocks of the dense shape.
ModelSpec blocksOf(int blocks, const TransformerShape& shape = denseShape()) {
  ModelSpec m;
  m.name = "blocks";
  Component c;
  c.name = "backbone";
  for (int i = 0; i < blocks; ++i) {
    Layer l = layerOf(shape, "transformer");
    l.name = "block." + std::to_string(i);
    c.layers.push_back(l);
  }
  m.components.push_back(c);
  return m;
}

PlanRequest onTwoDevices(const ModelSpec& model, const std::string& partition) {
  PlanRequest r = test::request(model, h100(), "1f1b", 2, 8, 1);
  r.config.partition = partition;
  return r;
}

// `model` on two devices planned both ways: over whole blocks (balanced) and with its blocks'
// halves free to split (balanced-split).
struct BothWays {
  Plan whole, halves;
};
BothWays planBothWays(const ModelSpec& model) {
  return {test::mustPlan(onTwoDevices(model, "balanced")), test::mustPlan(onTwoDevices(model, "balanced-split"))};
}

std::int64_t peakOf(const Plan& plan) {
  return test::worstOf(plan, [](const DeviceMetrics& d) { return d.peakMemoryBytes; });
}

double busiestOf(const Plan& plan) {
  return test::worstOf(plan, [](const DeviceMetrics& d) { return d.busyMs; });
}

}  // namespace

TEST(SplitBlocks, TheHalvesCostWhatTheBlockCosts) {
  const ClusterSpec cluster = h100();
  CostContext ctx;
  ctx.gpu = cluster.gpu;
  ctx.samplesPerMicrobatch = 2;
  ctx.links = collectiveLinks(cluster, ctx.parallel);
  expectHalvesAddUp(denseShape(), ctx, "dense, one GPU");
  ctx.parallel.tensor = 4;
  ctx.parallel.sequenceParallel = true;
  ctx.links = collectiveLinks(cluster, ctx.parallel);
  expectHalvesAddUp(denseShape(), ctx, "dense, TP 4");
  ctx.parallel.tpCommOverlap = true;
  ctx.precision = Precision::Fp8;
  ctx.links = collectiveLinks(cluster, ctx.parallel);
  expectHalvesAddUp(denseShape(), ctx, "dense, TP 4 overlapped, FP8");
  ctx.parallel.offloadModules = kOffloadQkvLinear | kOffloadCoreAttn | kOffloadMoeAct;
  ctx.parallel.expert = 8;
  ctx.parallel.data = 8;
  ctx.parallel.context = 2;
  ctx.parallel.recompute = Recompute::Selective;
  ctx.parallel.recomputeModules = kRecomputeLayerNorm | kRecomputeMoeAct | kRecomputeMlaUpProj;
  ctx.links = collectiveLinks(cluster, ctx.parallel);
  expectHalvesAddUp(moeMlaShape(), ctx, "MLA + MoE, EP 8, CP 2, selective, offloaded modules");
  ctx.parallel.offloadModules = 0;
  ctx.parallel.zeroStage = 3;
  ctx.parallel.recompute = Recompute::Full;
  ctx.links = collectiveLinks(cluster, ctx.parallel);
  expectHalvesAddUp(moeMlaShape(), ctx, "MLA + MoE, ZeRO-3, full recomputation");
  ctx = CostContext{};
  ctx.gpu = cluster.gpu;
  ctx.parallel.tensor = 2;
  ctx.parallel.sequenceParallel = true;
  ctx.parallel.framework = Framework::Torchtitan;
  ctx.parallel.recompute = Recompute::Selective;
  ctx.links = collectiveLinks(cluster, ctx.parallel);
  expectHalvesAddUp(denseShape(), ctx, "torchtitan, per-op selective recomputation");
  ctx.trainable = false;
  expectHalvesAddUp(denseShape(), ctx, "frozen");
}

TEST(SplitBlocks, BlocksOfMeasuredCostsAndTheModelsEndsStayWhole) {
  const ModelSpec halved = splitTransformerBlocks(blocksOf(3));
  ASSERT_EQ(halved.components.front().layers.size(), 6U);
  EXPECT_EQ(halved.components.front().layers[0].name, "block.0.attention");
  EXPECT_EQ(halved.components.front().layers[0].kind, std::string(kAttentionHalfKind));
  EXPECT_EQ(halved.components.front().layers[1].name, "block.0.mlp");
  EXPECT_EQ(halved.components.front().layers[1].kind, std::string(kMlpHalfKind));
  EXPECT_EQ(splitTransformerBlocks(halved).components.front().layers.size(), 6U);  // twice: once
  ModelSpec measured = test::equalLayers(3, 1, 1, 1);
  measured.components.front().layers[1].kind = "transformer";
  measured.components.front().layers[1].transformer = denseShape();
  EXPECT_EQ(splitTransformerBlocks(measured).components.front().layers.size(), 3U);
  // Nothing to halve: balanced-split is balanced.
  auto split = makePlan(onTwoDevices(test::equalLayers(3, 1, 1, 1), "balanced-split"));
  auto plain = makePlan(onTwoDevices(test::equalLayers(3, 1, 1, 1), "balanced"));
  ASSERT_THAT(split, test::HasValue());
  ASSERT_THAT(plain, test::HasValue());
  EXPECT_EQ(split->config.partition, "balanced-split");
  EXPECT_EQ(split->virtualStages.front().lastLayer, plain->virtualStages.front().lastLayer);
  EXPECT_EQ(split->metrics.iterationMs, plain->metrics.iterationMs);
}

// Three equal blocks on two devices: whole blocks put two on one device (2 | 1); over the halves a
// stage ends inside the middle block (attention, MLP, attention | MLP, attention, MLP), so the
// busiest device computes 1.5 blocks' worth where whole blocks make it compute 2. Its busy time is
// m · (its halves' F + B + W), from the halves' own costs.
TEST(SplitBlocks, AStageEndsInsideABlockWhereThatIsFaster) {
  const auto [whole, halves] = planBothWays(blocksOf(3));
  EXPECT_EQ(halves.config.partition, "balanced-split");
  ASSERT_EQ(halves.model.components.front().layers.size(), 6U);
  ASSERT_EQ(halves.virtualStages.size(), 2U);
  EXPECT_EQ(halves.virtualStages[0].lastLayer, 2) << "attention, MLP, attention | MLP, attention, MLP";
  EXPECT_LT(halves.metrics.iterationMs, whole.metrics.iterationMs);

  CostContext ctx;
  ctx.gpu = h100().gpu;
  ctx.links = collectiveLinks(h100(), ctx.parallel);
  const LayerCosts a = layerCosts(layerOf(denseShape(), kAttentionHalfKind), ctx);
  const LayerCosts m = layerCosts(layerOf(denseShape(), kMlpHalfKind), ctx);
  const LayerCosts block = layerCosts(layerOf(denseShape(), "transformer"), ctx);
  const auto pass = [](const LayerCosts& c) { return c.forwardMs + c.backwardInputMs + c.backwardWeightMs; };
  const double mb = halves.config.microbatches;
  const double busiestHalves = mb * std::max(2 * pass(a) + pass(m), pass(a) + 2 * pass(m));
  EXPECT_NEAR(busiestOf(halves), busiestHalves, 1e-6 * busiestHalves);
  EXPECT_NEAR(busiestOf(whole), mb * 2 * pass(block), 1e-6 * busiestHalves);
  // Same input, same plan.
  auto again = makePlan(onTwoDevices(blocksOf(3), "balanced-split"));
  ASSERT_THAT(again, test::HasValue());
  EXPECT_EQ(planToJson(*again).dump(), planToJson(halves).dump());
}

// Where two whole blocks on one device exceed the memory limit and one and a half do not, only the
// split plan fits (static memory dominates: short sequences, wide blocks).
TEST(SplitBlocks, HalvesFitWhereWholeBlocksDoNot) {
  TransformerShape wide = denseShape();
  wide.seq = 256;
  const ModelSpec model = blocksOf(3, wide);
  const auto [whole, halves] = planBothWays(model);
  const std::int64_t wholePeak = peakOf(whole);
  const std::int64_t halvesPeak = peakOf(halves);
  ASSERT_LT(halvesPeak, wholePeak);
  const std::int64_t limit = (halvesPeak + wholePeak) / 2;
  PlanRequest limited = onTwoDevices(model, "balanced");
  limited.config.memoryLimitBytes = limit;
  EXPECT_FALSE(makePlan(limited).hasValue()) << "every whole-block split puts two blocks on a device";
  limited.config.partition = "dp";
  EXPECT_FALSE(makePlan(limited).hasValue());
  limited.config.partition = "balanced-split";
  auto fits = makePlan(limited);
  ASSERT_THAT(fits, test::HasValue());
  EXPECT_LE(peakOf(*fits), limit);
  EXPECT_EQ(fits->model.components.front().layers.size(), 6U);
  limited.config.partition = "dp-split";
  auto dpFits = makePlan(limited);
  ASSERT_THAT(dpFits, test::HasValue());
  EXPECT_LE(peakOf(*dpFits), limit);
}

// Four blocks on two devices split evenly as whole blocks (2 | 2): no split of the halves is
// faster, so the plan is balanced's, over whole blocks.
TEST(SplitBlocks, WholeBlocksStayWhereHalvesAreNotFaster) {
  const auto [whole, split] = planBothWays(blocksOf(4));
  EXPECT_EQ(split.config.partition, "balanced-split");
  ASSERT_EQ(split.model.components.front().layers.size(), 4U);
  EXPECT_EQ(split.virtualStages[0].lastLayer, 1);
  EXPECT_EQ(split.metrics.iterationMs, whole.metrics.iterationMs);
  Plan renamed = whole;
  renamed.config.partition = "balanced-split";
  EXPECT_EQ(planToJson(split).dump(), planToJson(renamed).dump());
}

// The configurator with balanced-split (configure --split-blocks) ranks the cut plan on two GPUs,
// marks it, and the ranked configuration plans again to the same plan; without it the same
// pipeline runs whole blocks, slower.
TEST(SplitBlocks, TheConfiguratorRanksTheCutAndItReplaysExactly) {
  ClusterSpec two = h100();
  two.nodes = {NodeSpec{"n0", 2, std::nullopt, std::nullopt}};
  ConfigureOptions options;
  options.globalBatch = 8;
  options.microBatchSizes = {1};
  options.schedules = {"1f1b"};
  options.recomputes = {Recompute::None};
  options.zeroStages = {0};
  const auto pipelined = [](const ConfigCandidate& c) { return c.config.devices == 2; };
  auto whole = configure(blocksOf(3), two, options);
  options.partitions = {"balanced-split"};
  auto split = configure(blocksOf(3), two, options);
  ASSERT_THAT(whole, test::HasValue());
  ASSERT_THAT(split, test::HasValue());
  const auto w = std::find_if(whole->feasible.begin(), whole->feasible.end(), pipelined);
  const auto h = std::find_if(split->feasible.begin(), split->feasible.end(), pipelined);
  ASSERT_NE(w, whole->feasible.end());
  ASSERT_NE(h, split->feasible.end());
  EXPECT_FALSE(w->blockHalves);
  EXPECT_TRUE(h->blockHalves);
  EXPECT_LT(h->iterationMs, w->iterationMs);
  PlanRequest replay;
  replay.model = blocksOf(3);
  replay.cluster = two;
  replay.config = h->config;
  auto again = makePlan(replay);
  ASSERT_THAT(again, test::HasValue());
  EXPECT_EQ(again->metrics.iterationMs, h->iterationMs);
  EXPECT_EQ(again->model.components.front().layers.size(), 6U);
}

// HybridModel's pattern gives each half its symbol, so the split exports; GPTModel and torchtitan,
// which build whole blocks, refuse it; and planning the pattern as a given layout gives the split.
TEST(SplitBlocks, TheSplitExportsAsAHybridPatternAndPlansBackExactly) {
  auto plan = makePlan(onTwoDevices(blocksOf(3), "balanced-split"));
  ASSERT_THAT(plan, test::HasValue());
  auto hybrid = megatronExport(*plan);
  ASSERT_THAT(hybrid, test::HasValue());
  EXPECT_EQ(hybrid->hybridPattern, "*-*|-*-");
  auto gpt = megatronExport(*plan, {MegatronModel::Gpt});
  EXPECT_THAT(gpt, test::HasError("only HybridModel's --hybrid-layer-pattern can place"));
  auto titan = torchtitanExport(*plan, std::string("x.csv"));
  EXPECT_THAT(titan, test::HasError("torchtitan cannot place"));
  // The pattern as a given layout: whole blocks cannot end there, their halves can.
  EXPECT_THAT(megatronLayoutSplit(blocksOf(3), "*-*|-*-"), test::HasError("'s attention and its MLP"));
  EXPECT_TRUE(layoutCutsBlocks(blocksOf(3), "*-*|-*-"));
  EXPECT_FALSE(layoutCutsBlocks(blocksOf(3), "*-*-|*-"));
  PlanRequest given = onTwoDevices(blocksOf(3), "layout");
  given.config.layout = "*-*|-*-";
  auto planned = makePlan(given);
  ASSERT_THAT(planned, test::HasValue());
  ASSERT_EQ(planned->virtualStages.size(), 2U);
  EXPECT_EQ(planned->virtualStages[0].lastLayer, plan->virtualStages[0].lastLayer);
  EXPECT_EQ(planned->metrics.iterationMs, plan->metrics.iterationMs);
  auto back = megatronExport(*planned);
  ASSERT_THAT(back, test::HasValue());
  EXPECT_EQ(back->hybridPattern, "*-*|-*-");
}

// Patterns that do not fit the model's halves are refused with where and what.
TEST(SplitBlocks, HostilePatternsAreRefusedWithTheirPlace) {
  const ModelSpec halved = splitTransformerBlocks(blocksOf(3));
  EXPECT_THAT(megatronLayoutSplit(halved, "*-*|*-*"),
              test::HasError("segment 1: '*' at 0 is not layer 3 'block.1.mlp' (transformer_mlp), which is '-'"));
  EXPECT_THAT(megatronLayoutSplit(halved, "*-*|-*"), test::HasError("and the rest have no segment"));
  EXPECT_THAT(megatronLayoutSplit(halved, "*-*|-*-*-"), test::HasError("where the model has the end of the model"));
  EXPECT_THAT(megatronLayoutSplit(halved, "|*-*-*-"), test::HasError("segment 0: holds no layer"));
  // A block of measured costs cannot be halved: a pattern that cuts it is refused, not planned.
  ModelSpec measured = test::equalLayers(3, 1, 1, 1);
  for (Layer& l : measured.components.front().layers) l.kind = "transformer";
  EXPECT_FALSE(layoutCutsBlocks(measured, "*-*|-*-"));
  PlanRequest given = onTwoDevices(measured, "layout");
  given.config.layout = "*-*|-*-";
  EXPECT_THAT(makePlan(given), test::HasError("a block of measured costs cannot be halved"));
  // Recomputation groups count whole blocks: balanced-split keeps them.
  PlanRequest groups = onTwoDevices(blocksOf(3), "balanced-split");
  groups.config.parallel.recompute = Recompute::Full;
  groups.config.parallel.recomputeNumLayers = 1;
  auto grouped = makePlan(groups);
  ASSERT_THAT(grouped, test::HasValue());
  EXPECT_EQ(grouped->model.components.front().layers.size(), 3U);
}

}  // namespace pipestudio
