#pragma once
// Round-number inputs the cost-model tests compute their expected values from by hand.

#include <cstdint>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/model/Model.hpp"

namespace pipestudio::test {

/// A GPU with round numbers and no shape effects (no SM count): 100 TFLOP/s bf16 peak at 50 %,
/// 1 TB/s of HBM.
inline GpuSpec roundGpu() {
  GpuSpec g;
  g.name = "test";
  g.peakTflops = 100;
  g.memoryGib = 80;
  g.efficiency = 0.5;
  g.memoryBandwidthGBps = 1000;
  return g;
}

/// Hidden, sequence and heads; every other field as TransformerShape defaults it.
inline TransformerShape shapeOf(std::int64_t hidden, std::int64_t seq, std::int64_t heads) {
  TransformerShape t;
  t.hidden = hidden;
  t.seq = seq;
  t.heads = heads;
  return t;
}

/// A GPT block of hidden h, sequence s, heads a: GELU MLP of 4h, multi-head attention,
/// FlashAttention, dropout.
inline Layer gptBlock(std::int64_t h, std::int64_t s, std::int64_t a) {
  Layer l;
  l.name = "block";
  l.kind = "transformer";
  l.transformer = shapeOf(h, s, a);
  return l;
}

/// Tensor, context and expert parallelism on NVLink-like 100 GB/s links, data parallelism on a
/// 10 GB/s network; no latency.
inline void setRoundLinks(CollectiveLinks& links) {
  links.tensor = CollectiveLink{100, 0, false};
  links.context = CollectiveLink{100, 0, false};
  links.expert = CollectiveLink{100, 0, false};
  links.data = CollectiveLink{10, 0, true};
}

/// The links a TP × DP layout gets on `cluster` (Megatron order: TP inside a node).
inline CollectiveLinks tpDpLinks(const ClusterSpec& cluster, int tensor, int data) {
  Parallelism par;
  par.tensor = tensor;
  par.data = data;
  return collectiveLinks(cluster, par);
}

}  // namespace pipestudio::test
