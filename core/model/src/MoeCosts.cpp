// A mixture-of-experts layer as Megatron-Core trains it (issue 26): the router, the token
// permutation, the grouped expert GEMMs, the expert-parallel all-to-alls on the links they cross,
// expert tensor parallelism and the memory of it all, per GPU.
//
// Megatron-Core's MoE layer (megatron/core/transformer/moe/: router.py, token_dispatcher.py
// MoEAlltoAllTokenDispatcher, experts.py TEGroupedMLP; Megatron-Core MoE docs):
//   router GEMM and top-k → permute the routed copies of this rank's tokens by expert → all-to-all
//   over the EP ranks → all-gather over the ETP ranks (expert tensor parallelism) → sort by local
//   expert → grouped FC1, activation, grouped FC2 → the same steps backwards (reduce-scatter over
//   ETP, all-to-all, unpermute weighted by the router's probabilities).
// MoE parallel folding (Liu et al. 2025, "MoE Parallel Folding", Megatron-Core): the expert layers
// re-divide the T·C·D GPUs of a pipeline rank into ETP × EP × EDP, so each GPU holds experts / EP
// experts, sharded over ETP, whatever the attention's T and C; its tokens are the sequence-parallel
// shard the attention left it.

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "CostParts.hpp"

namespace pipestudio::costparts {
namespace {

constexpr double kBf16 = 2.0;
constexpr double kFp32 = 4.0;

// HybridEP's copy rate per SM it is given: on H100 its 16-rank table (docs/README_Hybrid-EP.md,
// branch hybrid-ep at 94a9f8f; 4,096 tokens of 7,168, top 8, BF16, Torch API) falls to 37.1 GB/s
// (dispatch) and 42.5 (combine) at 4 SMs from 54.5 / 53.4 at 16. At 4 SMs, 2 nodes, the (token,
// node) pairs it reports are 1.99 per token and the copies its SMs make for other GPUs of a node
// 7 per token, so the SMs copied 37.1·7 / 1.99 / 4 = 32.6 and 37.3 GB/s each: 34.9, their mean.
// Every other row of that table (32 and 64 ranks at 4 SMs, any count at 8) stays link-bound at
// this rate, as measured (table ep-dispatch). DeepEP's SM scaling has no published H100 sweep.
constexpr double kHybridEpCopyGBpsPerSm = 34.9;

// HybridEP's chunk of tokens per API call when none is set (docs/README_Hybrid-EP.md, "Chunk Size
// Tuning": dispatch, combine and preprocessing all default to 64).
constexpr double kHybridEpDefaultChunkTokens = 64;

// A scatter-add of bf16 rows into a zeroed output (PyTorch's index_add_ and scatter_add_): one
// atomic add per value. On an H100 (bench/fidelity/kernels-h100.jsonl, section layer, the MoE
// half's kernels: indexFuncLargeIndex) two calls over 32,768 rows of 2,048 took 1.0735 ms and two
// over 16,384 rows of 2,880 took 0.7777 ms: 125.0 and 121.3 G adds/s, 0.933 G per SM at their mean
// (a twelfth of the copy rate the same file measures). Other GPUs: in proportion to their SMs.
constexpr double kAtomicAddsPerSPerSm = 0.933e9;

// The token permutation and its inverse around one pass's dispatch and combine, as Megatron-Core
// runs them (megatron/core/transformer/moe/moe_utils.py permute / unpermute / sort_chunks_by_idxs;
// token_dispatcher.py). Each pass has one gather-like kernel (forward: the permutation; backward:
// the inverse's gradient) and one scatter-like kernel (the inverse; the permutation's gradient):
// fused (Transformer Engine's moe_permute/moe_unpermute) both stream their rows through HBM;
// unfused the scatter is a zeroed output and one atomic add per value.
// - all-to-all dispatcher: the token side permutes this GPU's x tokens into x·top_k copies by
//   destination and back; the expert side sorts the received rows by local expert after the
//   dispatch and back before the combine (sort_chunks_by_idxs: a copy, fused or not).
// - flex dispatcher: DeepEP and HybridEP take the tokens unpermuted and deliver each once per rank
//   it reaches; the expert side permutes those into rows per local expert and back. With HybridEP's
//   permute fusion its kernels write and read the rows in expert order: no permutation kernels.
double permutationMs(const GpuSpec& gpu, const MoeShape& s, double x, double rows) {
  const double row = kBf16 * s.hidden;
  auto scatter = [&](double in, double out) {
    // Fused: read the rows, write the output; unfused: zero the output, then the atomic adds.
    return s.permuteFusion ? memoryMs(gpu, row * (in + out))
                           : memoryMs(gpu, row * out) + msAt(in * s.hidden, atomicAddsPerS(gpu));
  };
  if (!s.flexDispatcher) {
    const double copies = x * s.topK * s.load;
    const double tokenSide = memoryMs(gpu, row * (x + copies)) + scatter(copies, x);
    const double expertSide = memoryMs(gpu, 2.0 * 2.0 * row * rows);
    return tokenSide + expertSide;
  }
  if (s.permuteInDispatcher && s.flexBackend == FlexBackend::HybridEp) return 0.0;
  // Tokens this GPU receives: each of the EP ranks' tokens once per rank of this GPU's it reaches
  // (ranks are domains of experts / EP consecutive experts for domainsHit).
  const double ep = std::max(1.0, s.ep);
  const TokenRouting routing{s.topK, s.routerGroups, s.routerGroupTopK};
  const double received = std::max(1.0, s.etp) * x * s.load * domainsHit(routing, ep);
  return memoryMs(gpu, row * (received + rows)) + scatter(rows, received);
}

}  // namespace

double atomicAddsPerS(const GpuSpec& gpu) {
  if (gpu.smCount > 0) return kAtomicAddsPerSPerSm * gpu.smCount;
  // Without an SM count: the same twelfth of the HBM bandwidth as on the H100, in bf16 values.
  return gpu.memoryBytesPerS() / 12.0 / kBf16;
}

CommShare hiddenBeside(double commMs, double computeMs, double smShare, double efficiency) {
  CommShare c;
  if (commMs <= 0) return c;
  c.exposedMs = computeMs <= 0 ? commMs : besideSpanMs(commMs, computeMs, smShare, efficiency) - computeMs;
  c.hiddenMs = commMs - c.exposedMs;
  return c;
}

CommShare hiddenUnder(double commMs, double computeMs) { return hiddenBeside(commMs, computeMs, 0.0); }

CollectiveLink linkForSpan(const CollectiveLinks& links, std::int64_t span, int tensor) {
  if (span <= std::max(1, tensor)) return links.tensor;
  return span <= links.domainGpus ? links.nvlink : links.network;
}

double allToAllOnLinksMs(const CollectiveLinks& links, const CollectiveLink& group, std::int64_t ranks,
                         std::int64_t stride, double bytes) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const auto n = static_cast<double>(ranks);
  // Peers of this GPU inside its NVLink domain (itself included); a group inside one domain
  // uses its own link throughout.
  const std::int64_t perDomain =
      std::clamp<std::int64_t>(links.domainGpus / std::max<std::int64_t>(1, stride), 1, ranks);
  const auto local = static_cast<double>(perDomain);
  auto part = [&](const CollectiveLink& link, double peers) {
    if (peers <= 0) return 0.0;
    const double perMs = link.bandwidthGBps * 1e6;
    return (perMs > 0 ? bytes * peers / n / perMs : 0.0) + link.latencyUs / 1000.0;
  };
  if (perDomain >= ranks) return part(group, n - 1.0);
  return std::max(part(links.nvlink, local - 1.0), part(group, n - local));
}

