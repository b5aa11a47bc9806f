// Memory as the recipes run (issue 42): the breakdown's parts, and the waits of activation
// offloading's copies, each against numbers worked out by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"

namespace pipestudio {
namespace {

MemoryBreakdown everyPart() {
  MemoryBreakdown m;
  std::int64_t v = 1;
  for (const MemoryPart& part : memoryParts()) m.*part.bytes = (v *= 3);  // 3, 9, 27, …: sums are unique
  return m;
}

// Every field is a line, listed once; the allocated lines add up to the peak, the kept-back ones
// (context, fragmentation) to the margin.
TEST(MemoryParts, AllocatedAndKeptBackAddUp) {
  const MemoryBreakdown m = everyPart();
  std::int64_t allocated = 0, keptBack = 0;
  for (const MemoryPart& part : memoryParts()) (part.keptBack ? keptBack : allocated) += m.*part.bytes;
  EXPECT_EQ(m.allocatedBytes(), allocated);
  EXPECT_EQ(m.marginBytes(), keptBack);
  EXPECT_EQ(m.marginBytes(), m.contextBytes + m.fragmentationBytes);
  EXPECT_EQ(m.totalBytes(), allocated + keptBack);
  // 3^11 + 3^12: the last two lines are the kept-back ones.
  EXPECT_EQ(keptBack, 177147 + 531441);
  EXPECT_EQ(largestMemoryPart(m).jsonKey, "cuda_graph_bytes");  // the largest allocated line
}

TEST(MemoryParts, PlanDocumentWritesEveryLine) {
  const MemoryBreakdown m = everyPart();
  const Json j = memoryBreakdownJson(m);
  for (const MemoryPart& part : memoryParts()) {
    ASSERT_TRUE(j.contains(std::string(part.jsonKey))) << part.jsonKey;
    EXPECT_EQ(j[std::string(part.jsonKey)].get<std::int64_t>(), m.*part.bytes) << part.jsonKey;
  }
  EXPECT_EQ(j["margin_bytes"].get<std::int64_t>(), m.marginBytes());
}

TEST(MemoryParts, MarginIsContextAndFragmentation) {
  GpuSpec gpu;
  gpu.memoryGib = 80;
  EXPECT_EQ(memoryContextBytes(), std::int64_t{1} << 30);
  EXPECT_EQ(memoryFragmentationBytes(gpu), static_cast<std::int64_t>(0.02 * 80.0 * (1 << 30)));
  EXPECT_EQ(memoryMarginBytes(gpu), memoryContextBytes() + memoryFragmentationBytes(gpu));
}

// The waits offloadWaits gives a stage's layers under the given leads, against the hand-worked ones.
void expectWaits(const std::vector<OffloadedLayer>& layers, int forwardLead, int backwardLead, bool preloadLast,
                 double forwardMs, double backwardMs) {
  const OffloadWaits w = offloadWaits(layers, forwardLead, backwardLead, preloadLast);
  EXPECT_DOUBLE_EQ(w.forwardMs, forwardMs);
  EXPECT_DOUBLE_EQ(w.backwardMs, backwardMs);
}

// Transformer Engine's default offload scheduling, 4 layers of 10 ms forward and 20 ms backward,
// the first N = 2 offloaded, each copy 15 ms: layer 0's copy (10 → 25) must end before layer 2
// starts (at 20: waits 5), layer 1's (25 → 40) before layer 3 (at 35: waits 5). Backward: layer
// 1 comes back when layer 2's backward starts (20 → 35, needed at 40), layer 0 when layer 1's
// starts (40 → 55, needed at 60): no wait.
TEST(OffloadWaits, TransformerEngineLayersHiddenAndExposed) {
  expectWaits({{10, 20, 15}, {10, 20, 15}, {10, 20, 0}, {10, 20, 0}}, 2, 1, false, 10.0, 0.0);
  // Copies of 30 ms: forward copies end at 40 and 70, layers 2 and 3 wait 20 each (start 40, 70);
  // backward: layer 1 back at 50 (needed at 40: waits 10), layer 0 starts at 50 after it (ends 80,
  // needed at 70: waits 10).
  expectWaits({{10, 20, 30}, {10, 20, 30}, {10, 20, 0}, {10, 20, 0}}, 2, 1, false, 40.0, 20.0);
}

// Megatron-Core's fine-grained offloading: the forward never waits; each layer comes back while
// the layer after it runs its backward, the last one already during the previous backward.
// Copies of 30 ms against 20 ms backwards: layers 2, 1, 0 each wait 10.
TEST(OffloadWaits, FineGrainedReloadsOneLayerAhead) {
  expectWaits({{10, 20, 30}, {10, 20, 30}, {10, 20, 30}, {10, 20, 30}}, 0, 1, true, 0.0, 30.0);
  const std::vector<OffloadedLayer> fast{{10, 20, 15}, {10, 20, 15}, {10, 20, 15}, {10, 20, 15}};
  EXPECT_DOUBLE_EQ(offloadWaits(fast, 0, 1, true).backwardMs, 0.0);
}

}  // namespace
}  // namespace pipestudio
