// The cost model of issue 26 — the FlashAttention kernel model, context parallelism's exchange,
// the mixture-of-experts layer and the attention shapes of today's models — one hand-computed
// case per formula. Expected values are written out from the formulas' sources (cited in
// AttentionKernel.cpp, ContextParallel.cpp, MoeCosts.cpp and CostModel.cpp), not computed by the
// code under test.
#include <gtest/gtest.h>

#include <cmath>

#include "CostFixtures.hpp"
#include "CostParts.hpp"
#include "pipestudio/model/CostModel.hpp"

using namespace pipestudio;
using namespace pipestudio::costparts;

namespace {

// Round numbers, no shape effects (no SM count): 100 TFLOP/s bf16 at 50 %, 1 TB/s of HBM, no
// published attention figures (attention runs at the bf16 efficiency with the kernel's terms).
GpuSpec testGpu() { return test::roundGpu(); }

constexpr double kRate = 100e12 * 0.5;  // FLOP/s
constexpr double kScoresPerTile = 128.0 * 128.0;

double ms(double flops, double rate = kRate) { return flops / rate * 1000.0; }

// Links of a cluster of 8-GPU NVLink domains: NVLink 100 GB/s, network 10 GB/s, no latency.
CollectiveLinks links(std::int64_t domain = 8) {
  CollectiveLinks l;
  l.nvlink = CollectiveLink{100, 0, false};
  l.network = CollectiveLink{10, 0, true};
  l.domainGpus = domain;
  l.tensor = l.context = l.expert = l.nvlink;
  l.data = l.network;
  return l;
}

}  // namespace

// --- FlashAttention kernel model ---

// Non-causal 512 × 512, head dim 128: 4 × 4 tiles plus one fill tile per query tile (forward),
// three per key tile (backward); 2·(128 + 128) FLOPs per score forward, 2·(3·128 + 2·128)
// backward, at the bf16 rate.
TEST(FlashAttention, FullBlockCountsItsTilesAndFill) {
  const FlashTimes t = flashAttention(testGpu(), {2, 512, 512, 128, 128, false, 0});
  EXPECT_DOUBLE_EQ(t.tiles, 16);
  EXPECT_NEAR(t.forwardMs, ms(2 * (16 + 4) * kScoresPerTile * 512), 1e-12);
  EXPECT_NEAR(t.backwardMs, ms(2 * (16 + 3 * 4) * kScoresPerTile * 1280), 1e-12);
}

// Causal: query tile i visits i + 1 key tiles, the diagonal computed whole: 1 + 2 + 3 + 4 = 10.
TEST(FlashAttention, CausalVisitsTheTilesUpToTheDiagonal) {
  const FlashTimes t = flashAttention(testGpu(), {1, 512, 512, 128, 128, true, 0});
  EXPECT_DOUBLE_EQ(t.tiles, 10);
  EXPECT_NEAR(t.forwardMs, ms((10 + 4) * kScoresPerTile * 512), 1e-12);
  // Queries at the end of a longer key sequence (a later chunk): 256 queries over 1024 keys see
  // 7 and 8 key tiles.
  EXPECT_DOUBLE_EQ(flashAttention(testGpu(), {1, 256, 1024, 128, 128, true, 0}).tiles, 15);
}

// A 128-key window: at most ⌈128/128⌉ + 1 = 2 key tiles per query tile (the first sees one).
TEST(FlashAttention, SlidingWindowCapsTheTilesPerQueryTile) {
  EXPECT_DOUBLE_EQ(flashAttention(testGpu(), {1, 1024, 1024, 64, 64, true, 128}).tiles, 1 + 7 * 2);
  EXPECT_DOUBLE_EQ(flashAttention(testGpu(), {1, 1024, 1024, 64, 64, false, 128}).tiles, 8 * 2);
}

// Head dim 64: the exponential (256 tensor-FLOPs on H100) is a larger share of each score's
// work: forward (1 + 256/512) / (1 + 256/256) = 0.75 of the rate, backward (1 + 0.2) / (1 + 0.4).
TEST(FlashAttention, SmallHeadsRunSlowerPerFlop) {
  const FlashTimes t = flashAttention(testGpu(), {1, 512, 512, 64, 64, false, 0});
  EXPECT_NEAR(t.forwardMs, ms((16 + 4) * kScoresPerTile * 256, kRate * 0.75), 1e-12);
  EXPECT_NEAR(t.backwardMs, ms((16 + 12) * kScoresPerTile * 640, kRate * 1.2 / 1.4), 1e-12);
  // Larger heads are capped at the reference rate (MLA: 192 query/key, 128 value dims).
  const FlashTimes mla = flashAttention(testGpu(), {1, 512, 512, 192, 128, false, 0});
  EXPECT_NEAR(mla.forwardMs, ms(20 * kScoresPerTile * 2 * (192 + 128)), 1e-12);
}

// A GPU's published attention efficiency replaces the GEMM efficiency; fewer thread blocks than
// SMs leave the rest idle.
TEST(FlashAttention, PublishedEfficiencyAndOccupancy) {
  GpuSpec g = testGpu();
  g.attentionEfficiency[static_cast<std::size_t>(AttentionBackend::Fused)] = {0.6, 0.4};
  g.attentionEfficiency[static_cast<std::size_t>(AttentionBackend::Flash)] = {0.3, 0.2};
  g.smCount = 16;
  // 2 (batch·heads) × 4 query tiles = 8 blocks on 16 SMs: half the rate.
  const FlashTimes t = flashAttention(g, {2, 512, 512, 128, 128, false, 0});
  EXPECT_NEAR(t.forwardMs, ms(2 * 20 * kScoresPerTile * 512, 100e12 * 0.6 * 0.5), 1e-12);
  EXPECT_NEAR(t.backwardMs, ms(2 * 28 * kScoresPerTile * 1280, 100e12 * 0.4 * 0.5), 1e-12);
  // FlashAttention-2's figures when the recipe runs it.
  const FlashTimes fa2 = flashAttention(g, {2, 512, 512, 128, 128, false, 0}, AttentionBackend::Flash);
  EXPECT_NEAR(fa2.forwardMs, ms(2 * 20 * kScoresPerTile * 512, 100e12 * 0.3 * 0.5), 1e-12);
}

