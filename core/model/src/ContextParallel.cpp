// Context parallelism's key/value exchange as Transformer Engine runs it (issue 26;
// transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, Megatron
// --cp-comm-type), with the attention kernels it splits the core into (AttentionKernel.cpp).
//
//  - p2p (AttnFuncWithCPAndKVP2P; Liu et al. 2023, ring attention): the sequence is cut into 2·C
//    chunks and rank r holds chunks r and 2C−1−r, which balances causal work. In C steps each rank
//    attends its queries to one rank's keys and values while sending its current K/V to the next
//    rank and receiving the following one: step 0 is the causal diagonal (its own chunks), every
//    other step a full block of half the local size (either half the queries against all local
//    keys or all queries against half the keys). A transfer is hidden under the step that runs
//    beside it; what it exceeds shows. After each step the partial outputs are merged by their
//    log-sum-exp (a memory-bound correction pass). Backward runs the ring again, carrying the
//    K/V chunk and the gradient dK/dV accumulated for it (twice the bytes).
//  - a2a (AttnFuncWithCPAndQKVOA2A; Jacobs et al. 2023, DeepSpeed-Ulysses): an all-to-all turns
//    Q, K, V from sequence-split to head-split before the kernel, one turns the output back after
//    it (backward: dO, then dQ, dK, dV); the kernel runs on the whole sequence with heads / C
//    heads. TE does not overlap these all-to-alls with the kernel.
//  - a2a+p2p (hierarchical, --hierarchical-context-parallel-sizes): all-to-all inside groups of
//    C_a ranks that share an NVLink domain, the p2p ring across the C / C_a groups.

#include <algorithm>
#include <cmath>

#include "CostParts.hpp"

