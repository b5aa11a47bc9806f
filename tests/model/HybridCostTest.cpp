// The hybrid-parallel cost model (issue 13): one hand-computed case per formula, parallelism
// kind and recompute mode. Expected values are written out from the papers' formulas, not
// computed by the code under test.
#include <gtest/gtest.h>

#include <cmath>

#include "CostFixtures.hpp"
#include "CostParts.hpp"
#include "pipestudio/model/CostModel.hpp"

using namespace pipestudio;

namespace {

// A GPU with round numbers and no shape effects (no SM count): 100 TFLOP/s peak at 50 %,
// 1 TB/s of HBM.
GpuSpec testGpu() { return test::roundGpu(); }

Layer block(std::int64_t h, std::int64_t s, std::int64_t a) { return test::gptBlock(h, s, a); }

CostContext context(int tp = 1, bool sp = false, Recompute rc = Recompute::None, std::int64_t b = 1) {
  CostContext c;
  c.gpu = testGpu();
  c.parallel.tensor = tp;
  c.parallel.sequenceParallel = sp;
  c.parallel.recompute = rc;
  c.samplesPerMicrobatch = b;
  test::setRoundLinks(c.links);
  return c;
}

constexpr double h = 1024, s = 512, a = 16, b = 2;  // NOLINT(readability-identifier-naming): the paper's symbols

}  // namespace

// Korthikanti et al. 2022 §4.1: s·b·h·(34 + 5·a·s/h) bytes without parallelism (GELU MLP of
// 4h, multi-head attention, dropout, an unfused attention kernel).
TEST(HybridCost, ActivationsWithoutParallelismFollowKorthikanti) {
  Layer l = block(1024, 512, 16);
  l.transformer->attention = AttentionKind::Standard;
  const LayerCosts c = layerCosts(l, context(1, false, Recompute::None, 2));
  EXPECT_EQ(c.activationBytes, std::llround(s * b * h * (34 + 5 * a * s / h)));
}

// §4.2.1 tensor parallelism without sequence parallelism: s·b·h·(10 + 24/t + 5·a·s/(h·t)).
TEST(HybridCost, TensorParallelActivationsFollowKorthikanti) {
  Layer l = block(1024, 512, 16);
  l.transformer->attention = AttentionKind::Standard;
  const double t = 4;
  const LayerCosts c = layerCosts(l, context(4, false, Recompute::None, 2));
  EXPECT_EQ(c.activationBytes, std::llround(s * b * h * (10 + 24 / t + 5 * a * s / (h * t))));
}

// §4.2.2 tensor + sequence parallelism: s·b·h/t·(34 + 5·a·s/h).
TEST(HybridCost, SequenceParallelActivationsFollowKorthikanti) {
  Layer l = block(1024, 512, 16);
  l.transformer->attention = AttentionKind::Standard;
  const double t = 4;
  const LayerCosts c = layerCosts(l, context(4, true, Recompute::None, 2));
  EXPECT_EQ(c.activationBytes, std::llround(s * b * h / t * (34 + 5 * a * s / h)));
}

// FlashAttention keeps no s² scores: 34·s·b·h plus the fp32 log-sum-exp per head and token.
TEST(HybridCost, FlashAttentionDropsTheScoreMatrix) {
  const LayerCosts c = layerCosts(block(1024, 512, 16), context(1, false, Recompute::None, 2));
  EXPECT_EQ(c.activationBytes, std::llround(s * b * h * 34 + 4 * a * s * b));
}