// Longer sequences amortise the fill: the forward rate rises from 4/5 of the reference at 512
// keys towards it.
TEST(FlashAttention, EfficiencyRisesWithSequenceLength) {
  auto rate = [](double s) {
    const FlashTimes t = flashAttention(testGpu(), {1, s, s, 128, 128, true, 0});
    return (s * s / 2 * 4 * 128) / (t.forwardMs / 1000.0);  // useful causal FLOPs per second
  };
  EXPECT_LT(rate(512), rate(4096));
  EXPECT_LT(rate(4096), rate(32768));
  EXPECT_LT(rate(32768), kRate);
}

// --- Context parallelism ---

// p2p ring, C = 2, 4096 tokens, 8 heads of 128: step 0 is the causal diagonal of this rank's
// 2048 tokens (16 tiles: 136 visited), step 1 a full block of 2048 queries × 1024 keys (16 × 8)
// plus the output correction (bf16 output read, fp32 accumulator read and written: 10 bytes per
// output value); the one transfer (K and V of 2048 tokens, bf16) runs beside step 0.
TEST(ContextParallel, RingOverlapsTheTransferWithTheDiagonalStep) {
  const GpuSpec g = testGpu();
  Parallelism par;
  par.context = 2;
  AttentionCoreShape shape;
  shape.seq = 4096;
  shape.heads = 8;
  shape.kvHeads = 8;
  CollectiveLinks l = links();
  l.context = CollectiveLink{1, 0, true};  // a slow ring: the transfer shows
  const ContextAttention ca = contextAttention(g, l, par, shape);
  const double step0 = ms(8 * (136 + 16) * kScoresPerTile * 512);
  const double step1 = ms(8 * (128 + 16) * kScoresPerTile * 512);
  const double correction = 10.0 * 2048 * 8 * 128 / 1e12 * 1000.0;
  EXPECT_NEAR(ca.forwardMs, step0 + step1 + correction, 1e-9);
  const double kvBytes = 2.0 * 2048 * 8 * 256;
  const double send = kvBytes / 1e9 * 1000.0;  // 1 GB/s
  EXPECT_NEAR(ca.forwardComm.exposedMs, send - step0, 1e-9);
  EXPECT_NEAR(ca.forwardComm.hiddenMs, step0, 1e-9);
  EXPECT_DOUBLE_EQ(ca.bufferBytes, 4 * kvBytes);
  // On NVLink the transfer hides entirely.
  par.context = 2;
  const ContextAttention fast = contextAttention(g, links(), par, shape);
  EXPECT_DOUBLE_EQ(fast.forwardComm.exposedMs, 0);
  EXPECT_NEAR(fast.forwardComm.hiddenMs, kvBytes / 100e9 * 1000.0, 1e-12);
}

// a2a (Ulysses): the kernel runs on the whole sequence with heads / C heads; Q, K, V in and the
// output back, each rank keeping its own 1/C: (C−1)/C of the bytes on NVLink, exposed.
TEST(ContextParallel, AllToAllRunsTheWholeSequenceOnFewerHeads) {
  Parallelism par;
  par.context = 4;
  par.cpCommType = CpCommType::A2a;
  AttentionCoreShape shape;
  shape.seq = 4096;
  shape.heads = 8;
  shape.kvHeads = 8;
  const ContextAttention ca = contextAttention(testGpu(), links(), par, shape);
  const FlashTimes whole = flashAttention(testGpu(), {2, 4096, 4096, 128, 128, true, 0});
  EXPECT_NEAR(ca.forwardMs, whole.forwardMs, 1e-12);
  const double values = 1024.0 * (8 * 128 + 8 * 256 + 8 * 128);
  EXPECT_NEAR(ca.forwardComm.exposedMs, 2.0 * values * 3.0 / 4.0 / 100e9 * 1000.0, 1e-12);
  EXPECT_EQ(ca.a2aRanks, 4);
}

// Hierarchical CP: the largest C_a whose T·C_a GPUs fit one NVLink domain and divide the heads.
TEST(ContextParallel, HierarchicalInnerGroupFitsTheDomainAndTheHeads) {
  EXPECT_EQ(hierarchicalA2aRanks(8, 2, 8, 16, 4), 4);
  EXPECT_EQ(hierarchicalA2aRanks(8, 2, 8, 16, 2), 2);
  EXPECT_EQ(hierarchicalA2aRanks(8, 8, 4, 16, 8), 1);
}

// --- Links of an all-to-all ---

// 16 ranks over two 8-GPU domains: 7/16 of the bytes on NVLink, 8/16 over the network at once.
TEST(MoeCost, AllToAllSplitsItsBytesOverTheLinksItCrosses) {
  const CollectiveLinks l = links();
  EXPECT_NEAR(allToAllOnLinksMs(l, l.network, 16, 1, 16e6), 16e6 * 8 / 16 / 10e9 * 1000.0, 1e-12);
  // Inside one domain: the group's own (NVLink) link only.
  EXPECT_NEAR(allToAllOnLinksMs(l, l.nvlink, 8, 1, 16e6), 16e6 * 7 / 8 / 100e9 * 1000.0, 1e-12);
  // Stride 2 (ETP 2): 4 peers per domain.
  EXPECT_NEAR(allToAllOnLinksMs(l, l.network, 8, 2, 16e6), 16e6 * 4 / 8 / 10e9 * 1000.0, 1e-12);
}

// --- Mixture of experts ---

