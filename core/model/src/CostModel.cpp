#include "pipestudio/model/CostModel.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace pipestudio {
namespace {

constexpr double kBf16 = 2.0;  // bytes per bf16/fp16 value (activations, weights, gradients sent)
constexpr double kFp32 = 4.0;
// GEMM output tile (rows × columns) of a CUTLASS/cuBLAS-class kernel: one tile per SM per wave.
constexpr double kTileRows = 128;
constexpr double kTileCols = 128;

// Saturates instead of overflowing: shapes at the loader's bounds (seq, hidden up to 1e7) give
// byte counts beyond int64, and converting those is undefined behaviour.
std::int64_t toBytes(double v) {
  constexpr double kMaxBytes = 9.0e18;
  if (!(v > 0)) return 0;
  return static_cast<std::int64_t>(std::llround(std::min(v, kMaxBytes)));
}

double msAtRate(double amount, double perS) { return perS > 0 ? amount / perS * 1000.0 : 0.0; }

// Fraction of the SMs busy over a GEMM's waves: the last wave of a skinny or small GEMM runs
// partly empty (wave quantization; NVIDIA's "Matrix Multiplication Background" guide).
double waveUtilisation(const GpuSpec& gpu, double rows, double cols) {
  if (gpu.smCount <= 0) return 1.0;
  const double tiles = std::ceil(std::max(1.0, rows) / kTileRows) * std::ceil(std::max(1.0, cols) / kTileCols);
  const double sms = gpu.smCount;
  const double waves = std::ceil(tiles / sms);
  return std::clamp(tiles / (waves * sms), 1e-3, 1.0);
}

// Sustained FLOP/s of weight GEMMs in `precision`: the GPU's dense peak for that format at its
// calibrated efficiency for it. A format the GPU lacks falls back to bf16 (requests for it are
// refused before costing; a hand-built context must not divide by zero).
double gemmFlopsPerS(const GpuSpec& gpu, Precision precision) {
  const double rate = gpu.gemmFlopsPerS(precision);
  return rate > 0 ? rate : gpu.effectiveFlopsPerS();
}

// One GEMM of an (m × k) by (k × n) product on one GPU: 2mnk FLOPs at the precision's rate and
// the wave utilisation of its m × n output, or the time to stream its operands (in the
// precision's format) and output through HBM when that is longer (roofline).
// `outputBytesPerValue` is 4 + 4 for weight-gradient GEMMs that accumulate into fp32 main
// gradients (Megatron's gradient-accumulation fusion).
double gemmMs(const GpuSpec& gpu, Precision precision, double m, double n, double k,
              double outputBytesPerValue = kBf16) {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  const double flops = 2.0 * m * n * k;
  const double compute = msAtRate(flops, gemmFlopsPerS(gpu, precision) * waveUtilisation(gpu, m, n));
  const double memory =
      msAtRate(operandBytes(precision) * (m * k + k * n) + outputBytesPerValue * m * n, gpu.memoryBytesPerS());
  return std::max(compute, memory);
}

double memoryMs(const GpuSpec& gpu, double bytes) { return msAtRate(bytes, gpu.memoryBytesPerS()); }

// Where a weight GEMM sits relative to the sequence-parallel collectives of Megatron's tensor
// parallelism (Korthikanti et al. 2022 §4.2.2): a column-parallel GEMM follows the all-gather
// of its sequence-sharded input, a row-parallel GEMM precedes the reduce-scatter of its output.
enum class TpSide : std::uint8_t { None, ColumnParallel, RowParallel };

// The weight GEMMs of a transformer layer on one GPU, forward shapes (m tokens × k in → n out).
struct Gemm {
  double m, n, k;
  double count = 1;            // identical GEMMs (local experts)
  TpSide side = TpSide::None;  // which sequence-parallel collective it meets
  bool inputFromNorm = false;  // its input is a norm's output (TE LayerNormLinear fuses the cast)
};

struct PassTimes {
  double forward = 0, backwardInput = 0, backwardWeight = 0;
  PassTimes& operator+=(const PassTimes& o) {
    forward += o.forward;
    backwardInput += o.backwardInput;
    backwardWeight += o.backwardWeight;
    return *this;
  }
};

// `wgradOutputBytes`: read and write of the main gradient the weight-gradient GEMM accumulates
// into (fp32 4 + 4, or bf16 2 + 2 when the recipe keeps gradients in bf16).
PassTimes gemmPasses(const GpuSpec& gpu, Precision precision, const std::vector<Gemm>& gemms,
                     double wgradOutputBytes = kFp32 + kFp32) {
  PassTimes t;
  for (const Gemm& g : gemms) {
    t.forward += g.count * gemmMs(gpu, precision, g.m, g.n, g.k);
    t.backwardInput += g.count * gemmMs(gpu, precision, g.m, g.k, g.n);                     // dX = dY · Wᵀ
    t.backwardWeight += g.count * gemmMs(gpu, precision, g.k, g.n, g.m, wgradOutputBytes);  // dW += Xᵀ · dY
  }
  return t;
}

// Bytes of HBM traffic per value that Transformer Engine's cast to `precision` moves (read the
// bf16 tensor, write the two layouts a low-precision GEMM pair reads: the row-wise one and the
// transposed one for wgrad, since Hopper's FP8 GEMMs take only TN operands and MX blocks do not
// transpose). Per-tensor current scaling (TE Float8CurrentScaling, Megatron-Bridge's H100 FP8)
// reads the tensor once more for its amax first, so a norm cannot fuse it; block-scaled
// formats (MXFP8, NVFP4) scale locally and TE fuses their cast into the preceding norm, which
// then writes the low-precision layouts instead of its bf16 output. Sources: Transformer Engine
// docs, "Using FP8 with Transformer Engine" and the low-precision training recipes.
double castBytesPerValue(Precision precision, bool fusedWithNorm) {
  const double layouts = 2.0 * operandBytes(precision);
  if (precision == Precision::Fp8) return kBf16 + kBf16 + layouts;  // amax read, cast read, two writes
  if (fusedWithNorm) return std::max(0.0, layouts - kBf16);
  return kBf16 + layouts;
}

// Low-precision cast traffic of a layer's weight GEMMs: forward each GEMM's input (m × k; with
// sequence parallelism a column-parallel GEMM's input is cast on this rank's shard before TE
// all-gathers it in the low-precision format), backward each output gradient (m × n; a
// row-parallel GEMM's gradient is cast on the shard before its all-gather). Weights are cast
// once per iteration and cached across microbatches, so they are not counted per microbatch.
PassTimes castPasses(const GpuSpec& gpu, Precision precision, const std::vector<Gemm>& gemms, double sp) {
  PassTimes t;
  if (!isLowPrecision(precision)) return t;
  double forwardBytes = 0, backwardBytes = 0;
  for (const Gemm& g : gemms) {
    const double inRows = g.side == TpSide::ColumnParallel ? g.m / sp : g.m;
    const double gradRows = g.side == TpSide::RowParallel ? g.m / sp : g.m;
    forwardBytes += g.count * inRows * g.k * castBytesPerValue(precision, g.inputFromNorm);
    backwardBytes += g.count * gradRows * g.n * castBytesPerValue(precision, false);
  }
  t.forward = memoryMs(gpu, forwardBytes);
  t.backwardInput = memoryMs(gpu, backwardBytes);
  return t;
}

// Bytes per value of a GEMM input that Transformer Engine keeps for the weight gradient: the
// low-precision transposed copy (columnwise) in a low-precision recipe, else the bf16 tensor.
double savedInputBytes(Precision precision) { return isLowPrecision(precision) ? operandBytes(precision) : kBf16; }

// A collective the recipe may overlap with the GEMM next to it (Transformer Engine userbuffers,
// `--tp-comm-overlap`; Wang et al. 2023, "Overlap Communication with Dependent Computation via
// Decomposition"): the GEMM is split into T chunks that run while the ring exchanges the next
// chunk. An all-gather feeding a GEMM starts on the local chunk, so only the part of the exchange
// that the chunks' compute cannot cover shows: (T−1)/T · max(0, c − g). A reduce-scatter of a
// GEMM's output waits for the last chunk: c/T more. Bulk overlaps (an all-gather for a later
// GEMM run under an independent one) show max(0, c − g).
struct Exposure {
  double exposedMs = 0, hiddenMs = 0;
  Exposure& operator+=(const Exposure& o) {
    exposedMs += o.exposedMs;
    hiddenMs += o.hiddenMs;
    return *this;
  }
};
enum class OverlapKind : std::uint8_t { GatherIntoGemm, GemmIntoScatter, Bulk };
Exposure overlapped(double commMs, double gemmMs, double chunks, OverlapKind kind) {
  Exposure e;
  const double n = std::max(1.0, chunks);
  const double uncovered = std::max(0.0, commMs - gemmMs);
  switch (kind) {
    case OverlapKind::GatherIntoGemm:
      e.exposedMs = (n - 1.0) / n * uncovered;
      break;
    case OverlapKind::GemmIntoScatter:
      e.exposedMs = std::min(commMs, commMs / n + (n - 1.0) / n * uncovered);
      break;
    case OverlapKind::Bulk:
      e.exposedMs = uncovered;
      break;
  }
  e.hiddenMs = std::max(0.0, commMs - e.exposedMs);
  return e;
}

// Derived dimensions of a transformer block on one GPU of its pipeline rank.
struct Block {
  const TransformerShape& t;
  const CostContext& ctx;
  double T, C, E, D;
  double sp;  // divisor of the norm/dropout/residual region (T with sequence parallelism)
  double b, s, h, a, hkv, f, fe;
  double n, nc;  // tokens of the microbatch, of this context rank
  double experts, topK, shared, cf, dropout, mlpMatrices;
  bool swiglu, flash, moe;
  Precision precision;
  double lp;  // bytes per value of a GEMM input kept for wgrad