// §5 selective recomputation: the attention core is replayed, the 5·a·s²·b term is gone and B
// grows by the forward attention core (4·b·s²·h FLOPs plus its score traffic).
TEST(HybridCost, SelectiveRecomputeDropsScoresAndReplaysTheCore) {
  Layer l = block(1024, 512, 16);
  l.transformer->attention = AttentionKind::Standard;
  const LayerCosts none = layerCosts(l, context(1, false, Recompute::None, 2));
  const LayerCosts sel = layerCosts(l, context(1, false, Recompute::Selective, 2));
  EXPECT_EQ(sel.activationBytes, std::llround(s * b * h * 34));
  // Standard causal attention computes the whole score matrix: 4·b·s²·h FLOPs at 50 TFLOP/s,
  // plus 13 bytes per score (a·s·s·b scores) at 1 TB/s.
  const double coreMs = 4 * b * s * s * h / 50e12 * 1000 + a * s * s * b * 13 / 1e12 * 1000;
  EXPECT_NEAR(sel.backwardInputMs - none.backwardInputMs, coreMs, 1e-9);
  EXPECT_DOUBLE_EQ(sel.forwardMs, none.forwardMs);
}

// With FlashAttention, selective recomputation changes nothing (nothing s² is held).
TEST(HybridCost, SelectiveRecomputeIsANoOpWithFlash) {
  const LayerCosts none = layerCosts(block(1024, 512, 16), context(1, false, Recompute::None, 2));
  const LayerCosts sel = layerCosts(block(1024, 512, 16), context(1, false, Recompute::Selective, 2));
  EXPECT_EQ(sel.activationBytes, none.activationBytes);
  EXPECT_DOUBLE_EQ(sel.backwardInputMs, none.backwardInputMs);
}

// §5 full recomputation: only the layer input (2·s·b·h bytes, /t with sequence parallelism);
// B replays the whole forward, collectives included.
TEST(HybridCost, FullRecomputeKeepsTheInputAndReplaysTheForward) {
  const LayerCosts none = layerCosts(block(1024, 512, 16), context(4, true, Recompute::None, 2));
  const LayerCosts full = layerCosts(block(1024, 512, 16), context(4, true, Recompute::Full, 2));
  EXPECT_EQ(full.activationBytes, std::llround(2 * s * b * h / 4));
  EXPECT_NEAR(full.backwardInputMs, none.backwardInputMs + none.forwardMs, 1e-9);
  EXPECT_NEAR(full.backwardInputCommMs, none.backwardInputCommMs + none.forwardCommMs, 1e-12);
  EXPECT_EQ(full.weightGradBytes, 0);
}

// Megatron tensor parallelism: two all-reduces of the s·b·h bf16 hidden states per layer in the
// forward and two in the backward; ring all-reduce 2(t−1)/t · B / bandwidth.
TEST(HybridCost, TensorParallelCollectivesAreTwoAllReducesPerPass) {
  const LayerCosts c = layerCosts(block(1024, 512, 16), context(4, false, Recompute::None, 2));
  const double bytes = 2 * s * b * h;
  const double oneMs = 2.0 * 3.0 / 4.0 * bytes / (100e9) * 1000;
  EXPECT_NEAR(c.forwardCommMs, 2 * oneMs, 1e-12);
  EXPECT_NEAR(c.backwardInputCommMs, 2 * oneMs, 1e-12);
  EXPECT_EQ(c.backwardWeightCommMs, 0);
  // Each GPU sends its 1/t share of the hidden states downstream.
  EXPECT_EQ(c.outputBytes, std::llround(bytes / 4));
}

// Korthikanti et al. 2022 Table 4: a 22B layer at TP 8 is slower than an eighth of TP 1 (the
// all-reduces and the replicated norm/dropout work do not shrink).
TEST(HybridCost, TensorParallelDoesNotScaleLinearly) {
  Layer l = block(6144, 2048, 64);
  CostContext one = context(1, false, Recompute::None, 4);
  CostContext eight = context(8, false, Recompute::None, 4);
  one.gpu.smCount = eight.gpu.smCount = 108;
  const LayerCosts c1 = layerCosts(l, one);
  const LayerCosts c8 = layerCosts(l, eight);
  EXPECT_GT(c8.forwardMs, c1.forwardMs / 8 * 1.05);
  EXPECT_GT(c8.backwardInputMs, c1.backwardInputMs / 8 * 1.05);
  // Sequence parallelism splits the replicated element-wise work: faster at the same volume.
  CostContext eightSp = context(8, true, Recompute::None, 4);
  eightSp.gpu.smCount = 108;
  EXPECT_LT(layerCosts(l, eightSp).forwardMs, c8.forwardMs);
}