namespace {
MoeShape smallMoe() {
  MoeShape s;
  s.tokens = 1024;
  s.hidden = 1024;
  s.expertFfn = 512;
  s.experts = 8;
  s.topK = 2;
  s.ep = 2;
  s.etp = 1;
  s.load = 1;
  s.wgradOutputBytes = 4;
  return s;
}
}  // namespace

// 1024 tokens × top-2 over EP 2: 2048 routed rows on 4 local experts, 512 each; FC1 (gate and
// up: 1024 outputs) is compute-bound: 2·4·512·1024·1024 FLOPs at the bf16 rate.
TEST(MoeCost, GroupedGemmsOnBalancedExperts) {
  const MoeCosts c = moeCosts(testGpu(), links(), smallMoe());
  EXPECT_DOUBLE_EQ(c.routedTokensPerExpert, 512);
  const double fc1 = ms(2.0 * 4 * 512 * 1024 * 1024);
  const double fc2 = ms(2.0 * 4 * 512 * 1024 * 512);
  // Each expert's GEMM a kernel of its own: 2.3 µs more for each of the 4 experts' FC1 and FC2.
  EXPECT_NEAR(c.expertGemmForwardMs, fc1 + fc2 + 2 * 4 * 0.0023, 1e-12);
  // Parameters: the router (1024 × 8) and 4 experts of (1024 + 512) × 1024.
  EXPECT_DOUBLE_EQ(c.localParams, 1024.0 * 8 + 4 * 1536.0 * 1024);
  EXPECT_DOUBLE_EQ(c.expertParams, 4 * 1536.0 * 1024);
}

// Few tokens per expert: the row tile is 1/8 full (16 of 128 rows), and every expert's weights
// still stream through HBM (4·(2·(16·1024 + 1024·1024) + 2·16·1024) bytes for FC1): each GEMM
// takes the longer of the two.
TEST(MoeCost, GroupedGemmEfficiencyFallsWithTokensPerExpert) {
  MoeShape s = smallMoe();
  s.tokens = 32;  // 64 rows over 4 experts: 16 each
  const MoeCosts c = moeCosts(testGpu(), links(), s);
  EXPECT_DOUBLE_EQ(c.routedTokensPerExpert, 16);
  const double fc1Compute = ms(2.0 * 4 * 16 * 1024 * 1024, kRate * 16.0 / 128.0);
  const double fc1Memory = 4.0 * (2 * (16.0 * 1024 + 1024.0 * 1024) + 2 * 16.0 * 1024) / 1e12 * 1000.0;
  const double fc2Compute = ms(2.0 * 4 * 16 * 1024 * 512, kRate * 16.0 / 128.0);
  const double fc2Memory = 4.0 * (2 * (16.0 * 512 + 512.0 * 1024) + 2 * 16.0 * 1024) / 1e12 * 1000.0;
  EXPECT_NEAR(c.expertGemmForwardMs,
              std::max(fc1Compute, fc1Memory) + std::max(fc2Compute, fc2Memory) + 2 * 4 * kExpertGemmLatencyMs, 1e-12);
  // Per routed token, more than 3 times slower than with 512 rows per expert.
  const MoeCosts big = moeCosts(testGpu(), links(), smallMoe());
  EXPECT_GT(c.expertGemmForwardMs / 64, 3 * big.expertGemmForwardMs / 2048);
  // With the GPU's full rate the weights' traffic sets the time.
  s.tokens = 64;  // 32 rows per expert
  GpuSpec slowMemory = testGpu();
  slowMemory.memoryBandwidthGBps = 10;
  const MoeCosts m = moeCosts(slowMemory, links(), s);
  const double fc1Bytes = 4.0 * (2 * (32.0 * 1024 + 1024.0 * 1024) + 2 * 32.0 * 1024);
  const double fc2Bytes = 4.0 * (2 * (32.0 * 512 + 512.0 * 1024) + 2 * 32.0 * 1024);
  EXPECT_NEAR(m.expertGemmForwardMs, (fc1Bytes + fc2Bytes) / 10e9 * 1000.0 + 2 * 4 * kExpertGemmLatencyMs, 1e-9);
}

// Token dropping pads every expert to capacity × its share; dropless with an imbalance of 1.5
// gives the busiest rank 1.5 × its share: either way the routed rows, the dispatched bytes and
// the held activations scale with the load.
TEST(MoeCost, CapacityAndImbalanceScaleTheBusiestRank) {
  MoeShape s = smallMoe();
  s.load = 1.5;
  const MoeCosts c = moeCosts(testGpu(), links(), s);
  EXPECT_DOUBLE_EQ(c.routedTokensPerExpert, 768);
  // One all-to-all over EP 2 on NVLink: half of the 2048·1.5 bf16 rows of 1024 leaves the GPU.
  const double send = 2.0 * 1024 * 2048 * 1.5;
  EXPECT_NEAR(c.dispatchMs, send / 2 / 100e9 * 1000.0, 1e-12);
  EXPECT_DOUBLE_EQ(c.bufferBytes, 2 * send);
}

// Held from F to B (bf16 recipe, balanced): router logits and probabilities (fp32, 8 experts),
// routing indices and weights (12 bytes per copy), FC1's input, the activation's input (gate and
// up) and FC2's input.
TEST(MoeCost, ActivationMemoryTermByTerm) {
  const MoeCosts c = moeCosts(testGpu(), links(), smallMoe());
  const double rows = 2048;
  const double expected = 2 * 4 * 1024.0 * 8 + 2048 * 12.0 + rows * 2 * 1024 + rows * 2 * 1024 + rows * 2 * 512;
  EXPECT_DOUBLE_EQ(c.activationBytes, expected);
  EXPECT_DOUBLE_EQ(c.weightGradBytes, rows * 2 * 1024 + rows * 2 * 512);
  EXPECT_DOUBLE_EQ(c.actOutputBytes, rows * 2 * 512);
}

