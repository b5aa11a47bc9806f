#include "pipestudio/model/CostModel.hpp"

#include <algorithm>
#include <cmath>

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

// One GEMM of an (m × k) by (k × n) product on one GPU: 2mnk FLOPs at the calibrated efficiency
// and the wave utilisation of its m × n output, or the time to stream its operands and output
// through HBM when that is longer (roofline). `outputBytesPerValue` is 4 + 4 for weight-gradient
// GEMMs that accumulate into fp32 main gradients (Megatron's gradient-accumulation fusion).
double gemmMs(const GpuSpec& gpu, double m, double n, double k, double outputBytesPerValue = kBf16) {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  const double flops = 2.0 * m * n * k;
  const double compute = msAtRate(flops, gpu.effectiveFlopsPerS() * waveUtilisation(gpu, m, n));
  const double memory = msAtRate(kBf16 * (m * k + k * n) + outputBytesPerValue * m * n, gpu.memoryBytesPerS());
  return std::max(compute, memory);
}

double memoryMs(const GpuSpec& gpu, double bytes) { return msAtRate(bytes, gpu.memoryBytesPerS()); }

// The weight GEMMs of a transformer layer on one GPU, forward shapes (m tokens × k in → n out).
struct Gemm {
  double m, n, k;
  double count = 1;  // identical GEMMs (local experts)
};

struct PassTimes {
  double forward = 0, backwardInput = 0, backwardWeight = 0;
};

PassTimes gemmPasses(const GpuSpec& gpu, const std::vector<Gemm>& gemms) {
  PassTimes t;
  for (const Gemm& g : gemms) {
    t.forward += g.count * gemmMs(gpu, g.m, g.n, g.k);
    t.backwardInput += g.count * gemmMs(gpu, g.m, g.k, g.n);                  // dX = dY · Wᵀ
    t.backwardWeight += g.count * gemmMs(gpu, g.k, g.n, g.m, kFp32 + kFp32);  // dW += Xᵀ · dY
  }
  return t;
}

