// Today's training recipes in the cost model (issue 25): precision, overlapped communication,
// the gradient reduction type, partial recomputation and the GPU catalogue. One hand-computed
// case per formula; expected values are written out from the formulas cited in CostModel.cpp,
// not computed by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "CostFixtures.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/model/GpuCatalog.hpp"
#include "pipestudio/plan/Costs.hpp"

using namespace pipestudio;

namespace {

// Round numbers and no shape effects (no SM count): bf16 100 TFLOP/s at 50 %, fp8 200 TFLOP/s
// at 50 %, 1 TB/s of HBM.
GpuSpec testGpu() {
  GpuSpec g = test::roundGpu();
  g.peakTflopsByPrecision[static_cast<std::size_t>(Precision::Fp8)] = 200;
  return g;
}

// A GPT block of hidden h, sequence s, heads a: GELU MLP of 4h, multi-head attention,
// FlashAttention, dropout.
Layer block(std::int64_t h, std::int64_t s, std::int64_t a) { return test::gptBlock(h, s, a); }

CostContext context(Precision p = Precision::Bf16, int tp = 1, std::int64_t b = 2) {
  CostContext c;
  c.gpu = testGpu();
  c.precision = p;
  c.parallel.tensor = tp;
  c.parallel.sequenceParallel = tp > 1;
  c.samplesPerMicrobatch = b;
  test::setRoundLinks(c.links);
  return c;
}

// The block's shape in the formulas below (hidden, sequence, heads, microbatch, tokens).
const double h = 1024, s = 512, a = 16, b = 2, n = s * b;

double ms(double amount, double perS) { return amount / perS * 1000.0; }

}  // namespace

// FP8 runs the weight GEMMs at the fp8 rate (24·n·h² FLOPs for a 4h GELU block: QKV 6nh²,
// projection 2nh², MLP 16nh²) and adds Transformer Engine's casts with per-tensor current
// scaling, 6 bytes per value (amax read 2, cast read 2, row-wise and transposed writes 1 + 1):
// forward the inputs of QKV (h), the projection (h), FC1 (h) and FC2 (4h) per token; backward
// the output gradients of QKV (3h), the projection (h), FC1 (4h) and FC2 (h). The attention
// core and the element-wise kernels are the same as in bf16.
TEST(RecipeCost, Fp8RunsTheGemmsAtItsRateAndPaysForTheCasts) {
  const LayerCosts bf16 = layerCosts(block(1024, 512, 16), context(Precision::Bf16));
  const LayerCosts fp8 = layerCosts(block(1024, 512, 16), context(Precision::Fp8));
  const double gemmBf16 = ms(24 * n * h * h, 50e12);
  const double gemmFp8 = ms(24 * n * h * h, 100e12);
  const double castFwd = ms(6 * n * 7 * h, 1e12);
  const double castBwd = ms(6 * n * 9 * h, 1e12);
  EXPECT_NEAR(fp8.forwardMs - bf16.forwardMs, gemmFp8 - gemmBf16 + castFwd, 1e-9);
  EXPECT_NEAR(fp8.backwardInputMs - bf16.backwardInputMs, gemmFp8 - gemmBf16 + castBwd, 1e-9);
  // wgrad: the same GEMMs at the fp8 rate, no casts of their own (they read the copies).
  EXPECT_NEAR(fp8.backwardWeightMs - bf16.backwardWeightMs, gemmFp8 - gemmBf16, 1e-9);
}

// TE keeps an fp8 copy of every linear weight and its transpose across the microbatches: 2 bytes
// per linear parameter (12h² for a 4h GELU block), none in bf16.
TEST(RecipeCost, Fp8KeepsWeightCopies) {
  EXPECT_EQ(layerCosts(block(1024, 512, 16), context(Precision::Bf16)).lowPrecisionWeightBytes, 0);
  EXPECT_EQ(layerCosts(block(1024, 512, 16), context(Precision::Fp8)).lowPrecisionWeightBytes,
            std::llround(2 * 12 * h * h));
}

// The inputs of the weight GEMMs are kept in fp8 for wgrad (1 byte instead of 2): QKV and FC1
// inputs (−2h) and FC2's (−4h); the attention output stays in bf16 for FlashAttention's backward
// and the projection keeps its own fp8 copy (+h): 34 − 5 = 29 bytes per token and hidden unit
// (Korthikanti et al. 2022 §4.1 with FlashAttention), plus the log-sum-exp.
TEST(RecipeCost, Fp8KeepsGemmInputsInFp8) {
  const LayerCosts fp8 = layerCosts(block(1024, 512, 16), context(Precision::Fp8));
  EXPECT_EQ(fp8.activationBytes, std::llround(29 * n * h + 4 * a * n));
}