// ETP 2: each GPU's ETP group gathers both ranks' routed copies (twice the rows, half the expert
// width: the same FLOPs) and reduce-scatters them back (ring: (n−1)/n of the gathered bytes).
TEST(MoeCost, ExpertTensorParallelismGathersTheRoutedRows) {
  MoeShape s = smallMoe();
  s.etp = 2;
  const MoeCosts c = moeCosts(testGpu(), links(), s);
  EXPECT_DOUBLE_EQ(c.routedTokensPerExpert, 1024);
  EXPECT_DOUBLE_EQ(c.expertParams, 4 * (512.0 + 256) * 1024);
  const double send = 2.0 * 1024 * 2048;
  const double a2a = send / 2 / 100e9 * 1000.0;  // EP 2, ETP apart: both in one NVLink domain
  const double gathered = 2.0 * 1024 * 4096;
  EXPECT_NEAR(c.dispatchMs, a2a + gathered / 2 / 100e9 * 1000.0, 1e-12);
}

// The flex dispatcher: EP 16 over two 8-GPU domains, top-2: a token reaches 2·(1 − (1/2)²) = 1.5
// domains on average, the other one with probability 3/4. DeepEP sends it over the network once
// per other domain; HybridEP's network stage passes it once per domain, its own included. Its
// copies for other GPUs of a domain (7/8 of them) cross NVLink. HybridEP pipelines its stages in
// chunks of 64 of the 1,024 tokens: the slowest stage plus 1/16 of the others.
TEST(MoeCost, FlexDispatcherSendsOneCopyPerDomainReached) {
  MoeShape s = smallMoe();
  s.ep = 16;
  s.experts = 16;
  s.flexDispatcher = true;
  CollectiveLinks l = links();
  l.expert = l.network;  // the EP group spans two domains
  const double nvlink = 1024 * 2 * 2048.0 * 7.0 / 8.0 / 100e9 * 1000.0;
  const double deepEp = 1024 * 0.75 * 2048.0 / 10e9 * 1000.0;
  EXPECT_NEAR(moeCosts(testGpu(), l, s).dispatchMs, std::max(deepEp, nvlink), 1e-12);
  s.flexBackend = FlexBackend::HybridEp;
  const double hybridEp = 1024 * 1.5 * 2048.0 / 10e9 * 1000.0;
  EXPECT_NEAR(moeCosts(testGpu(), l, s).dispatchMs, hybridEp + nvlink / 16, 1e-12);
  // The all-to-all dispatcher sends both copies, 8/16 of them over the network.
  s.flexDispatcher = false;
  EXPECT_NEAR(moeCosts(testGpu(), l, s).dispatchMs, 1024 * 2 * 2048.0 * 8 / 16 / 10e9 * 1000.0, 1e-12);
}

// HybridEP's SMs copy the tokens bound for other GPUs of a domain at 34.9 GB/s each (its H100
// table, MoeCosts.cpp): on fast links (1,000 GB/s network) one SM sets the dispatch time,
// 1,024·2 copies·7/8 of 2,048 bytes over 34.9 GB/s; four SMs leave it to NVLink. Each adds
// 64/1,024 of its other stages (the chunks' fill). DeepEP's SMs and chunks are not modelled.
TEST(MoeCost, HybridEpOnFewSmsIsBoundByItsCopies) {
  MoeShape s = smallMoe();
  s.ep = 16;
  s.experts = 16;
  s.flexDispatcher = true;
  s.flexBackend = FlexBackend::HybridEp;
  CollectiveLinks l = links();
  l.network = l.expert = CollectiveLink{1000, 0, true};
  const double copies = 1024 * 2 * 2048.0 * 7.0 / 8.0;
  const double nvlink = copies / 100e9 * 1000.0;
  const double network = 1024 * 1.5 * 2048.0 / 1000e9 * 1000.0;
  s.commSms = 1;
  const double oneSm = copies / 34.9e9 * 1000.0;
  EXPECT_NEAR(moeCosts(testGpu(), l, s).dispatchMs, oneSm + (nvlink + network) / 16, 1e-12);
  s.commSms = 4;
  EXPECT_NEAR(moeCosts(testGpu(), l, s).dispatchMs, nvlink + (oneSm / 4 + network) / 16, 1e-12);
  s.commSms = 0;  // no limit stated
  EXPECT_NEAR(moeCosts(testGpu(), l, s).dispatchMs, nvlink + network / 16, 1e-12);
  s.commSms = 1;
  s.flexBackend = FlexBackend::DeepEp;
  EXPECT_NEAR(moeCosts(testGpu(), l, s).dispatchMs, nvlink, 1e-12);
}

// --- Issue 43: the permutation as the libraries run it, the dispatcher's host wait ---

// The all-to-all dispatcher's permutation per pass (smallMoe: 1,024 tokens of 1,024, top-2, EP 2:
// 2,048 copies, 2,048 rows on this GPU's experts), rows of 2·1,024 bytes at 1 TB/s. Fused
// (Transformer Engine): the token side gathers x into the copies and scatters them back, both
// through HBM, and the expert side sorts the rows by expert and back (4 passes over the rows).
// Unfused (PyTorch): the scatter zeroes x rows and adds the copies' 2,048·1,024 values one atomic
// add each, at 0.933 G adds/s per SM on 132 SMs.
TEST(MoeCost, UnfusedPermutationScattersWithOneAtomicAddPerValue) {
  MoeShape s = smallMoe();
  GpuSpec g = testGpu();
  g.smCount = 132;
  const double row = 2.0 * 1024;
  const double toMs = 1000.0 / 1e12;  // per byte at 1 TB/s
  const double expertSide = 4 * row * 2048 * toMs;
  const double fused = row * (1024 + 2048) * toMs + row * (2048 + 1024) * toMs + expertSide;
  const MoeCosts f = moeCosts(g, links(), s);
  EXPECT_NEAR(f.permuteMs, fused, 1e-12);
  s.permuteFusion = false;
  const double atomics = 2048.0 * 1024 / (132 * 0.933e9) * 1000.0;
  const double unfused = row * (1024 + 2048) * toMs + row * 1024 * toMs + atomics + expertSide;
  const MoeCosts u = moeCosts(g, links(), s);
  EXPECT_NEAR(u.permuteMs, unfused, 1e-12);
  // Both passes carry it; nothing else changes.
  EXPECT_NEAR(u.forwardMs - f.forwardMs, unfused - fused, 1e-12);
  EXPECT_NEAR(u.backwardInputMs - f.backwardInputMs, unfused - fused, 1e-12);
  EXPECT_DOUBLE_EQ(atomicAddsPerS(g), 132 * 0.933e9);
}

