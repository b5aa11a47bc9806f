#pragma once
// Round-number inputs the cost-model tests compute their expected values from by hand.

#include <cstdint>

#include "pipestudio/model/Cluster.hpp"
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

/// A GPT block of hidden h, sequence s, heads a: GELU MLP of 4h, multi-head attention,
/// FlashAttention, dropout.
inline Layer gptBlock(std::int64_t h, std::int64_t s, std::int64_t a) {
  Layer l;
  l.name = "block";
  l.kind = "transformer";
  TransformerShape t;
  t.hidden = h;
  t.seq = s;
  t.heads = a;
  l.transformer = t;
  return l;
}

}  // namespace pipestudio::test