// Context parallelism splits the sequence: activations halve at C = 2; the ring's K/V exchange
// is hidden under the attention core until the link is slow.
TEST(HybridCost, ContextParallelSplitsTheSequence) {
  CostContext one = context();
  CostContext two = context();
  two.parallel.context = 2;
  one.samplesPerMicrobatch = two.samplesPerMicrobatch = 2;
  const LayerCosts c1 = layerCosts(block(1024, 512, 16), one);
  const LayerCosts c2 = layerCosts(block(1024, 512, 16), two);
  EXPECT_EQ(c2.activationBytes, std::llround(static_cast<double>(c1.activationBytes) / 2.0));
  two.links.context = CollectiveLink{1e6, 0, false};  // a link fast enough to hide the exchange
  EXPECT_EQ(layerCosts(block(1024, 512, 16), two).forwardCommMs, 0);
  // A 1 MB/s link cannot: one ring step sends K and V of this rank's s·b/2 tokens (bf16).
  two.links.context = CollectiveLink{0.001, 0, true};
  const LayerCosts slow = layerCosts(block(1024, 512, 16), two);
  const double ringMs = 2 * 2 * (s * b / 2) * h / 1e6 * 1000;
  EXPECT_GT(slow.forwardCommMs, 0.9 * ringMs);
  EXPECT_LE(slow.forwardCommMs, ringMs);
}

// Grouped-query attention and SwiGLU (Llama 2 §2.2; Shazeer 2020): parameters h·(h + 2·h_kv) +
// h² + 3·h·ffn (+ 2h norms); activations 4h + 4·h_kv + 6·ffn per token in the split part.
TEST(HybridCost, GroupedQueryAttentionAndSwiGlu) {
  Layer l = block(1024, 512, 16);
  l.transformer->kvHeads = 4;  // h_kv = 4 · 64 = 256
  l.transformer->mlp = MlpKind::SwiGlu;
  l.transformer->ffn = 2816;
  l.transformer->dropout = false;
  const LayerCosts c = layerCosts(l, context(1, false, Recompute::None, 2));
  const double hkv = 256, f = 2816;
  EXPECT_EQ(c.parameterBytes, std::llround(2 * (h * (h + 2 * hkv) + h * h + 3 * h * f + 2 * h)));
  EXPECT_DOUBLE_EQ(c.modelParameters, h * (h + 2 * hkv) + h * h + 3 * h * f + 2 * h);
  // Per token: 8h replicated (two norm inputs, QKV and MLP inputs), 4h + 4·h_kv + 4a (flash
  // LSE) + 6f split.
  EXPECT_EQ(c.activationBytes, std::llround(s * b * (8 * h + 4 * h + 4 * hkv + 4 * a + 6 * f)));
  // Forward model FLOPs: 2·n·h·(h + 2·h_kv) + 2·n·h² + 6·n·h·f + 4·b·s²·h.
  const double n = s * b;
  EXPECT_DOUBLE_EQ(c.modelFlopsForward, 2 * n * h * (h + 2 * hkv) + 2 * n * h * h + 6 * n * h * f + 4 * b * s * s * h);
}

namespace {

// A SwiGLU block of 8 experts of FFN 2048, top-2, and its context: EP 4 within DP 4.
Layer moeBlock() {
  Layer l = block(1024, 512, 16);
  l.transformer->mlp = MlpKind::SwiGlu;
  l.transformer->experts = 8;
  l.transformer->topK = 2;
  l.transformer->expertFfn = 2048;
  return l;
}

CostContext moeContext() {
  CostContext ctx = context(1, false, Recompute::None, 2);
  ctx.parallel.expert = 4;
  ctx.parallel.data = 4;
  return ctx;
}

}  // namespace