  Block(const TransformerShape& shape, const CostContext& c)
      : t(shape),
        ctx(c),
        T(std::max(1, c.parallel.tensor)),
        C(std::max(1, c.parallel.context)),
        E(std::max(1, c.parallel.expert)),
        D(std::max(1, c.parallel.data)),
        sp(c.parallel.sequenceParallel ? T : 1.0),
        b(static_cast<double>(std::max<std::int64_t>(1, c.samplesPerMicrobatch))),
        s(static_cast<double>(shape.seq)),
        h(static_cast<double>(shape.hidden)),
        a(static_cast<double>(std::max<std::int64_t>(1, shape.heads))),
        hkv(h / a * static_cast<double>(shape.kvHeadsOrHeads())),
        f(static_cast<double>(shape.ffnOrDefault())),
        fe(static_cast<double>(shape.expertFfnOrDefault())),
        n(b * s),
        nc(b * s / C),
        experts(static_cast<double>(shape.experts)),
        topK(static_cast<double>(shape.topK)),
        shared(static_cast<double>(shape.sharedExperts)),
        cf(shape.capacityFactor),
        dropout(shape.dropout ? 1.0 : 0.0),
        mlpMatrices(shape.mlp == MlpKind::SwiGlu ? 3.0 : 2.0),
        swiglu(shape.mlp == MlpKind::SwiGlu),
        flash(shape.attention == AttentionKind::Flash),
        moe(shape.isMoe()),
        precision(c.precision),
        lp(savedInputBytes(c.precision)) {}