double domainsHit(const TokenRouting& routing, double domains) {
  const double d = std::max(1.0, domains);
  const double k = routing.topK;
  const double groups = routing.groups;
  const double chosen = routing.groupTopK;
  // Without a group limit every expert is a candidate: a domain holds 1/d of them and is missed
  // by each of the k picks with probability 1 − 1/d.
  if (groups <= 1 || chosen <= 0 || chosen >= groups) return d * (1.0 - std::pow(1.0 - 1.0 / d, k));
  if (groups >= d && std::fmod(groups, d) == 0) {
    // Each domain holds q = groups / d whole groups. The token's g chosen groups are a uniform
    // draw, so the number c of them in one domain is hypergeometric; its k experts are uniform over
    // the chosen groups' experts, so the domain is missed with probability (1 − c/g)^k.
    const double q = groups / d;
    auto logChoose = [](double n, double r) {
      return std::lgamma(n + 1.0) - std::lgamma(r + 1.0) - std::lgamma(n - r + 1.0);
    };
    double hit = 0;
    for (double c = std::max(0.0, chosen - (groups - q)); c <= std::min(q, chosen); c += 1.0) {
      const double pc = std::exp(logChoose(q, c) + logChoose(groups - q, chosen - c) - logChoose(groups, chosen));
      hit += pc * (1.0 - std::pow(1.0 - c / chosen, k));
    }
    return d * hit;
  }
  if (d > groups && std::fmod(d, groups) == 0) {
    // Each group spans d / groups domains: a domain's group is chosen with probability g / groups,
    // and then each pick lands in it with probability groups / (g·d).
    return d * (chosen / groups) * (1.0 - std::pow(1.0 - groups / (chosen * d), k));
  }
  // Groups that straddle domains unevenly: the limit is not applied (an upper bound).
  return d * (1.0 - std::pow(1.0 - 1.0 / d, k));
}

