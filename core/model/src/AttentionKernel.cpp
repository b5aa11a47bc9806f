// The FlashAttention kernel model (issue 26): attention time from the tiles a fused attention
// kernel computes, not from the GEMM efficiency.
//
// FlashAttention (Dao et al. 2022; Dao 2023, FlashAttention-2; Shah et al. 2024, FlashAttention-3)
// and cuDNN's fused attention give each thread block one tile of Br = 128 queries of one
// (batch, head) and stream the keys past it in tiles of Bc = 128: per score tile the forward
// computes S = QKᵀ and O += PV (2·(d_qk + d_v) FLOPs per score) and one exponential per score;
// the backward recomputes S and P and computes dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q
// (2·(3·d_qk + 2·d_v) FLOPs per score, 2.5× the forward when d_qk = d_v) and one exponential.
//
//  - Causal masking: a query tile visits the key tiles up to the diagonal; the diagonal tile is
//    computed whole and masked (so short causal sequences waste a larger share).
//  - Sliding window: a query tile visits the key tiles of its window, plus one straddling tile.
//  - Sequence length: a thread block loads its query tile, fills its pipeline and writes its
//    output and log-sum-exp once, which costs about as much as kFillTiles key tiles of its loop;
//    short sequences pay it over fewer tiles.
//  - Head dimension: the exponentials run on the special-function units, 256× slower than the
//    dense bf16 tensor cores on H100 (989 TFLOP/s vs 3.9 TFLOP/s; FlashAttention-3 §3.1); with the
//    softmax only partly overlapped with the GEMMs, small heads (d = 64) spend a larger share on it.
//  - Occupancy: fewer thread blocks than SMs leave SMs idle.
//
// The remaining constant is the kernel's long-sequence fraction of the bf16 tensor peak at head
// dimension 128, per pass and per kernel (cuDNN's fused attention, FlashAttention-2): the GPU's
// `attention_efficiency` from published kernel benchmarks (resources/gpus/catalog.json:
// FlashAttention-3's Fig. 5 and 7 for cuDNN and FlashAttention-2 on H100), or the GPU's bf16 GEMM
// efficiency where none is published. The fill constants come from the same curves:
// cuDNN's forward reaches 80% of its long-sequence rate at 512 keys (4 tiles: 4 / (4 + 1)), its
// backward 57% (4 / (4 + 3)), non-causal, head dim 128.

#include <algorithm>
#include <cmath>

#include "CostParts.hpp"

namespace pipestudio::costparts {
namespace {

constexpr double kTile = 128;            // Br = Bc: query and key rows per tile
constexpr double kForwardFillTiles = 1;  // per thread block: Q load, pipeline fill, O and LSE store
constexpr double kBackwardFillTiles = 3;
// Tensor-core FLOPs one exponential costs on H100: 989 TFLOP/s dense bf16 / 3.9 TFLOP/s of
// special functions (FlashAttention-3 §3.1).
constexpr double kExpCostFlops = 256;
// The reference the published efficiencies are measured at: head dim 128 (d_qk = d_v = 128).
constexpr double kReferenceForwardShare = kExpCostFlops / (2.0 * (128 + 128));
constexpr double kReferenceBackwardShare = kExpCostFlops / (2.0 * (3 * 128 + 2 * 128));

// Key tiles each query tile visits, summed over the query tiles of one (batch, head): all of
// them, or (causal) those up to the diagonal, at most the window's.
double visitedTiles(const FlashProblem& p) {
  const double nq = std::ceil(std::max(0.0, p.queries) / kTile);
  const double nk = std::ceil(std::max(0.0, p.keys) / kTile);
  if (nq <= 0 || nk <= 0) return 0.0;
  double cap = nk;
  if (p.window > 0) cap = std::min(cap, std::ceil(p.window / kTile) + 1.0);
  if (!p.causal) return nq * cap;
  // Query tile i (0-based) sees key tiles 0 .. offset + i, where the queries are the last
  // `queries` positions of the keys: min(cap, offset + i + 1) tiles.
  const double offset = std::floor(std::max(0.0, p.keys - p.queries) / kTile);
  const double rising = std::clamp(cap - offset - 1.0, 0.0, nq);  // tiles before the cap is reached
  return rising * (offset + 1.0) + rising * (rising - 1.0) / 2.0 + (nq - rising) * cap;
}

// The kernel's rate relative to its head-dim-128 reference: the share of time the exponentials
// add per score, max 1 (larger heads do not run faster than the tensor cores).
double headDimFactor(double flopsPerScore, double referenceShare) {
  const double share = kExpCostFlops / flopsPerScore;
  return std::min(1.0, (1.0 + referenceShare) / (1.0 + share));
}

double occupancy(const GpuSpec& gpu, double blocks) {
  if (gpu.smCount <= 0 || blocks <= 0) return 1.0;
  return std::clamp(blocks / gpu.smCount, 1e-3, 1.0);
}

}  // namespace

FlashTimes flashAttention(const GpuSpec& gpu, const FlashProblem& p, AttentionBackend backend) {
  FlashTimes t;
  t.tiles = visitedTiles(p);
  if (t.tiles <= 0 || p.batchHeads <= 0) return t;
  const double peak = gpu.peakTflops * 1e12;  // attention runs in bf16 (Transformer Engine)
  const GpuSpec::AttentionEfficiency& published = gpu.attentionEfficiency[static_cast<std::size_t>(backend)];
  const double forwardRef = published.forward > 0 ? published.forward : gpu.efficiency;
  const double backwardRef = published.backward > 0 ? published.backward : gpu.efficiency;
  if (peak <= 0 || forwardRef <= 0 || backwardRef <= 0) return t;
  const double nq = std::ceil(p.queries / kTile);
  const double nk = std::ceil(p.keys / kTile);
  const double scoresPerTile = kTile * kTile;
  const double forwardFlopsPerScore = 2.0 * (p.qkDim + p.vDim);
  const double backwardFlopsPerScore = 2.0 * (3.0 * p.qkDim + 2.0 * p.vDim);
  // The forward parallelises over query tiles, the backward over key tiles (FlashAttention-2 §3.2).
  const double forwardWork = p.batchHeads * (t.tiles + kForwardFillTiles * nq) * scoresPerTile * forwardFlopsPerScore;
  const double backwardWork =
      p.batchHeads * (t.tiles + kBackwardFillTiles * nk) * scoresPerTile * backwardFlopsPerScore;
  const double forwardRate = peak * forwardRef * headDimFactor(forwardFlopsPerScore, kReferenceForwardShare) *
                             occupancy(gpu, p.batchHeads * nq);
  const double backwardRate = peak * backwardRef * headDimFactor(backwardFlopsPerScore, kReferenceBackwardShare) *
                              occupancy(gpu, p.batchHeads * nk);
  t.forwardMs = forwardWork / forwardRate * 1000.0;
  t.backwardMs = backwardWork / backwardRate * 1000.0;
  return t;
}

}  // namespace pipestudio::costparts