  // Tokens this GPU's experts process per microbatch (balanced router): each of the E
  // expert-parallel ranks receives the tokens routed to its experts from all E ranks.
  double routedTokens() const { return moe ? nc * topK * cf : 0.0; }
  double localExperts() const { return std::max(1.0, experts / E); }
  // Activation-function values per token of the dense MLP or of one expert (SwiGLU keeps the
  // gate and the up projection, 2·ffn; GELU its input, ffn).
  double actInputs(double ffn) const { return (swiglu ? 2.0 : 1.0) * ffn; }
};

// --- model FLOPs and parameters (whole layer, unsharded) ---
// FLOPs: Narayanan et al. 2021 §5.1 and Korthikanti et al. 2022 Appendix A (24·b·s·h² + 4·b·s²·h
// with a 4h GELU MLP); grouped-query attention shrinks the K/V projections to kv_heads·head_dim
// (Ainslie et al. 2023; Llama 2 §2.2 / Llama 3 §3.2); SwiGLU has three ffn matrices (Shazeer
// 2020; Llama 2); MoE routes each token to top_k of `experts` (Mixtral, Jiang et al. 2024 §2.1;
// DeepSeek-V3 §2.1.2 for shared experts).
struct ModelCounts {
  double flopsForward = 0, parameters = 0, attnParams = 0, mlpParams = 0, normParams = 0;
};
ModelCounts modelCounts(const Block& k) {
  ModelCounts m;
  const double attnProjFlops = 2.0 * k.n * k.h * (k.h + 2.0 * k.hkv) + 2.0 * k.n * k.h * k.h;
  const double attnCoreFlops = 4.0 * k.b * k.s * k.s * k.h;
  double mlpFlops = 0;
  if (k.moe) {
    mlpFlops = 2.0 * k.n * k.h * k.experts + (k.topK + k.shared) * 2.0 * k.mlpMatrices * k.n * k.h * k.fe;
    m.mlpParams = k.h * k.experts + (k.experts + k.shared) * k.mlpMatrices * k.h * k.fe;
  } else {
    mlpFlops = 2.0 * k.mlpMatrices * k.n * k.h * k.f;
    m.mlpParams = k.mlpMatrices * k.h * k.f;
  }
  m.flopsForward = attnProjFlops + attnCoreFlops + mlpFlops;
  m.attnParams = k.h * (k.h + 2.0 * k.hkv) + k.h * k.h;
  m.normParams = 2.0 * k.h;
  m.parameters = m.attnParams + m.mlpParams + m.normParams;
  return m;
}

// The layer's weight GEMMs on this GPU, by module (attention projections, the MLP or the
// router and experts, the shared experts): TP shards attention and MLP, EP the routed experts.
struct LayerGemms {
  std::vector<Gemm> attention, mlp, shared;
  double linearParams = 0;  // parameters of this GPU's linear layers (what low-precision copies cover)
};
LayerGemms layerGemms(const Block& k) {
  LayerGemms g;
  g.attention.push_back({k.nc, (k.h + 2.0 * k.hkv) / k.T, k.h, 1, TpSide::ColumnParallel, true});  // QKV
  g.attention.push_back({k.nc, k.h, k.h / k.T, 1, TpSide::RowParallel, false});                    // output projection
  g.linearParams = (k.h + 2.0 * k.hkv) / k.T * k.h + k.h / k.T * k.h;
  if (k.moe) {
    const double perExpert = k.routedTokens() / k.localExperts();
    g.mlp.push_back({k.nc / k.sp, k.experts, k.h, 1, TpSide::None, false});  // router (replicated over TP)
    g.mlp.push_back({perExpert, k.actInputs(k.fe) / k.T, k.h, k.localExperts(), TpSide::ColumnParallel, false});
    g.mlp.push_back({perExpert, k.h, k.fe / k.T, k.localExperts(), TpSide::RowParallel, false});  // expert FC2
    g.linearParams += k.localExperts() * (k.actInputs(k.fe) + k.fe) / k.T * k.h;
    if (k.shared > 0) {
      g.shared.push_back({k.nc, k.actInputs(k.shared * k.fe) / k.T, k.h, 1, TpSide::ColumnParallel, true});
      g.shared.push_back({k.nc, k.h, k.shared * k.fe / k.T, 1, TpSide::RowParallel, false});
      g.linearParams += (k.actInputs(k.shared * k.fe) + k.shared * k.fe) / k.T * k.h;
    }
  } else {
    g.mlp.push_back({k.nc, k.actInputs(k.f) / k.T, k.h, 1, TpSide::ColumnParallel, true});  // FC1 (gate+up)
    g.mlp.push_back({k.nc, k.h, k.f / k.T, 1, TpSide::RowParallel, false});                 // FC2
    g.linearParams += (k.actInputs(k.f) + k.f) / k.T * k.h;
  }
  return g;
}

// Attention core: QKᵀ and PV over this rank's nc queries and all s keys, heads split over T, in
// bf16 whatever the recipe's precision (TE's fp8 attention is off in the recipes). A causal
// FlashAttention kernel skips the masked half of the score blocks; a standard (unfused) kernel
// computes the whole matrix and masks it, and moves the score matrix through HBM (bytes per
// score: write QKᵀ 2, softmax read+write 4, dropout read+write+mask 5, PV read 2).
// FlashAttention's backward recomputes the scores: five matmuls to the forward's two; the
// unfused backward does four and re-reads the score matrices twice (Dao et al. 2022).
struct AttentionTimes {
  double forwardMs = 0, backwardMs = 0;
};
AttentionTimes attentionCore(const Block& k) {
  const GpuSpec& gpu = k.ctx.gpu;
  const double causalFactor = (k.t.causal && k.flash) ? 0.5 : 1.0;
  const double coreMs = msAtRate(4.0 * k.nc * k.s * k.h / k.T * causalFactor, gpu.effectiveFlopsPerS());
  const double scoreBytes = k.flash ? 0.0 : (k.a / k.T) * k.nc * k.s * (8.0 + 5.0 * k.dropout);
  AttentionTimes t;
  t.forwardMs = coreMs + memoryMs(gpu, scoreBytes);
  t.backwardMs = k.flash ? 2.5 * coreMs : 2.0 * coreMs + memoryMs(gpu, 2.0 * scoreBytes);
  return t;
}

// Element-wise kernels (Megatron's fused kernels; bf16): two norms (read + write h), two
// bias-dropout-add (read 2h, write h, mask h/2 bytes·2), the MLP activation (GELU read + write
// ffn; SwiGLU read 2·ffn, write ffn), MoE permutation copies (read + write h per routed token,
// dispatch and combine). Backward moves about twice the bytes.
struct ElementwiseBytes {
  double norms = 0, other = 0, mlpAct = 0, expertAct = 0, sharedAct = 0;
  double total() const { return norms + other + mlpAct + expertAct + sharedAct; }
};
ElementwiseBytes elementwise(const Block& k) {
  ElementwiseBytes e;
  const double tokens = k.nc / k.sp;
  e.norms = tokens * 8.0 * k.h;
  e.other = tokens * 2.0 * (6.0 * k.h + k.dropout * k.h);
  const double perValue = k.swiglu ? 6.0 : 4.0;
  if (k.moe) {
    e.expertAct = k.routedTokens() * perValue * k.fe / k.T + k.routedTokens() * 8.0 * k.h / k.T;
    e.sharedAct = k.nc * k.shared * perValue * k.fe / k.T;
  } else {
    e.mlpAct = k.nc * perValue * k.f / k.T;
  }
  return e;
}

// Tensor-parallel collectives per pass (Megatron-LM: two all-reduces per layer forward and two
// backward, Shoeybi et al. 2019 §3; with sequence parallelism two all-gathers and two
// reduce-scatters of the same volume, Korthikanti §4.2.2). With `--tp-comm-overlap` (needs
// sequence parallelism) each meets its GEMM in Transformer Engine's userbuffers pipelines: the
// forward all-gathers feed the QKV and FC1 GEMMs and the reduce-scatters follow the projection
// and FC2; backward the output-gradient all-gathers feed the projection's and FC2's dgrad, the
// input-gradient reduce-scatters follow the QKV and FC1 dgrad, and the re-gather of their
// sequence-sharded inputs for wgrad runs under the dgrad GEMMs (bulk). Low-precision recipes
// all-gather the already-cast inputs.
struct TpComm {
  Exposure forward, backward;
};
TpComm tensorParallelComm(const Block& k, const LayerGemms& g) {
  TpComm c;
  if (k.T <= 1) return c;
  const CollectiveLink& link = k.ctx.links.tensor;
  const int ranks = static_cast<int>(k.T);
  const double hiddenBytes = kBf16 * k.nc * k.h;
  const bool overlap = k.ctx.parallel.tpCommOverlap && k.ctx.parallel.sequenceParallel;
  if (!overlap) {
    c.forward.exposedMs = 2.0 * allReduceMs(link, ranks, hiddenBytes);
    c.backward.exposedMs = c.forward.exposedMs;
    return c;
  }
  const double gather = allGatherMs(link, ranks, hiddenBytes);
  const double gatherCast = allGatherMs(link, ranks, operandBytes(k.precision) / kBf16 * hiddenBytes);
  const double scatter = gather;  // a reduce-scatter moves the same volume in the same steps
  // Each collective meets the GEMMs on its side of the attention block and of the MLP (the
  // shared experts' GEMMs run beside the routed ones).
  std::vector<Gemm> mlp = g.mlp;
  mlp.insert(mlp.end(), g.shared.begin(), g.shared.end());
  for (const std::vector<Gemm>* module : std::array<const std::vector<Gemm>*, 2>{&g.attention, &mlp}) {
    PassTimes column, row;
    for (const Gemm& gemm : *module) {
      if (gemm.side == TpSide::None) continue;
      (gemm.side == TpSide::ColumnParallel ? column : row) += gemmPasses(k.ctx.gpu, k.precision, {gemm});
    }
    c.forward += overlapped(gatherCast, column.forward, k.T, OverlapKind::GatherIntoGemm);
    c.forward += overlapped(scatter, row.forward, k.T, OverlapKind::GemmIntoScatter);
    c.backward += overlapped(gatherCast, row.backwardInput, k.T, OverlapKind::GatherIntoGemm);
    c.backward += overlapped(scatter, column.backwardInput, k.T, OverlapKind::GemmIntoScatter);
    c.backward += overlapped(gather, column.backwardInput, 1.0, OverlapKind::Bulk);
  }
  return c;
}

// Context parallelism: ring attention passes each K/V chunk around the C context ranks (C−1
// steps, this rank's K and V in bf16, heads split over T), overlapped with the attention core of
// the chunk it computes meanwhile (Liu et al. 2023; Transformer Engine's p2p ring); backward
// passes K/V again and their gradients.
TpComm contextParallelComm(const Block& k, const AttentionTimes& attn) {
  TpComm c;
  if (k.C <= 1) return c;
  const double chunkBytes = 2.0 * kBf16 * k.nc * k.hkv / k.T;
  const CollectiveLink& l = k.ctx.links.context;
  const double stepMs =
      l.bandwidthGBps > 0 ? chunkBytes / (l.bandwidthGBps * 1e6) + l.latencyUs / 1000.0 : l.latencyUs / 1000.0;
  const double ringMs = (k.C - 1.0) * stepMs;
  c.forward.exposedMs = std::max(0.0, ringMs - attn.forwardMs * (k.C - 1.0) / k.C);
  c.forward.hiddenMs = ringMs - c.forward.exposedMs;
  c.backward.exposedMs = std::max(0.0, 2.0 * ringMs - attn.backwardMs * (k.C - 1.0) / k.C);
  c.backward.hiddenMs = 2.0 * ringMs - c.backward.exposedMs;
  return c;
}

// Expert parallelism dispatches and combines tokens with one all-to-all each per pass
// (Lepikhin et al. 2021; Megatron-Core MoE), not overlapped.
TpComm expertParallelComm(const Block& k, std::int64_t& bufferBytes) {
  TpComm c;
  if (!k.moe || k.E <= 1) return c;
  const double dispatchBytes = kBf16 * k.nc / k.sp * k.topK * k.cf * k.h;
  c.forward.exposedMs = 2.0 * allToAllMs(k.ctx.links.expert, static_cast<int>(k.E), dispatchBytes);
  c.backward.exposedMs = c.forward.exposedMs;
  bufferBytes = toBytes(2.0 * dispatchBytes);
  return c;
}

// --- activation memory per GPU (bytes per token × tokens of this rank) ---
// Korthikanti et al. 2022 §4.1 term by term (34·s·b·h + 5·a·s²·b for a 4h GELU MLP with
// dropout), §4.2 for tensor and sequence parallelism (10 replicated + 24/t sharded). The inputs
// of the weight GEMMs are kept in the format wgrad reads (lp bytes: bf16, or the low-precision
// transposed copy Transformer Engine keeps); FlashAttention keeps Q, K, V and its output in bf16
// (its backward needs them) and the per-row log-sum-exp, no s² matrix (Dao et al. 2022).
struct ActivationBytes {
  double replicated = 0;   // per token, divided by sp
  double attention = 0;    // per token, sharded over T
  double mlp = 0;          // per token, sharded over T
  double normOutputs = 0;  // part of `replicated`: the QKV and MLP inputs (norm outputs)
  double mlpInternal = 0;  // part of `mlp` a recomputed MLP does not keep
  double expertAct = 0;    // part of `mlp`: expert FC2 inputs (the activation's output)
  double sharedInternal = 0;
};
ActivationBytes activationBytes(const Block& k, bool keepScores) {
  ActivationBytes x;
  // Two norm inputs (2h each), the QKV input and the MLP input (lp·h each), two dropout masks.
  x.normOutputs = 2.0 * k.lp * k.h;
  x.replicated = 4.0 * k.h + x.normOutputs + 2.0 * k.dropout * k.h;
  if (k.moe) x.replicated += 8.0 * k.experts;  // router logits and probabilities (fp32)
  // Q (2h), K and V (2·hkv each), the attention output (2h; in bf16 recipes the same tensor is
  // the projection's saved input), the projection input's low-precision copy, the scores
  // (2·a·s softmax output + a·s mask + 2·a·s dropout output) or FlashAttention's fp32
  // log-sum-exp (4a).
  x.attention = 4.0 * k.h + 4.0 * k.hkv;
  if (isLowPrecision(k.precision)) x.attention += k.lp * k.h;
  if (keepScores) x.attention += k.a * k.s * (2.0 + 3.0 * k.dropout);
  if (k.flash) x.attention += 4.0 * k.a;
  // MLP: the activation's input (2 bytes per value) and FC2's input (lp).
  if (k.moe) {
    // Each routed copy's expert input and internals, and the shared experts'.
    const double perCopy = k.lp * k.h + kBf16 * k.actInputs(k.fe) + k.lp * k.fe;
    x.expertAct = k.topK * k.cf * k.lp * k.fe;
    x.sharedInternal = k.shared * (kBf16 * k.actInputs(k.fe) + k.lp * k.fe);
    x.mlp = k.topK * k.cf * perCopy + x.sharedInternal;
    x.mlpInternal = x.mlp;
  } else {
    x.mlp = kBf16 * k.actInputs(k.f) + k.lp * k.f;
    x.mlpInternal = x.mlp;
  }
  return x;
}

// A transformer block under hybrid parallelism and the recipe's precision, overlap and
// recomputation.
LayerCosts transformerCosts(const TransformerShape& t, const CostContext& ctx) {
  const Block k(t, ctx);
  const GpuSpec& gpu = ctx.gpu;
  const Parallelism& par = ctx.parallel;
  LayerCosts c;
  const ModelCounts counts = modelCounts(k);
  c.modelFlopsForward = counts.flopsForward;
  c.modelParameters = counts.parameters;

  // --- parameters of this GPU (bf16) ---
  double localParams = counts.attnParams / k.T + counts.normParams;
  if (k.moe) {
    localParams += k.h * k.experts + (k.experts / k.E + k.shared) * k.mlpMatrices * k.h * k.fe / k.T;
  } else {
    localParams += counts.mlpParams / k.T;
  }
  c.parameterBytes = toBytes(kBf16 * localParams);
  if (k.moe) c.expertParameterBytes = toBytes(kBf16 * k.experts / k.E * k.mlpMatrices * k.h * k.fe / k.T);

  // --- compute ---
  const LayerGemms g = layerGemms(k);
  if (isLowPrecision(k.precision))
    c.lowPrecisionWeightBytes = toBytes(2.0 * operandBytes(k.precision) * g.linearParams);
  const double wgradOut = 2.0 * (par.gradReduceInFp32 ? kFp32 : kBf16);
  const PassTimes attnGemm = gemmPasses(gpu, k.precision, g.attention, wgradOut);
  const PassTimes mlpGemm = gemmPasses(gpu, k.precision, g.mlp, wgradOut);
  const PassTimes sharedGemm = gemmPasses(gpu, k.precision, g.shared, wgradOut);
  PassTimes casts = castPasses(gpu, k.precision, g.attention, k.sp);
  const PassTimes mlpCasts = castPasses(gpu, k.precision, g.mlp, k.sp);
  const PassTimes sharedCasts = castPasses(gpu, k.precision, g.shared, k.sp);
  casts += mlpCasts;
  casts += sharedCasts;
  const AttentionTimes core = attentionCore(k);
  const ElementwiseBytes ew = elementwise(k);
  const double elementwiseFwdMs = memoryMs(gpu, ew.total());
  const double elementwiseBwdMs = 2.0 * elementwiseFwdMs;

  // --- collectives ---
  const TpComm tp = tensorParallelComm(k, g);
  const TpComm cp = contextParallelComm(k, core);
  std::int64_t a2aBufferBytes = 0;
  const TpComm ep = expertParallelComm(k, a2aBufferBytes);

  // --- activations ---
  const bool keepScores = !k.flash && par.recompute == Recompute::None;
  const ActivationBytes act = activationBytes(k, keepScores);
  double activation = k.nc * (act.replicated / k.sp + (act.attention + act.mlp) / k.T);
  // W needs the inputs of the weight GEMMs: QKV and FC1 inputs (replicated unless SP), the
  // projection and FC2 inputs (sharded), the experts' inputs.
  double wgrad = k.nc * ((2.0 * k.lp * k.h) / k.sp +
                         (k.lp * k.h + k.lp * (k.moe ? k.topK * k.cf * k.fe + k.shared * k.fe : k.f)) / k.T);
  if (k.moe) wgrad += k.nc * k.topK * k.cf * k.lp * k.h / k.T;

  const double gemmFwd = attnGemm.forward + mlpGemm.forward + sharedGemm.forward;
  double forwardMs = gemmFwd + casts.forward + core.forwardMs + elementwiseFwdMs + tp.forward.exposedMs +
                     cp.forward.exposedMs + ep.forward.exposedMs;
  double forwardCommMs = tp.forward.exposedMs + cp.forward.exposedMs + ep.forward.exposedMs;
  double backwardInputMs = attnGemm.backwardInput + mlpGemm.backwardInput + sharedGemm.backwardInput +
                           casts.backwardInput + core.backwardMs + elementwiseBwdMs + tp.backward.exposedMs +
                           cp.backward.exposedMs + ep.backward.exposedMs;
  double backwardInputCommMs = tp.backward.exposedMs + cp.backward.exposedMs + ep.backward.exposedMs;
  double backwardWeightMs = attnGemm.backwardWeight + mlpGemm.backwardWeight + sharedGemm.backwardWeight;
  double backwardWeightCommMs = 0;
  c.forwardHiddenCommMs = tp.forward.hiddenMs + cp.forward.hiddenMs + ep.forward.hiddenMs;
  c.backwardInputHiddenCommMs = tp.backward.hiddenMs + cp.backward.hiddenMs + ep.backward.hiddenMs;

  // --- recomputation (Korthikanti et al. 2022 §5; Megatron-Core's --recompute-modules) ---
  if (par.recompute == Recompute::Full) {
    // Only the layer input survives the forward (sequence-parallel: this rank's shard); the
    // backward first replays the whole forward, collectives included. The replayed
    // activations are transient (alive while this layer's backward runs).
    c.recomputeBytes = toBytes(activation);
    activation = kBf16 * k.nc * k.h / k.sp;
    wgrad = 0;
    backwardInputMs += forwardMs;
    backwardInputCommMs += forwardCommMs;
  } else if (par.recompute == Recompute::Selective) {
    const std::uint32_t modules = par.selectiveModules();
    if ((modules & kRecomputeCoreAttn) && !k.flash) {
      // The attention core (scores, softmax, dropout) is replayed in B instead of held; with
      // FlashAttention nothing s² is held and its backward already replays the scores, so the
      // module changes nothing.
      backwardInputMs += core.forwardMs;
    }
    if (modules & kRecomputeLayerNorm) {
      // The norms' outputs (the QKV and MLP inputs) are dropped after the forward and the norms
      // replayed in B.
      activation -= k.nc * act.normOutputs / k.sp;
      backwardInputMs += memoryMs(gpu, ew.norms);
    }
    if ((modules & kRecomputeMlp) && !k.moe) {
      // Only the MLP's input is kept; B replays FC1, the activation and FC2 (with their casts).
      activation -= k.nc * act.mlpInternal / k.T;
      backwardInputMs += mlpGemm.forward + mlpCasts.forward + memoryMs(gpu, ew.mlpAct);
    }
    if (k.moe && (modules & kRecomputeMoe)) {
      activation -= k.nc * act.mlpInternal / k.T;
      backwardInputMs += mlpGemm.forward + sharedGemm.forward + mlpCasts.forward + sharedCasts.forward +
                         memoryMs(gpu, ew.expertAct + ew.sharedAct) + ep.forward.exposedMs;
      backwardInputCommMs += ep.forward.exposedMs;
    } else {
      if (k.moe && (modules & kRecomputeMoeAct)) {
        activation -= k.nc * act.expertAct / k.T;
        backwardInputMs += memoryMs(gpu, ew.expertAct);
      }
      if (k.moe && (modules & kRecomputeSharedExperts)) {
        activation -= k.nc * act.sharedInternal / k.T;
        backwardInputMs += sharedGemm.forward + sharedCasts.forward + memoryMs(gpu, ew.sharedAct);
      }
    }
    activation = std::max(activation, kBf16 * k.nc * k.h / k.sp);
  }

  // --- ZeRO-3 (FSDP): each pass gathers this layer's parameters (prefetched under the previous
  // layer's compute) and W reduce-scatters its gradients (fp32, or bf16 when the recipe reduces
  // in bf16).
  // ZeRO-2 shards the gradients as well, so each microbatch's W reduce-scatters what it
  // produced instead of accumulating a full gradient (DeepSpeed's stage 2 with gradient
  // accumulation; PyTorch FSDP's SHARD_GRAD_OP outside no_sync). ---
  std::int64_t gatherBufferBytes = 0;
  if (par.zeroStage >= 2 && k.D > 1 && ctx.trainable) {
    const double gradBytes = par.gradReduceInFp32 ? kFp32 : kBf16;
    const double scatter = allGatherMs(ctx.links.data, static_cast<int>(k.D), gradBytes * localParams);
    const Exposure wgt = overlapped(scatter, backwardWeightMs, 1.0, OverlapKind::Bulk);
    backwardWeightMs += wgt.exposedMs;
    backwardWeightCommMs += wgt.exposedMs;
    c.backwardWeightHiddenCommMs += wgt.hiddenMs;
  }
  if (par.zeroStage >= 3 && k.D > 1 && ctx.trainable) {
    const double gather = allGatherMs(ctx.links.data, static_cast<int>(k.D), kBf16 * localParams);
    const Exposure fwd = overlapped(gather, forwardMs, 1.0, OverlapKind::Bulk);
    const Exposure bwd = overlapped(gather, backwardInputMs, 1.0, OverlapKind::Bulk);
    forwardMs += fwd.exposedMs;
    forwardCommMs += fwd.exposedMs;
    backwardInputMs += bwd.exposedMs;
    backwardInputCommMs += bwd.exposedMs;
    c.forwardHiddenCommMs += fwd.hiddenMs;
    c.backwardInputHiddenCommMs += bwd.hiddenMs;
    gatherBufferBytes = toBytes(2.0 * kBf16 * localParams);  // this layer and the prefetched next
  }

  c.forwardMs = forwardMs;
  c.backwardInputMs = backwardInputMs;
  c.backwardWeightMs = backwardWeightMs;
  c.forwardCommMs = forwardCommMs;
  c.backwardInputCommMs = backwardInputCommMs;
  c.backwardWeightCommMs = backwardWeightCommMs;
  c.activationBytes = toBytes(activation);
  c.weightGradBytes = toBytes(std::min(wgrad, activation));
  // Megatron sends the sequence-sharded hidden states (sequence parallel) or splits them over
  // the TP ranks and all-gathers on NVLink (Narayanan et al. 2021 §4.1 scatter/gather).
  c.outputBytes = toBytes(kBf16 * k.nc * k.h / k.T);
  c.communicationBytes = std::max(a2aBufferBytes, gatherBufferBytes);
  return c;
}

// Vocabulary-parallel LM head (Megatron: logits split over TP): the logits GEMM 2·b·s·h·V
// (Narayanan et al. 2021 §5.1), its input and the fp32 logits kept for the cross-entropy backward.
LayerCosts lmHeadCosts(const TransformerShape& t, bool tied, const CostContext& ctx) {
  const GpuSpec& gpu = ctx.gpu;
  const double T = std::max(1, ctx.parallel.tensor);
  const double C = std::max(1, ctx.parallel.context);
  const double sp = ctx.parallel.sequenceParallel ? T : 1.0;
  const double b = static_cast<double>(std::max<std::int64_t>(1, ctx.samplesPerMicrobatch));
  const double h = static_cast<double>(t.hidden);
  const double v = static_cast<double>(*t.vocab);
  const double n = b * static_cast<double>(t.seq);
  const double nc = n / C;
  LayerCosts c;
  c.modelFlopsForward = 2.0 * n * h * v;
  c.modelParameters = tied ? 0.0 : v * h;         // tied: the embedding's weight, counted there
  c.parameterBytes = toBytes(kBf16 * v * h / T);  // a tied head on another rank holds a copy (Megatron)
  // Megatron's output layer runs outside Transformer Engine's low-precision region: bf16.
  const double wgradOut = 2.0 * (ctx.parallel.gradReduceInFp32 ? kFp32 : kBf16);
  const PassTimes gemm = gemmPasses(gpu, Precision::Bf16, {{nc, v / T, h}}, wgradOut);
  // Cross-entropy: read the bf16 logits, write fp32 softmax (forward); read it, write the
  // logits' gradient (backward).
  const double ceFwdMs = memoryMs(gpu, 6.0 * nc * v / T);
  const double ceBwdMs = memoryMs(gpu, 6.0 * nc * v / T);
  double tpFwdMs = 0, tpBwdMs = 0;
  if (T > 1) {
    // Sequence parallel: all-gather the input, reduce-scatter its gradient; otherwise the input
    // is replicated and its gradient all-reduced. The vocabulary-parallel cross-entropy adds
    // three small all-reduces (max, sum, target logit) of one fp32 per token.
    const double hiddenBytes = kBf16 * nc * h;
    tpFwdMs = (ctx.parallel.sequenceParallel ? allGatherMs(ctx.links.tensor, static_cast<int>(T), hiddenBytes) : 0.0) +
              3.0 * allReduceMs(ctx.links.tensor, static_cast<int>(T), kFp32 * nc);
    tpBwdMs = ctx.parallel.sequenceParallel ? allGatherMs(ctx.links.tensor, static_cast<int>(T), hiddenBytes)
                                            : allReduceMs(ctx.links.tensor, static_cast<int>(T), hiddenBytes);
  }
  c.forwardMs = gemm.forward + ceFwdMs + tpFwdMs;
  c.forwardCommMs = tpFwdMs;
  c.backwardInputMs = gemm.backwardInput + ceBwdMs + tpBwdMs;
  c.backwardInputCommMs = tpBwdMs;
  c.backwardWeightMs = gemm.backwardWeight;
  c.activationBytes = toBytes(kBf16 * nc * h / sp + kFp32 * nc * v / T);
  c.weightGradBytes = toBytes(kBf16 * nc * h / sp);
  if (ctx.parallel.recompute == Recompute::Full) {
    c.backwardInputMs += c.forwardMs;
    c.backwardInputCommMs += c.forwardCommMs;
    c.activationBytes = toBytes(kBf16 * nc * h / sp);
    c.weightGradBytes = 0;
  }
  c.outputBytes = toBytes(kFp32 * nc);  // per-token loss
  return c;
}

// Vocabulary-parallel embedding: a memory-bound lookup (each TP rank reads its rows, writes the
// whole output), then an all-reduce (reduce-scatter with sequence parallelism) of the output;
// its weight gradient is a scatter-add into the fp32 gradient.
LayerCosts embeddingCosts(const TransformerShape& t, const CostContext& ctx) {
  const GpuSpec& gpu = ctx.gpu;
  const double T = std::max(1, ctx.parallel.tensor);
  const double C = std::max(1, ctx.parallel.context);
  const double b = static_cast<double>(std::max<std::int64_t>(1, ctx.samplesPerMicrobatch));
  const double h = static_cast<double>(t.hidden);
  const double v = static_cast<double>(*t.vocab);
  const double nc = b * static_cast<double>(t.seq) / C;
  LayerCosts c;
  c.modelParameters = v * h;
  c.parameterBytes = toBytes(kBf16 * v * h / T);
  double tpMs = 0;
  if (T > 1) {
    const double bytes = kBf16 * nc * h;
    tpMs = ctx.parallel.sequenceParallel ? allGatherMs(ctx.links.tensor, static_cast<int>(T), bytes)
                                         : allReduceMs(ctx.links.tensor, static_cast<int>(T), bytes);
  }
  c.forwardMs = memoryMs(gpu, kBf16 * nc * h / T + kBf16 * nc * h) + tpMs;
  c.forwardCommMs = tpMs;
  c.backwardInputMs = 0;
  c.backwardWeightMs = memoryMs(gpu, nc * h / T * (kBf16 + 2.0 * (ctx.parallel.gradReduceInFp32 ? kFp32 : kBf16)));
  c.activationBytes = toBytes(8.0 * nc);  // int64 token ids
  c.weightGradBytes = c.activationBytes;
  c.outputBytes = toBytes(kBf16 * nc * h / T);
  return c;
}

}  // namespace