// Mixture of experts (Mixtral §2.1): each token to top_k of the experts; expert parallelism E
// holds experts/E of them per GPU and moves tokens with an all-to-all to dispatch and one to
// combine, per pass.
TEST(HybridCost, MixtureOfExpertsWithExpertParallelism) {
  const Layer l = moeBlock();
  CostContext ctx = moeContext();
  const LayerCosts c = layerCosts(l, ctx);
  const double fe = 2048;
  EXPECT_EQ(c.expertParameterBytes, std::llround(2 * (8.0 / 4) * 3 * h * fe));
  EXPECT_EQ(c.parameterBytes, std::llround(2 * (h * 3 * h + h * h + 2 * h + h * 8 + (8.0 / 4) * 3 * h * fe)));
  // Model FLOPs count the two routed experts a token uses (and the router).
  const double n = s * b;
  EXPECT_DOUBLE_EQ(c.modelFlopsForward,
                   2 * n * h * 3 * h + 2 * n * h * h + 2 * n * h * 8 + 2 * 2 * 3 * n * h * fe + 4 * b * s * s * h);
  // Dispatch bytes: every token's hidden state to each of its top-2 experts (bf16); all-to-all
  // over 4 ranks moves 3/4 of them.
  const double a2aMs = 3.0 / 4.0 * (2 * n * 2 * h) / 100e9 * 1000;
  // The forward also waits for the dispatcher's token counts on the host: the measured round trip
  // less what the first permutation (read n rows, write 2n copies of 2h bytes) covers.
  const double permutationMs = 2 * h * (n + 2 * n) / 1e12 * 1000;
  EXPECT_NEAR(c.forwardCommMs, 2 * a2aMs + (costparts::kMeasuredD2hRoundTripMs - permutationMs), 1e-12);
  EXPECT_NEAR(c.backwardInputCommMs, 2 * a2aMs, 1e-12);
}

// CUDA graphs (issue 43). Time: the published A/Bs remove no launch time on H100 (docs/fidelity.md),
// so only what graphs move changes it: with moe_preprocess graphed the all-to-all dispatcher's
// token counts start for the host at the all-to-all, and the permutation that covered part of
// the round trip no longer does. Memory: each graphed module's input is copied into a static
// buffer for the microbatch (attention and the MoE block up to its router: two n × h bf16 copies;
// the whole layer: one; one full-iteration graph: none).
TEST(HybridCost, CudaGraphsMoveTheDispatchersHostWaitAndHoldTheirInputs) {
  const Layer l = moeBlock();
  CostContext ctx = moeContext();
  const LayerCosts eager = layerCosts(l, ctx);
  ctx.parallel.cudaGraphImpl = CudaGraphImpl::TransformerEngine;
  ctx.parallel.cudaGraphModules = kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess;
  const LayerCosts graphed = layerCosts(l, ctx);
  const double n = s * b;
  const double permutationMs = 2 * h * (n + 2 * n) / 1e12 * 1000;
  EXPECT_NEAR(graphed.forwardMs - eager.forwardMs, permutationMs, 1e-12);
  EXPECT_DOUBLE_EQ(graphed.backwardInputMs, eager.backwardInputMs);
  EXPECT_EQ(graphed.activationBytes - eager.activationBytes, std::llround(2 * 2 * n * h));
  ctx.parallel.cudaGraphModules = 0;  // the whole layer
  EXPECT_EQ(layerCosts(l, ctx).activationBytes - eager.activationBytes, std::llround(2 * n * h));
  ctx.parallel.cudaGraphImpl = CudaGraphImpl::FullIteration;
  EXPECT_EQ(layerCosts(l, ctx).activationBytes, eager.activationBytes);
}