// FP8 with 1×128 block scales (TE Float8BlockScaling, Megatron's --fp8-recipe blockwise) runs
// its GEMMs on the fp8 tensor cores at fp8's rate; its casts scale each block locally, so no amax
// pass: read the bf16 tensor (2) and write both layouts with an FP32 scale per 128 values
// (2 × (1 + 4/128)) = 4.0625 bytes per value, against current scaling's 6. The GEMM inputs kept
// for wgrad and the weight copies carry the scales too: 1 + 1/32 bytes per value.
TEST(RecipeCost, Fp8BlockScalesLocallyAtTheFp8Rate) {
  const LayerCosts fp8 = layerCosts(block(1024, 512, 16), context(Precision::Fp8));
  const LayerCosts blk = layerCosts(block(1024, 512, 16), context(Precision::Fp8Block));
  EXPECT_NEAR(fp8.forwardMs - blk.forwardMs, ms((6 - 4.0625) * n * 7 * h, 1e12), 1e-9);
  EXPECT_NEAR(fp8.backwardInputMs - blk.backwardInputMs, ms((6 - 4.0625) * n * 9 * h, 1e12), 1e-9);
  EXPECT_NEAR(blk.backwardWeightMs, fp8.backwardWeightMs, 1e-9);
  // Saved in low precision: the inputs of QKV, the projection, FC1 (h each) and FC2 (4h).
  EXPECT_EQ(blk.activationBytes, std::llround((29 + 7.0 / 32) * n * h + 4 * a * n));
  EXPECT_EQ(blk.lowPrecisionWeightBytes, std::llround(2 * (1 + 1.0 / 32) * 12 * h * h));
}

// On Blackwell (compute capability 10.x) FP8 GEMMs take operands in any layout, so Transformer
// Engine keeps one per-tensor FP8 copy instead of the data and its transpose: the casts write one
// byte per value (amax read 2, cast read 2, one write: 5 bytes, against Hopper's 6) and the weight
// copies hold one byte per linear parameter (12h² for a 4h GELU block, against 2 · 12h²).
TEST(RecipeCost, Fp8OnBlackwellKeepsOneCopy) {
  CostContext hopper = context(Precision::Fp8);
  CostContext blackwell = hopper;
  blackwell.gpu.computeCapability = 10.0;
  EXPECT_FALSE(hopper.gpu.fp8GemmTakesAnyLayout());
  EXPECT_TRUE(blackwell.gpu.fp8GemmTakesAnyLayout());
  const LayerCosts tn = layerCosts(block(1024, 512, 16), hopper);
  const LayerCosts any = layerCosts(block(1024, 512, 16), blackwell);
  EXPECT_NEAR(tn.forwardMs - any.forwardMs, ms((6 - 5) * n * 7 * h, 1e12), 1e-9);
  EXPECT_NEAR(tn.backwardInputMs - any.backwardInputMs, ms((6 - 5) * n * 9 * h, 1e12), 1e-9);
  EXPECT_EQ(any.lowPrecisionWeightBytes, std::llround(12 * h * h));
  // Consumer Blackwell (12.x) takes only TN FP8 GEMMs, as Transformer Engine sees it.
  blackwell.gpu.computeCapability = 12.0;
  EXPECT_FALSE(blackwell.gpu.fp8GemmTakesAnyLayout());
}