// The flex dispatcher (DeepEP / HybridEP; DeepSeek-V3 §3.2.2): a token goes over the network
// once to each other NVLink domain holding one of its experts — to the GPU with its own index
// there — and is forwarded over NVLink to the experts' GPUs; group-limited routing (DeepSeek-V3
// §2.1.2: at most 4 nodes per token) bounds the domains it reaches (domainsHit). Every copy bound
// for another GPU of a domain crosses NVLink.
// The two libraries realize that at different rates, each as its published benchmark measures
// it (both report "logical" bandwidth: (token, domain) pairs, the token's own domain counted —
// DeepEP's `num_rdma_token_sent`, HybridEP's `count_rdma_send_from_routing_map` — times the
// token's bytes over the time):
// - DeepEP's normal kernels move the remote pairs at the NIC's rate. Its table (docs/legacy.md;
//   H800, 4,096 tokens of 7,168, 256 experts, top 8 of the best 4 node groups, FP8 dispatch:
//   43 / 58 / 51 GB/s at EP 16 / 32 / 64) is what remote pairs at 45 GB/s and NVLink at the 155
//   GB/s it measured inside a node give: 44 (NVLink-bound) / 60 / 52.
// - HybridEP's pairs, its own domain's among them, pass its network stage at about the NIC's
//   rate: on H100 (docs/README_Hybrid-EP.md, branch hybrid-ep at 94a9f8f; 4,096 tokens of 7,168,
//   top 8, uniform routing, BF16, through the Torch API) 54.5 / 47.4 / 41.2 GB/s at 16 / 32 / 64
//   ranks against 45 for all pairs (90 / 60 / 51 for remote pairs only).
double flexAllToAllMs(const CollectiveLinks& links, std::int64_t ranks, std::int64_t stride, double tokens,
                      const TokenRouting& routing, double bytesPerCopy, FlexBackend backend, double sms,
                      double chunkTokens) {
  if (ranks <= 1 || tokens <= 0) return 0.0;
  const std::int64_t perDomain =
      std::clamp<std::int64_t>(links.domainGpus / std::max<std::int64_t>(1, stride), 1, ranks);
  // Every copy bound for another GPU of a domain crosses NVLink; HybridEP's SMs make those
  // copies (its TMA stage), and with few SMs that, not a link, sets the time.
  const double nvlinkBytes = tokens * routing.topK * bytesPerCopy * (1.0 - 1.0 / static_cast<double>(perDomain));
  const double smCopyMs =
      backend == FlexBackend::HybridEp && sms > 0 ? nvlinkBytes / (sms * kHybridEpCopyGBpsPerSm * 1e6) : 0.0;
  // HybridEP's stages pass chunks of tokens on (hybrid_ep_backend.cuh: NUM_OF_CHUNKS_PER_RANK chunks of
  // NUM_OF_TOKENS_PER_CHUNK, one per stage at a time): the slowest stage's time plus one chunk's worth
  // of the others.
  const double chunk = backend == FlexBackend::HybridEp && chunkTokens > 0 ? std::min(1.0, chunkTokens / tokens) : 0.0;
  auto pipelined = [chunk](std::initializer_list<double> stages) {
    const double slowest = std::max(stages);
    double all = 0;
    for (double t : stages) all += t;
    return slowest + chunk * (all - slowest);
  };
  // Inside one domain it is the all-to-all on the group's link.
  if (perDomain >= ranks) {
    return pipelined(
        {allToAllOnLinksMs(links, links.expert, ranks, stride, tokens * routing.topK * bytesPerCopy), smCopyMs});
  }
  const double domains = std::ceil(static_cast<double>(ranks) / static_cast<double>(perDomain));
  const double hit = domainsHit(routing, domains);
  // DeepEP sends to the other domains a token reaches: its own is among them with probability
  // hit / domains (every domain alike).
  const double pairs = backend == FlexBackend::HybridEp ? hit : hit * (1.0 - 1.0 / domains);
  const double networkBytes = tokens * pairs * bytesPerCopy;
  auto part = [](const CollectiveLink& link, double bytes) {
    if (bytes <= 0) return 0.0;
    const double perMs = link.bandwidthGBps * 1e6;
    return (perMs > 0 ? bytes / perMs : 0.0) + link.latencyUs / 1000.0;
  };
  return pipelined({part(links.expert, networkBytes), part(links.nvlink, nvlinkBytes), smCopyMs});
}