// The flex dispatcher delivers each token once per rank it reaches: over EP 2 with 4 experts per
// rank and top-2, 2·(1 − (1/2)²) = 1.5 ranks, so this GPU receives 1,536 tokens to permute into
// its 2,048 rows and back (no token side). HybridEP with its permute fusion writes and reads the
// rows in expert order: no permutation kernels.
TEST(MoeCost, FlexDispatcherPermutesOnlyWhatItReceives) {
  MoeShape s = smallMoe();
  s.flexDispatcher = true;
  const double row = 2.0 * 1024;
  EXPECT_NEAR(moeCosts(testGpu(), links(), s).permuteMs, 2 * row * (1536 + 2048) / 1e12 * 1000.0, 1e-12);
  s.flexBackend = FlexBackend::HybridEp;
  s.permuteInDispatcher = true;
  EXPECT_DOUBLE_EQ(moeCosts(testGpu(), links(), s).permuteMs, 0.0);
  s.flexBackend = FlexBackend::DeepEp;  // only HybridEP fuses it
  EXPECT_GT(moeCosts(testGpu(), links(), s).permuteMs, 0.0);
}

// The all-to-all dispatcher copies its token counts to the host before the permutation and waits
// for them before the all-to-all: the GPU idles for the measured round trip (0.1996 ms) less the
// permutation's gather (2·1,024 bytes × (1,024 + 2,048) rows at 1 TB/s). With moe_preprocess in a
// CUDA graph the copy starts at the all-to-all: the whole round trip. EP 1 waits for nothing, nor
// does a dispatch whose shapes are static (dropping and padding to capacity: "no_sync"; which
// dispatches wait is moeDispatchWaitsOnHost's, CaveatsTest).
TEST(MoeCost, AllToAllDispatcherWaitsForItsTokenCountsOnTheHost) {
  MoeShape s = smallMoe();
  const double gather = 2.0 * 1024 * (1024 + 2048) / 1e12 * 1000.0;
  EXPECT_NEAR(moeCosts(testGpu(), links(), s).hostSyncMs, 0.1996 - gather, 1e-12);
  s.graphedPreprocess = true;
  EXPECT_NEAR(moeCosts(testGpu(), links(), s).hostSyncMs, 0.1996, 1e-12);
  s.dispatchWaitsOnHost = false;
  EXPECT_DOUBLE_EQ(moeCosts(testGpu(), links(), s).hostSyncMs, 0.0);
  s.dispatchWaitsOnHost = true;
  s.ep = 1;
  EXPECT_DOUBLE_EQ(moeCosts(testGpu(), links(), s).hostSyncMs, 0.0);
}

// The flex dispatcher's libraries learn what they receive on the host inside the dispatch, after
// their counting kernel, so the whole round trip shows (DeepEP always, HybridEP without a rank
// budget); with Megatron's sync-free MoE (HybridEP with a budget) nothing waits.
TEST(MoeCost, FlexDispatcherWaitsOnTheHostUnlessHybridEpHasABudget) {
  MoeShape s = smallMoe();
  s.flexDispatcher = true;
  EXPECT_DOUBLE_EQ(moeCosts(testGpu(), links(), s).hostSyncMs, 0.1996);
  s.flexBackend = FlexBackend::HybridEp;
  s.rankCapacityFactor = 1.5;
  s.dispatchWaitsOnHost = false;
  EXPECT_DOUBLE_EQ(moeCosts(testGpu(), links(), s).hostSyncMs, 0.0);
}

// A rank budget of 1.5 gives the experts' saved inputs (FC1's, the activation's, FC2's) the
// budget's 3,072 rows instead of the balanced 2,048, and the receive buffer 3,072 rows of 1,024 bf16
// values; the paged stash at 1.2 keeps 2,457.6 rows' worth instead. The router's terms do not change.
TEST(MoeCost, RankBudgetAndPagedStashSizeTheExpertsActivations) {
  MoeShape s = smallMoe();
  s.flexDispatcher = true;
  s.flexBackend = FlexBackend::HybridEp;
  const MoeCosts eager = moeCosts(testGpu(), links(), s);
  const double perRow = 2 * 1024 + 2 * 1024 + 2 * 512;  // FC1 input, activation input, FC2 input
  s.rankCapacityFactor = 1.5;
  const MoeCosts budget = moeCosts(testGpu(), links(), s);
  EXPECT_DOUBLE_EQ(budget.activationBytes - eager.activationBytes, (3072 - 2048) * perRow);
  EXPECT_DOUBLE_EQ(budget.fc1InputBytes, 3072 * 2 * 1024.0);
  EXPECT_DOUBLE_EQ(budget.bufferBytes - eager.bufferBytes, (3072 - 2048) * 2 * 1024.0);
  s.pagedStashFactor = 1.2;
  const MoeCosts stash = moeCosts(testGpu(), links(), s);
  EXPECT_NEAR(stash.activationBytes - eager.activationBytes, (2048 * 1.2 - 2048) * perRow, 1e-6);
  EXPECT_DOUBLE_EQ(stash.bufferBytes, budget.bufferBytes);
  // The compute is the routed rows', whatever the buffers.
  EXPECT_DOUBLE_EQ(stash.forwardMs, eager.forwardMs);
}