// MXFP8 scales each 32 values locally (no amax pass) and keeps a row-wise and a column-wise copy,
// since its scales run along one axis: read 2, write 2 × (1 + 1/32) = 4.0625 bytes per value,
// forward and backward, not fused with the norm (Transformer Engine fuses it only with cuDNN's
// norm). NVFP4 reads the tensor for its amax and the Hadamard-transformed amax, then again to cast,
// and writes two copies of 1/2 + 1/16 bytes: 2 + 2 + 1.125 = 5.125 bytes per value. Their GEMMs run
// at their own peaks (400 and 800 TFLOP/s here, 50 %).
TEST(RecipeCost, BlockScaledCastsOnBlackwell) {
  CostContext ctx = context(Precision::Bf16);
  ctx.gpu.computeCapability = 10.0;
  ctx.gpu.peakTflopsByPrecision[static_cast<std::size_t>(Precision::Mxfp8)] = 200;
  ctx.gpu.peakTflopsByPrecision[static_cast<std::size_t>(Precision::Nvfp4)] = 400;
  const LayerCosts bf16 = layerCosts(block(1024, 512, 16), ctx);
  const double gemmBf16 = ms(24 * n * h * h, 50e12);
  for (const auto& [precision, peak, castBytes] :
       {std::tuple{Precision::Mxfp8, 200e12, 4.0625}, std::tuple{Precision::Nvfp4, 400e12, 5.125}}) {
    ctx.precision = precision;
    const LayerCosts lp = layerCosts(block(1024, 512, 16), ctx);
    const double gemm = ms(24 * n * h * h, 0.5 * peak);
    EXPECT_NEAR(lp.forwardMs - bf16.forwardMs, gemm - gemmBf16 + ms(castBytes * n * 7 * h, 1e12), 1e-9)
        << precisionName(precision);
    EXPECT_NEAR(lp.backwardInputMs - bf16.backwardInputMs, gemm - gemmBf16 + ms(castBytes * n * 9 * h, 1e12), 1e-9)
        << precisionName(precision);
    EXPECT_EQ(lp.lowPrecisionWeightBytes, std::llround(2 * operandBytes(precision) * 12 * h * h))
        << precisionName(precision);
  }
}

// The names a recipe gives the block-scaled format (ours, Megatron-Bridge's "ss" for subchannel
// scaling, Megatron's flag value) all read as fp8-block, and it writes back as fp8-block.
TEST(RecipeCost, Fp8BlockIsReadUnderItsRecipeNames) {
  for (const char* name : {"fp8-block", "fp8_ss", "fp8-ss", "fp8-blockwise"}) {
    EXPECT_EQ(precisionFromName(name), Precision::Fp8Block) << name;
  }
  EXPECT_EQ(precisionName(Precision::Fp8Block), "fp8-block");
  EXPECT_EQ(precisionFromName("fp8-block-128"), std::nullopt);
  EXPECT_NE(precisionChoices().find("fp8-block"), std::string_view::npos);
}

// An fp8 recipe on a GPU without an fp8 peak would divide by zero: the cost model falls back to
// bf16 (requests for it are refused before costing: PlannerRecipe tests).
TEST(RecipeCost, APrecisionTheGpuLacksFallsBackToBf16) {
  CostContext ctx = context(Precision::Nvfp4);
  const LayerCosts lp = layerCosts(block(1024, 512, 16), ctx);
  EXPECT_GT(lp.forwardMs, 0);
  EXPECT_TRUE(std::isfinite(lp.forwardMs));
}

// Transformer Engine's userbuffers overlap (--tp-comm-overlap) with T = 4 and sequence
// parallelism: each all-gather feeds its GEMM in T chunks and each reduce-scatter follows its
// GEMM's last chunk. With GEMMs longer than the collectives, only each reduce-scatter's last
// chunk shows: 2 per pass (attention and MLP), c/T each, c = (T−1)/T · 2nh bytes / 100 GB/s.
TEST(RecipeCost, TensorParallelOverlapHidesAllButTheLastChunk) {
  CostContext on = context(Precision::Bf16, 4);
  CostContext off = on;
  off.parallel.tpCommOverlap = false;
  const double c = ms(3.0 / 4.0 * 2 * n * h, 100e9);
  // Larger blocks make every GEMM chunk longer than its collective's chunk.
  Layer big = block(8192, 512, 64);
  const double cBig = ms(3.0 / 4.0 * 2 * n * 8192, 100e9);
  const LayerCosts overlapped = layerCosts(big, on);
  EXPECT_NEAR(overlapped.forwardCommMs, 2 * cBig / 4, 1e-12);
  // Forward: two all-gathers and two reduce-scatters in all; the rest is hidden.
  EXPECT_NEAR(overlapped.forwardCommMs + overlapped.forwardHiddenCommMs, 4 * cBig, 1e-12);
  // Off: two ring all-reduces (2·(T−1)/T · 2nh / bandwidth each), all exposed.
  const LayerCosts exposed = layerCosts(block(1024, 512, 16), off);
  EXPECT_NEAR(exposed.forwardCommMs, 2 * 2 * c, 1e-12);
  EXPECT_EQ(exposed.forwardHiddenCommMs, 0);
}