// The per-GPU dimensions of an MoE layer that its compute, collectives and memory share.
struct MoeDims {
  double x = 0;       // tokens of this GPU
  double h = 0;       // hidden size
  double ep = 1;      // expert-parallel ranks
  double etp = 1;     // expert tensor-parallel ranks
  double local = 1;   // experts of this GPU
  double act = 0;     // FC1 outputs per row (gate and up)
  double ffn = 0;     // FC2 inputs per row
  double rows = 0;    // routed copies this GPU's experts process
  double copies = 0;  // routed copies of this GPU's tokens
  double sendBytes = 0;
};

MoeDims moeDims(const MoeShape& s) {
  MoeDims d;
  d.x = s.tokens;
  d.h = s.hidden;
  d.ep = std::max(1.0, s.ep);
  d.etp = std::max(1.0, s.etp);
  d.local = std::max(1.0, s.experts / d.ep);
  d.act = (s.swiglu ? 2.0 : 1.0) * s.expertFfn / d.etp;
  d.ffn = s.expertFfn / d.etp;
  // Routed copies this GPU's experts process: its ETP group gathers the copies routed to its
  // experts from all EP ranks, x·top_k per GPU on average, `load` times that on the busiest rank
  // (or the capacity every expert is padded to).
  d.rows = d.etp * d.x * s.topK * s.load;
  d.copies = d.x * s.topK;
  d.sendBytes = kBf16 * d.h * d.copies * s.load;
  return d;
}