CollectiveLinks collectiveLinks(const ClusterSpec& cluster, const Parallelism& parallel) {
  const std::int64_t perNode = cluster.gpusPerNode();
  const std::int64_t domain = cluster.nvlinkDomainGpus();
  // A group of ranks `stride` apart spanning `span` consecutive GPUs stays on NVLink when the
  // span fits in one NVLink domain (a node, or an NVL72 rack of 18 nodes); beyond it every GPU
  // of a node talks at once, so each gets its node's NIC bandwidth divided among them (one NIC
  // per GPU: the NIC's bandwidth).
  auto linkFor = [&](std::int64_t span) {
    CollectiveLink l;
    if (span <= domain || cluster.nodes.size() <= 1) {
      l.bandwidthGBps = cluster.intraNode.bandwidthGBps;
      l.latencyUs = cluster.intraNode.latencyUs;
    } else {
      const double nics =
          cluster.nicsPerNode > 0 ? static_cast<double>(cluster.nicsPerNode) : static_cast<double>(perNode);
      l.bandwidthGBps = cluster.interNode.bandwidthGBps * std::min(1.0, nics / static_cast<double>(perNode));
      l.latencyUs = cluster.interNode.latencyUs;
      l.crossesNodes = true;
    }
    return l;
  };
  const std::int64_t T = std::max(1, parallel.tensor);
  const std::int64_t C = std::max(1, parallel.context);
  const std::int64_t E = std::max(1, parallel.expert);
  const std::int64_t D = std::max(1, parallel.data);
  CollectiveLinks out;
  out.tensor = linkFor(T);
  out.context = linkFor(T * C);
  out.expert = linkFor(T * C * E);
  out.data = linkFor(T * C * D);
  return out;
}

