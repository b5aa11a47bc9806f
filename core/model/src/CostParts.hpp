#pragma once
// Private parts of the cost model (issue 26): the FlashAttention kernel model, context
// parallelism's key/value exchange and the mixture-of-experts layer as Megatron-Core trains it.
// CostModel.cpp's transformerCosts composes them with the dense parts; each formula cites its
// source where it is defined (AttentionKernel.cpp, ContextParallel.cpp, MoeCosts.cpp).

#include <cstdint>
#include <optional>

#include "pipestudio/model/CostModel.hpp"

namespace pipestudio::costparts {

/// A collective's time on the links, the part the recipe hides under compute and the rest.
struct CommShare {
  double exposedMs = 0, hiddenMs = 0;
  double totalMs() const { return exposedMs + hiddenMs; }
};

/// `commMs` overlapped with `computeMs` of independent work: what does not fit shows.
CommShare hiddenUnder(double commMs, double computeMs);
/// An expert all-to-all of `commMs` beside `computeMs` of compute on another stream: its exposed
/// part is what the pair takes beyond the compute, besideSpanMs(comm, compute, smShare,
/// efficiency) − compute (all of it beside no compute). With efficiency 1 that is
/// max(comm − compute, smShare·comm): the compute runs on the SMs the collective leaves it.
CommShare hiddenBeside(double commMs, double computeMs, double smShare, double efficiency = 1.0);

/// The link a group of `span` consecutive GPUs uses (NVLink inside one NVLink domain, else the
/// node's NICs), as collectiveLinks places the fixed groups; a group inside the TP group's span
/// uses the TP link.
CollectiveLink linkForSpan(const CollectiveLinks& links, std::int64_t span, int tensor);

/// An all-to-all in which each of `ranks` GPUs, `stride` apart, sends `bytes` spread evenly over
/// the group (its own share stays local); `group` is the link collectiveLinks gives the whole
/// group. When the group spans several NVLink domains, the peers inside this GPU's domain are
/// reached over NVLink while the others go over the NICs at the same time, so the slower of the
/// two parts sets the time (NCCL issues every pair's send and receive in one group: one latency
/// per link, not one per peer).
double allToAllOnLinksMs(const CollectiveLinks& links, const CollectiveLink& group, std::int64_t ranks,
                         std::int64_t stride, double bytes);

/// How a token picks its experts: `topK` of them, from its best `groupTopK` of `groups` equal
/// groups of consecutive experts (group-limited routing; groups 0: no limit).
struct TokenRouting {
  double topK = 0;
  double groups = 0, groupTopK = 0;
};

/// NVLink domains a token's experts lie in, on average, with the experts laid over `domains`
/// equal domains in order (expert parallelism places consecutive experts on consecutive ranks)
/// and the router's choice uniform (the force-balanced benchmarks' random logits).
double domainsHit(const TokenRouting& routing, double domains);

/// The flex dispatcher's dispatch or combine over `ranks` GPUs `stride` apart: `tokens` of this
/// GPU routed as `routing` says, `bytesPerCopy` each. Inside one NVLink domain it is the
/// all-to-all; across domains a token crosses the network once per other domain it reaches
/// (DeepEP), or HybridEP's network stage passes it once per domain it reaches, its own included,
/// and every copy for another GPU of a domain crosses NVLink, the slower of the two setting the
/// time (MoeCosts.cpp cites the libraries' published bandwidths). HybridEP's SMs copy the tokens
/// bound for other GPUs of a domain at kHybridEpCopyGBpsPerSm each: with `sms` of them (0: no
/// limit) that can set the time instead.
///
/// HybridEP moves a call's tokens in chunks of `chunkTokens` through its stages (the SMs' copies,
/// NVLink, the network), one chunk in each stage at a time: the slowest stage sets the time, and
/// the others add their share of one chunk (pipeline fill and drain). 0: not chunked (DeepEP).
double flexAllToAllMs(const CollectiveLinks& links, std::int64_t ranks, std::int64_t stride, double tokens,
                      const TokenRouting& routing, double bytesPerCopy, FlexBackend backend, double sms = 0,
                      double chunkTokens = 0);

/// Atomic adds per second of a scatter-add of bf16 rows (PyTorch's index_add_ / scatter_add_, what
/// the unfused permutation's inverse and the permutation's gradient run), on `gpu`.
double atomicAddsPerS(const GpuSpec& gpu);

/// The host waiting for a device-to-host copy and launching again (kMeasuredD2hRoundTripMs).
inline constexpr double kMeasuredD2hRoundTripMs = 0.1996;

// --- GEMM kernels (GemmKernel.cpp) ---

/// Milliseconds to do `amount` at `perS` per second (0 when the rate is not positive).
double msAt(double amount, double perS);

/// Milliseconds to stream `bytes` through the GPU's HBM (a memory-bound kernel).
double memoryMs(const GpuSpec& gpu, double bytes);

/// Fraction of the SMs busy over the waves of a GEMM with a rows × cols output.
double waveUtilisation(const GpuSpec& gpu, double rows, double cols);

/// How much longer a GEMM of depth k takes than its long-k rate says: (k + fill) / k with the
/// GPU's fill for `precision` (1 where the GPU has none).
double mainLoopFill(const GpuSpec& gpu, Precision precision, double k);

/// One (m × k) by (k × n) GEMM: 2mnk FLOPs at the precision's rate, its wave utilisation and
/// main-loop fill, or the time to stream its operands (in the precision's format) and output
/// through HBM when that is longer. `outputBytesPerValue` is 4 + 4 for weight-gradient GEMMs that
/// accumulate into fp32 main gradients (Megatron's gradient-accumulation fusion).
double gemmMs(const GpuSpec& gpu, Precision precision, double m, double n, double k, double outputBytesPerValue = 2.0);

/// A grouped GEMM (TE GroupedLinear / CUTLASS grouped GEMM): `groups` products of (m × k) by
/// (k × n), one per local expert, launched together. Its tiles share the SMs, so the waves are
/// counted over all groups; a group's last row tile is partly empty when m is not a multiple of
/// the tile (few tokens per expert), and every expert's weights stream through HBM once, so the
/// roofline turns memory-bound as the tokens per expert fall.
double groupedGemmMs(const GpuSpec& gpu, Precision precision, double groups, double m, double n, double k,
                     double outputBytesPerValue);

/// Each expert's GEMM is a kernel of its own as Transformer Engine's GroupedLinear runs them on
/// Hopper (one cuBLAS GEMM per local expert, spread over several streams): beyond the tiles the
/// grouped model counts together, each costs a fixed time on the GPU — its launch, ramp and tail on
/// a stream. Fitted, as the GEMM fill is, to the expert GEMMs timed in CUDA graphs on an H100
/// (bench/fidelity/kernels-h100.jsonl, section experts: 4 streams, 4–16 experts of 256–4,096
/// tokens, the Qwen3, GPT-OSS and DeepSeek-V3 shapes, bf16 and fp8): 2.3 µs per expert GEMM takes
/// the grouped model from 15.5 % to 9.2 % (bf16) and 18.6 % to 7.5 % (fp8) MAPE, 36 % to 10 % at
/// 256 tokens per expert; `make fidelity` refits it (Kernels.cpp).
inline constexpr double kExpertGemmLatencyMs = 0.0023;

/// The experts' GEMMs of one kind on one GPU: `experts` local experts, each an (m × k)·(k × n)
/// GEMM, the tokens per expert being m (forward, input gradient) or k (weight gradient), of
/// experts `hidden` wide with `expertFfn` intermediate values (ETP's shard).
struct ExpertGemm {
  double experts = 0, m = 0, n = 0, k = 0;
  bool weightGradient = false;
  double hidden = 0, expertFfn = 0;
};

/// The GPU's measured efficiency of expert GEMMs (GpuSpec::expertGemmCurve) at `tokens` per expert
/// for the measured expert shape nearest (hidden, expertFfn), interpolated in log(tokens); nullopt
/// without measurements for `precision` (or the format it runs as).
std::optional<double> measuredExpertGemmEfficiency(const GpuSpec& gpu, Precision precision, double tokens,
                                                   double hidden, double expertFfn);

/// Time of `g`: with a measured curve, the dense GEMM of the experts' tokens stacked over the
/// measured efficiency; else groupedGemmMs plus kExpertGemmLatencyMs per expert.
double expertGemmMs(const GpuSpec& gpu, Precision precision, const ExpertGemm& g, double outputBytesPerValue);

// --- FlashAttention (AttentionKernel.cpp) ---

/// One fused attention kernel launch on one GPU: `batchHeads` independent (batch, head) problems
/// of `queries` × `keys`.
struct FlashProblem {
  double batchHeads = 1;
  double queries = 0;
  double keys = 0;
  double qkDim = 128;  ///< query/key size per head
  double vDim = 128;   ///< value size per head
  /// The queries are the last `queries` positions of the keys and attend only to earlier ones
  /// (a causal diagonal block).
  bool causal = false;
  double window = 0;  ///< keys each query sees at most (sliding window); 0: all
};

struct FlashTimes {
  double forwardMs = 0, backwardMs = 0;
  double tiles = 0;  ///< 128 × 128 score tiles the kernel computes per (batch, head)
};

/// Time of a FlashAttention forward and backward kernel (the fused attention Transformer Engine
/// calls: cuDNN or FlashAttention-3 on Hopper) in bf16 whatever the recipe's precision.
FlashTimes flashAttention(const GpuSpec& gpu, const FlashProblem& problem,
                          AttentionBackend backend = AttentionBackend::Fused);

// --- Context parallelism (ContextParallel.cpp) ---
// The kernels run on the recipe's attention backend (Parallelism::attentionBackend).

/// The attention core of one transformer block on one GPU, before context parallelism splits it.
struct AttentionCoreShape {
  double batch = 1;
  double seq = 0;      ///< whole sequence
  double heads = 0;    ///< query heads of this GPU (heads / T)
  double kvHeads = 0;  ///< key/value heads of this GPU (kv_heads / T; MLA: = heads)
  double qkDim = 128;
  double vDim = 128;
  bool causal = true;
  double window = 0;
  AttentionBackend backend = AttentionBackend::Fused;
};

/// The attention core under context parallelism C with Transformer Engine's communication type:
/// kernel time (the kernels the exchange splits it into, with the partial-output corrections
/// between them) and the exchange, hidden under the kernels where TE overlaps it.
struct ContextAttention {
  double forwardMs = 0, backwardMs = 0;  ///< compute, without the exchange
  CommShare forwardComm, backwardComm;
  double bufferBytes = 0;  ///< K/V chunks (and their gradients) in flight, or the all-to-all's copies
  int a2aRanks = 1;        ///< C_a: ranks of the all-to-all part (a2a: C; a2a+p2p: the inner group)
};
ContextAttention contextAttention(const GpuSpec& gpu, const CollectiveLinks& links, const Parallelism& parallel,
                                  const AttentionCoreShape& shape);

/// The inner (all-to-all) group size of hierarchical context parallelism (a2a+p2p): the largest
/// divisor of C whose T·C_a GPUs share an NVLink domain and that divides this GPU's query and
/// key/value heads.
int hierarchicalA2aRanks(std::int64_t domainGpus, int tensor, int context, double heads, double kvHeads);

// --- Mixture of experts (MoeCosts.cpp) ---

/// What the MoE layer's cost depends on, per GPU.
struct MoeShape {
  int tensor = 1;     ///< the attention's T (an ETP group inside it uses the TP link)
  double tokens = 0;  ///< tokens of this GPU entering the router (sequence-parallel shard)
  double hidden = 0;
  double expertFfn = 0;
  double experts = 0;
  double topK = 0;
  bool swiglu = true;
  double ep = 1, etp = 1;
  /// Routed copies the busiest expert-parallel rank processes relative to a balanced router:
  /// the capacity factor when tokens are dropped (and padded to capacity), else the stated load
  /// imbalance.
  double load = 1;
  Precision precision = Precision::Bf16;
  double wgradOutputBytes = 8;                   ///< main-gradient read + write per weight-gradient value
  bool flexDispatcher = false;                   ///< DeepEP/HybridEP: one copy per NVLink domain a token reaches
  double routerGroups = 0, routerGroupTopK = 0;  ///< group-limited routing (0: none)
  FlexBackend flexBackend = FlexBackend::DeepEp;
  double commSms = 0;         ///< SMs the flex dispatcher runs on (Parallelism::moeCommSmsOrDefault; 0: no limit)
  bool permuteFusion = true;  ///< Parallelism::moePermuteFusion
  bool permuteInDispatcher = false;  ///< Parallelism::moePermuteFusionIntoDispatcher (HybridEP)
  double combineChunkTokens = 64;    ///< HybridEP's combine chunk (Parallelism::moeCombineChunkTokensOrDefault)
  bool graphedPreprocess = false;    ///< CUDA graphs capture MoELayer.preprocess (moe_preprocess or more)
  /// HybridEP's budget per rank over a balanced router's copies (Parallelism::moeRankCapacityFactor;
  /// 0: unset).
  double rankCapacityFactor = 0;
  bool dispatchWaitsOnHost = true;  ///< moeDispatchWaitsOnHost (Caveats.hpp): for its token counts
  /// The paged stash's buffer over a balanced router's copies (0: no paged stash).
  double pagedStashFactor = 0;
};

/// The routed part of a MoE layer on one GPU (router, permutation, grouped expert GEMMs, token
/// all-to-alls and the expert-tensor-parallel gather/scatter). Shared experts are a dense MLP of
/// the block and are not included.
struct MoeCosts {
  double forwardMs = 0, backwardInputMs = 0, backwardWeightMs = 0;  ///< compute, no collectives
  double expertGemmForwardMs = 0;                                   ///< part of forwardMs: the grouped FC1 and FC2
  double expertActMs = 0;                                           ///< part of forwardMs: the activation function
  double dispatchMs = 0;  ///< one all-to-all (dispatch or combine) with its ETP collective
  double permuteMs = 0;   ///< part of each pass: the token permutation and its inverse
  /// Forward only: the GPU idle while the host waits for the dispatcher's token counts.
  double hostSyncMs = 0;
  double activationBytes = 0;        ///< held from F to B
  double weightGradBytes = 0;        ///< of those, the expert GEMMs' inputs W reads
  double actOutputBytes = 0;         ///< of those, FC2's inputs (what moe_act recomputation drops)
  double fc1InputBytes = 0;          ///< of those, the experts' FC1 inputs (expert_fc1 offloading)
  double actInputBytes = 0;          ///< of those, the activation's inputs (moe_act offloading)
  double bufferBytes = 0;            ///< all-to-all send and receive copies while a pass runs
  double routedTokensPerExpert = 0;  ///< rows of one local expert's GEMMs
  double localParams = 0;            ///< router (replicated) and this GPU's expert shards
  double expertParams = 0;           ///< part of localParams in routed experts
  double linearParams = 0;           ///< expert weights a low-precision recipe keeps copies of
  double modelFlopsForward = 0;      ///< whole layer's routed part (router and top_k experts)
  double modelParameters = 0;        ///< whole layer's router and experts
};
MoeCosts moeCosts(const GpuSpec& gpu, const CollectiveLinks& links, const MoeShape& shape);

/// What the token all-to-alls of a layer can hide under: the compute of its attention half and of
/// its MoE half (routed and shared experts, router, permutation), per pass (backward: input and
/// weight gradients), and of the shared experts alone.
struct MoeOverlapWindows {
  double a2aMs = 0;  ///< one all-to-all (dispatch or combine) of one pass
  double attentionForwardMs = 0, mlpForwardMs = 0;
  double attentionBackwardMs = 0, mlpBackwardMs = 0;
  double sharedForwardMs = 0, sharedBackwardMs = 0;
  /// The share of the GPU's SMs the all-to-all kernels occupy while they run (pipestudio::moeCommSmShare).
  double commSmShare = 0;
  /// The share of the time beside compute that comes off (pipestudio::epOverlapEfficiency).
  double overlapEfficiency = 1.0;
};

/// Exposed and hidden shares of the dispatch and combine all-to-alls of one forward and one
/// backward of a layer as the recipe overlaps them: under the shared experts' compute of the same
/// pass (--moe-shared-expert-overlap), or — 1F1B A2A overlap and DualPipe's F&B pairing — each
/// under a compute chunk of another microbatch's opposite pass.
struct MoeCommExposure {
  CommShare forward, backward;
};
MoeCommExposure moeCommExposure(const MoeOverlapWindows& windows, const Parallelism& parallel);

/// Bytes of HBM traffic per value of Transformer Engine's cast to `precision` (CostModel.cpp).
double lowPrecisionCastBytes(const GpuSpec& gpu, Precision precision);

}  // namespace pipestudio::costparts