// Sequence parallelism without userbuffers (Transformer Engine's Linear with async_op): with
// T = 4 and GEMMs longer than the collectives, the forward all-gathers each module's input and
// reduce-scatters its output in the open (2 × (g + g), g = (T−1)/T · 2nh / 100 GB/s); backward only
// the row-parallel side's output-gradient gather waits (2 × g), the input re-gather and the
// input-gradient reduce-scatter run under the column-parallel dgrad and wgrad (2 × (g + g)
// hidden). An FP8 recipe gathers its cast inputs and gradients: half the bytes (1 of 2 per value).
TEST(RecipeCost, SequenceParallelWithoutUserbuffersOverlapsTheAsyncBackwardCollectives) {
  CostContext ctx = context(Precision::Bf16, 4);
  ctx.parallel.tpCommOverlap = false;
  const double g = ms(3.0 / 4.0 * 2 * n * 8192, 100e9);
  const LayerCosts bf16 = layerCosts(block(8192, 512, 64), ctx);
  EXPECT_NEAR(bf16.forwardCommMs, 2 * (g + g), 1e-9);
  EXPECT_EQ(bf16.forwardHiddenCommMs, 0);
  EXPECT_NEAR(bf16.backwardInputCommMs, 2 * g, 1e-9);
  EXPECT_NEAR(bf16.backwardInputHiddenCommMs, 2 * (g + g), 1e-9);
  ctx.precision = Precision::Fp8;
  const LayerCosts fp8 = layerCosts(block(8192, 512, 64), ctx);
  EXPECT_NEAR(fp8.forwardCommMs, 2 * (g / 2 + g), 1e-9);
  EXPECT_NEAR(fp8.backwardInputCommMs, 2 * g / 2, 1e-9);
  EXPECT_NEAR(fp8.backwardInputHiddenCommMs, 2 * (g / 2 + g), 1e-9);
}

// Gradients reduced in bf16 keep a bf16 accumulation buffer: the distributed optimizer holds
// 2 (weight) + 2 (gradient) + 12/d bytes per parameter instead of 2 + 4 + 12/d.
TEST(RecipeCost, BfloatGradientsHalveTheGradientBuffer) {
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(1, 8, false).total(), 4.0 + 12.0 / 8);
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(1, 8, true).total(), 6.0 + 12.0 / 8);
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(2, 8, false).total(), 2.0 + 14.0 / 8);
}

// Megatron's --recompute-num-layers N with --recompute-method block recomputes the first N
// blocks of each virtual stage; with uniform, every block in groups of N that keep one input
// and rebuild the whole group in the backward.
TEST(RecipeCost, RecomputeNumLayersFollowsTheMethod) {
  ModelSpec model;
  model.name = "four blocks";
  Component c;
  c.name = "backbone";
  for (int i = 0; i < 4; ++i) c.layers.push_back(block(1024, 512, 16));
  model.components.push_back(c);
  ClusterSpec cluster;
  cluster.name = "one";
  cluster.gpu = testGpu();
  cluster.nodes.push_back(NodeSpec{"n", 1, std::nullopt, std::nullopt});
  PlanConfig config;
  config.parallel.recompute = Recompute::Full;
  const VirtualStage stage{0, 0, 0, 0, 0, 3, 0};
  const LayerCosts none = layerCosts(c.layers[0], context(Precision::Bf16, 1, 1));
  CostContext fullCtx = context(Precision::Bf16, 1, 1);
  fullCtx.parallel.recompute = Recompute::Full;
  const LayerCosts full = layerCosts(c.layers[0], fullCtx);

  config.parallel.recomputeNumLayers = 2;
  config.parallel.recomputeMethod = RecomputeMethod::Block;
  const StageCosts blockwise = CostedModel(model, cluster, config).stage(stage);
  EXPECT_EQ(blockwise.activationBytes, 2 * full.activationBytes + 2 * none.activationBytes);
  EXPECT_NEAR(blockwise.backwardInputMs, 2 * full.backwardInputMs + 2 * none.backwardInputMs, 1e-9);

  config.parallel.recomputeMethod = RecomputeMethod::Uniform;
  const StageCosts uniform = CostedModel(model, cluster, config).stage(stage);
  EXPECT_EQ(uniform.activationBytes, 2 * full.activationBytes);  // one input per group of two
  EXPECT_EQ(uniform.recomputeBytes, 2 * none.activationBytes);   // a group rebuilt at once
  EXPECT_NEAR(uniform.backwardInputMs, 4 * full.backwardInputMs, 1e-9);
}