// ZeRO (Rajbhandari et al. 2020) over d = 8 replicas: 18, 6 + 12/8, 2 + 16/8, 18/8 bytes per
// parameter for stages 0–3.
TEST(HybridCost, ZeroStagesShardStaticMemory) {
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(0, 8).total(), 18.0);
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(1, 8).total(), 6.0 + 12.0 / 8);
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(2, 8).total(), 2.0 + 16.0 / 8);
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(3, 8).total(), 18.0 / 8);
}

// ZeRO-3 gathers each layer's parameters over the data-parallel group in every pass; with a
// slow link the part the compute cannot hide shows in F.
TEST(HybridCost, ZeroThreeGathersParametersPerPass) {
  CostContext ctx = context(1, false, Recompute::None, 2);
  ctx.parallel.data = 4;
  ctx.parallel.zeroStage = 3;
  ctx.links.data = CollectiveLink{0.01, 0, true};  // 10 MB/s
  const LayerCosts plain = layerCosts(block(1024, 512, 16), context(1, false, Recompute::None, 2));
  const LayerCosts z3 = layerCosts(block(1024, 512, 16), ctx);
  const double gatherMs = 3.0 / 4.0 * static_cast<double>(plain.parameterBytes) / 0.01e9 * 1000;
  EXPECT_NEAR(z3.forwardMs, gatherMs, 1e-6 * gatherMs);  // the gather dominates
  // The FSDP unit's buffers: the gathered bf16 weights and the unsharded gradient in the reduce
  // type (bf16 here), one parameter's worth each.
  EXPECT_EQ(z3.fsdpGatherBytes, plain.parameterBytes);
  EXPECT_EQ(z3.fsdpGradientBytes, plain.parameterBytes);
  ctx.parallel.gradReduceInFp32 = true;
  EXPECT_EQ(layerCosts(block(1024, 512, 16), ctx).fsdpGradientBytes, 2 * plain.parameterBytes);
  EXPECT_EQ(plain.fsdpGatherBytes, 0);  // no ZeRO-3, no unit buffers
}

// NCCL's choice between ring and tree all-reduce: the tree's log-depth latency wins for small
// messages on many ranks, the ring's bandwidth term for large ones.
TEST(HybridCost, AllReducePicksRingOrTree) {
  const CollectiveLink link{10, 10, true};  // 10 GB/s, 10 µs
  const double small = 1e3, large = 1e9;
  const double ringSmall = 2.0 * 63 / 64 * small / 10e6 + 2.0 * 63 * 0.01;
  const double treeSmall = 2.0 * small / 10e6 + 2.0 * 6 * 0.01;
  EXPECT_DOUBLE_EQ(allReduceMs(link, 64, small), std::min(ringSmall, treeSmall));
  EXPECT_DOUBLE_EQ(allReduceMs(link, 64, small), treeSmall);
  const double ringLarge = 2.0 * 63 / 64 * large / 10e6 + 2.0 * 63 * 0.01;
  EXPECT_DOUBLE_EQ(allReduceMs(link, 64, large), ringLarge);
  EXPECT_DOUBLE_EQ(allGatherMs(link, 4, large), 3.0 / 4 * large / 10e6 + 3 * 0.01);
}

namespace {

// Four 8-GPU nodes, NVLink at 300 GB/s (3 µs) inside, 4 NICs of 50 GB/s (10 µs) each between.
ClusterSpec fourNodesOfEightWithFourNics() {
  ClusterSpec cluster;
  cluster.nodes.assign(4, NodeSpec{"n", 8, std::nullopt, std::nullopt});
  cluster.intraNode = LinkSpec{300, 3};
  cluster.interNode = LinkSpec{50, 10};
  cluster.nicsPerNode = 4;
  return cluster;
}

}  // namespace