// HybridEP's combine passes chunks of tokens through its stages: the slowest stage plus one
// chunk's share of the others. 1,024 tokens over EP 16 (two domains): the network stage (1.5
// pairs per token, 10 GB/s) is the slowest; NVLink adds 64/1,024 of its time at the default chunk,
// 128/1,024 at 128; DeepEP is not chunked.
TEST(MoeCost, HybridEpPipelinesItsStagesInChunks) {
  CollectiveLinks l = links();
  l.expert = l.network;
  const TokenRouting routing{2, 0, 0};
  const double network = 1024 * 1.5 * 2048.0 / 10e9 * 1000.0;
  const double nvlink = 1024 * 2 * 2048.0 * 7.0 / 8.0 / 100e9 * 1000.0;
  EXPECT_NEAR(flexAllToAllMs(l, 16, 1, 1024, routing, 2048, FlexBackend::HybridEp, 0, 64), network + nvlink / 16,
              1e-12);
  EXPECT_NEAR(flexAllToAllMs(l, 16, 1, 1024, routing, 2048, FlexBackend::HybridEp, 0, 128), network + nvlink / 8,
              1e-12);
  EXPECT_NEAR(flexAllToAllMs(l, 16, 1, 1024, routing, 2048, FlexBackend::HybridEp, 0, 0), network, 1e-12);
  EXPECT_NEAR(flexAllToAllMs(l, 16, 1, 1024, routing, 2048, FlexBackend::DeepEp, 0, 64),
              std::max(1024 * 0.75 * 2048.0 / 10e9 * 1000.0, nvlink), 1e-12);
}

// --- Expert GEMMs as measured: the GPU's curve (tests/gpu/expert_gemm_curve.py) ---

namespace {
GpuSpec curveGpu() {
  GpuSpec g = testGpu();
  // Qwen3-30B's experts measured at 256 and 1,024 tokens; a wider shape elsewhere.
  g.expertGemmCurve = {{Precision::Bf16, 256, 2048, 768, 0.4},
                       {Precision::Bf16, 1024, 2048, 768, 0.8},
                       {Precision::Bf16, 512, 7168, 2048, 0.95}};
  return g;
}
}  // namespace

// Between two measured points the efficiency runs linearly in log(tokens) (512 is halfway between
// 256 and 1,024: 0.6), flat beyond them; the nearest measured shape is used; a precision without
// points (fp8 here) has none.
TEST(GemmKernel, ExpertGemmCurveInterpolatesInLogTokens) {
  const GpuSpec g = curveGpu();
  EXPECT_NEAR(*measuredExpertGemmEfficiency(g, Precision::Bf16, 512, 2048, 768), 0.6, 1e-12);
  EXPECT_NEAR(*measuredExpertGemmEfficiency(g, Precision::Bf16, 64, 2048, 768), 0.4, 1e-12);
  EXPECT_NEAR(*measuredExpertGemmEfficiency(g, Precision::Bf16, 8192, 2048, 768), 0.8, 1e-12);
  EXPECT_NEAR(*measuredExpertGemmEfficiency(g, Precision::Bf16, 512, 2880, 1000), 0.6, 1e-12);  // nearer Qwen3's
  EXPECT_NEAR(*measuredExpertGemmEfficiency(g, Precision::Bf16, 100, 6144, 2048), 0.95, 1e-12);
  EXPECT_FALSE(measuredExpertGemmEfficiency(g, Precision::Fp8, 512, 2048, 768).has_value());
  EXPECT_FALSE(measuredExpertGemmEfficiency(testGpu(), Precision::Bf16, 512, 2048, 768).has_value());
}

// With a curve, 8 experts' FC1 at 512 tokens each (2,048 → 1,536) take the dense GEMM of the 4,096
// stacked tokens over 0.6; a weight gradient stacks the tokens in its reduction dimension.
// Without one: the grouped kernel model and 2.3 µs per expert.
TEST(GemmKernel, ExpertGemmsTakeTheMeasuredEfficiency) {
  const GpuSpec g = curveGpu();
  const ExpertGemm fc1{8, 512, 1536, 2048, false, 2048, 768};
  EXPECT_NEAR(expertGemmMs(g, Precision::Bf16, fc1, 2.0), ms(2.0 * 4096 * 1536 * 2048) / 0.6, 1e-12);
  const ExpertGemm wgrad{8, 2048, 1536, 512, true, 2048, 768};
  EXPECT_NEAR(expertGemmMs(g, Precision::Bf16, wgrad, 8.0), ms(2.0 * 2048 * 1536 * 4096) / 0.6, 1e-12);
  EXPECT_NEAR(expertGemmMs(testGpu(), Precision::Bf16, fc1, 2.0),
              groupedGemmMs(testGpu(), Precision::Bf16, 8, 512, 1536, 2048, 2.0) + 8 * 0.0023, 1e-12);
}

// Domains a token's experts lie in (the flex dispatcher's network pairs), by hand: without a
// group limit d·(1 − (1 − 1/d)^k); one group per domain, g of G chosen: the domain's group with
// probability g/G, then missed by each pick with probability 1 − 1/g; G/d groups per domain: the
// chosen groups in a domain are hypergeometric; a group over d/G domains: each pick lands in one
// of them with probability G/(g·d).
TEST(MoeCost, DomainsHitUnderGroupLimitedRouting) {
  EXPECT_NEAR(domainsHit(TokenRouting{2, 0, 0}, 2), 1.5, 1e-12);
  const double missOneOfFour = std::pow(0.75, 8);
  EXPECT_NEAR(domainsHit(TokenRouting{8, 8, 4}, 8), 8 * 0.5 * (1 - missOneOfFour), 1e-12);
  // 8 groups over 2 domains, 4 chosen: c of them in a domain with C(4,c)·C(4,4−c)/70.
  const double perDomain =
      (16 * (1 - missOneOfFour) + 36 * (1 - std::pow(0.5, 8)) + 16 * (1 - std::pow(0.25, 8)) + 1) / 70.0;
  EXPECT_NEAR(domainsHit(TokenRouting{8, 8, 4}, 2), 2 * perDomain, 1e-12);
  EXPECT_NEAR(domainsHit(TokenRouting{8, 2, 1}, 8), 8 * 0.5 * (1 - missOneOfFour), 1e-12);
  // All groups chosen is no limit.
  EXPECT_DOUBLE_EQ(domainsHit(TokenRouting{8, 4, 4}, 4), domainsHit(TokenRouting{8, 0, 0}, 4));
  // The limit only lowers the domains a token reaches.
  EXPECT_LT(domainsHit(TokenRouting{8, 8, 4}, 8), domainsHit(TokenRouting{8, 0, 0}, 8));
}