// Megatron's selective modules: layernorm drops the two norm outputs (the QKV and MLP inputs,
// 2·2h per token) and replays the norms in B (read + write h each, 8h bytes per token); mlp keeps
// only the MLP's input (drops FC1's output 2·4h and FC2's input 2·4h).
TEST(RecipeCost, SelectiveModulesDropWhatTheyRecompute) {
  CostContext ctx = context(Precision::Bf16, 1, 2);
  const LayerCosts none = layerCosts(block(1024, 512, 16), ctx);
  ctx.parallel.recompute = Recompute::Selective;
  ctx.parallel.recomputeModules = kRecomputeLayerNorm;
  const LayerCosts norms = layerCosts(block(1024, 512, 16), ctx);
  EXPECT_EQ(none.activationBytes - norms.activationBytes, std::llround(4 * n * h));
  EXPECT_NEAR(norms.backwardInputMs - none.backwardInputMs, ms(8 * n * h, 1e12), 1e-12);
  ctx.parallel.recomputeModules = kRecomputeMlp;
  const LayerCosts mlp = layerCosts(block(1024, 512, 16), ctx);
  EXPECT_EQ(none.activationBytes - mlp.activationBytes, std::llround(16 * n * h));
  EXPECT_GT(mlp.backwardInputMs, none.backwardInputMs);
}

// The catalogue: every GPU has a source, a bf16 peak and memory; fp8 is twice bf16 on Hopper and
// Blackwell, and Hopper has no nvfp4; names and aliases resolve case-insensitively.
// CUDA graphs as Megatron-Core names and checks them (--cuda-graph-impl, --cuda-graph-modules;
// TransformerConfig.__post_init__ at NVIDIA/Megatron-LM d98e8a64).
TEST(RecipeCost, CudaGraphSettingsReadAndCheckedAsMegatronDoes) {
  for (CudaGraphImpl impl :
       {CudaGraphImpl::None, CudaGraphImpl::Local, CudaGraphImpl::TransformerEngine, CudaGraphImpl::FullIteration}) {
    EXPECT_EQ(cudaGraphImplFromName(cudaGraphImplName(impl)), impl);
  }
  EXPECT_EQ(cudaGraphImplName(CudaGraphImpl::TransformerEngine), "transformer_engine");
  EXPECT_FALSE(cudaGraphImplFromName("full").has_value());
  std::string unknown;
  EXPECT_EQ(cudaGraphModulesFromNames("attn, moe_router,moe_preprocess", &unknown),
            kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess);
  EXPECT_EQ(cudaGraphModulesName(kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess), "attn,moe_router,moe_preprocess");
  EXPECT_FALSE(cudaGraphModulesFromNames("attn,router", &unknown).has_value());
  EXPECT_EQ(unknown, "router");

  Parallelism par;
  EXPECT_FALSE(cudaGraphProblem(par).has_value());
  EXPECT_FALSE(par.graphsModule(kGraphAttn));
  par.cudaGraphImpl = CudaGraphImpl::TransformerEngine;
  par.cudaGraphModules = kGraphAttn | kGraphMoeRouter;
  EXPECT_FALSE(cudaGraphProblem(par).has_value());
  EXPECT_TRUE(par.graphsModule(kGraphAttn));
  EXPECT_FALSE(par.graphsModule(kGraphMoePreprocess));
  par.cudaGraphModules = kGraphMoePreprocess;  // without moe_router
  EXPECT_TRUE(cudaGraphProblem(par).has_value());
  par.cudaGraphModules = kGraphMoe | kGraphMoeRouter;
  EXPECT_TRUE(cudaGraphProblem(par).has_value());
  par.cudaGraphModules = kGraphMoeRouter;
  par.recompute = Recompute::Selective;
  par.recomputeModules = kRecomputeMoe;
  EXPECT_TRUE(cudaGraphProblem(par).has_value());
  par.recompute = Recompute::Full;
  EXPECT_TRUE(cudaGraphProblem(par).has_value());  // full recomputation needs full-iteration graphs
  par.cudaGraphImpl = CudaGraphImpl::FullIteration;
  EXPECT_TRUE(cudaGraphProblem(par).has_value());  // which take no modules
  par.cudaGraphModules = 0;
  EXPECT_FALSE(cudaGraphProblem(par).has_value());
  EXPECT_TRUE(par.graphsModule(kGraphMoePreprocess));
}