double allReduceMs(const CollectiveLink& link, int ranks, double bytes) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = ranks;
  const double bw = link.bandwidthGBps * 1e6;  // bytes per ms
  const double alpha = link.latencyUs / 1000.0;
  const double transfer = bw > 0 ? bytes / bw : 0.0;
  const double ring = 2.0 * (n - 1.0) / n * transfer + 2.0 * (n - 1.0) * alpha;
  const double tree = 2.0 * transfer + 2.0 * std::ceil(std::log2(n)) * alpha;
  return std::min(ring, tree);
}

double allGatherMs(const CollectiveLink& link, int ranks, double bytes) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = ranks;
  const double bw = link.bandwidthGBps * 1e6;
  return (bw > 0 ? (n - 1.0) / n * bytes / bw : 0.0) + (n - 1.0) * link.latencyUs / 1000.0;
}

double allToAllMs(const CollectiveLink& link, int ranks, double bytes) { return allGatherMs(link, ranks, bytes); }

double transformerForwardFlops(const TransformerShape& shape, std::int64_t batch) {
  CostContext ctx;
  ctx.samplesPerMicrobatch = batch;
  TransformerShape t = shape;
  t.vocab.reset();
  return transformerCosts(t, ctx).modelFlopsForward;
}

LayerCosts layerCosts(const Layer& layer, const CostContext& ctx) {
  LayerCosts c;
  const double b = static_cast<double>(std::max<std::int64_t>(1, ctx.samplesPerMicrobatch));
  const GpuSpec& gpu = ctx.gpu;

  if (layer.transformer) {
    const TransformerShape& t = *layer.transformer;
    if (layer.kind == "lm_head" && t.vocab) {
      c = lmHeadCosts(t, layer.tied, ctx);
    } else if (layer.kind == "embedding" && t.vocab) {
      c = embeddingCosts(t, ctx);
    } else {
      c = transformerCosts(t, ctx);
    }
  } else if (layer.flopsForward) {
    // Generic layer (conv, attention, …): given FLOPs, not split by TP/CP; backward ≈ 2×
    // forward split evenly into input and weight gradients (each one GEMM-sized pass).
    const double flops = *layer.flopsForward * b;
    c.modelFlopsForward = flops;
    c.forwardMs = msAtRate(flops, gpu.effectiveFlopsPerS());
    c.backwardInputMs = c.forwardMs;
    c.backwardWeightMs = layer.params && *layer.params > 0 ? c.forwardMs : 0.0;
    if (layer.params) {
      c.parameterBytes = toBytes(kBf16 * static_cast<double>(*layer.params));
      c.modelParameters = static_cast<double>(*layer.params);
    }
  } else if (layer.params) {
    c.parameterBytes = toBytes(kBf16 * static_cast<double>(*layer.params));
    c.modelParameters = static_cast<double>(*layer.params);
  }

  // Measured fields always win (measured at the plan's parallelism; their collective share is
  // then unknown and reported as zero).
  if (layer.forwardMs) {
    c.forwardMs = *layer.forwardMs;
    c.forwardCommMs = 0;
  }
  if (layer.backwardInputMs) {
    c.backwardInputMs = *layer.backwardInputMs;
    c.backwardInputCommMs = 0;
  }
  if (layer.backwardWeightMs) {
    c.backwardWeightMs = *layer.backwardWeightMs;
    c.backwardWeightCommMs = 0;
  }
  if (layer.activationBytes) c.activationBytes = *layer.activationBytes;
  if (layer.parameterBytes) {
    c.parameterBytes = *layer.parameterBytes;
    c.expertParameterBytes = std::min(c.expertParameterBytes, c.parameterBytes);
    if (c.modelParameters <= 0) c.modelParameters = static_cast<double>(*layer.parameterBytes) / kBf16;
  }
  if (layer.outputBytes) c.outputBytes = *layer.outputBytes;
  if (layer.weightGradBytes) {
    c.weightGradBytes = *layer.weightGradBytes;
  } else if (layer.activationBytes && !layer.transformer) {
    // Measured activations without a split: assume half is needed by W (inputs of GEMMs).
    c.weightGradBytes = c.activationBytes / 2;
  }
  c.weightGradBytes = std::min(c.weightGradBytes, c.activationBytes);

  if (!ctx.trainable) {
    c.backwardInputMs = 0;
    c.backwardWeightMs = 0;
    c.backwardInputCommMs = 0;
    c.backwardWeightCommMs = 0;
    c.weightGradBytes = 0;
  }
  return c;
}