namespace {

// One layer's all-to-all (3 ms) and the compute windows beside it.
MoeOverlapWindows overlapWindows() {
  MoeOverlapWindows w;
  w.a2aMs = 3;
  w.attentionForwardMs = 1;
  w.mlpForwardMs = 2;
  w.attentionBackwardMs = 2;
  w.mlpBackwardMs = 4;
  w.sharedForwardMs = 2;
  w.sharedBackwardMs = 4;
  return w;
}

}  // namespace

// The all-to-alls as recipes overlap them: exposed (two per pass), under the shared experts
// (half of their compute beside each), or paired chunk by chunk with another microbatch's
// opposite pass: [attention F ‖ combine B], [dispatch F ‖ MLP B], [MLP F ‖ dispatch B],
// [combine F ‖ attention B].
TEST(MoeCost, AllToAllOverlap) {
  Parallelism par;
  const MoeOverlapWindows w = overlapWindows();
  MoeCommExposure e = moeCommExposure(w, par);
  EXPECT_DOUBLE_EQ(e.forward.exposedMs, 6);
  EXPECT_DOUBLE_EQ(e.backward.exposedMs, 6);
  par.moeSharedExpertOverlap = true;
  e = moeCommExposure(w, par);
  EXPECT_DOUBLE_EQ(e.forward.exposedMs, 2 * (3 - 1));
  EXPECT_DOUBLE_EQ(e.backward.exposedMs, 2 * (3 - 2));
  par.moeA2aOverlap = true;
  e = moeCommExposure(w, par);
  EXPECT_DOUBLE_EQ(e.forward.exposedMs, 0 + 1);   // dispatch F under MLP B (4), combine F under attention B (2)
  EXPECT_DOUBLE_EQ(e.backward.exposedMs, 2 + 1);  // combine B under attention F (1), dispatch B under MLP F (2)
  EXPECT_DOUBLE_EQ(e.forward.hiddenMs, 3 + 2);
}

// A collective beside compute while it holds a share of the SMs: 2 ms beside 5 ms with a
// quarter of the SMs shows a quarter of itself (the compute takes 5 + 0.5); 4 ms beside 2 ms
// shows what the compute does not cover (2); beside nothing it all shows.
TEST(MoeCost, CollectiveBesideComputeTakesItsShareOfTheSms) {
  CommShare c = hiddenBeside(2, 5, 0.25);
  EXPECT_DOUBLE_EQ(c.exposedMs, 0.5);
  EXPECT_DOUBLE_EQ(c.hiddenMs, 1.5);
  c = hiddenBeside(4, 2, 0.25);
  EXPECT_DOUBLE_EQ(c.exposedMs, 2);
  c = hiddenBeside(3, 0, 0.25);
  EXPECT_DOUBLE_EQ(c.exposedMs, 3);
  // No share: hiddenUnder.
  EXPECT_DOUBLE_EQ(hiddenBeside(2, 5, 0).exposedMs, hiddenUnder(2, 5).exposedMs);
}

// Kernels beside each other slow each other: with efficiency 0.4 only 0.4 of the time a 2 ms
// all-to-all runs beside 5 ms of compute comes off, so the pair takes 5 + 0.6·2 = 6.2 (1.2 ms
// exposed, more than the quarter of the SMs' 0.5); 4 ms beside 2 ms takes 4 + 0.6·2 = 5.2 (3.2
// exposed). At efficiency 1 the SM share alone decides; a share of every SM hides nothing.
TEST(MoeCost, KernelsBesideEachOtherTakeTheMeasuredShareOfTheirOverlap) {
  EXPECT_DOUBLE_EQ(besideSpanMs(2, 5, 0.25, 0.4), 6.2);
  EXPECT_DOUBLE_EQ(besideSpanMs(4, 2, 0.25, 0.4), 5.2);
  EXPECT_DOUBLE_EQ(besideSpanMs(2, 5, 0.25, 1.0), 5.5);
  EXPECT_DOUBLE_EQ(besideSpanMs(2, 5, 1.0, 1.0), 7.0);
  EXPECT_DOUBLE_EQ(besideSpanMs(2, 0, 0.25, 0.4), 2.0);
  CommShare c = hiddenBeside(2, 5, 0.25, 0.4);
  EXPECT_NEAR(c.exposedMs, 1.2, 1e-12);
  EXPECT_NEAR(c.hiddenMs, 0.8, 1e-12);
  c = hiddenBeside(4, 2, 0.25, 0.4);
  EXPECT_NEAR(c.exposedMs, 3.2, 1e-12);

  // A GPU without its own value uses the H100 measurement (1.600 s off of 3.959 s together).
  GpuSpec g = testGpu();
  EXPECT_DOUBLE_EQ(epOverlapEfficiency(g), kMeasuredEpOverlapEfficiency);
  EXPECT_NEAR(kMeasuredEpOverlapEfficiency, (22.821 - 21.221) / 3.958997, 1e-3);
  g.epOverlapEfficiency = 0.9;
  EXPECT_DOUBLE_EQ(epOverlapEfficiency(g), 0.9);

  // The 1F1B A2A overlap of overlapWindows() (3 ms all-to-alls) at 0.4 with no SMs held: each
  // chunk shows max(3 − compute, 0) + 0.6·min(3, compute).
  Parallelism par;
  par.moeA2aOverlap = true;
  MoeOverlapWindows w = overlapWindows();
  w.overlapEfficiency = 0.4;
  const MoeCommExposure e = moeCommExposure(w, par);
  EXPECT_NEAR(e.forward.exposedMs, 0.6 * 3 + (1 + 0.6 * 2), 1e-12);         // beside MLP B (4), attention B (2)
  EXPECT_NEAR(e.backward.exposedMs, (2 + 0.6 * 1) + (1 + 0.6 * 2), 1e-12);  // beside attention F (1), MLP F (2)
}