TEST(GpuCatalog, EntriesCarryTheirDatasheetFigures) {
  ASSERT_GE(gpuCatalog().size(), 9u);
  for (const CatalogGpu& g : gpuCatalog()) {
    EXPECT_FALSE(g.source.empty()) << g.gpu.name;
    EXPECT_GT(g.gpu.peakTflops, 0) << g.gpu.name;
    EXPECT_GT(g.gpu.memoryGib, 0) << g.gpu.name;
    EXPECT_GT(g.nvlinkDomain, 0) << g.gpu.name;
  }
  const CatalogGpu* h100 = findCatalogGpu("h100");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->gpu.name, "H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(h100->gpu.peakTflopsFor(Precision::Fp8), 2 * h100->gpu.peakTflopsFor(Precision::Bf16));
  EXPECT_EQ(h100->gpu.peakTflopsFor(Precision::Nvfp4), 0);
  // fp8-block has no catalogue values of its own: it runs on the fp8 tensor cores at fp8's
  // calibrated efficiency and fill; a GPU without fp8 has no fp8-block either.
  EXPECT_DOUBLE_EQ(h100->gpu.peakTflopsFor(Precision::Fp8Block), h100->gpu.peakTflopsFor(Precision::Fp8));
  EXPECT_DOUBLE_EQ(h100->gpu.efficiencyFor(Precision::Fp8Block), h100->gpu.efficiencyFor(Precision::Fp8));
  EXPECT_NE(h100->gpu.efficiencyFor(Precision::Fp8Block), h100->gpu.efficiencyFor(Precision::Bf16));
  EXPECT_DOUBLE_EQ(h100->gpu.gemmFillKFor(Precision::Fp8Block), h100->gpu.gemmFillKFor(Precision::Fp8));
  const CatalogGpu* a100 = findCatalogGpu("A100");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->gpu.peakTflopsFor(Precision::Fp8Block), 0);
  const CatalogGpu* gb200 = findCatalogGpu("GB200");
  ASSERT_NE(gb200, nullptr);
  EXPECT_EQ(gb200->nvlinkDomain, 72);
  EXPECT_GT(gb200->gpu.peakTflopsFor(Precision::Nvfp4), gb200->gpu.peakTflopsFor(Precision::Fp8));
  EXPECT_EQ(findCatalogGpu("no such GPU"), nullptr);
}

// GPUs without a calibrating run of their own take the calibrated values of the same silicon
// (calibration_from): H200 and the other GH100 parts H100 SXM5's, B300 GB300's; their datasheet
// figures stay their own. Every entry states its compute capability.
TEST(GpuCatalog, SameSiliconSharesItsCalibration) {
  const CatalogGpu* h100 = findCatalogGpu("H100");
  ASSERT_NE(h100, nullptr);
  for (const char* name : {"H200", "H100-NVL", "H100-PCIe"}) {
    const CatalogGpu* g = findCatalogGpu(name);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(g->calibrationFrom, "H100-SXM5-80GB") << name;
    for (Precision p : kPrecisions) EXPECT_DOUBLE_EQ(g->gpu.efficiencyFor(p), h100->gpu.efficiencyFor(p)) << name;
    EXPECT_EQ(g->gpu.attentionEfficiency, h100->gpu.attentionEfficiency) << name;
    EXPECT_EQ(g->gpu.gemmFillK, h100->gpu.gemmFillK) << name;
    EXPECT_DOUBLE_EQ(g->gpu.computeCapability, 9.0) << name;
  }
  EXPECT_DOUBLE_EQ(findCatalogGpu("H200")->gpu.memoryBandwidthGBps, 4800);
  const CatalogGpu* gb300 = findCatalogGpu("GB300");
  const CatalogGpu* b300 = findCatalogGpu("B300");
  ASSERT_NE(gb300, nullptr);
  ASSERT_NE(b300, nullptr);
  for (Precision p : kPrecisions) EXPECT_DOUBLE_EQ(b300->gpu.efficiencyFor(p), gb300->gpu.efficiencyFor(p));
  EXPECT_LT(b300->gpu.peakTflopsFor(Precision::Fp8), gb300->gpu.peakTflopsFor(Precision::Fp8));
  EXPECT_TRUE(b300->gpu.fp8GemmTakesAnyLayout());
  for (const CatalogGpu& g : gpuCatalog()) EXPECT_GT(g.gpu.computeCapability, 0) << g.gpu.name;
  EXPECT_TRUE(h100->calibrationFrom.empty());
}