LayerCosts layerCosts(const Layer& layer, const GpuSpec& gpu, std::int64_t samplesPerMicrobatch, bool trainable) {
  CostContext ctx;
  ctx.gpu = gpu;
  ctx.samplesPerMicrobatch = samplesPerMicrobatch;
  ctx.trainable = trainable;
  return layerCosts(layer, ctx);
}

StaticBytesPerParameter staticBytesPerParameter(int zeroStage, int dataParallel, bool gradientsInFp32) {
  // Mixed-precision Adam: bf16 weight (2) + gradient accumulation buffer (fp32 4, or bf16 2 when
  // gradients are reduced in bf16: Megatron-Core's DDP keeps its grad buffer in the reduce
  // dtype) + fp32 master weight, momentum and variance (12) (Korthikanti et al. 2022;
  // Megatron-LM distributed optimizer docs); ZeRO (Rajbhandari et al. 2020) shards them over
  // the D replicas by stage.
  const double d = std::max(1, dataParallel);
  StaticBytesPerParameter b;
  if (!gradientsInFp32) b.gradient = kBf16;
  if (zeroStage >= 1) b.optimizer /= d;
  if (zeroStage >= 2) b.gradient /= d;
  if (zeroStage >= 3) b.parameter /= d;
  return b;
}

double staticBytesPerParameter(const OptimizerSpec& optimizer, int dataParallel) {
  return staticBytesPerParameter(optimizer.distributed ? 1 : 0, dataParallel).total();
}

double staticMemoryBytes(double trainableParameters, double frozenParameters, const OptimizerSpec& optimizer,
                         int dataParallel) {
  return trainableParameters * staticBytesPerParameter(optimizer, dataParallel) + frozenParameters * kBf16;
}

double optimizerStepMs(const GpuSpec& gpu, double parameters) {
  return memoryMs(gpu, 34.0 * std::max(0.0, parameters));
}

}  // namespace pipestudio