// Collectives: dispatch and combine all-to-alls over the EP ranks (ETP·EP consecutive GPUs, ETP
// apart), the ETP all-gather after the dispatch and reduce-scatter before the combine (NCCL
// ring: (n−1)/n of the gathered bytes, (n−1) steps), and the dispatcher's wait on the host.
void addMoeCollectives(const GpuSpec& gpu, const CollectiveLinks& links, const MoeShape& s, const MoeDims& d,
                       MoeCosts& c) {
  const TokenRouting routing{s.topK, s.routerGroups, s.routerGroupTopK};
  double a2a = 0;
  if (s.flexDispatcher) {
    // Dispatch at HybridEP's default chunk, combine at the recipe's; one a2aMs for both (their mean).
    auto flex = [&](double chunk) {
      return flexAllToAllMs(links, static_cast<std::int64_t>(d.ep), static_cast<std::int64_t>(d.etp), d.x * s.load,
                            routing, kBf16 * d.h, s.flexBackend, s.commSms, chunk);
    };
    a2a = 0.5 * (flex(kHybridEpDefaultChunkTokens) + flex(s.combineChunkTokens));
    // The flex dispatcher's libraries size what they receive on the host inside the dispatch, after
    // the kernel that counts it, so nothing covers the round trip: DeepEP's normal dispatch returns
    // the received counts as a host list (Megatron-LM d98e8a64 fused_a2a.py, FusedDispatch), HybridEP
    // without a rank budget waits for its counts in pinned memory (`non_blocking` only with
    // num_permuted_tokens; token_dispatcher.py _HybridEPManager.setup_metadata).
    if (d.ep > 1 && s.dispatchWaitsOnHost) c.hostSyncMs = kMeasuredD2hRoundTripMs;
  } else {
    a2a = allToAllOnLinksMs(links, links.expert, static_cast<std::int64_t>(d.ep), static_cast<std::int64_t>(d.etp),
                            d.sendBytes);
    // The all-to-all dispatcher needs its split sizes on the host: it copies the token counts to
    // the host before the permutation and waits for them before the all-to-all (token_dispatcher.py:
    // cuda_dtoh_point "before_permutation_1", cuda_sync_point "before_ep_alltoall"), so the GPU idles
    // for whatever of the round trip the permutation does not cover. With moe_preprocess in a CUDA
    // graph the copy moves to the all-to-all itself (cuda_dtoh_point "before_ep_alltoall") and the
    // whole round trip shows. Dropping and padding to capacity sizes everything statically: no wait
    // ("no_sync").
    if (d.ep > 1 && s.dispatchWaitsOnHost) {
      const double covered = s.graphedPreprocess ? 0.0 : memoryMs(gpu, kBf16 * d.h * (d.x + d.copies));
      c.hostSyncMs = std::max(0.0, kMeasuredD2hRoundTripMs - covered);
    }
  }
  double etpMs = 0;
  if (d.etp > 1) {
    const CollectiveLink link = linkForSpan(links, static_cast<std::int64_t>(d.etp), s.tensor);
    const double gathered = kBf16 * d.h * d.rows;
    etpMs = (link.bandwidthGBps > 0 ? (d.etp - 1.0) / d.etp * gathered / (link.bandwidthGBps * 1e6) : 0.0) +
            (d.etp - 1.0) * link.latencyUs / 1000.0;
  }
  c.dispatchMs = a2a + etpMs;
}

// Memory held from F to B: router logits and probabilities (fp32), routing indices and weights,
// FC1's input (in the format wgrad reads), the activation's input (bf16) and FC2's input. The
// router's probabilities are applied inside the experts' activation (Megatron-Core TEGroupedMLP
// with permuted probs: weighted SwiGLU), so the unpermute keeps nothing.
void addMoeMemory(const MoeShape& s, const MoeDims& d, MoeCosts& c) {
  const Precision p = s.precision;
  // A rank budget fixes the experts' shapes at the budget's rows; the paged stash keeps what the
  // backward needs in pages sized at its factor of a balanced router's rows (Megatron-LM d98e8a64
  // docs/user-guide/features/paged_stash.md: both factors are multiples of the balanced case).
  const double balancedRows = d.etp * d.x * s.topK;
  const double budgetRows = s.rankCapacityFactor > 0 ? std::max(d.rows, balancedRows * s.rankCapacityFactor) : d.rows;
  const double savedRows = s.pagedStashFactor > 0 ? std::max(d.rows, balancedRows * s.pagedStashFactor) : budgetRows;
  const double lp = isLowPrecision(p) ? operandBytes(p) : kBf16;
  const double fc1Input = savedRows * lp * d.h;
  c.actOutputBytes = savedRows * lp * d.ffn;
  c.fc1InputBytes = fc1Input;
  c.actInputBytes = savedRows * kBf16 * d.act;
  c.weightGradBytes = fc1Input + c.actOutputBytes;
  c.activationBytes =
      2.0 * kFp32 * d.x * s.experts + d.copies * (8.0 + kFp32) + fc1Input + c.actInputBytes + c.actOutputBytes;
  // The all-to-all's send and receive copies (the receive side at the budget) and, with ETP, the
  // gathered rows.
  const double receiveBytes =
      s.rankCapacityFactor > 0 ? std::max(d.sendBytes, kBf16 * d.h * budgetRows / d.etp) : d.sendBytes;
  c.bufferBytes = d.sendBytes + receiveBytes + (d.etp > 1 ? kBf16 * d.h * d.rows : 0.0);
}