// An NVL72 rack is one NVLink domain over 18 nodes of 4 GPUs: a TP 8 group spans two nodes and
// stays on NVLink; a data-parallel group beyond the rack takes the NICs.
TEST(GpuCatalog, NvlinkDomainsSpanNodes) {
  ClusterSpec cluster;
  cluster.name = "nvl72";
  cluster.gpu = findCatalogGpu("GB200")->gpu;
  for (int i = 0; i < 36; ++i) cluster.nodes.push_back(NodeSpec{"tray", 4, std::nullopt, std::nullopt});
  cluster.nvlinkDomain = 72;
  cluster.intraNode = LinkSpec{700, 4};
  cluster.interNode = LinkSpec{45, 12};
  const CollectiveLinks links = test::tpDpLinks(cluster, 8, 16);
  EXPECT_FALSE(links.tensor.crossesNodes);
  EXPECT_DOUBLE_EQ(links.tensor.bandwidthGBps, 700);
  EXPECT_TRUE(links.data.crossesNodes);
  EXPECT_TRUE(cluster.sameNvlinkDomain(0, 71));
  EXPECT_FALSE(cluster.sameNvlinkDomain(71, 72));
  EXPECT_DOUBLE_EQ(cluster.transferMs(3, 4, 700e6), 1.0 + 0.004);  // node 0 → node 1, same rack
}

// --- torchtitan's recipe (issue 42): its kernels, its per-op checkpointing, AsyncTP ---
namespace {

// Llama's block as torchtitan builds it, in round numbers: hidden 1024, 16 heads with 4
// key/value heads (GQA: Q 1024 wide, K and V 256), SwiGLU of 2816, no dropout; 2 × 512 tokens.
Layer llamaBlock() {
  Layer l = block(1024, 512, 16);
  l.transformer->kvHeads = 4;
  l.transformer->ffn = 2816;
  l.transformer->mlp = MlpKind::SwiGlu;
  l.transformer->dropout = false;
  return l;
}

CostContext torchtitan(Precision p = Precision::Bf16, Recompute rc = Recompute::None, bool compiled = true) {
  CostContext c = context(p);
  c.parallel.framework = Framework::Torchtitan;
  c.parallel.recompute = rc;
  c.parallel.torchCompile = compiled;
  return c;
}

// The compiled block's element-wise bytes (torchtitanElementwise): two norms read and write
// 2 bytes per value (4·2h per token), the two residual adds 6 bytes (12h), RoPE on Q and K 4
// bytes (4·1280), repeat_kv reads K and V and writes them at the query width (2·2·(256 + 1024)),
// the attention output's contiguous copy (2·2·1024), SwiGLU 6 bytes per ffn value (6·2816).
constexpr double kCompiledBytesPerToken =
    8.0 * 1024 + 12.0 * 1024 + 4.0 * 1280 + 4.0 * (256 + 1024) + 4.0 * 1024 + 6.0 * 2816;

}  // namespace

// torch.compile fuses the element-wise ops between the matmuls and SDPA; eager runs one kernel
// per PyTorch op: RMSNorm 36 bytes per value instead of 4, RoPE 20 instead of 4, SiLU and the
// gate multiply 10 instead of 6 (torchtitan's norms.py and model.py at 9dec370). Backward moves
// twice the forward's element-wise bytes.
TEST(TorchtitanCost, EagerBlocksMoveMoreBytesThanCompiledOnes) {
  const Layer l = llamaBlock();
  const LayerCosts compiled = layerCosts(l, torchtitan());
  const LayerCosts eager = layerCosts(l, torchtitan(Precision::Bf16, Recompute::None, false));
  const double extraBytes = n * (2.0 * (36 - 4) * h + (20 - 4) * 1280.0 + (10 - 6) * 2816.0);
  EXPECT_NEAR(eager.forwardMs - compiled.forwardMs, ms(extraBytes, 1e12), 1e-12);
  EXPECT_NEAR(eager.backwardInputMs - compiled.backwardInputMs, ms(2 * extraBytes, 1e12), 1e-12);
  EXPECT_EQ(eager.activationBytes, compiled.activationBytes);
}

