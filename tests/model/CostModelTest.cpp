#include <gtest/gtest.h>

#include "CostFixtures.hpp"
#include "pipestudio/model/CostModel.hpp"

using namespace pipestudio;

using pipestudio::test::shapeOf;

TEST(CostModel, TransformerFlopsFollowNarayanan) {
  TransformerShape t = shapeOf(2048, 2048, 16);
  const double b = 1, s = 2048, h = 2048;
  EXPECT_DOUBLE_EQ(transformerForwardFlops(t, 1), 24 * b * s * h * h + 4 * b * s * s * h);
}

TEST(CostModel, MeasuredCostsWinOverShape) {
  Layer l;
  l.kind = "transformer";
  l.transformer = shapeOf(1024, 1024, 16);
  l.forwardMs = 3.0;
  GpuSpec gpu{"x", 100, 80, 0.5};
  const LayerCosts c = layerCosts(l, gpu, 1, true);
  EXPECT_DOUBLE_EQ(c.forwardMs, 3.0);
  EXPECT_GT(c.backwardInputMs, 0);
  // 12·h² parameters plus two norms of h, 2 bytes each.
  EXPECT_EQ(c.parameterBytes, 2 * (12 * 1024 * 1024 + 2 * 1024));
  // FlashAttention (the default): s·b·h·34 plus the fp32 log-sum-exp per head and token.
  EXPECT_EQ(c.activationBytes, static_cast<std::int64_t>(1024.0 * 1024 * 34 + 4.0 * 16 * 1024));
}

TEST(CostModel, FrozenLayersHaveNoBackward) {
  Layer l;
  l.flopsForward = 1e12;
  l.params = 1000;
  GpuSpec gpu{"x", 100, 80, 0.5};
  const LayerCosts c = layerCosts(l, gpu, 2, false);
  EXPECT_NEAR(c.forwardMs, 2e12 / 50e12 * 1000, 1e-9);
  EXPECT_EQ(c.backwardInputMs, 0);
  EXPECT_EQ(c.backwardWeightMs, 0);
}

TEST(CostModel, StaticMemoryPerParameter) {
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(OptimizerSpec{false}, 8), 18.0);
  EXPECT_DOUBLE_EQ(staticBytesPerParameter(OptimizerSpec{true}, 4), 9.0);
}