MoeCosts moeCosts(const GpuSpec& gpu, const CollectiveLinks& links, const MoeShape& s) {
  MoeCosts c;
  const Precision p = s.precision;
  const MoeDims d = moeDims(s);
  const double x = d.x;
  const double h = d.h;
  const double local = d.local;
  const double act = d.act;
  const double ffn = d.ffn;
  const double rows = d.rows;
  const double m = rows / local;
  c.routedTokensPerExpert = m;

  // --- router: a GEMM into the expert logits, softmax/sigmoid and top-k in fp32 ---
  const double routerFwd =
      groupedGemmMs(gpu, Precision::Bf16, 1, x, s.experts, h, kBf16) + memoryMs(gpu, 3.0 * kFp32 * x * s.experts);
  const double routerBwdInput =
      groupedGemmMs(gpu, Precision::Bf16, 1, x, h, s.experts, kBf16) + memoryMs(gpu, 3.0 * kFp32 * x * s.experts);
  const double routerBwdWeight = groupedGemmMs(gpu, Precision::Bf16, 1, h, s.experts, x, s.wgradOutputBytes);

  // --- permutation around the dispatch (permutationMs), each pass ---
  const double permuteMs = permutationMs(gpu, s, x, rows);
  c.permuteMs = permuteMs;

  // --- expert GEMMs (expertGemmMs: as measured on the GPU, or the grouped kernel model) ---
  auto experts = [&](double gm, double gn, double gk, bool wgrad, double out) {
    return expertGemmMs(gpu, p, ExpertGemm{local, gm, gn, gk, wgrad, h, ffn}, out);
  };
  const double fc1 = experts(m, act, h, false, kBf16);
  const double fc2 = experts(m, h, ffn, false, kBf16);
  const double fc1Dgrad = experts(m, h, act, false, kBf16);
  const double fc2Dgrad = experts(m, ffn, h, false, kBf16);
  const double fc1Wgrad = experts(h, act, m, true, s.wgradOutputBytes);
  const double fc2Wgrad = experts(ffn, h, m, true, s.wgradOutputBytes);
  // Activation (SwiGLU reads gate and up, writes one; GELU reads and writes one), bf16.
  c.expertActMs = memoryMs(gpu, rows * (s.swiglu ? 6.0 : 4.0) * ffn);
  // Transformer Engine's casts of the expert GEMMs' inputs and output gradients (low precision).
  double castFwd = 0, castBwd = 0;
  if (isLowPrecision(p)) {
    const double perValue = lowPrecisionCastBytes(gpu, p);
    castFwd = memoryMs(gpu, perValue * rows * (h + ffn));
    castBwd = memoryMs(gpu, perValue * rows * (h + act));
  }
  c.expertGemmForwardMs = fc1 + fc2;
  c.forwardMs = routerFwd + permuteMs + fc1 + fc2 + c.expertActMs + castFwd;
  c.backwardInputMs = routerBwdInput + permuteMs + fc1Dgrad + fc2Dgrad + 2.0 * c.expertActMs + castBwd;
  c.backwardWeightMs = routerBwdWeight + fc1Wgrad + fc2Wgrad;

  addMoeCollectives(gpu, links, s, d, c);
  addMoeMemory(s, d, c);

  // --- parameters: the router (replicated) and this GPU's shards of its experts ---
  c.expertParams = local * (act + ffn) * h;
  c.linearParams = c.expertParams;
  c.localParams = h * s.experts + c.expertParams;
  return c;
}