namespace pipestudio::costparts {
namespace {

constexpr double kBf16 = 2.0;

double transferMs(const CollectiveLink& link, double bytes) {
  const double perMs = link.bandwidthGBps * 1e6;
  return (perMs > 0 ? bytes / perMs : 0.0) + link.latencyUs / 1000.0;
}

// The p2p ring over `ring` ranks on `link` for one GPU holding `tokens` queries and keys of
// `shape` (its heads): kernels, corrections and the exposed/hidden exchange.
ContextAttention ringAttention(const GpuSpec& gpu, const CollectiveLink& link, double ring, double tokens,
                               const AttentionCoreShape& shape, double heads, double kvHeads) {
  ContextAttention out;
  const double bh = shape.batch * heads;
  FlashProblem diagonal{bh, tokens, tokens, shape.qkDim, shape.vDim, shape.causal, shape.window};
  const FlashTimes first = flashAttention(gpu, diagonal, shape.backend);
  // Off-diagonal steps see whole blocks (no mask) of half the local size.
  FlashProblem block{bh, tokens, shape.causal ? tokens / 2.0 : tokens, shape.qkDim, shape.vDim, false, 0.0};
  const FlashTimes other = ring > 1 ? flashAttention(gpu, block, shape.backend) : FlashTimes{};
  const double steps = ring - 1.0;
  // Merging each later step's partial output into the fp32 accumulator: read its bf16 output and
  // fp32 log-sum-exp, read and write the accumulator (TE's out correction); backward accumulates
  // dQ in fp32 and dK/dV for the chunk in hand.
  const double outValues = shape.batch * tokens * heads * shape.vDim;
  const double qValues = shape.batch * tokens * heads * shape.qkDim;
  const double kvValues = shape.batch * tokens * kvHeads * (shape.qkDim + shape.vDim);
  const double correctFwdMs = memoryMs(gpu, (kBf16 + 8.0) * outValues);
  const double correctBwdMs = memoryMs(gpu, 8.0 * qValues + 8.0 * kvValues);
  out.forwardMs = first.forwardMs + steps * (other.forwardMs + correctFwdMs);
  out.backwardMs = first.backwardMs + steps * (other.backwardMs + correctBwdMs);
  if (ring <= 1) return out;
  const double kvBytes = kBf16 * kvValues;
  const double sendFwd = transferMs(link, kvBytes);
  const double sendBwd = transferMs(link, 2.0 * kvBytes);
  // Transfer j (1 ≤ j ≤ C−1) runs beside step j−1: the diagonal, then the blocks.
  const CommShare f0 = hiddenUnder(sendFwd, first.forwardMs);
  const CommShare f1 = hiddenUnder(sendFwd, other.forwardMs + correctFwdMs);
  const CommShare b0 = hiddenUnder(sendBwd, first.backwardMs);
  const CommShare b1 = hiddenUnder(sendBwd, other.backwardMs + correctBwdMs);
  out.forwardComm = {f0.exposedMs + (steps - 1.0) * f1.exposedMs, f0.hiddenMs + (steps - 1.0) * f1.hiddenMs};
  out.backwardComm = {b0.exposedMs + (steps - 1.0) * b1.exposedMs, b0.hiddenMs + (steps - 1.0) * b1.hiddenMs};
  // The chunk being sent and the one arriving (backward: with their gradients).
  out.bufferBytes = 2.0 * 2.0 * kvBytes;
  return out;
}

}  // namespace

int hierarchicalA2aRanks(std::int64_t domainGpus, int tensor, int context, double heads, double kvHeads) {
  const int T = std::max(1, tensor);
  for (int ca = std::max(1, context); ca > 1; --ca) {
    if (context % ca != 0) continue;
    if (static_cast<std::int64_t>(T) * ca > domainGpus) continue;
    if (std::fmod(heads, ca) != 0.0 || std::fmod(kvHeads, ca) != 0.0) continue;
    return ca;
  }
  return 1;
}

ContextAttention contextAttention(const GpuSpec& gpu, const CollectiveLinks& links, const Parallelism& parallel,
                                  const AttentionCoreShape& shape) {
  const int C = std::max(1, parallel.context);
  const double tokens = shape.seq / C;  // this rank's queries, keys and values
  if (C == 1) return ringAttention(gpu, links.context, 1.0, shape.seq, shape, shape.heads, shape.kvHeads);
  int ca = 1;
  switch (parallel.cpCommType) {
    case CpCommType::P2p:
      ca = 1;
      break;
    case CpCommType::A2a:
      ca = C;
      break;
    case CpCommType::A2aP2p:
      ca = hierarchicalA2aRanks(links.domainGpus, parallel.tensor, C, shape.heads, shape.kvHeads);
      break;
  }
  const double ring = static_cast<double>(C) / ca;
  // After the all-to-all each rank holds C_a·tokens of the sequence for heads / C_a heads; the
  // ring crosses the C / C_a groups, T·C_a GPUs apart: the whole context group's span.
  ContextAttention out =
      ringAttention(gpu, links.context, ring, tokens * ca, shape, shape.heads / ca, shape.kvHeads / ca);
  out.a2aRanks = ca;
  if (ca > 1) {
    // Forward: Q, K, V in and the output back; backward: dO in, dQ, dK, dV back. Exposed.
    const double values =
        shape.batch * tokens *
        (shape.heads * shape.qkDim + shape.kvHeads * (shape.qkDim + shape.vDim) + shape.heads * shape.vDim);
    const std::int64_t T = std::max(1, parallel.tensor);
    const CollectiveLink group = ca == C ? links.context : linkForSpan(links, T * ca, parallel.tensor);
    const double a2aMs = allToAllOnLinksMs(links, group, ca, T, kBf16 * values);
    out.forwardComm.exposedMs += a2aMs;
    out.backwardComm.exposedMs += a2aMs;
    out.bufferBytes = std::max(out.bufferBytes, kBf16 * values);
  }
  return out;
}

}  // namespace pipestudio::costparts

namespace pipestudio {

int hierarchicalContextA2aRanks(const ClusterSpec& cluster, const Parallelism& parallel,
                                const TransformerShape& shape) {
  const int T = std::max(1, parallel.tensor);
  const double heads = static_cast<double>(std::max<std::int64_t>(1, shape.heads)) / T;
  // Multi-head latent attention has a key and value per head.
  const double kvHeads = static_cast<double>(shape.mla ? shape.heads : shape.kvHeadsOrHeads()) / T;
  return costparts::hierarchicalA2aRanks(collectiveLinks(cluster, parallel).domainGpus, T,
                                         std::max(1, parallel.context), heads, kvHeads);
}

}  // namespace pipestudio