// The 1F1B A2A overlap with the all-to-alls on 33 of 132 SMs (a quarter): each chunk's
// collective shows max(3 − compute, 0.75); with every SM taken nothing hides, as without the
// overlap. The dispatcher's default SMs: 20 for flex (DeepEP), 32 for NCCL.
TEST(MoeCost, AllToAllOverlapLosesTheSmsTheCollectivesTake) {
  Parallelism par;
  par.moeA2aOverlap = true;
  MoeOverlapWindows w = overlapWindows();
  w.commSmShare = 0.25;
  MoeCommExposure e = moeCommExposure(w, par);
  EXPECT_DOUBLE_EQ(e.forward.exposedMs, 0.75 + 1);  // dispatch F beside MLP B (4), combine F beside attention B (2)
  EXPECT_DOUBLE_EQ(e.backward.exposedMs, 2 + 1);    // combine B beside attention F (1), dispatch B beside MLP F (2)
  w.commSmShare = 1.0;
  e = moeCommExposure(w, par);
  EXPECT_DOUBLE_EQ(e.forward.exposedMs, 6);
  EXPECT_DOUBLE_EQ(e.backward.exposedMs, 6);

  GpuSpec g = testGpu();
  g.smCount = 132;
  par.moeCommSms = 33;
  EXPECT_DOUBLE_EQ(moeCommSmShare(g, par), 0.25);
  par.moeCommSms = 0;
  EXPECT_DOUBLE_EQ(moeCommSmShare(g, par), 32.0 / 132.0);
  par.moeFlexDispatcher = true;
  EXPECT_DOUBLE_EQ(moeCommSmShare(g, par), 20.0 / 132.0);
  // HybridEP's own defaults: 8 SMs across NVLink domains, 24 inside one (config.cuh).
  par.moeFlexBackend = FlexBackend::HybridEp;
  EXPECT_DOUBLE_EQ(moeCommSmShare(g, par), 8.0 / 132.0);
  EXPECT_DOUBLE_EQ(moeCommSmShare(g, par, false), 24.0 / 132.0);
  par.moeFlexBackend = FlexBackend::DeepEp;
  par.moeCommSms = 500;
  EXPECT_DOUBLE_EQ(moeCommSmShare(g, par), 1.0);
  g.smCount = 0;
  EXPECT_DOUBLE_EQ(moeCommSmShare(g, par), 0.0);
}

// --- GEMM kernel model: the main-loop fill ---

// 1024³ in bf16 with a fill of 128 k steps: 2·1024³ FLOPs at the bf16 rate, times
// (1024 + 128) / 1024; fp16 falls back to bf16's fill, a format without one has none, and a GPU
// without a measured fill runs at its long-k rate.
TEST(GemmKernel, MainLoopFillSlowsShallowGemms) {
  GpuSpec g = testGpu();
  const double plain = ms(2.0 * 1024 * 1024 * 1024);
  EXPECT_NEAR(gemmMs(g, Precision::Bf16, 1024, 1024, 1024), plain, 1e-12);
  g.gemmFillK[static_cast<std::size_t>(Precision::Bf16)] = 128;
  EXPECT_NEAR(gemmMs(g, Precision::Bf16, 1024, 1024, 1024), plain * 1152.0 / 1024.0, 1e-12);
  EXPECT_NEAR(gemmMs(g, Precision::Fp16, 1024, 1024, 1024), plain * 1152.0 / 1024.0, 1e-12);
  // k = 128: half the time is the fill.
  EXPECT_NEAR(gemmMs(g, Precision::Bf16, 8192, 8192, 128), 2.0 * ms(2.0 * 8192 * 8192 * 128), 1e-12);
  // fp8 at 200 TFLOP/s peak (50 %) with its own fill of 384: 1024 + 384 over 1024.
  g.peakTflopsByPrecision[static_cast<std::size_t>(Precision::Fp8)] = 200;
  const double fp8 = ms(2.0 * 1024 * 1024 * 1024, 200e12 * 0.5);
  EXPECT_NEAR(gemmMs(g, Precision::Fp8, 1024, 1024, 1024), fp8, 1e-12);
  g.gemmFillK[static_cast<std::size_t>(Precision::Fp8)] = 384;
  EXPECT_NEAR(gemmMs(g, Precision::Fp8, 1024, 1024, 1024), fp8 * 1408.0 / 1024.0, 1e-12);
}

// The grouped expert GEMMs pay the same fill per group's depth: 4 groups of 256 × 512 × 768 in
// bf16 with a fill of 256 run at 768 / 1024 of the rate.
TEST(GemmKernel, GroupedGemmsPayTheFillOfTheirDepth) {
  GpuSpec g = testGpu();
  g.gemmFillK[static_cast<std::size_t>(Precision::Bf16)] = 256;
  const double flops = 2.0 * 4 * 256 * 512 * 768;
  EXPECT_NEAR(groupedGemmMs(g, Precision::Bf16, 4, 256, 512, 768, 2.0), ms(flops) * 1024.0 / 768.0, 1e-12);
}