MoeCommExposure moeCommExposure(const MoeOverlapWindows& w, const Parallelism& parallel) {
  MoeCommExposure e;
  auto add = [](CommShare& into, const CommShare& part) {
    into.exposedMs += part.exposedMs;
    into.hiddenMs += part.hiddenMs;
  };
  if (parallel.moeA2aOverlap) {
    // One microbatch's forward and another's backward of this layer run as a pair of streams cut
    // into attention, dispatch, MLP and combine chunks, each communication chunk of one beside a
    // compute chunk of the other (DeepSeek-V3 §3.2.1, Fig. 4; Megatron-Core's combined 1F1B
    // schedule): [attention F ‖ combine B], [dispatch F ‖ MLP B], [MLP F ‖ dispatch B],
    // [combine F ‖ attention B].
    add(e.backward, hiddenBeside(w.a2aMs, w.attentionForwardMs, w.commSmShare, w.overlapEfficiency));
    add(e.forward, hiddenBeside(w.a2aMs, w.mlpBackwardMs, w.commSmShare, w.overlapEfficiency));
    add(e.backward, hiddenBeside(w.a2aMs, w.mlpForwardMs, w.commSmShare, w.overlapEfficiency));
    add(e.forward, hiddenBeside(w.a2aMs, w.attentionBackwardMs, w.commSmShare, w.overlapEfficiency));
    return e;
  }
  if (parallel.moeSharedExpertOverlap) {
    // The shared experts' FC1 runs beside the dispatch and their FC2 beside the combine.
    for (int i = 0; i < 2; ++i) {
      add(e.forward, hiddenBeside(w.a2aMs, w.sharedForwardMs / 2.0, w.commSmShare, w.overlapEfficiency));
      add(e.backward, hiddenBeside(w.a2aMs, w.sharedBackwardMs / 2.0, w.commSmShare, w.overlapEfficiency));
    }
    return e;
  }
  e.forward.exposedMs = 2.0 * w.a2aMs;
  e.backward.exposedMs = 2.0 * w.a2aMs;
  return e;
}

}  // namespace pipestudio::costparts

namespace pipestudio {

double epOverlapEfficiency(const GpuSpec& gpu) {
  return gpu.epOverlapEfficiency > 0 ? gpu.epOverlapEfficiency : kMeasuredEpOverlapEfficiency;
}

double besideSpanMs(double commMs, double computeMs, double smShare, double efficiency) {
  const double comm = std::max(0.0, commMs), compute = std::max(0.0, computeMs);
  // Compute C beside a collective M that holds a share f of the SMs runs at 1 − f while M runs:
  // it finishes inside M when C ≤ (1 − f)·M (the pair takes M), else the pair takes
  // M + (C − (1 − f)·M) = C + f·M. DeepSeek-V3 §3.2.1 reserves 20 of the H800's 132 SMs for its
  // all-to-alls for this reason.
  const double onFreeSms = compute + std::clamp(smShare, 0.0, 1.0) * comm;
  // The kernels slowing each other while they run together (kMeasuredEpOverlapEfficiency).
  const double contended = std::max(comm, compute) + (1.0 - std::clamp(efficiency, 0.0, 1.0)) * std::min(comm, compute);
  return std::max({comm, onFreeSms, contended});
}

double moeCommSmShare(const GpuSpec& gpu, const Parallelism& parallel, bool acrossDomains) {
  if (gpu.smCount <= 0) return 0.0;
  return std::min(1.0, static_cast<double>(parallel.moeCommSmsOrDefault(acrossDomains)) / gpu.smCount);
}

}  // namespace pipestudio
