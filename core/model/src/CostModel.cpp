#include "pipestudio/model/CostModel.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "CostParts.hpp"
#include "pipestudio/model/BlockHalves.hpp"
#include "pipestudio/model/Caveats.hpp"

namespace pipestudio {
namespace {

constexpr double kBf16 = 2.0;  // bytes per bf16/fp16 value (activations, weights, gradients sent)
constexpr double kFp32 = 4.0;
using costparts::gemmMs;    // the GEMM kernel model (GemmKernel.cpp)
using costparts::memoryMs;  // a memory-bound kernel
using costparts::msAt;

// Saturates instead of overflowing: shapes at the loader's bounds (seq, hidden up to 1e7) give
// byte counts beyond int64, and converting those is undefined behaviour.
std::int64_t toBytes(double v) {
  constexpr double kMaxBytes = 9.0e18;
  if (!(v > 0)) return 0;
  return static_cast<std::int64_t>(std::llround(std::min(v, kMaxBytes)));
}

// Where a weight GEMM sits relative to the sequence-parallel collectives of Megatron's tensor
// parallelism (Korthikanti et al. 2022 §4.2.2): a column-parallel GEMM follows the all-gather
// of its sequence-sharded input, a row-parallel GEMM precedes the reduce-scatter of its output.
enum class TpSide : std::uint8_t { None, ColumnParallel, RowParallel };

// The weight GEMMs of a transformer layer on one GPU, forward shapes (m tokens × k in → n out).
struct Gemm {
  double m, n, k;
  double count = 1;            // identical GEMMs (local experts)
  TpSide side = TpSide::None;  // which sequence-parallel collective it meets
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

// Bytes of HBM traffic per value that Transformer Engine's cast to `precision` moves, as its
// quantizers run (transformer_engine/pytorch/csrc/quantizer.cpp and extensions/normalization.cpp
// at d0067d0da): read the bf16 tensor and write the copies a low-precision GEMM pair reads
// (operandCopies: row-wise and column-wise, or one per-tensor FP8 copy where the GPU's FP8 GEMMs
// take any layout), plus an amax pass where the format has a per-tensor scale.
//  - FP8 with per-tensor current scaling (Float8CurrentScaling) reads the tensor once for its
//    amax, then once to cast. A norm can take that amax (FUSED_NORM_AMAX_FP8) only without
//    cuDNN's norm, which Megatron-Bridge's FP8 recipes turn on (NVTE_NORM_FWD_USE_CUDNN=1).
//  - NVFP4 (NVFP4BlockScaling) needs the tensor's amax for its second-level scale, and for the
//    column-wise copy that of the random-Hadamard-transformed tensor: one pass reads the tensor
//    for both (nvte_hadamard_transform_amax), then the fused cast reads it again and writes the
//    row-wise copy and the transformed column-wise one. With the transform on (the default
//    recipe's inputs and gradients) the norm takes no part of it.
//  - FP8 with 1×128 blocks (Float8BlockScaling) and MXFP8 scale locally: no amax pass. A norm
//    fuses the MXFP8 cast only with cuDNN's norm on 128×128 tiles and never the blockwise one;
//    the cost model takes them unfused (the norm writes bf16, the cast reads it once).
double castBytesPerValue(const GpuSpec& gpu, Precision precision) {
  if (!isLowPrecision(precision)) return 0.0;
  const double copies = operandCopies(precision, gpu.fp8GemmTakesAnyLayout()) * operandBytes(precision);
  const bool amaxPass = precision == Precision::Fp8 || precision == Precision::Nvfp4;
  return (amaxPass ? kBf16 : 0.0) + kBf16 + copies;
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
    forwardBytes += g.count * inRows * g.k * castBytesPerValue(gpu, precision);
    backwardBytes += g.count * gradRows * g.n * castBytesPerValue(gpu, precision);
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

// Routed copies the busiest expert processes relative to a balanced router: the capacity factor
// when tokens are dropped (Megatron pads each expert's input to its capacity,
// --moe-pad-expert-input-to-capacity), else — dropless — the stated load imbalance.
double moeLoad(const TransformerShape& t, const Parallelism& par) {
  std::optional<double> capacity = t.capacityFactor;
  if (par.moeCapacityFactor) capacity = *par.moeCapacityFactor > 0 ? par.moeCapacityFactor : std::nullopt;
  return capacity ? *capacity : t.loadImbalance;
}

// Derived dimensions of a transformer block on one GPU of its pipeline rank.
struct Block {
  const TransformerShape& t;
  const CostContext& ctx;
  double T, C, E, D;
  double sp;  // divisor of the norm/dropout/residual region (T with sequence parallelism)
  double b, s, h, a, f, fe;
  // Attention widths (issue 26: head_dim apart from hidden / heads, GQA, MLA): query/key and value
  // sizes of a head, key/value heads, and the Q, K, V and attention-output widths of a token.
  double dqk, dv, kvh, hq, hk, hv, ho;
  double n, nc;  // tokens of the microbatch, of this context rank
  double experts, topK, shared, dropout, mlpMatrices;
  double etp;   // expert tensor parallelism (ETP; T unless set apart)
  double load;  // routed copies on the busiest expert-parallel rank relative to a balanced router
  bool swiglu, flash, moe;
  Precision precision;
  double lp;  // bytes per value of a GEMM input kept for wgrad

  Block(const TransformerShape& shape, const CostContext& c)
      : t(shape),
        ctx(c),
        T(std::max(1, c.parallel.tensor)),
        C(std::max(1, c.parallel.context)),
        E(std::max(1, c.parallel.expert)),
        D(static_cast<double>(c.parallel.denseData())),  // D·C: the ranks sharing the dense weights
        sp(c.parallel.sequenceParallel ? T : 1.0),
        b(static_cast<double>(std::max<std::int64_t>(1, c.samplesPerMicrobatch))),
        s(static_cast<double>(shape.seq)),
        h(static_cast<double>(shape.hidden)),
        a(static_cast<double>(std::max<std::int64_t>(1, shape.heads))),
        f(static_cast<double>(shape.ffnOrDefault())),
        fe(static_cast<double>(shape.expertFfnOrDefault())),
        dqk(static_cast<double>(shape.qkHeadDim())),
        dv(static_cast<double>(shape.vHeadDim())),
        kvh(shape.mla ? a : static_cast<double>(shape.kvHeadsOrHeads())),
        hq(a * dqk),
        hk(kvh * dqk),
        hv(kvh * dv),
        ho(a * dv),
        n(b * s),
        nc(b * s / C),
        experts(static_cast<double>(shape.experts)),
        topK(static_cast<double>(shape.topK)),
        shared(static_cast<double>(shape.sharedExperts)),
        dropout(shape.dropout ? 1.0 : 0.0),
        mlpMatrices(shape.mlp == MlpKind::SwiGlu ? 3.0 : 2.0),
        etp(std::max(1, c.parallel.expertTensorOrTensor())),
        load(moeLoad(shape, c.parallel)),
        swiglu(shape.mlp == MlpKind::SwiGlu),
        // The unfused backend runs any attention as the standard (score-materialising) kernels.
        flash(shape.attention == AttentionKind::Flash && c.parallel.attentionBackend != AttentionBackend::Unfused),
        moe(shape.isMoe()),
        precision(c.precision),
        lp(savedInputBytes(c.precision)) {}

  // Activation-function values per token of the dense MLP or of one expert (SwiGLU keeps the
  // gate and the up projection, 2·ffn; GELU its input, ffn).
  double actInputs(double ffn) const { return (swiglu ? 2.0 : 1.0) * ffn; }
};

// --- model FLOPs and parameters (whole layer, unsharded) ---
// FLOPs: Narayanan et al. 2021 §5.1 and Korthikanti et al. 2022 Appendix A (24·b·s·h² + 4·b·s²·h
// with a 4h GELU MLP); grouped-query attention shrinks the K/V projections to kv_heads·head_dim
// (Ainslie et al. 2023; Llama 2 §2.2 / Llama 3 §3.2); SwiGLU has three ffn matrices (Shazeer
// 2020; Llama 2); MoE routes each token to top_k of `experts` (Mixtral, Jiang et al. 2024 §2.1;
// DeepSeek-V3 §2.1.2 for shared experts). Heads of head_dim apart from hidden / heads (Qwen3,
// GPT-OSS) size Q, K, V and the output projection by heads · head_dim; multi-head latent attention
// (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1) projects queries through a q_lora_rank latent and keys and
// values through a kv_lora_rank latent plus a shared rotary key, and up again per head; a sliding
// window (GPT-OSS) limits the keys per query to the window.
struct ModelCounts {
  double flopsForward = 0, parameters = 0, attnParams = 0, mlpParams = 0, normParams = 0;
};
// Parameters of the attention projections (whole layer).
double attentionProjectionParams(const Block& k) {
  if (!k.t.mla) return k.h * (k.hq + k.hk + k.hv) + k.ho * k.h;
  const TransformerShape::Mla& m = *k.t.mla;
  const auto ql = static_cast<double>(m.qLoraRank);
  const auto kvl = static_cast<double>(m.kvLoraRank);
  const auto rope = static_cast<double>(m.qkRopeHeadDim);
  const auto nope = static_cast<double>(m.qkNopeHeadDim);
  const double query = ql > 0 ? k.h * ql + ql * k.hq : k.h * k.hq;
  return query + k.h * (kvl + rope) + kvl * k.a * (nope + k.dv) + k.ho * k.h;
}
ModelCounts modelCounts(const Block& k) {
  ModelCounts m;
  const double keysPerQuery = k.t.window > 0 ? std::min(k.s, static_cast<double>(k.t.window)) : k.s;
  const double attnProjFlops = 2.0 * k.n * attentionProjectionParams(k);
  const double attnCoreFlops = 2.0 * k.n * keysPerQuery * (k.hq + k.ho);
  double mlpFlops = 0;
  if (k.moe) {
    mlpFlops = 2.0 * k.n * k.h * k.experts + (k.topK + k.shared) * 2.0 * k.mlpMatrices * k.n * k.h * k.fe;
    m.mlpParams = k.h * k.experts + (k.experts + k.shared) * k.mlpMatrices * k.h * k.fe;
  } else {
    mlpFlops = 2.0 * k.mlpMatrices * k.n * k.h * k.f;
    m.mlpParams = k.mlpMatrices * k.h * k.f;
  }
  m.flopsForward = attnProjFlops + attnCoreFlops + mlpFlops;
  m.attnParams = attentionProjectionParams(k);
  m.normParams = 2.0 * k.h;
  if (k.t.mla) m.normParams += static_cast<double>(k.t.mla->qLoraRank + k.t.mla->kvLoraRank);  // latent norms
  m.parameters = m.attnParams + m.mlpParams + m.normParams;
  return m;
}

// The layer's weight GEMMs on this GPU, by module (attention projections, the MLP or the
// router and experts, the shared experts): TP shards attention and MLP, EP the routed experts.
struct LayerGemms {
  std::vector<Gemm> attention, mlp, shared;
  double linearParams = 0;  // parameters of this GPU's linear layers (what low-precision copies cover)
};
// Multi-head latent attention's projections (Megatron-Core MLASelfAttention): the down
// projections to the latents are replicated over TP and run on this rank's sequence shard (the
// latents are then gathered), the up projections and the output projection are split over TP.
void mlaGemms(const Block& k, LayerGemms& g) {
  const TransformerShape::Mla& m = *k.t.mla;
  const auto ql = static_cast<double>(m.qLoraRank);
  const auto kvl = static_cast<double>(m.kvLoraRank);
  const auto rope = static_cast<double>(m.qkRopeHeadDim);
  const auto nope = static_cast<double>(m.qkNopeHeadDim);
  if (ql > 0) {
    g.attention.push_back({k.nc / k.sp, ql, k.h, 1, TpSide::None});            // q down
    g.attention.push_back({k.nc, k.hq / k.T, ql, 1, TpSide::ColumnParallel});  // q up
    g.linearParams += k.h * ql + ql * k.hq / k.T;
  } else {
    g.attention.push_back({k.nc, k.hq / k.T, k.h, 1, TpSide::ColumnParallel});
    g.linearParams += k.h * k.hq / k.T;
  }
  g.attention.push_back({k.nc / k.sp, kvl + rope, k.h, 1, TpSide::None});                    // kv down
  g.attention.push_back({k.nc, k.a * (nope + k.dv) / k.T, kvl, 1, TpSide::ColumnParallel});  // kv up
  g.attention.push_back({k.nc, k.h, k.ho / k.T, 1, TpSide::RowParallel});                    // output projection
  g.linearParams += k.h * (kvl + rope) + kvl * k.a * (nope + k.dv) / k.T + k.ho / k.T * k.h;
}

LayerGemms layerGemms(const Block& k) {
  LayerGemms g;
  if (k.t.mla) {
    mlaGemms(k, g);
  } else {
    g.attention.push_back({k.nc, (k.hq + k.hk + k.hv) / k.T, k.h, 1, TpSide::ColumnParallel});  // QKV
    g.attention.push_back({k.nc, k.h, k.ho / k.T, 1, TpSide::RowParallel});                     // output projection
    g.linearParams = (k.hq + k.hk + k.hv) / k.T * k.h + k.ho / k.T * k.h;
  }
  if (k.moe) {
    // The router and the routed experts are costed by moeCosts (MoeCosts.cpp).
    if (k.shared > 0) {
      g.shared.push_back({k.nc, k.actInputs(k.shared * k.fe) / k.T, k.h, 1, TpSide::ColumnParallel});
      g.shared.push_back({k.nc, k.h, k.shared * k.fe / k.T, 1, TpSide::RowParallel});
      g.linearParams += (k.actInputs(k.shared * k.fe) + k.shared * k.fe) / k.T * k.h;
    }
  } else {
    g.mlp.push_back({k.nc, k.actInputs(k.f) / k.T, k.h, 1, TpSide::ColumnParallel});  // FC1 (gate+up)
    g.mlp.push_back({k.nc, k.h, k.f / k.T, 1, TpSide::RowParallel});                  // FC2
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
  const double coreMs = msAt(2.0 * k.nc * k.s * (k.hq + k.ho) / k.T * causalFactor, gpu.effectiveFlopsPerS());
  const double scoreBytes = k.flash ? 0.0 : (k.a / k.T) * k.nc * k.s * (8.0 + 5.0 * k.dropout);
  AttentionTimes t;
  t.forwardMs = coreMs + memoryMs(gpu, scoreBytes);
  t.backwardMs = k.flash ? 2.5 * coreMs : 2.0 * coreMs + memoryMs(gpu, 2.0 * scoreBytes);
  return t;
}

// Element-wise kernels (Megatron's fused kernels; bf16): two norms (read + write h), two
// bias-dropout-add (read 2h, write h, mask h/2 bytes·2), the MLP activation (GELU read + write
// ffn; SwiGLU read 2·ffn, write ffn); the routed experts' activation and permutation are
// moeCosts'. Backward moves about twice the bytes.
struct ElementwiseBytes {
  double norms = 0, other = 0, mlpAct = 0, expertAct = 0, sharedAct = 0;
  double total() const { return norms + other + mlpAct + expertAct + sharedAct; }
};
// torchtitan's block (torchtitan/models/llama/model.py and models/norms.py at 9dec370): its
// RMSNorm casts to fp32, squares, means, multiplies by the rsqrt, casts back and scales (eager:
// read 2 write 4, read 4 write 4, read 4, read 4 write 4, read 4 write 2, read 2 write 2 = 36
// bytes per value; compiled into one kernel: read 2 write 2); apply_rotary_emb casts Q and K to
// fp32 complex pairs, multiplies them by the frequencies and casts back (eager 20 bytes per value,
// compiled 4); repeat_kv copies K and V out to the query heads before SDPA (read the K/V width,
// write the query width) and the attention output is transposed into a contiguous copy (4 bytes
// per value) in either mode; SiLU then the gate multiply (eager 4 + 6 bytes per ffn value,
// compiled 6). torch.compile fuses what sits between the extern kernels (matmuls, SDPA).
void torchtitanElementwise(const Block& k, ElementwiseBytes& e) {
  const bool eager = !k.ctx.parallel.torchCompile;
  const double tokens = k.nc / k.sp;
  e.norms = tokens * 2.0 * (eager ? 36.0 : 4.0) * k.h;
  const double rope = (eager ? 20.0 : 4.0) * (k.hq + k.hk);
  const double repeatKv = k.kvh < k.a ? 2.0 * kBf16 * (k.hk + k.hq) : 0.0;
  const double transposeOut = 2.0 * kBf16 * k.ho;
  e.other += k.nc * (rope + repeatKv + transposeOut) / k.T;
  if (!k.moe) e.mlpAct = k.nc * (k.swiglu ? (eager ? 10.0 : 6.0) : 4.0) * k.f / k.T;
}

ElementwiseBytes elementwise(const Block& k) {
  ElementwiseBytes e;
  const double tokens = k.nc / k.sp;
  e.norms = tokens * 8.0 * k.h;
  e.other = tokens * 2.0 * (6.0 * k.h + k.dropout * k.h);
  if (k.ctx.parallel.framework == Framework::Torchtitan) {
    torchtitanElementwise(k, e);
    return e;
  }
  const double perValue = k.swiglu ? 6.0 : 4.0;
  if (k.moe) {
    // The routed experts' activation and permutation: moeCosts.
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
  double forwardGatherExposedMs = 0;  ///< the forward all-gathers' exposed part (a replay repeats them)
};

// The column- and row-parallel GEMM passes of one module (attention or MLP) of a layer.
struct ModuleGemms {
  PassTimes column, row;
};
ModuleGemms moduleGemms(const Block& k, const std::vector<Gemm>& module) {
  ModuleGemms m;
  for (const Gemm& gemm : module) {
    if (gemm.side == TpSide::None) continue;
    (gemm.side == TpSide::ColumnParallel ? m.column : m.row) += gemmPasses(k.ctx.gpu, k.precision, {gemm});
  }
  return m;
}

// torchtitan's AsyncTP: torch.compile's micro_pipeline_tp pass (torch/_inductor/fx_passes/
// micro_pipeline_tp.py at 5f65158a) replaces an all-gather whose result feeds matmuls, and a
// reduce-scatter whose input is one matmul's output, with PyTorch's symmetric-memory ops
// (torch/distributed/_symmetric_memory/__init__.py at 006b161f):
// - fused_all_gather_matmul copies this rank's shard into its symmetric buffer and waits at a
//   barrier before its first chunk ("we are giving up the chance to overlap 'mv' and 'b' with the
//   first shard_consumer"), then pulls the other T − 1 shards one at a time with the copy engine
//   while the GEMM runs chunk by chunk: (T−1)/T of what the GEMM cannot cover shows, plus the
//   copy (read and write the shard) and the barrier.
// - fused_matmul_reduce_scatter computes the rows each peer needs chunk by chunk while the peers
//   pull the previous chunk, then reduces the T partial chunks it received in one more kernel
//   (reduce_partials: read them, write the shard), which nothing hides.
// The forward's all-gathers into QKV and FC1 and reduce-scatters after the projection and FC2
// match; backward the output-gradient all-gathers into the projection's and FC2's dgrad match,
// but the input-gradient reduce-scatters follow the sum of the module's dgrads (Q, K and V are
// separate linears in torchtitan's Llama, as are w1 and w3) and _find_producer_matmul finds no
// single matmul: they stay NCCL reduce-scatters on the critical path. The gathered inputs the
// fused op returns (return_A) serve the wgrad, so no re-gather. Copy engines hold no SMs.
TpComm asyncTensorParallelComm(const Block& k, const LayerGemms& g, double gather, double gatherCast) {
  TpComm c;
  const GpuSpec& gpu = k.ctx.gpu;
  const double hiddenBytes = kBf16 * k.nc * k.h;
  const double castShard = operandBytes(k.precision) / kBf16 * hiddenBytes / k.T;
  const double barrierMs = k.ctx.links.tensor.latencyUs / 1000.0;
  const double localCopyMs = memoryMs(gpu, 2.0 * castShard) + barrierMs;
  const double reduceMs = memoryMs(gpu, hiddenBytes + hiddenBytes / k.T) + barrierMs;
  const double scatter = gather;
  auto decomposed = [&](double comm, double gemm, double fixedMs) {
    Exposure e = overlapped(comm, gemm, k.T, OverlapKind::GatherIntoGemm);
    e.exposedMs += fixedMs;
    return e;
  };
  std::vector<Gemm> mlp = g.mlp;
  mlp.insert(mlp.end(), g.shared.begin(), g.shared.end());
  for (const std::vector<Gemm>* module : std::array<const std::vector<Gemm>*, 2>{&g.attention, &mlp}) {
    if (module->empty()) continue;
    const ModuleGemms m = moduleGemms(k, *module);
    const Exposure intoColumn = decomposed(gatherCast, m.column.forward, localCopyMs);
    c.forward += intoColumn;
    c.forwardGatherExposedMs += intoColumn.exposedMs;
    c.forward += decomposed(scatter, m.row.forward, reduceMs);
    c.backward += decomposed(gatherCast, m.row.backwardInput, localCopyMs);
    c.backward.exposedMs += scatter;
  }
  return c;
}

TpComm tensorParallelComm(const Block& k, const LayerGemms& g) {
  TpComm c;
  if (k.T <= 1) return c;
  const CollectiveLink& link = k.ctx.links.tensor;
  const int ranks = static_cast<int>(k.T);
  const double hiddenBytes = kBf16 * k.nc * k.h;
  const bool overlap = k.ctx.parallel.tpCommOverlap && k.ctx.parallel.sequenceParallel;
  // A MoE layer's MLP half has TP collectives only for its shared experts: the routed experts
  // take this rank's sequence shard as it is (expert tensor parallelism gathers inside moeCosts).
  const bool mlpCollectives = !g.mlp.empty() || !g.shared.empty();
  const double modules = mlpCollectives ? 2.0 : 1.0;
  const double gather = allGatherMs(link, ranks, hiddenBytes);
  const double gatherCast = allGatherMs(link, ranks, operandBytes(k.precision) / kBf16 * hiddenBytes);
  const double scatter = gather;  // a reduce-scatter moves the same volume in the same steps
  if (!overlap && !k.ctx.parallel.sequenceParallel) {
    c.forward.exposedMs = modules * allReduceMs(link, ranks, hiddenBytes);
    c.backward.exposedMs = c.forward.exposedMs;
    return c;
  }
  if (!overlap && k.ctx.parallel.framework == Framework::Torchtitan) {
    // DTensor's sequence parallelism without AsyncTP: per module an all-gather and a
    // reduce-scatter of the same volume, each waited for (NCCL runs those as rings, never NVLS).
    c.forward.exposedMs = modules * 2.0 * gather;
    c.backward.exposedMs = c.forward.exposedMs;
    c.forwardGatherExposedMs = modules * gather;
    return c;
  }
  if (overlap && k.ctx.parallel.framework == Framework::Torchtitan) {
    return asyncTensorParallelComm(k, g, gather, gatherCast);
  }
  // Each collective meets the GEMMs on its side of the attention block and of the MLP (the
  // shared experts' GEMMs run beside the routed ones).
  std::vector<Gemm> mlp = g.mlp;
  mlp.insert(mlp.end(), g.shared.begin(), g.shared.end());
  for (const std::vector<Gemm>* module : std::array<const std::vector<Gemm>*, 2>{&g.attention, &mlp}) {
    if (module->empty()) continue;
    const ModuleGemms m = moduleGemms(k, *module);
    if (!overlap) {
      // Sequence parallelism without userbuffers (Transformer Engine's Linear, module/linear.py):
      // forward the column-parallel GEMM's input is all-gathered (cast first in a low-precision
      // recipe) and the row-parallel GEMM's output reduce-scattered, each before or after its
      // GEMM. Backward the row-parallel dgrad waits for its output gradient's all-gather (cast);
      // the column-parallel side re-gathers the sequence-sharded input it kept (cast) for wgrad
      // while its dgrad GEMM runs, and reduce-scatters the input gradient while its wgrad GEMM
      // runs (async_op=True, waited for at the end of the module's backward).
      c.forward.exposedMs += gatherCast + scatter;
      c.forwardGatherExposedMs += gatherCast;
      c.backward.exposedMs += gatherCast;
      c.backward += overlapped(gatherCast, m.column.backwardInput, 1.0, OverlapKind::Bulk);
      c.backward += overlapped(scatter, m.column.backwardWeight, 1.0, OverlapKind::Bulk);
      continue;
    }
    const Exposure intoColumn = overlapped(gatherCast, m.column.forward, k.T, OverlapKind::GatherIntoGemm);
    c.forward += intoColumn;
    c.forwardGatherExposedMs += intoColumn.exposedMs;
    c.forward += overlapped(scatter, m.row.forward, k.T, OverlapKind::GemmIntoScatter);
    c.backward += overlapped(gatherCast, m.row.backwardInput, k.T, OverlapKind::GatherIntoGemm);
    c.backward += overlapped(scatter, m.column.backwardInput, k.T, OverlapKind::GemmIntoScatter);
    c.backward += overlapped(gather, m.column.backwardInput, 1.0, OverlapKind::Bulk);
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
  const double chunkBytes = kBf16 * k.nc * (k.hk + k.hv) / k.T;
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

// The attention core with FlashAttention (the kernel model of AttentionKernel.cpp) and, with
// context parallelism, Transformer Engine's K/V exchange (ContextParallel.cpp).
struct CoreWithContext {
  AttentionTimes core;
  TpComm cp;
  double bufferBytes = 0;
};
CoreWithContext flashCoreWithContext(const Block& k) {
  costparts::AttentionCoreShape shape;
  shape.batch = k.b;
  shape.seq = k.s;
  shape.heads = k.a / k.T;
  shape.kvHeads = k.kvh / k.T;
  shape.qkDim = k.dqk;
  shape.vDim = k.dv;
  shape.causal = k.t.causal;
  shape.window = static_cast<double>(k.t.window);
  shape.backend = k.ctx.parallel.attentionBackend;
  const costparts::ContextAttention ca = costparts::contextAttention(k.ctx.gpu, k.ctx.links, k.ctx.parallel, shape);
  CoreWithContext out;
  out.core.forwardMs = ca.forwardMs;
  out.core.backwardMs = ca.backwardMs;
  out.cp.forward = {ca.forwardComm.exposedMs, ca.forwardComm.hiddenMs};
  out.cp.backward = {ca.backwardComm.exposedMs, ca.backwardComm.hiddenMs};
  out.bufferBytes = ca.bufferBytes;
  return out;
}

// The routed part of a MoE layer on this GPU (MoeCosts.cpp): its tokens are the sequence shard
// the attention leaves (T with sequence parallelism), its experts E / EP sharded over ETP.
costparts::MoeCosts routedExperts(const Block& k, double wgradOutputBytes) {
  costparts::MoeShape shape;
  shape.tensor = static_cast<int>(k.T);
  shape.tokens = k.nc / k.sp;
  shape.hidden = k.h;
  shape.expertFfn = k.fe;
  shape.experts = k.experts;
  shape.topK = k.topK;
  shape.swiglu = k.swiglu;
  shape.ep = k.E;
  shape.etp = k.etp;
  shape.load = k.load;
  shape.precision = k.precision;
  shape.wgradOutputBytes = wgradOutputBytes;
  shape.flexDispatcher = k.ctx.parallel.moeFlexDispatcher;
  shape.flexBackend = k.ctx.parallel.moeFlexBackend;
  const Parallelism& par = k.ctx.parallel;
  shape.commSms = par.moeCommSmsOrDefault(k.ctx.links.expert.crossesNodes);
  shape.permuteFusion = par.moePermuteFusion;
  shape.permuteInDispatcher = par.moePermuteFusionIntoDispatcher;
  shape.combineChunkTokens = par.moeCombineChunkTokensOrDefault();
  shape.graphedPreprocess = par.graphsModule(kGraphMoePreprocess);
  shape.rankCapacityFactor = par.moeRankCapacityFactor.value_or(0.0);
  shape.dispatchWaitsOnHost = moeDispatchWaitsOnHost(par, moeDropsAndPads(k.t, par));
  shape.pagedStashFactor = par.moePagedStash ? par.moePagedStashBufferFactorOrDefault() : 0.0;
  shape.routerGroups = static_cast<double>(k.t.routerGroups);
  shape.routerGroupTopK = static_cast<double>(k.t.routerGroupTopK);
  return costparts::moeCosts(k.ctx.gpu, k.ctx.links, shape);
}

// --- activation memory per GPU (bytes per token × tokens of this rank) ---
// Korthikanti et al. 2022 §4.1 term by term (34·s·b·h + 5·a·s²·b for a 4h GELU MLP with
// dropout), §4.2 for tensor and sequence parallelism (10 replicated + 24/t sharded). The inputs
// of the weight GEMMs are kept in the format wgrad reads (lp bytes: bf16, or the low-precision
// transposed copy Transformer Engine keeps); FlashAttention keeps Q, K, V and its output in bf16
// (its backward needs them) and the per-row log-sum-exp, no s² matrix (Dao et al. 2022).
struct ActivationBytes {
  double replicated = 0;     // per token, divided by sp
  double attention = 0;      // per token, sharded over T
  double mlp = 0;            // per token, sharded over T
  double unsharded = 0;      // per token, neither: MLA's gathered latents
  double normOutputs = 0;    // part of `replicated`: the QKV and MLP inputs (norm outputs)
  double mlpInternal = 0;    // part of `mlp` a recomputed MLP does not keep
  double upProjOutputs = 0;  // part of `attention`: MLA's up-projected Q, K, V (mla_up_proj)
  double sharedInternal = 0;
};
ActivationBytes activationBytes(const Block& k, bool keepScores) {
  ActivationBytes x;
  // Two norm inputs (2h each), the QKV input and the MLP input (lp·h each), two dropout masks.
  x.normOutputs = 2.0 * k.lp * k.h;
  x.replicated = 4.0 * k.h + x.normOutputs + 2.0 * k.dropout * k.h;
  // Q, K and V and the attention output in bf16 (2·(hq + hk + hv + ho); 4h + 4·hkv when heads
  // are hidden / heads wide; in bf16 recipes the output is the projection's saved input), the
  // projection input's low-precision copy, the scores (2·a·s softmax output + a·s mask + 2·a·s
  // dropout output) or FlashAttention's fp32 log-sum-exp (4a).
  x.attention = kBf16 * (k.hq + k.hk + k.hv + k.ho);
  if (isLowPrecision(k.precision)) x.attention += k.lp * k.ho;
  if (keepScores) x.attention += k.a * k.s * (2.0 + 3.0 * k.dropout);
  if (k.flash) x.attention += 4.0 * k.a;
  if (k.t.mla) {
    // MLA: the gathered latents' norm inputs (bf16) and the up projections' inputs (lp); Q, K, V
    // are the up projections' outputs.
    const TransformerShape::Mla& m = *k.t.mla;
    const auto ql = static_cast<double>(m.qLoraRank);
    const auto kvl = static_cast<double>(m.kvLoraRank);
    x.unsharded = kBf16 * (ql + kvl + static_cast<double>(m.qkRopeHeadDim)) + k.lp * (ql + kvl);
    x.upProjOutputs = kBf16 * (k.hq + k.hk + k.hv);
  }
  // MLP: the activation's input (2 bytes per value) and FC2's input (lp); a MoE layer's routed
  // experts are moeCosts', its shared experts a dense MLP.
  if (k.moe) {
    x.sharedInternal = k.shared * (kBf16 * k.actInputs(k.fe) + k.lp * k.fe);
    x.mlp = x.sharedInternal;
    x.mlpInternal = x.mlp;
  } else {
    x.mlp = kBf16 * k.actInputs(k.f) + k.lp * k.f;
    x.mlpInternal = x.mlp;
  }
  return x;
}

// This GPU's parameters of a block (bf16 each): attention over TP, norms whole, MLA's down
// projections replicated over TP, the routed experts as the expert layout shards them.
double localParameters(const Block& k, const ModelCounts& counts, const costparts::MoeCosts& moe) {
  double localParams = counts.attnParams / k.T + counts.normParams;
  if (k.t.mla) {
    // MLA's down projections are replicated over TP.
    const TransformerShape::Mla& m = *k.t.mla;
    const double down = k.h * static_cast<double>(m.qLoraRank + m.kvLoraRank + m.qkRopeHeadDim);
    localParams += down * (1.0 - 1.0 / k.T);
  }
  if (k.moe) {
    localParams += moe.localParams + k.shared * k.mlpMatrices * k.h * k.fe / k.T;
  } else {
    localParams += counts.mlpParams / k.T;
  }
  return localParams;
}

// The parts a block's passes are made of: its GEMMs with their casts, the element-wise kernels,
// the attention core and the TP, CP and EP collectives with what the recipe hides of each.
struct BlockParts {
  LayerGemms g;
  PassTimes attnGemm, mlpGemm, sharedGemm;
  PassTimes casts, mlpCasts, sharedCasts;  ///< casts: all three together
  ElementwiseBytes ew;
  double elementwiseFwdMs = 0, elementwiseBwdMs = 0;
  AttentionTimes core;
  TpComm cp, tp, ep;
  double cpBufferBytes = 0;
};

BlockParts blockParts(const Block& k, const GpuSpec& gpu, const Parallelism& par, const costparts::MoeCosts& moe,
                      double wgradOut) {
  BlockParts p;
  p.g = layerGemms(k);
  p.attnGemm = gemmPasses(gpu, k.precision, p.g.attention, wgradOut);
  p.mlpGemm = gemmPasses(gpu, k.precision, p.g.mlp, wgradOut);
  p.sharedGemm = gemmPasses(gpu, k.precision, p.g.shared, wgradOut);
  p.casts = castPasses(gpu, k.precision, p.g.attention, k.sp);
  p.mlpCasts = castPasses(gpu, k.precision, p.g.mlp, k.sp);
  p.sharedCasts = castPasses(gpu, k.precision, p.g.shared, k.sp);
  p.casts += p.mlpCasts;
  p.casts += p.sharedCasts;
  p.ew = elementwise(k);
  p.elementwiseFwdMs = memoryMs(gpu, p.ew.total());
  p.elementwiseBwdMs = 2.0 * p.elementwiseFwdMs;

  // FlashAttention from its kernel model with context parallelism's exchange as Transformer
  // Engine runs it; the unfused kernel as before.
  if (k.flash) {
    const CoreWithContext fa = flashCoreWithContext(k);
    p.core = fa.core;
    p.cp = fa.cp;
    p.cpBufferBytes = fa.bufferBytes;
  } else {
    p.core = attentionCore(k);
    p.cp = contextParallelComm(k, p.core);
  }
  p.tp = tensorParallelComm(k, p.g);
  if (k.moe) {
    // The token all-to-alls, hidden as the recipe overlaps them (MoeCosts.cpp). The attention
    // half takes the element-wise kernels and casts; the MoE half the experts and the router.
    costparts::MoeOverlapWindows w;
    w.a2aMs = moe.dispatchMs;
    w.commSmShare = moeCommSmShare(gpu, par, k.ctx.links.expert.crossesNodes);
    w.overlapEfficiency = epOverlapEfficiency(gpu);
    w.attentionForwardMs = p.attnGemm.forward + p.core.forwardMs + p.casts.forward + p.elementwiseFwdMs;
    w.attentionBackwardMs = p.attnGemm.backwardInput + p.attnGemm.backwardWeight + p.core.backwardMs +
                            p.casts.backwardInput + p.elementwiseBwdMs;
    w.sharedForwardMs = p.sharedGemm.forward;
    w.sharedBackwardMs = p.sharedGemm.backwardInput + p.sharedGemm.backwardWeight;
    w.mlpForwardMs = moe.forwardMs + w.sharedForwardMs;
    w.mlpBackwardMs = moe.backwardInputMs + moe.backwardWeightMs + w.sharedBackwardMs;
    const costparts::MoeCommExposure e = costparts::moeCommExposure(w, par);
    p.ep.forward = {e.forward.exposedMs, e.forward.hiddenMs};
    p.ep.backward = {e.backward.exposedMs, e.backward.hiddenMs};
  }
  return p;
}

// A block's pass times (collectives' exposed part included and also counted apart) and the
// bytes it keeps for B and for W.
struct BlockSums {
  double activation = 0, wgrad = 0;
  double forwardMs = 0, forwardCommMs = 0;
  double backwardInputMs = 0, backwardInputCommMs = 0;
  double backwardWeightMs = 0, backwardWeightCommMs = 0;
};

BlockSums blockSums(const Block& k, const BlockParts& p, const costparts::MoeCosts& moe, const ActivationBytes& act) {
  BlockSums s;
  s.activation = k.nc * (act.replicated / k.sp + (act.attention + act.mlp) / k.T + act.unsharded) + moe.activationBytes;
  // W needs the inputs of the weight GEMMs: QKV and FC1 inputs (replicated unless SP), the
  // projection and FC2 inputs (sharded), the experts' inputs.
  s.wgrad = k.nc * ((2.0 * k.lp * k.h) / k.sp + (k.lp * k.ho + k.lp * (k.moe ? k.shared * k.fe : k.f)) / k.T) +
            moe.weightGradBytes;
  const double gemmFwd = p.attnGemm.forward + p.mlpGemm.forward + p.sharedGemm.forward;
  // The dispatcher's wait for its token counts on the host is idle time the pass shows, counted
  // with the exposed communication.
  s.forwardMs = gemmFwd + p.casts.forward + p.core.forwardMs + p.elementwiseFwdMs + moe.forwardMs +
                p.tp.forward.exposedMs + p.cp.forward.exposedMs + p.ep.forward.exposedMs + moe.hostSyncMs;
  s.forwardCommMs = p.tp.forward.exposedMs + p.cp.forward.exposedMs + p.ep.forward.exposedMs + moe.hostSyncMs;
  s.backwardInputMs = p.attnGemm.backwardInput + p.mlpGemm.backwardInput + p.sharedGemm.backwardInput +
                      p.casts.backwardInput + p.core.backwardMs + p.elementwiseBwdMs + moe.backwardInputMs +
                      p.tp.backward.exposedMs + p.cp.backward.exposedMs + p.ep.backward.exposedMs;
  s.backwardInputCommMs = p.tp.backward.exposedMs + p.cp.backward.exposedMs + p.ep.backward.exposedMs;
  s.backwardWeightMs =
      p.attnGemm.backwardWeight + p.mlpGemm.backwardWeight + p.sharedGemm.backwardWeight + moe.backwardWeightMs;
  return s;
}

// Megatron-Core's --recompute-modules: each module drops what it replays and adds its forward
// to B.
void recomputeSelective(const Block& k, const GpuSpec& gpu, std::uint32_t modules, const BlockParts& p,
                        const costparts::MoeCosts& moe, const ActivationBytes& act, BlockSums& s) {
  if ((modules & kRecomputeCoreAttn) && !k.flash) {
    // The attention core (scores, softmax, dropout) is replayed in B instead of held; with
    // FlashAttention nothing s² is held and its backward already replays the scores, so the
    // module changes nothing.
    s.backwardInputMs += p.core.forwardMs;
  }
  if (modules & kRecomputeLayerNorm) {
    // The norms' outputs (the QKV and MLP inputs) are dropped after the forward and the norms
    // replayed in B.
    s.activation -= k.nc * act.normOutputs / k.sp;
    s.backwardInputMs += memoryMs(gpu, p.ew.norms);
  }
  if ((modules & kRecomputeMlaUpProj) && k.t.mla) {
    // Megatron-Core's mla_up_proj: the up-projected Q, K, V are dropped after the attention and
    // B replays the up projections from the kept latents.
    s.activation -= k.nc * act.upProjOutputs / k.T;
    for (const Gemm& gemm : p.g.attention) {
      if (gemm.side == TpSide::ColumnParallel) s.backwardInputMs += gemmPasses(gpu, k.precision, {gemm}).forward;
    }
  }
  if ((modules & kRecomputeMlp) && !k.moe) {
    // Only the MLP's input is kept; B replays FC1, the activation and FC2 (with their casts).
    s.activation -= k.nc * act.mlpInternal / k.T;
    s.backwardInputMs += p.mlpGemm.forward + p.mlpCasts.forward + memoryMs(gpu, p.ew.mlpAct);
  }
  if (k.moe && (modules & kRecomputeMoe)) {
    // The whole MoE block is replayed in B (its all-to-alls too) from its kept input.
    s.activation -= k.nc * act.mlpInternal / k.T + moe.activationBytes;
    s.backwardInputMs += moe.forwardMs + p.sharedGemm.forward + p.sharedCasts.forward + memoryMs(gpu, p.ew.sharedAct) +
                         p.ep.forward.exposedMs + moe.hostSyncMs;
    s.backwardInputCommMs += p.ep.forward.exposedMs + moe.hostSyncMs;
  } else {
    if (k.moe && (modules & kRecomputeMoeAct)) {
      s.activation -= moe.actOutputBytes;
      s.backwardInputMs += moe.expertActMs;
    }
    if (k.moe && (modules & kRecomputeSharedExperts)) {
      s.activation -= k.nc * act.sharedInternal / k.T;
      s.backwardInputMs += p.sharedGemm.forward + p.sharedCasts.forward + memoryMs(gpu, p.ew.sharedAct);
    }
  }
  s.activation = std::max(s.activation, kBf16 * k.nc * k.h / k.sp);
}

// torchtitan's per-op selective checkpointing (torchtitan/parallelisms/parallelize_llama.py at
// 9dec370: _save_list and _custom_policy; unchanged at 820504e): inside each checkpointed block
// the outputs of aten.mm are saved except every second one, and those of SDPA (with its
// log-sum-exp), reduce_scatter_tensor and abs/max; everything else is recomputed in the
// backward. Llama's block issues its matmuls as wq, wk, wv, wo, w1, w3, w2, so wk, wo and w3 are
// recomputed, with the norms, RoPE, SiLU and the gate multiply; torch.compile's partitioner
// drops what the backward does not read (wo's output: the saved reduce-scatter follows it), an
// eager replay runs it. Float8 linears run aten._scaled_mm, which is not on the list: every
// linear of the block is recomputed, with its casts. Kept: the block's input, Q, V, the attention
// output and its log-sum-exp, w1's and w2's outputs (w2's before its reduce-scatter: the whole
// hidden size) and, with sequence parallelism, the reduce-scatters' outputs. A replayed GEMM
// whose input was all-gathered (sequence parallelism) gathers it again. Dense blocks with
// grouped-query or multi-head attention (torchtitan's Llama); MoE and MLA layers keep Megatron's
// modules.
void recomputeOpPolicy(const Block& k, const BlockParts& p, BlockSums& s, LayerCosts& c) {
  const GpuSpec& gpu = k.ctx.gpu;
  const bool eager = !k.ctx.parallel.torchCompile;
  double kept = kBf16 * k.h / k.sp + kBf16 * k.ho / k.T + kFp32 * k.a / k.T;
  if (k.sp > 1) kept += 2.0 * kBf16 * k.h / k.sp;  // the two reduce-scatters' outputs
  double replayMs = memoryMs(gpu, p.ew.total());
  if (isLowPrecision(k.precision)) {
    replayMs += p.attnGemm.forward + p.mlpGemm.forward + p.casts.forward;
  } else {
    kept += kBf16 * ((k.hq + k.hv + k.f) / k.T + k.h);
    std::vector<Gemm> replayed{{k.nc, k.hk / k.T, k.h, 1, TpSide::ColumnParallel},
                               {k.nc, k.f / k.T, k.h, 1, TpSide::ColumnParallel}};
    if (eager) replayed.push_back({k.nc, k.h, k.ho / k.T, 1, TpSide::RowParallel});
    replayMs += gemmPasses(gpu, k.precision, replayed).forward;
  }
  const double fullBytes = s.activation;
  s.activation = std::min(fullBytes, k.nc * kept);
  s.wgrad = std::min(s.wgrad, s.activation);
  c.recomputeBytes = toBytes(fullBytes - s.activation);
  s.backwardInputMs += replayMs + p.tp.forwardGatherExposedMs;
  s.backwardInputCommMs += p.tp.forwardGatherExposedMs;
}

// Recomputation (Korthikanti et al. 2022 §5; Megatron-Core's --recompute-modules; torchtitan's
// per-op policy above); the activations a full recomputation rebuilds are returned in
// c.recomputeBytes.
void recompute(const Block& k, const GpuSpec& gpu, const Parallelism& par, const BlockParts& p,
               const costparts::MoeCosts& moe, const ActivationBytes& act, BlockSums& s, LayerCosts& c) {
  if (par.recompute == Recompute::Selective && par.framework == Framework::Torchtitan && !k.moe && !k.t.mla) {
    recomputeOpPolicy(k, p, s, c);
    return;
  }
  if (par.recompute == Recompute::Full) {
    // Only the layer input survives the forward (sequence-parallel: this rank's shard); the
    // backward first replays the whole forward, collectives included. The replayed
    // activations are transient (alive while this layer's backward runs).
    c.recomputeBytes = toBytes(s.activation);
    s.activation = kBf16 * k.nc * k.h / k.sp;
    s.wgrad = 0;
    s.backwardInputMs += s.forwardMs;
    s.backwardInputCommMs += s.forwardCommMs;
  } else if (par.recompute == Recompute::Selective) {
    recomputeSelective(k, gpu, par.selectiveModules(), p, moe, act, s);
  }
}

// The GEMM workspaces of a process. cuBLAS asks for 32 MiB on Hopper and later and 4 MiB before
// (cuBLAS documentation, cublasSetWorkspace); Transformer Engine allocates one workspace of 32 MiB
// + 1 KiB (4 MiB before Hopper) for its GEMMs, one three times that size for its userbuffer
// GEMMs (_NUM_MAX_UB_STREAMS) and one per compute stream (4: common/util/multi_stream.cpp) for
// grouped GEMMs (transformer_engine/pytorch/cpp_extensions/gemm.py, get_cublas_workspace at
// d0067d0da6cb); PyTorch's own GEMMs (the output layer, the router) take one cuBLAS workspace.
// A GPU with FP8 tensor cores is taken as Hopper or later.
double cublasWorkspaceBytes(const GpuSpec& gpu) {
  return gpu.peakTflopsFor(Precision::Fp8) > 0 ? 32.0 * 1024 * 1024 : 4.0 * 1024 * 1024;
}
double gemmWorkspaceBytes(const GpuSpec& gpu, bool transformerEngine, bool userbuffers, bool grouped) {
  const double torchWorkspace = cublasWorkspaceBytes(gpu);
  if (!transformerEngine) return torchWorkspace;
  const double te = gpu.peakTflopsFor(Precision::Fp8) > 0 ? 32.0 * 1024 * 1024 + 1024 : 4.0 * 1024 * 1024;
  constexpr double kUserbufferStreams = 3;
  constexpr double kComputeStreams = 4;
  return torchWorkspace + te * (1.0 + (userbuffers ? kUserbufferStreams : 0.0) + (grouped ? kComputeStreams : 0.0));
}

// Transformer Engine's userbuffers for the TP communication overlap. Megatron initialises them
// with the shape [seq·mbs / CP, hidden] (megatron/training/initialize.py,
// _initialize_tp_communicators) and TE allocates one buffer of that shape for each of the twelve
// overlapped GEMMs (qkv, proj, fc1, fc2 × fprop, dgrad, wgrad; initialize_ub in
// transformer_engine/pytorch/module/base.py): the eight that all-gather in one byte per value
// under an FP8 recipe (fp8_buf; NVFP4 recipes run them in bf16), the four that reduce-scatter
// in bf16. Only with --tp-comm-overlap (sequence parallel, T > 1).
double teUserbufferBytes(const Block& k) {
  const Parallelism& par = k.ctx.parallel;
  if (!(k.T > 1 && par.sequenceParallel && par.tpCommOverlap)) return 0.0;
  const bool fp8Buffers =
      k.precision == Precision::Fp8 || k.precision == Precision::Fp8Block || k.precision == Precision::Mxfp8;
  const double values = k.nc * k.h;  // one buffer: the microbatch's tokens of this context rank
  constexpr double kAllGatherBuffers = 8, kReduceScatterBuffers = 4;
  return values * (kAllGatherBuffers * (fp8Buffers ? 1.0 : kBf16) + kReduceScatterBuffers * kBf16);
}

// Fine-grained activation offloading's groups (Megatron-Core, --offload-modules): what each
// module's group captures of the tensors the layer saves for its backward (the offload manager
// hooks saved_tensors between group_start and group_offload: megatron/core/transformer/
// attention.py, transformer_layer.py, moe/experts.py). Megatron-Core's Transformer Engine layer
// fuses the attention's input norm into the QKV GEMM and the dense MLP's into FC1
// (TELayerNormColumnParallelLinear), so attn_norm offloads only under multi-head latent attention
// (a separate TENorm) and mlp_norm only before experts; qkv_linear then holds the fused norm's
// input with its low-precision output. In a 16-bit recipe the attention output is the output
// projection's saved input too, so it leaves the GPU with core_attn and attn_proj together (which
// Megatron requires); a low-precision recipe's projection keeps its own copy. A recomputed region
// saves nothing for its groups.
void offloadGroups(const Block& k, const ActivationBytes& act, const costparts::MoeCosts& moe, LayerCosts& c) {
  const Parallelism& par = k.ctx.parallel;
  if (par.offloadModules == 0 || par.recompute == Recompute::Full) return;
  const std::uint32_t recomputed = par.selectiveModules();
  const bool lowPrecision = isLowPrecision(k.precision);
  auto& g = c.offloadGroupBytes;
  const double normInput = kBf16 * k.nc * k.h / k.sp;
  if (k.t.mla) {
    g[0] = toBytes(normInput);
    g[1] = toBytes(k.nc * act.normOutputs / 2.0 / k.sp);
  } else {
    g[1] = toBytes(normInput + k.nc * act.normOutputs / 2.0 / k.sp);
  }
  if (!(recomputed & kRecomputeCoreAttn)) {
    const double core = act.attention - (lowPrecision ? k.lp * k.ho : 0.0) - kBf16 * k.ho;
    g[2] = toBytes(k.nc * (core + (lowPrecision ? kBf16 * k.ho : 0.0)) / k.T);
  }
  g[3] = toBytes(k.nc * (lowPrecision ? k.lp : kBf16) * k.ho / k.T);
  if (k.moe) {
    g[4] = toBytes(normInput);
    if (!(recomputed & kRecomputeMoe)) {
      g[5] = toBytes(moe.fc1InputBytes);
      if (!(recomputed & kRecomputeMoeAct)) g[6] = toBytes(moe.actInputBytes);
    }
  }
  for (int m = 0; m < kOffloadModuleCount; ++m) {
    if (!(par.offloadModules & (1u << m))) g[static_cast<std::size_t>(m)] = 0;
  }
}

// ZeRO-3's transient buffers of one FSDP unit (a layer: Megatron-FSDP's fsdp_unit_modules are the
// transformer layers, torchtitan shards every block, the embedding and the output layer apart):
// the weights a pass gathers — bf16, or the low-precision weights in their format (Megatron-FSDP
// gathers fp8 parameters as they are) — and the gradient the backward produces unsharded, in the
// reduce type, before its reduce-scatter (megatron/core/distributed/fsdp/src/megatron_fsdp/
// param_and_grad_buffer.py, AllGatherPipeline and GradReducePipeline; PyTorch FSDP2's
// all-gather output and reduce-scatter input).
void fsdpUnitBuffers(const CostContext& ctx, LayerCosts& c) {
  const Parallelism& par = ctx.parallel;
  if (par.zeroStage < 3 || par.denseData() <= 1 || !ctx.trainable || c.parameterBytes <= 0) return;
  const double params = c.parameterCount();
  const double quantized = std::min(params, c.quantizedParameters);
  c.fsdpGatherBytes = toBytes(kBf16 * (params - quantized) + operandBytes(ctx.precision) * quantized);
  c.fsdpGradientBytes = toBytes((par.gradReduceInFp32 ? kFp32 : kBf16) * params);
}

// The modules of a block whose inputs a per-layer CUDA graph copies into static buffers.
double graphedModuleInputs(const Block& k, const Parallelism& par) {
  if (par.cudaGraphImpl != CudaGraphImpl::Local && par.cudaGraphImpl != CudaGraphImpl::TransformerEngine) return 0.0;
  if (par.cudaGraphModules == 0) return 1.0;
  double inputs = (par.cudaGraphModules & kGraphAttn) ? 1.0 : 0.0;
  const std::uint32_t mlp = k.moe ? (kGraphMoe | kGraphMoeRouter) : kGraphMlp;
  if (par.cudaGraphModules & mlp) inputs += 1.0;
  return inputs;
}

// ZeRO-3 (FSDP): each pass gathers this layer's parameters (prefetched under the previous
// layer's compute: PyTorch FSDP2's implicit prefetch, Megatron-FSDP's per-module buckets) and W
// reduce-scatters its gradients (fp32, or bf16 when the recipe reduces in bf16) on its own
// stream, hidden under a weight-gradient pass (a schedule that splits B and W may run other
// work between the W passes, so only W is counted). ZeRO-2 shards the gradients as well, so each
// microbatch's W reduce-scatters what it produced instead of accumulating a full gradient
// (DeepSpeed's stage 2 with gradient accumulation; PyTorch FSDP's SHARD_GRAD_OP outside
// no_sync). The collectives run hierarchically where the group crosses NVLink domains
// (allGatherMs). The buffers they fill are fsdpUnitBuffers'.
void shardedDataParallel(const Block& k, const CostContext& ctx, double localParams, BlockSums& s, LayerCosts& c) {
  const Parallelism& par = ctx.parallel;
  if (par.zeroStage >= 2 && k.D > 1 && ctx.trainable) {
    const double gradBytes = par.gradReduceInFp32 ? kFp32 : kBf16;
    const double scatter = allGatherMs(ctx.links.data, static_cast<int>(k.D), gradBytes * localParams);
    const Exposure wgt = overlapped(scatter, s.backwardWeightMs, 1.0, OverlapKind::Bulk);
    s.backwardWeightMs += wgt.exposedMs;
    s.backwardWeightCommMs += wgt.exposedMs;
    c.backwardWeightHiddenCommMs += wgt.hiddenMs;
  }
  if (par.zeroStage >= 3 && k.D > 1 && ctx.trainable) {
    const double gather = allGatherMs(ctx.links.data, static_cast<int>(k.D), kBf16 * localParams);
    const Exposure fwd = overlapped(gather, s.forwardMs, 1.0, OverlapKind::Bulk);
    const Exposure bwd = overlapped(gather, s.backwardInputMs, 1.0, OverlapKind::Bulk);
    s.forwardMs += fwd.exposedMs;
    s.forwardCommMs += fwd.exposedMs;
    s.backwardInputMs += bwd.exposedMs;
    s.backwardInputCommMs += bwd.exposedMs;
    c.forwardHiddenCommMs += fwd.hiddenMs;
    c.backwardInputHiddenCommMs += bwd.hiddenMs;
  }
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
  const double wgradOut = 2.0 * (par.gradReduceInFp32 ? kFp32 : kBf16);
  const costparts::MoeCosts moe = k.moe ? routedExperts(k, wgradOut) : costparts::MoeCosts{};

  const double localParams = localParameters(k, counts, moe);
  c.parameterBytes = toBytes(kBf16 * localParams);
  if (k.moe) c.expertParameterBytes = toBytes(kBf16 * moe.expertParams);

  const BlockParts p = blockParts(k, gpu, par, moe, wgradOut);
  // Transformer Engine keeps each linear weight in the low-precision format in both layouts its
  // GEMMs read (row-wise for fprop, column-wise for dgrad and wgrad): a cached copy beside the
  // bf16 weight, or, with --fp8-param-gather, the weight itself (Megatron-Core's DDP then holds
  // the row-wise data in its parameter buffer, megatron/core/distributed/param_and_grad_buffer.py,
  // and no bf16 copy exists).
  if (isLowPrecision(k.precision)) {
    c.lowPrecisionWeightBytes = toBytes(operandCopies(k.precision, gpu.fp8GemmTakesAnyLayout()) *
                                        operandBytes(k.precision) * (p.g.linearParams + moe.linearParams));
  }
  if (par.lowPrecisionParamsFor(k.precision)) {
    c.quantizedParameters = p.g.linearParams + moe.linearParams;
    c.quantizedExpertParameters = moe.linearParams;
  }

  const bool keepScores = !k.flash && par.recompute == Recompute::None;
  const ActivationBytes act = activationBytes(k, keepScores);
  BlockSums s = blockSums(k, p, moe, act);
  c.forwardHiddenCommMs = p.tp.forward.hiddenMs + p.cp.forward.hiddenMs + p.ep.forward.hiddenMs;
  c.backwardInputHiddenCommMs = p.tp.backward.hiddenMs + p.cp.backward.hiddenMs + p.ep.backward.hiddenMs;
  recompute(k, gpu, par, p, moe, act, s, c);
  offloadGroups(k, act, moe, c);
  shardedDataParallel(k, ctx, localParams, s, c);

  c.forwardMs = s.forwardMs;
  c.backwardInputMs = s.backwardInputMs;
  c.backwardWeightMs = s.backwardWeightMs;
  c.forwardCommMs = s.forwardCommMs;
  c.backwardInputCommMs = s.backwardInputCommMs;
  c.backwardWeightCommMs = s.backwardWeightCommMs;
  // CUDA graphs (Transformer Engine's make_graphed_callables, Megatron-Core's per-layer graphs)
  // replay each graphed module on static buffers: its input is copied into a buffer of its own,
  // held for the microbatch like the module's saved activations (one hidden-state copy per
  // graphed module: the attention, the dense MLP or the MoE block up to its router; the whole
  // layer when no module is named). Full-iteration graphs allocate from one pool as the eager step
  // does (Megatron's paged stash for padded MoE buffers is not modelled).
  const double graphedInputs = graphedModuleInputs(k, par);
  s.activation += graphedInputs * kBf16 * k.nc / k.sp * k.h;
  c.activationBytes = toBytes(s.activation);
  c.weightGradBytes = toBytes(std::min(s.wgrad, s.activation));
  // Megatron sends the sequence-sharded hidden states (sequence parallel) or splits them over
  // the TP ranks and all-gathers on NVLink (Narayanan et al. 2021 §4.1 scatter/gather).
  c.outputBytes = toBytes(kBf16 * k.nc * k.h / k.T);
  c.communicationBytes = std::max(toBytes(moe.bufferBytes), toBytes(p.cpBufferBytes));
  c.userbufferBytes = toBytes(teUserbufferBytes(k));
  c.workspaceBytes = toBytes(gemmWorkspaceBytes(gpu, true, c.userbufferBytes > 0, k.moe));
  return c;
}

// --- a block's attention and MLP halves (issue 46, BlockHalves.hpp) ---
// Megatron-LM's HybridModel builds a block as two layers, its attention (`*`, `+`: the input norm,
// the attention, the residual add) and its MLP or MoE (`-`, `E`: the same around the MLP), so a
// pipeline stage may end between them. The attention half takes the block's own terms of its
// attention (BlockParts): the projections with their casts, the core, the context-parallel
// exchange, the attention's TP collectives (tensorParallelComm over its GEMMs alone), one of the
// two norms and residual adds (half the norm and other element-wise bytes); of the kept bytes half
// the replicated ones, the attention's and MLA's gathered latents; its parameters, FLOPs and
// offload groups. What recomputation, ZeRO and CUDA graphs add to a pass or to the kept bytes it
// shares in the proportion its terms are of the block's (a pass's exposed communication in the
// pass's proportion, so neither half has more than its pass). The MLP half is the block less its
// attention half: the two add up to the block exactly. A buffer a pass needs goes with the module
// that needs it (the context-parallel exchange's with the attention, the experts' with the MLP);
// the process-wide workspaces and the hidden state each half sends are the block's.
namespace halves {

double shareOf(double part, double whole, double otherwise) {
  return whole > 0 ? std::clamp(part / whole, 0.0, 1.0) : otherwise;
}
std::int64_t shareOf(std::int64_t bytes, double share) {
  return static_cast<std::int64_t>(std::floor(static_cast<double>(bytes) * share));
}

// The block less its attention half, field by field; buffers stay the MLP's own.
LayerCosts mlpHalf(const LayerCosts& whole, const LayerCosts& a, std::int64_t communicationBytes) {
  LayerCosts m = whole;
  m.forwardMs -= a.forwardMs;
  m.backwardInputMs -= a.backwardInputMs;
  m.backwardWeightMs -= a.backwardWeightMs;
  m.forwardCommMs -= a.forwardCommMs;
  m.backwardInputCommMs -= a.backwardInputCommMs;
  m.backwardWeightCommMs -= a.backwardWeightCommMs;
  m.forwardHiddenCommMs -= a.forwardHiddenCommMs;
  m.backwardInputHiddenCommMs -= a.backwardInputHiddenCommMs;
  m.backwardWeightHiddenCommMs -= a.backwardWeightHiddenCommMs;
  m.activationBytes -= a.activationBytes;
  m.weightGradBytes -= a.weightGradBytes;
  m.parameterBytes -= a.parameterBytes;
  m.lowPrecisionWeightBytes -= a.lowPrecisionWeightBytes;
  m.quantizedParameters -= a.quantizedParameters;
  for (std::size_t i = 0; i < m.offloadGroupBytes.size(); ++i) m.offloadGroupBytes[i] -= a.offloadGroupBytes[i];
  m.recomputeBytes -= a.recomputeBytes;
  m.cudaGraphBytes -= a.cudaGraphBytes;
  m.modelFlopsForward -= a.modelFlopsForward;
  m.modelParameters -= a.modelParameters;
  m.communicationBytes = communicationBytes;
  return m;
}

}  // namespace halves

LayerCosts blockHalfCosts(const TransformerShape& t, const CostContext& ctx, BlockHalf half) {
  const LayerCosts whole = transformerCosts(t, ctx);
  const Block k(t, ctx);
  const GpuSpec& gpu = ctx.gpu;
  const Parallelism& par = ctx.parallel;
  const double wgradOut = 2.0 * (par.gradReduceInFp32 ? kFp32 : kBf16);
  const costparts::MoeCosts moe = k.moe ? routedExperts(k, wgradOut) : costparts::MoeCosts{};
  const BlockParts p = blockParts(k, gpu, par, moe, wgradOut);
  const ActivationBytes act = activationBytes(k, !k.flash && par.recompute == Recompute::None);
  const BlockSums s = blockSums(k, p, moe, act);

  // The attention's own terms, before recomputation and ZeRO.
  LayerGemms own;
  own.attention = p.g.attention;
  const TpComm tp = tensorParallelComm(k, own);
  const PassTimes casts = castPasses(gpu, k.precision, p.g.attention, k.sp);
  const double normMs = memoryMs(gpu, (p.ew.norms + p.ew.other) / 2.0);
  const double forwardMs =
      p.attnGemm.forward + casts.forward + p.core.forwardMs + normMs + tp.forward.exposedMs + p.cp.forward.exposedMs;
  const double backwardMs = p.attnGemm.backwardInput + casts.backwardInput + p.core.backwardMs + 2.0 * normMs +
                            tp.backward.exposedMs + p.cp.backward.exposedMs;
  const double keptBytes = k.nc * (act.replicated / 2.0 / k.sp + act.attention / k.T + act.unsharded);
  const double keptForWBytes = k.nc * (k.lp * k.h / k.sp + k.lp * k.ho / k.T);
  double linearParams = 0;
  for (const Gemm& g : p.g.attention) linearParams += g.count * g.n * g.k;
  double localParams = attentionProjectionParams(k) / k.T + k.h;
  if (k.t.mla) {
    const TransformerShape::Mla& m = *k.t.mla;
    localParams += static_cast<double>(m.qLoraRank + m.kvLoraRank);  // the latent norms
    localParams += k.h * static_cast<double>(m.qLoraRank + m.kvLoraRank + m.qkRopeHeadDim) * (1.0 - 1.0 / k.T);
  }
  const double keysPerQuery = k.t.window > 0 ? std::min(k.s, static_cast<double>(k.t.window)) : k.s;

  const double forward = halves::shareOf(forwardMs, s.forwardMs, 0.5);
  const double backward = halves::shareOf(backwardMs, s.backwardInputMs, forward);
  const double weight = halves::shareOf(p.attnGemm.backwardWeight, s.backwardWeightMs, forward);
  const double kept = halves::shareOf(keptBytes, s.activation, forward);
  const double keptForW = halves::shareOf(keptForWBytes, s.wgrad, kept);
  LayerCosts a;
  a.forwardMs = forward * whole.forwardMs;
  a.backwardInputMs = backward * whole.backwardInputMs;
  a.backwardWeightMs = weight * whole.backwardWeightMs;
  a.forwardCommMs = forward * whole.forwardCommMs;
  a.backwardInputCommMs = backward * whole.backwardInputCommMs;
  a.backwardWeightCommMs = weight * whole.backwardWeightCommMs;
  const double hiddenFwd = p.tp.forward.hiddenMs + p.cp.forward.hiddenMs + p.ep.forward.hiddenMs;
  const double hiddenBwd = p.tp.backward.hiddenMs + p.cp.backward.hiddenMs + p.ep.backward.hiddenMs;
  a.forwardHiddenCommMs =
      halves::shareOf(tp.forward.hiddenMs + p.cp.forward.hiddenMs, hiddenFwd, forward) * whole.forwardHiddenCommMs;
  a.backwardInputHiddenCommMs = halves::shareOf(tp.backward.hiddenMs + p.cp.backward.hiddenMs, hiddenBwd, backward) *
                                whole.backwardInputHiddenCommMs;
  a.backwardWeightHiddenCommMs = weight * whole.backwardWeightHiddenCommMs;
  // Kept bytes: the MLP half's share of those kept for W may not exceed its share of the kept.
  a.activationBytes = halves::shareOf(whole.activationBytes, kept);
  a.weightGradBytes = std::min(halves::shareOf(whole.weightGradBytes, keptForW), a.activationBytes);
  const std::int64_t mlpOverrun =
      (whole.weightGradBytes - a.weightGradBytes) - (whole.activationBytes - a.activationBytes);
  if (mlpOverrun > 0) a.weightGradBytes += mlpOverrun;
  a.parameterBytes = std::min(whole.parameterBytes, toBytes(kBf16 * localParams));
  const double allLinear = p.g.linearParams + moe.linearParams;
  a.lowPrecisionWeightBytes =
      halves::shareOf(whole.lowPrecisionWeightBytes, halves::shareOf(linearParams, allLinear, 0));
  if (whole.quantizedParameters > 0) a.quantizedParameters = std::min(whole.quantizedParameters, linearParams);
  for (const OffloadModule module : {kOffloadAttnNorm, kOffloadQkvLinear, kOffloadCoreAttn, kOffloadAttnProj}) {
    const auto bit = static_cast<std::size_t>(std::countr_zero(static_cast<std::uint32_t>(module)));
    a.offloadGroupBytes[bit] = whole.offloadGroupBytes[bit];
  }
  a.recomputeBytes = halves::shareOf(whole.recomputeBytes, kept);
  a.cudaGraphBytes = halves::shareOf(whole.cudaGraphBytes, forward);
  a.outputBytes = whole.outputBytes;
  a.workspaceBytes = whole.workspaceBytes;
  a.userbufferBytes = whole.userbufferBytes;
  a.communicationBytes = toBytes(p.cpBufferBytes);
  a.modelFlopsForward = 2.0 * k.n * attentionProjectionParams(k) + 2.0 * k.n * keysPerQuery * (k.hq + k.ho);
  a.modelParameters = attentionProjectionParams(k) + k.h;
  if (k.t.mla) a.modelParameters += static_cast<double>(k.t.mla->qLoraRank + k.t.mla->kvLoraRank);
  if (half == BlockHalf::Attention) return a;
  return halves::mlpHalf(whole, a, toBytes(moe.bufferBytes));
}

// Vocabulary-parallel LM head (Megatron: logits split over TP): the logits GEMM 2·b·s·h·V
// (Narayanan et al. 2021 §5.1), its input and the fp32 logits kept for the cross-entropy backward.
LayerCosts lmHeadCosts(const TransformerShape& t, bool tied, const CostContext& ctx) {
  const GpuSpec& gpu = ctx.gpu;
  const double T = std::max(1, ctx.parallel.tensor);
  const double C = std::max(1, ctx.parallel.context);
  const double sp = ctx.parallel.sequenceParallel ? T : 1.0;
  const double b = static_cast<double>(std::max<std::int64_t>(1, ctx.samplesPerMicrobatch));
  const auto h = static_cast<double>(t.hidden);
  const auto v = static_cast<double>(*t.vocab);
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
  // torchtitan's loss (train.py at 9dec370, never compiled): cross_entropy(pred.float()) — the cast
  // (read 2 write 4), log-softmax (read 4 write 4); backward its gradient (read 4 + 4, write 4),
  // the scatter of the target's gradient, the cast back (read 4 write 2): about 14 and 22 bytes.
  const bool torchtitan = ctx.parallel.framework == Framework::Torchtitan;
  const double ceFwdMs = memoryMs(gpu, (torchtitan ? 14.0 : 6.0) * nc * v / T);
  const double ceBwdMs = memoryMs(gpu, (torchtitan ? 22.0 : 6.0) * nc * v / T);
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
  // torchtitan checkpoints the transformer blocks only (apply_ac over model.layers).
  if (ctx.parallel.recompute == Recompute::Full && !torchtitan) {
    c.backwardInputMs += c.forwardMs;
    c.backwardInputCommMs += c.forwardCommMs;
    c.activationBytes = toBytes(kBf16 * nc * h / sp);
    c.weightGradBytes = 0;
  }
  c.outputBytes = toBytes(kFp32 * nc);  // per-token loss
  c.workspaceBytes = toBytes(gemmWorkspaceBytes(gpu, false, false, false));
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
  const auto h = static_cast<double>(t.hidden);
  const auto v = static_cast<double>(*t.vocab);
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

// Multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core's MultiTokenPredictionBlock, on the last
// pipeline stage): each of the `mtpLayers` modules normalises the hidden state and the embedding of
// the next token, projects their concatenation (2h → h, split over TP), runs one transformer block
// of the layer's shape and the shared output head with its cross-entropy. The output head is the
// main model's; the embedding is a copy of the first stage's (its gradient is all-reduced with it,
// as for tied embeddings), so the layer holds the projection, the block and that copy.
LayerCosts mtpCosts(const TransformerShape& t, const CostContext& ctx) {
  TransformerShape block = t;
  block.mtpLayers = 0;
  block.vocab.reset();
  const LayerCosts blockCosts = transformerCosts(block, ctx);
  const LayerCosts head = lmHeadCosts(t, true, ctx);
  const LayerCosts lookup = embeddingCosts(t, ctx);
  const double T = std::max(1, ctx.parallel.tensor);
  const double C = std::max(1, ctx.parallel.context);
  const double sp = ctx.parallel.sequenceParallel ? T : 1.0;
  const double b = static_cast<double>(std::max<std::int64_t>(1, ctx.samplesPerMicrobatch));
  const auto h = static_cast<double>(t.hidden);
  const double nc = b * static_cast<double>(t.seq) / C;
  const double wgradOut = 2.0 * (ctx.parallel.gradReduceInFp32 ? kFp32 : kBf16);
  const PassTimes proj =
      gemmPasses(ctx.gpu, ctx.precision, {{nc, h / T, 2.0 * h, 1, TpSide::ColumnParallel}}, wgradOut);
  const double norms = memoryMs(ctx.gpu, 2.0 * 2.0 * kBf16 * nc / sp * h);
  const auto depth = static_cast<double>(t.mtpLayers);
  LayerCosts c;
  auto add = [&](const LayerCosts& part) {
    c.forwardMs += depth * part.forwardMs;
    c.backwardInputMs += depth * part.backwardInputMs;
    c.backwardWeightMs += depth * part.backwardWeightMs;
    c.forwardCommMs += depth * part.forwardCommMs;
    c.backwardInputCommMs += depth * part.backwardInputCommMs;
    c.backwardWeightCommMs += depth * part.backwardWeightCommMs;
    c.forwardHiddenCommMs += depth * part.forwardHiddenCommMs;
    c.backwardInputHiddenCommMs += depth * part.backwardInputHiddenCommMs;
    c.backwardWeightHiddenCommMs += depth * part.backwardWeightHiddenCommMs;
    c.activationBytes += toBytes(depth * static_cast<double>(part.activationBytes));
    c.weightGradBytes += toBytes(depth * static_cast<double>(part.weightGradBytes));
    c.recomputeBytes = std::max(c.recomputeBytes, part.recomputeBytes);
    c.communicationBytes = std::max(c.communicationBytes, part.communicationBytes);
    c.workspaceBytes = std::max(c.workspaceBytes, part.workspaceBytes);
    c.userbufferBytes = std::max(c.userbufferBytes, part.userbufferBytes);
    c.cudaGraphBytes += toBytes(depth * static_cast<double>(part.cudaGraphBytes));
    c.modelFlopsForward += depth * part.modelFlopsForward;
  };
  add(blockCosts);
  add(head);
  add(lookup);
  c.forwardMs += depth * (proj.forward + norms);
  c.backwardInputMs += depth * (proj.backwardInput + 2.0 * norms);
  c.backwardWeightMs += depth * proj.backwardWeight;
  c.activationBytes += toBytes(depth * nc / sp * (2.0 * kBf16 * 2.0 * h));  // the two norms' inputs
  c.modelFlopsForward += depth * 2.0 * b * static_cast<double>(t.seq) * 2.0 * h * h;
  const double projParams = 2.0 * h * h / T + 2.0 * h;
  c.parameterBytes =
      toBytes(depth * (static_cast<double>(blockCosts.parameterBytes) + kBf16 * projParams)) + lookup.parameterBytes;
  c.expertParameterBytes = toBytes(depth * static_cast<double>(blockCosts.expertParameterBytes));
  c.lowPrecisionWeightBytes = toBytes(depth * static_cast<double>(blockCosts.lowPrecisionWeightBytes));
  c.quantizedParameters = depth * blockCosts.quantizedParameters;
  c.quantizedExpertParameters = depth * blockCosts.quantizedExpertParameters;
  c.modelParameters = depth * (blockCosts.modelParameters + 2.0 * h * h + 2.0 * h);
  c.outputBytes = blockCosts.outputBytes;  // the main model's hidden states pass on to the head
  return c;
}

}  // namespace

namespace costparts {
double lowPrecisionCastBytes(const GpuSpec& gpu, Precision precision) { return castBytesPerValue(gpu, precision); }
}  // namespace costparts

double nvlsAllReduceFactor(const GpuSpec& gpu) {
  if (gpu.nvlsEfficiency <= 0 || gpu.nvlsChannels < 2) return 0.0;
  const double channels = gpu.nvlsChannels;
  return 2.0 * gpu.nvlsEfficiency * (channels - 1.0) / channels;
}

CollectiveLinks collectiveLinks(const ClusterSpec& cluster, const Parallelism& parallel) {
  const std::int64_t perNode = cluster.gpusPerNode();
  const std::int64_t domain = cluster.nvlinkDomainGpus();
  const bool oneDomain = cluster.nodes.size() <= 1;
  const double nvls = cluster.nvls ? nvlsAllReduceFactor(cluster.gpu) : 0.0;
  // A group of `ranks` ranks `stride` apart stays on NVLink when its span (ranks · stride
  // consecutive GPUs) fits in one NVLink domain (a node, or an NVL72 rack of 18 nodes); beyond it
  // every GPU of a node talks at once, so each gets its node's NIC bandwidth divided among them
  // (one NIC per GPU: the NIC's bandwidth), and the group's ranks that share a domain
  // (domain / stride of them) cross together, each over its own share (NCCL's rings leave a
  // domain once per channel, one channel per such rank: allGatherMs).
  auto linkFor = [&](std::int64_t ranks, std::int64_t stride) {
    CollectiveLink l;
    const std::int64_t span = ranks * stride;
    l.nvlsFactor = nvls;
    if (span <= domain || oneDomain) {
      l.bandwidthGBps = cluster.intraNode.bandwidthGBps;
      l.latencyUs = cluster.intraNode.latencyUs;
      return l;
    }
    const double nics =
        cluster.nicsPerNode > 0 ? static_cast<double>(cluster.nicsPerNode) : static_cast<double>(perNode);
    l.bandwidthGBps = cluster.interNode.bandwidthGBps * std::min(1.0, nics / static_cast<double>(perNode));
    l.latencyUs = cluster.interNode.latencyUs;
    l.crossesNodes = true;
    l.ranksPerDomain = static_cast<int>(std::clamp<std::int64_t>(domain / std::max<std::int64_t>(1, stride), 1, ranks));
    l.nvlinkGBps = cluster.intraNode.bandwidthGBps;
    l.nvlinkLatencyUs = cluster.intraNode.latencyUs;
    return l;
  };
  const std::int64_t T = std::max(1, parallel.tensor);
  const std::int64_t C = std::max(1, parallel.context);
  const std::int64_t E = std::max(1, parallel.expert);
  const std::int64_t D = std::max(1, parallel.data);
  const std::int64_t expertGrid = std::max(1, parallel.expertTensorOrTensor()) * E;
  CollectiveLinks out;
  out.tensor = linkFor(T, 1);
  out.context = linkFor(C, T);
  // MoE parallel folding: the expert layers' ETP × EP ranks are consecutive GPUs of the pipeline
  // rank (Megatron-Core's expert rank order tp-ep-dp), whatever T and C are; their data-parallel
  // replicas are ETP·EP apart.
  out.expert = linkFor(expertGrid, 1);
  out.data = linkFor(D, T * C);
  out.expertData = linkFor(parallel.expertData(), expertGrid);
  out.nvlink = linkFor(1, 1);
  out.network = linkFor(std::numeric_limits<std::int64_t>::max() / 2, 1);
  out.network.ranksPerDomain = 1;
  out.domainGpus = oneDomain ? std::numeric_limits<std::int64_t>::max() : domain;
  return out;
}

namespace {

// NCCL's channel limit (MAXCHANNELS, src/include/device.h): at most this many rings or trees
// leave a domain, each through one NIC.
constexpr int kMaxChannels = 64;

// NCCL's ring over `ranks` GPUs on `link`, each GPU sending `volume` · (n−1)/n of the tensor
// along it (volume 1: all-gather, reduce-scatter; 2: all-reduce, NCCL's nsteps = (n−1) or
// 2(n−1), src/graph/tuning.cc). Inside one domain, or with one rank per domain, every step runs
// on the link. A group with p > 1 ranks in each of N domains: NCCL builds one ring per channel,
// each leaving a domain through another rank's NIC (its rail), so a GPU sends 1/p of its ring
// traffic over its NIC and the rest over NVLink, both at once (tuning.cc: ring bus bandwidth =
// nChannels × per-channel inter bandwidth); at most kMaxChannels of them leave a domain.
// Latency: nsteps − nInterSteps NVLink steps and nInterSteps network steps, nInterSteps = N − 1
// (all-reduce 2(N − 1)), as tuning.cc counts them.
double ringMs(const CollectiveLink& link, int ranks, double bytes, double volume) {
  const double n = ranks;
  const double sent = volume * (n - 1.0) / n * bytes;
  const double steps = volume * (n - 1.0);
  const int p = std::clamp(link.ranksPerDomain, 1, ranks);
  if (!link.crossesNodes || p <= 1) {
    const double bw = link.bandwidthGBps * 1e6;  // bytes per ms
    return (bw > 0 ? sent / bw : 0.0) + steps * link.latencyUs / 1000.0;
  }
  const double domains = std::ceil(n / p);
  const double exits = std::min(p, kMaxChannels);
  const double nic = link.bandwidthGBps * 1e6 * exits;
  const double nvlink = link.nvlinkGBps * 1e6;
  const double nicMs = nic > 0 ? sent / nic : 0.0;
  const double nvlinkMs = nvlink > 0 ? sent * (p - 1.0) / p / nvlink : 0.0;
  const double interSteps = volume * (domains - 1.0);
  return std::max(nicMs, nvlinkMs) + (steps - interSteps) * link.nvlinkLatencyUs / 1000.0 +
         interSteps * link.latencyUs / 1000.0;
}

// NCCL's tree all-reduce (double binary tree over the domains, a chain inside each): 2·B through
// every GPU, the log-depth latency (tuning.cc: tree latency 2·((p − 1)·intra + log2(N)·inter),
// bus bandwidth × ratio 0.5). Across domains the chain runs on NVLink and each of the p chains'
// tree on another rank's NIC.
double treeMs(const CollectiveLink& link, int ranks, double bytes) {
  const double n = ranks;
  const int p = std::clamp(link.ranksPerDomain, 1, ranks);
  if (!link.crossesNodes || p <= 1) {
    const double bw = link.bandwidthGBps * 1e6;
    return (bw > 0 ? 2.0 * bytes / bw : 0.0) + 2.0 * std::ceil(std::log2(n)) * link.latencyUs / 1000.0;
  }
  const double domains = std::ceil(n / p);
  const double nic = link.bandwidthGBps * 1e6 * std::min(p, kMaxChannels);
  const double nvlink = link.nvlinkGBps * 1e6;
  const double bwMs = std::max(nic > 0 ? 2.0 * bytes / nic : 0.0, nvlink > 0 ? 2.0 * bytes / nvlink : 0.0);
  return bwMs + 2.0 * ((p - 1.0) * link.nvlinkLatencyUs + std::ceil(std::log2(domains)) * link.latencyUs) / 1000.0;
}

// NCCL's NVLS all-reduce inside one domain (its ring's bus bandwidth × nvlsFactor), and NVLS
// tree across domains: NVLS inside each domain, a tree of the domains over the p ranks' NICs,
// pipelined (tuning.cc: busBw = nChannels × min(intra NVLS bw, inter bw), the inter bandwidth
// doubled for two domains; latency: NVLS's 25 µs on NVLink, hwLatencies, plus
// 2·log2(N) network steps). The NVLS figures are per GPU type (GpuSpec::nvlsEfficiency).
double nvlsMs(const CollectiveLink& link, int ranks, double bytes) {
  constexpr double kNvlsLatencyUs = 25.0;  // tuning.cc hwLatencies[NVLINK][NVLS][SIMPLE]
  const double n = ranks;
  const int p = std::clamp(link.ranksPerDomain, 1, ranks);
  const double ringBusBytes = 2.0 * (n - 1.0) / n * bytes;
  if (!link.crossesNodes) {
    const double bw = link.bandwidthGBps * link.nvlsFactor * 1e6;
    return (bw > 0 ? ringBusBytes / bw : 0.0) + kNvlsLatencyUs / 1000.0;
  }
  const double domains = std::ceil(n / p);
  const double intra = link.nvlinkGBps * link.nvlsFactor * 1e6;
  const double inter = link.bandwidthGBps * 1e6 * std::min(p, kMaxChannels) * (domains <= 2 ? 2.0 : 1.0);
  const double bwMs = std::max(intra > 0 ? ringBusBytes / intra : 0.0, inter > 0 ? ringBusBytes / inter : 0.0);
  return bwMs + kNvlsLatencyUs / 1000.0 + 2.0 * std::ceil(std::log2(domains)) * link.latencyUs / 1000.0;
}

}  // namespace

double allReduceMs(const CollectiveLink& link, int ranks, double bytes) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  double best = std::min(ringMs(link, ranks, bytes, 2.0), treeMs(link, ranks, bytes));
  // NVLS needs a switch inside the domain: a group with one rank per domain has none to use.
  const bool nvlsApplies = link.nvlsFactor > 0 && (!link.crossesNodes || link.ranksPerDomain > 1);
  if (nvlsApplies) best = std::min(best, nvlsMs(link, ranks, bytes));
  return best;
}

double allGatherMs(const CollectiveLink& link, int ranks, double bytes) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  return ringMs(link, ranks, bytes, 1.0);
}

double allToAllMs(const CollectiveLink& link, int ranks, double bytes) {
  // Every pair exchanges directly: no hierarchy to use (the expert all-to-alls split their NVLink
  // and network peers themselves, MoeCosts.cpp).
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = ranks;
  const double bw = link.bandwidthGBps * 1e6;
  return (bw > 0 ? (n - 1.0) / n * bytes / bw : 0.0) + (n - 1.0) * link.latencyUs / 1000.0;
}

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
    } else if (t.mtpLayers > 0 && t.vocab) {
      c = mtpCosts(t, ctx);
    } else if (const auto half = blockHalfOf(layer)) {
      c = blockHalfCosts(t, ctx, *half);
    } else {
      c = transformerCosts(t, ctx);
    }
  } else if (layer.flopsForward) {
    // Generic layer (conv, attention, …): given FLOPs, not split by TP/CP; backward ≈ 2×
    // forward split evenly into input and weight gradients (each one GEMM-sized pass).
    const double flops = *layer.flopsForward * b;
    c.modelFlopsForward = flops;
    c.forwardMs = msAt(flops, gpu.effectiveFlopsPerS());
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
  c.quantizedParameters = std::min(c.quantizedParameters, c.parameterCount());
  c.quantizedExpertParameters = std::min(c.quantizedExpertParameters, c.quantizedParameters);
  // The layers whose ZeRO-3 gathers the cost model times (the transformer-shaped ones) hold
  // their gather and reduce buffers.
  if (layer.transformer) fsdpUnitBuffers(ctx, c);

  if (!ctx.trainable) {
    c.backwardInputMs = 0;
    c.backwardWeightMs = 0;
    c.backwardInputCommMs = 0;
    c.backwardWeightCommMs = 0;
    c.weightGradBytes = 0;
  }
  return c;
}

namespace {

// A transformer-shaped layer costed as a block (not the embedding or the LM head).
// A block's MLP half has no attention core.
bool isTransformerBlock(const Layer& layer) {
  if (!layer.transformer || blockHalfOf(layer) == BlockHalf::Mlp) return false;
  const bool vocab = layer.transformer->vocab.has_value();
  return !((layer.kind == "lm_head" || layer.kind == "embedding") && vocab);
}

// The attention core of `queries` query tokens per sample against `keys` keys, unmasked: the
// part of a sequence chunk's attention outside its own causal diagonal block (the earlier
// chunks' keys), through the one attention-core model.
AttentionTimes attentionCoreOverKeys(const TransformerShape& shape, const CostContext& ctx, double queries,
                                     double keys) {
  TransformerShape t = shape;
  t.seq = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(keys)));
  t.causal = false;
  Block k(t, ctx);
  k.n = k.b * queries;
  k.nc = k.n / k.C;
  return attentionCore(k);
}

}  // namespace

LayerCosts layerChunkCosts(const Layer& layer, const CostContext& ctx, std::int64_t sequenceTokens,
                           std::int64_t queryBegin, std::int64_t queryEnd) {
  const std::int64_t seq = std::max<std::int64_t>(1, sequenceTokens);
  const std::int64_t q0 = std::clamp<std::int64_t>(queryBegin, 0, seq);
  const std::int64_t q1 = std::clamp<std::int64_t>(queryEnd, q0, seq);
  const double share = static_cast<double>(q1 - q0) / static_cast<double>(seq);
  Layer chunk = layer;
  auto scaleMs = [share](std::optional<double>& v) {
    if (v) *v *= share;
  };
  auto scaleBytes = [share](std::optional<std::int64_t>& v) {
    if (v) *v = toBytes(static_cast<double>(*v) * share);
  };
  scaleMs(chunk.forwardMs);
  scaleMs(chunk.backwardInputMs);
  scaleMs(chunk.backwardWeightMs);
  scaleBytes(chunk.activationBytes);
  scaleBytes(chunk.weightGradBytes);
  scaleBytes(chunk.outputBytes);
  if (chunk.flopsForward) *chunk.flopsForward *= share;
  // The layer's own sequence (a layer may see a sequence of another length than the model's).
  double earlierKeys = 0, queries = 0;
  if (chunk.transformer) {
    const auto own = static_cast<double>(std::max<std::int64_t>(1, chunk.transformer->seq));
    queries = std::max(1.0, std::round(own * share));
    earlierKeys = std::round(own * static_cast<double>(q0) / static_cast<double>(seq));
    chunk.transformer->seq = static_cast<std::int64_t>(queries);
  }
  LayerCosts c = layerCosts(chunk, ctx);
  if (!isTransformerBlock(layer) || earlierKeys <= 0 || !ctx.trainable) return c;
  const TransformerShape& t = *layer.transformer;
  const AttentionTimes extra = attentionCoreOverKeys(t, ctx, queries, earlierKeys);
  const Parallelism& par = ctx.parallel;
  const bool flash = t.attention == AttentionKind::Flash;
  // What transformerCosts adds for the attention core, for the earlier keys: the forward, the
  // backward (and its replay under full recomputation, or of the unfused core when selective
  // recomputation names it), the score matrices an unfused kernel keeps.
  if (!layer.forwardMs) c.forwardMs += extra.forwardMs;
  if (!layer.backwardInputMs) {
    c.backwardInputMs += extra.backwardMs;
    const bool replayed = par.recompute == Recompute::Full || (par.recompute == Recompute::Selective && !flash &&
                                                               (par.selectiveModules() & kRecomputeCoreAttn) != 0);
    if (replayed) c.backwardInputMs += extra.forwardMs;
  }
  if (!layer.activationBytes && !flash && par.recompute == Recompute::None) {
    const double T = std::max(1, par.tensor);
    const double C = std::max(1, par.context);
    const double b = static_cast<double>(std::max<std::int64_t>(1, ctx.samplesPerMicrobatch));
    const double heads = static_cast<double>(std::max<std::int64_t>(1, t.heads));
    const double scores = heads / T * (b * queries / C) * earlierKeys * (2.0 + 3.0 * (t.dropout ? 1.0 : 0.0));
    c.activationBytes += toBytes(scores);
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