// Placement (Megatron order): TP inside a node, DP across nodes sharing the node's NICs.
TEST(HybridCost, CollectiveLinksFollowPlacement) {
  const ClusterSpec cluster = fourNodesOfEightWithFourNics();
  const CollectiveLinks links = test::tpDpLinks(cluster, 8, 4);
  EXPECT_EQ(links.tensor.bandwidthGBps, 300);
  EXPECT_FALSE(links.tensor.crossesNodes);
  EXPECT_TRUE(links.data.crossesNodes);
  EXPECT_DOUBLE_EQ(links.data.bandwidthGBps, 50.0 * 4 / 8);  // 4 NICs for 8 GPUs
  // One data-parallel rank per node: every step of its ring crosses, a flat ring at the share.
  EXPECT_EQ(links.data.ranksPerDomain, 1);
  EXPECT_DOUBLE_EQ(allGatherMs(links.data, 4, 1e9), 3.0 / 4 * 1e9 / 25e6 + 3 * 0.010);
}

// NCCL's ring over a data-parallel group of 512 GB200s (T 1): 72 of its ranks share each NVL72
// rack, so its ring leaves a rack once per channel (at most 64), each through another rank's
// NIC, and the rest of the ring stays on NVLink (src/graph/tuning.cc). Hand-computed for a
// 16 GB reduce-scatter (Llama 3.1 8B's bf16 gradients): each GPU sends 511/512 · 16e9 bytes,
// 71/72 of it on NVLink at 700 GB/s, 1/64 of it (64 exits) on each NIC at 45 GB/s, at once;
// latency 504 NVLink steps of 4 µs and 7 network steps of 12 µs (8 domains).
TEST(HybridCost, RackScaleDataParallelRingIsHierarchical) {
  ClusterSpec cluster;
  cluster.nodes.assign(128, NodeSpec{"tray", 4, std::nullopt, std::nullopt});
  cluster.nvlinkDomain = 72;
  cluster.intraNode = LinkSpec{700, 4};
  cluster.interNode = LinkSpec{45, 12};
  Parallelism par;
  par.data = 512;
  const CollectiveLinks links = collectiveLinks(cluster, par);
  ASSERT_TRUE(links.data.crossesNodes);
  EXPECT_EQ(links.data.ranksPerDomain, 72);
  EXPECT_DOUBLE_EQ(links.data.nvlinkGBps, 700);
  EXPECT_DOUBLE_EQ(links.data.bandwidthGBps, 45);
  const double bytes = 16e9;
  const double sent = 511.0 / 512.0 * bytes;
  const double nvlinkMs = sent * 71.0 / 72.0 / 700e6;
  const double nicMs = sent / (64 * 45e6);
  ASSERT_GT(nvlinkMs, nicMs);  // NVLink-bound: the NICs carry 1/64 each
  const double latencyMs = (504 * 4.0 + 7 * 12.0) / 1000.0;
  EXPECT_NEAR(allGatherMs(links.data, 512, bytes), nvlinkMs + latencyMs, 1e-9);
  // The flat ring at the NIC rate it replaces: 14 times slower.
  const double flatMs = sent / 45e6 + 511 * 0.012;
  EXPECT_GT(flatMs / allGatherMs(links.data, 512, bytes), 14.0);
  // All-reduce: the ring sends twice as much on the same links over 1,022 steps (nInterSteps
  // 2(N − 1)); NCCL's tree moves 2·B through each GPU's NVLink chain and over the 64 channels'
  // NICs with a log-depth latency (2·(71 NVLink steps + ⌈log2 8⌉ network steps)), and wins here.
  const double ringAllReduceMs = 2.0 * nvlinkMs + (2 * 511 - 14) * 0.004 + 14 * 0.012;
  const double treeMs = 2.0 * bytes / 700e6 + 2.0 * (71 * 0.004 + 3 * 0.012);
  ASSERT_LT(treeMs, ringAllReduceMs);
  EXPECT_NEAR(allReduceMs(links.data, 512, bytes), treeMs, 1e-9);
}