// Per-op selective checkpointing in bf16: of the matmuls wq, wk, wv, wo, w1, w3, w2 every second
// output is recomputed (compiled: wk and w3; wo's output is not read by the backward), with
// every element-wise op; kept per token are the block input (2h), the attention output (2·1024)
// and its fp32 log-sum-exp (4·16), Q (2·1024), V (2·256), w1's (2·2816) and w2's (2h) outputs.
TEST(TorchtitanCost, OpPolicyKeepsEveryOtherMatmulOutput) {
  const Layer l = llamaBlock();
  const LayerCosts none = layerCosts(l, torchtitan());
  const LayerCosts sac = layerCosts(l, torchtitan(Precision::Bf16, Recompute::Selective));
  const double keptPerToken = 2 * h + 2 * 1024.0 + 4 * a + 2 * (1024.0 + 256 + 2816) + 2 * h;
  EXPECT_EQ(sac.activationBytes, std::llround(n * keptPerToken));
  EXPECT_EQ(sac.recomputeBytes, none.activationBytes - sac.activationBytes);
  const double replayFlops = 2 * n * 256 * h + 2 * n * 2816 * h;  // wk and w3, forward
  EXPECT_NEAR(sac.backwardInputMs - none.backwardInputMs,
              ms(replayFlops, 100e12 * 0.5) + ms(n * kCompiledBytesPerToken, 1e12), 1e-12);
  EXPECT_DOUBLE_EQ(sac.forwardMs, none.forwardMs);
  // Eager replays wo too (2·n·h·1024 FLOPs more).
  const LayerCosts eager = layerCosts(l, torchtitan(Precision::Bf16, Recompute::Selective, false));
  const LayerCosts eagerNone = layerCosts(l, torchtitan(Precision::Bf16, Recompute::None, false));
  EXPECT_GT(eager.backwardInputMs - eagerNone.backwardInputMs - ms(2 * n * h * 1024, 100e12 * 0.5),
            sac.backwardInputMs - none.backwardInputMs);
}

// With Float8 the linears run aten._scaled_mm, which the policy does not save: every linear's
// forward is replayed with its casts (per-tensor scaling: 6 bytes per value of each GEMM input,
// QKV and w1/w3 read h, wo 1024, w2 2816 per token), and only the block input and the attention
// output with its log-sum-exp are kept.
TEST(TorchtitanCost, Float8OpPolicyReplaysEveryLinear) {
  const Layer l = llamaBlock();
  const LayerCosts none = layerCosts(l, torchtitan(Precision::Fp8));
  const LayerCosts sac = layerCosts(l, torchtitan(Precision::Fp8, Recompute::Selective));
  EXPECT_EQ(sac.activationBytes, std::llround(n * (2 * h + 2 * 1024.0 + 4 * a)));
  const double gemmFlops =
      2 * n * h * (1024.0 + 256 + 256) + 2 * n * 1024 * h + 2 * n * h * 2 * 2816 + 2 * n * 2816 * h;
  const double castBytes = 6.0 * n * (h + 1024 + h + 2816);
  EXPECT_NEAR(sac.backwardInputMs - none.backwardInputMs,
              ms(gemmFlops, 200e12 * 0.5) + ms(castBytes, 1e12) + ms(n * kCompiledBytesPerToken, 1e12), 1e-12);
}

// AsyncTP on a link fast enough that every decomposed collective hides under its GEMM: what
// shows is what nothing hides. Forward per module: the all-gather's local shard copy into the
// symmetric buffer (read and write hidden/T) and the reduce-scatter's reduction of its T partial
// chunks (read hidden, write hidden/T). Backward per module: the output-gradient all-gather's
// copy, and the input-gradient reduce-scatter, which follows a sum of dgrads and stays NCCL's.
TEST(TorchtitanCost, AsyncTpShowsItsCopiesAndTheBackwardReduceScatters) {
  CostContext ctx = torchtitan();
  ctx.parallel.tensor = 8;
  ctx.parallel.sequenceParallel = true;
  ctx.parallel.tpCommOverlap = true;
  ctx.links.tensor = CollectiveLink{1e6, 0, false};
  const LayerCosts c = layerCosts(llamaBlock(), ctx);
  const double hidden = 2.0 * n * h;
  const double copyMs = ms(2.0 * hidden / 8, 1e12);
  const double reduceMs = ms(hidden + hidden / 8, 1e12);
  const double scatterMs = 7.0 / 8 * hidden / 1e12;  // 1e6 GB/s = 1e12 bytes per ms
  EXPECT_NEAR(c.forwardCommMs, 2 * (copyMs + reduceMs), 1e-12);
  EXPECT_NEAR(c.backwardInputCommMs, 2 * (copyMs + scatterMs), 1e-12);
  // Megatron's userbuffers on the same link: the reduce-scatters' last chunk only.
  ctx.parallel.framework = Framework::Megatron;
  const LayerCosts te = layerCosts(llamaBlock(), ctx);
  EXPECT_NEAR(te.forwardCommMs, 2 * scatterMs / 8, 1e-12);
}