// A transformer block under hybrid parallelism. Sources:
//  FLOPs: Narayanan et al. 2021 §5.1 and Korthikanti et al. 2022 Appendix A (24·b·s·h² + 4·b·s²·h
//    with a 4h GELU MLP); grouped-query attention shrinks the K/V projections to kv_heads·head_dim
//    (Ainslie et al. 2023; Llama 2 §2.2 / Llama 3 §3.2); SwiGLU has three ffn matrices
//    (Shazeer 2020; Llama 2); MoE routes each token to top_k of `experts` (Mixtral, Jiang et al.
//    2024 §2.1; DeepSeek-V3 §2.1.2 for shared experts).
//  Activations: Korthikanti et al. 2022 §4.1 term by term (34·s·b·h + 5·a·s²·b for a 4h GELU MLP
//    with dropout), §4.2 for tensor and sequence parallelism (10 replicated + 24/t sharded), §5 for
//    selective and full recomputation. FlashAttention (Dao et al. 2022) keeps no s² score matrix,
//    only its output and the per-row log-sum-exp.
//  Causal attention: a causal FlashAttention kernel skips the masked half of the score blocks,
//    so its time counts half the 4·b·s²·h FLOPs; a standard (unfused) kernel computes the whole
//    matrix and masks it. Model FLOPs (MFU) count the whole matrix either way, as Korthikanti
//    et al. Appendix A do.
//  Collectives: Megatron-LM tensor parallelism does two all-reduces per layer forward and two
//    backward (Shoeybi et al. 2019 §3), or with sequence parallelism two all-gathers and two
//    reduce-scatters of the same volume (Korthikanti §4.2.2); ring attention passes each K/V
//    chunk around the C context ranks, overlapped with the attention core (Liu et al. 2023);
//    expert parallelism dispatches and combines tokens with one all-to-all each per pass
//    (Lepikhin et al. 2021; Megatron-Core MoE).
LayerCosts transformerCosts(const TransformerShape& t, const CostContext& ctx) {
  const GpuSpec& gpu = ctx.gpu;
  const Parallelism& par = ctx.parallel;
  const double T = std::max(1, par.tensor);
  const double C = std::max(1, par.context);
  const double E = std::max(1, par.expert);
  const double D = std::max(1, par.data);
  const double sp = par.sequenceParallel ? T : 1.0;  // divisor of the norm/dropout/residual region
  const double b = static_cast<double>(std::max<std::int64_t>(1, ctx.samplesPerMicrobatch));
  const double s = static_cast<double>(t.seq);
  const double h = static_cast<double>(t.hidden);
  const double a = static_cast<double>(std::max<std::int64_t>(1, t.heads));
  const double hkv = h / a * static_cast<double>(t.kvHeadsOrHeads());
  const double f = static_cast<double>(t.ffnOrDefault());
  const double fe = static_cast<double>(t.expertFfnOrDefault());
  const bool swiglu = t.mlp == MlpKind::SwiGlu;
  const bool flash = t.attention == AttentionKind::Flash;
  const double dropout = t.dropout ? 1.0 : 0.0;
  const double mlpMatrices = swiglu ? 3.0 : 2.0;
  const double n = b * s;   // tokens of the microbatch
  const double nc = n / C;  // tokens of this context rank
  const bool moe = t.isMoe();
  const double experts = static_cast<double>(t.experts);
  const double topK = static_cast<double>(t.topK);
  const double shared = static_cast<double>(t.sharedExperts);
  const double cf = t.capacityFactor;

  LayerCosts c;
  // --- model FLOPs and parameters (whole layer, unsharded) ---
  const double attnProjFlops = 2.0 * n * h * (h + 2.0 * hkv) + 2.0 * n * h * h;
  const double attnCoreFlops = 4.0 * b * s * s * h;
  double mlpFlops = 0;
  double mlpParams = 0;
  if (moe) {
    mlpFlops = 2.0 * n * h * experts + (topK + shared) * 2.0 * mlpMatrices * n * h * fe;
    mlpParams = h * experts + (experts + shared) * mlpMatrices * h * fe;
  } else {
    mlpFlops = 2.0 * mlpMatrices * n * h * f;
    mlpParams = mlpMatrices * h * f;
  }
  c.modelFlopsForward = attnProjFlops + attnCoreFlops + mlpFlops;
  const double attnParams = h * (h + 2.0 * hkv) + h * h;
  const double normParams = 2.0 * h;
  c.modelParameters = attnParams + mlpParams + normParams;

  // --- parameters of this GPU (bf16): TP shards attention and MLP, EP the routed experts ---
  double localParams = attnParams / T + normParams;
  if (moe) {
    localParams += h * experts + (experts / E + shared) * mlpMatrices * h * fe / T;
  } else {
    localParams += mlpParams / T;
  }
  c.parameterBytes = toBytes(kBf16 * localParams);
  if (moe) c.expertParameterBytes = toBytes(kBf16 * experts / E * mlpMatrices * h * fe / T);

  // --- compute: weight GEMMs of this GPU ---
  std::vector<Gemm> gemms;
  gemms.push_back({nc, (h + 2.0 * hkv) / T, h});  // QKV (column parallel)
  gemms.push_back({nc, h, h / T});                // attention output projection (row parallel)
  double routedTokens = 0;                        // tokens this GPU's experts process per microbatch (balanced router)
  if (moe) {
    // Each of the E expert-parallel ranks receives the tokens routed to its experts from all E
    // ranks: E · nc · top_k · cf / E (balanced router); its T GPUs split the expert FFN.
    routedTokens = nc * topK * cf;
    const double localExperts = std::max(1.0, experts / E);
    const double perExpert = routedTokens / localExperts;
    gemms.push_back({nc / sp, experts, h});                                        // router (replicated over TP)
    gemms.push_back({perExpert, (swiglu ? 2.0 : 1.0) * fe / T, h, localExperts});  // expert FC1 (gate+up)
    gemms.push_back({perExpert, h, fe / T, localExperts});                         // expert FC2
    if (shared > 0) {
      gemms.push_back({nc, (swiglu ? 2.0 : 1.0) * shared * fe / T, h});
      gemms.push_back({nc, h, shared * fe / T});
    }
  } else {
    gemms.push_back({nc, (swiglu ? 2.0 : 1.0) * f / T, h});  // FC1 (fused gate+up for SwiGLU)
    gemms.push_back({nc, h, f / T});                         // FC2
  }
  const PassTimes gemm = gemmPasses(gpu, gemms);

  // Attention core: QKᵀ and PV over this rank's nc queries and all s keys, heads split over T.
  const double causalFactor = (t.causal && flash) ? 0.5 : 1.0;
  const double attnCoreMs = msAtRate(4.0 * nc * s * h / T * causalFactor, gpu.effectiveFlopsPerS());
  // Score-matrix traffic of an unfused kernel (bytes per score: write QKᵀ 2, softmax read+write
  // 4, dropout read+write+mask 5, PV read 2); FlashAttention keeps scores in on-chip memory.
  const double scoreBytes = flash ? 0.0 : (a / T) * nc * s * (8.0 + 5.0 * dropout);
  const double attnFwdMs = attnCoreMs + memoryMs(gpu, scoreBytes);
  // FlashAttention's backward recomputes the scores: five matmuls to the forward's two; the
  // unfused backward does four and re-reads the score matrices twice.
  const double attnBwdMs = flash ? 2.5 * attnCoreMs : 2.0 * attnCoreMs + memoryMs(gpu, 2.0 * scoreBytes);

  // Element-wise kernels (Megatron's fused kernels; bf16): two norms (read + write h), two
  // bias-dropout-add (read 2h, write h, mask h/2 bytes·2), the MLP activation (GELU read + write
  // ffn; SwiGLU read 2·ffn, write ffn), MoE permutation copies (read + write h per routed token,
  // dispatch and combine).
  const double replicatedBytes = nc / sp * (8.0 * h + 2.0 * (6.0 * h + dropout * h));
  double shardedBytes = 0;
  if (moe) {
    shardedBytes = routedTokens * (swiglu ? 6.0 : 4.0) * fe / T + nc * shared * (swiglu ? 6.0 : 4.0) * fe / T +
                   routedTokens * 8.0 * h / T;
  } else {
    shardedBytes = nc * (swiglu ? 6.0 : 4.0) * f / T;
  }
  const double elementwiseFwdMs = memoryMs(gpu, replicatedBytes + shardedBytes);
  const double elementwiseBwdMs = 2.0 * elementwiseFwdMs;

  // --- collectives (not overlapped with compute unless said) ---
  double tpFwdMs = 0, tpBwdMs = 0;
  if (T > 1) {
    const double hiddenBytes = kBf16 * nc * h;
    tpFwdMs = 2.0 * allReduceMs(ctx.links.tensor, static_cast<int>(T), hiddenBytes);
    tpBwdMs = tpFwdMs;
  }
  double cpFwdMs = 0, cpBwdMs = 0;
  if (C > 1) {
    // C−1 ring steps, each passing this rank's K and V chunk (bf16, heads split over T), hidden
    // under the attention core of the chunk it computes meanwhile.
    const double chunkBytes = 2.0 * kBf16 * nc * hkv / T;
    const CollectiveLink& l = ctx.links.context;
    const double stepMs =
        l.bandwidthGBps > 0 ? chunkBytes / (l.bandwidthGBps * 1e6) + l.latencyUs / 1000.0 : l.latencyUs / 1000.0;
    const double ringMs = (C - 1.0) * stepMs;
    cpFwdMs = std::max(0.0, ringMs - attnFwdMs * (C - 1.0) / C);
    cpBwdMs = std::max(0.0, 2.0 * ringMs - attnBwdMs * (C - 1.0) / C);  // K/V again and their gradients
  }
  double epFwdMs = 0, epBwdMs = 0;
  std::int64_t a2aBufferBytes = 0;
  if (moe && E > 1) {
    const double dispatchBytes = kBf16 * nc / sp * topK * cf * h;
    epFwdMs = 2.0 * allToAllMs(ctx.links.expert, static_cast<int>(E), dispatchBytes);  // dispatch + combine
    epBwdMs = epFwdMs;
    a2aBufferBytes = toBytes(2.0 * dispatchBytes);
  }

  // --- activation memory per GPU (bytes per token × tokens of this rank) ---
  // Replicated over TP unless sequence parallel: two norm inputs (4h), the QKV input (2h), the
  // MLP input (2h), two dropout masks (h each).
  double replicatedAct = (8.0 * h + 2.0 * dropout * h) / sp;
  if (moe) replicatedAct += 8.0 * experts / sp;  // router logits and probabilities (fp32)
  // Split over TP: Q (2h), K and V (2·hkv each), the projection input (2h), the scores (2·a·s
  // softmax output + a·s mask + 2·a·s dropout output) or FlashAttention's fp32 log-sum-exp (4a).
  const bool keepScores = !flash && ctx.parallel.recompute == Recompute::None;
  double shardedAct = 4.0 * h + 4.0 * hkv;
  if (keepScores) shardedAct += a * s * (2.0 + 3.0 * dropout);
  if (flash) shardedAct += 4.0 * a;
  double mlpAct = 0;
  if (moe) {
    // Each routed copy's expert input and internals, and the shared experts'.
    mlpAct = topK * cf * (2.0 * h + (swiglu ? 6.0 : 4.0) * fe) + shared * (swiglu ? 6.0 : 4.0) * fe;
  } else {
    mlpAct = (swiglu ? 6.0 : 4.0) * f;  // GELU input + FC2 input, or SwiGLU's gate, up and FC2 input
  }
  shardedAct += mlpAct;
  double activation = nc * (replicatedAct + shardedAct / T);
  // W needs the inputs of the weight GEMMs: QKV and FC1 inputs (2h each, replicated unless SP),
  // the projection and FC2 inputs (sharded).
  double wgrad = nc * ((4.0 * h) / sp + (2.0 * h + 2.0 * (moe ? topK * cf * fe + shared * fe : f)) / T);
  if (moe) wgrad += nc * topK * cf * 2.0 * h / T;

  double forwardMs = gemm.forward + attnFwdMs + elementwiseFwdMs + tpFwdMs + cpFwdMs + epFwdMs;
  double forwardCommMs = tpFwdMs + cpFwdMs + epFwdMs;
  double backwardInputMs = gemm.backwardInput + attnBwdMs + elementwiseBwdMs + tpBwdMs + cpBwdMs + epBwdMs;
  double backwardInputCommMs = tpBwdMs + cpBwdMs + epBwdMs;
  double backwardWeightMs = gemm.backwardWeight;
  double backwardWeightCommMs = 0;

  // --- recomputation (Korthikanti et al. 2022 §5) ---
  if (par.recompute == Recompute::Full) {
    // Only the layer input survives the forward (sequence-parallel: this rank's shard); the
    // backward first replays the whole forward, collectives included. The replayed GEMM inputs
    // W needs are transient (alive from B to W), not counted as held activations.
    activation = kBf16 * nc * h / sp;
    wgrad = 0;
    backwardInputMs += forwardMs;
    backwardInputCommMs += forwardCommMs;
  } else if (par.recompute == Recompute::Selective && !flash) {
    // The attention core (scores, softmax, dropout) is replayed in B instead of held; with
    // FlashAttention nothing s² is held and its backward already replays the scores, so
    // selective recomputation changes nothing.
    backwardInputMs += attnFwdMs;
  }

  // --- ZeRO-3 (FSDP): each pass gathers this layer's parameters (prefetched under the previous
  // layer's compute) and W reduce-scatters its gradients (fp32). ---
  std::int64_t gatherBufferBytes = 0;
  if (par.zeroStage >= 3 && D > 1 && ctx.trainable) {
    const double gather = allGatherMs(ctx.links.data, static_cast<int>(D), kBf16 * localParams);
    const double scatter = allGatherMs(ctx.links.data, static_cast<int>(D), kFp32 * localParams);
    const double fwdExposed = std::max(0.0, gather - forwardMs);
    const double bwdExposed = std::max(0.0, gather - backwardInputMs);
    const double wExposed = std::max(0.0, scatter - backwardWeightMs);
    forwardMs += fwdExposed;
    forwardCommMs += fwdExposed;
    backwardInputMs += bwdExposed;
    backwardInputCommMs += bwdExposed;
    backwardWeightMs += wExposed;
    backwardWeightCommMs += wExposed;
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
  c.outputBytes = toBytes(kBf16 * nc * h / T);
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
  const PassTimes gemm = gemmPasses(gpu, {{nc, v / T, h}});
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
  c.backwardWeightMs = memoryMs(gpu, nc * h / T * (kBf16 + 2.0 * kFp32));
  c.activationBytes = toBytes(8.0 * nc);  // int64 token ids
  c.weightGradBytes = c.activationBytes;
  c.outputBytes = toBytes(kBf16 * nc * h / T);
  return c;
}

}  // namespace

CollectiveLinks collectiveLinks(const ClusterSpec& cluster, const Parallelism& parallel) {
  const std::int64_t perNode = cluster.gpusPerNode();
  // A group of ranks `stride` apart spanning `span` consecutive GPUs stays on NVLink when the
  // span fits in a node; across nodes every GPU of the node talks at once, so each gets its
  // node's NIC bandwidth divided among them (one NIC per GPU: the NIC's bandwidth).
  auto linkFor = [&](std::int64_t span) {
    CollectiveLink l;
    if (span <= perNode || cluster.nodes.size() <= 1) {
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

StaticBytesPerParameter staticBytesPerParameter(int zeroStage, int dataParallel) {
  // Mixed-precision Adam: bf16 weight (2) + fp32 gradient accumulation (4) + fp32 master weight,
  // momentum and variance (12) = 18 bytes (Korthikanti et al. 2022; Megatron-LM distributed
  // optimizer docs); ZeRO (Rajbhandari et al. 2020) shards them over the D replicas by stage.
  const double d = std::max(1, dataParallel);
  StaticBytesPerParameter b;
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