// Two ranks per domain over few NICs: the NICs bound the ring. TP 4 × DP 8 on 8-GPU nodes with
// 4 NICs each (a GPU's share 50 · 4 / 8 = 25 GB/s): 2 DP ranks per node, 4 nodes; each GPU
// sends 7/8 · B, half over its NIC share (2 channels leave each node), half on NVLink.
TEST(HybridCost, FewRanksPerDomainAreBoundByTheirNics) {
  const ClusterSpec cluster = fourNodesOfEightWithFourNics();
  const CollectiveLinks links = test::tpDpLinks(cluster, 4, 8);
  EXPECT_EQ(links.data.ranksPerDomain, 2);
  const double bytes = 1e9;
  const double sent = 7.0 / 8.0 * bytes;
  const double nicMs = sent / (2 * 25e6);
  const double latencyMs = (4 * 3.0 + 3 * 10.0) / 1000.0;  // 7 steps: 4 inside nodes, 3 between
  EXPECT_NEAR(allGatherMs(links.data, 8, bytes), nicMs + latencyMs, 1e-9);
}

// NVLink SHARP (NCCL's NVLS): an all-reduce inside an H100 board runs at its ring's bus
// bandwidth × 2 · 0.85 · 15/16 (tuning.cc: Hopper's nvlsEfficiency, 16 channels, both halves
// pipelined through the switch) plus NVLS's 25 µs; reduce-scatter and all-gather keep the ring.
// A group with one rank per domain has no switch to use.
TEST(HybridCost, NvlsSpeedsUpAllReduceInsideADomain) {
  GpuSpec gpu;
  gpu.nvlsEfficiency = 0.85;
  gpu.nvlsChannels = 16;
  EXPECT_DOUBLE_EQ(nvlsAllReduceFactor(gpu), 2 * 0.85 * 15.0 / 16.0);
  ClusterSpec cluster;
  cluster.gpu = gpu;
  cluster.nodes.assign(2, NodeSpec{"n", 8, std::nullopt, std::nullopt});
  cluster.intraNode = LinkSpec{350, 4};
  cluster.interNode = LinkSpec{45, 15};
  const CollectiveLinks links = test::tpDpLinks(cluster, 8, 2);
  const double bytes = 1e9;
  const double nvls = 2.0 * 7 / 8 * bytes / (350e6 * 2 * 0.85 * 15 / 16) + 0.025;
  const double ring = 2.0 * 7 / 8 * bytes / 350e6 + 14 * 0.004;
  ASSERT_LT(nvls, ring);
  EXPECT_NEAR(allReduceMs(links.tensor, 8, bytes), nvls, 1e-9);
  EXPECT_NEAR(allGatherMs(links.tensor, 8, bytes), 7.0 / 8 * bytes / 350e6 + 7 * 0.004, 1e-9);
  EXPECT_EQ(links.data.ranksPerDomain, 1);
  EXPECT_NEAR(allReduceMs(links.data, 2, bytes), bytes / 45e6 + 2 * 0.015, 1e-9);  // the flat ring
  cluster.nvls = false;                                                            // switches without NVLS
  EXPECT_NEAR(allReduceMs(test::tpDpLinks(cluster, 8, 2).tensor, 8, bytes), ring, 1e-9);
}

// The weight-gradient pass is the weight GEMMs only; the Zero Bubble paper profiled T_W at
// 0.50–0.74 of T_F on GPT models (its Table 6 / arXiv Table 9). The element-wise kernels and the
// attention core keep it well below F.
TEST(HybridCost, WeightGradientIsAFractionOfTheForward) {
  Layer l = block(2304, 1024, 24);  // the 1.5B model's layer
  l.transformer->attention = AttentionKind::Standard;
  CostContext ctx = context(1, false, Recompute::None, 6);
  ctx.gpu.peakTflops = 312;
  ctx.gpu.efficiency = 0.5;
  ctx.gpu.memoryBandwidthGBps = 2039;
  ctx.gpu.smCount = 108;
  const LayerCosts c = layerCosts(l, ctx);
  const double ratio = c.backwardWeightMs / c.forwardMs;
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.8);
  EXPECT_GT(c.backwardInputMs, c.forwardMs * 0.9);
}
