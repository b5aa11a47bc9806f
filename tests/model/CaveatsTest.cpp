// What the planner says it leaves out (Caveats.hpp): the notes beside a prediction, for the
// recipes and models whose published runs differ from it (docs/fidelity.md, "Every release").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipestudio/model/Caveats.hpp"

namespace pipestudio {
namespace {

// One trainable component of `blocks` transformer layers shaped like Qwen3-30B-A3B's (or dense).
ModelSpec blocksModel(bool moe, int blocks = 2) {
  TransformerShape t;
  t.hidden = 2048;
  t.seq = 4096;
  t.heads = 32;
  t.kvHeads = 4;
  t.mlp = MlpKind::SwiGlu;
  if (moe) {
    t.experts = 128;
    t.topK = 8;
    t.expertFfn = 768;
  }
  Component backbone;
  backbone.name = "backbone";
  for (int i = 0; i < blocks; ++i) {
    Layer layer;
    layer.name = "block." + std::to_string(i);
    layer.kind = "transformer";
    layer.transformer = t;
    backbone.layers.push_back(layer);
  }
  ModelSpec model;
  model.name = moe ? "moe" : "dense";
  model.components.push_back(backbone);
  return model;
}

bool mentions(const std::vector<std::string>& notes, const std::string& text) {
  for (const std::string& note : notes)
    if (note.find(text) != std::string::npos) return true;
  return false;
}

TEST(Caveats, TheDispatchWaitsOnTheHostUnlessItsShapesAreStatic) {
  Parallelism p;
  EXPECT_TRUE(moeDispatchWaitsOnHost(p, false));  // the all-to-all dispatcher: its split sizes
  EXPECT_FALSE(moeDispatchWaitsOnHost(p, true));  // dropping and padding to capacity: "no_sync"
  p.moeRankCapacityFactor = 1.5;
  EXPECT_TRUE(moeDispatchWaitsOnHost(p, false));  // a budget is HybridEP's; alltoall still copies its counts
  p.moeFlexDispatcher = true;
  p.moeFlexBackend = FlexBackend::DeepEp;
  EXPECT_TRUE(moeDispatchWaitsOnHost(p, true));  // DeepEP returns its received counts as a host list
  p.moeFlexBackend = FlexBackend::HybridEp;
  EXPECT_FALSE(moeDispatchWaitsOnHost(p, false));
  p.moeRankCapacityFactor.reset();
  EXPECT_TRUE(moeDispatchWaitsOnHost(p, false));
}

TEST(Caveats, TheRecipesCapacityFactorOverridesTheLayers) {
  TransformerShape layer;
  layer.experts = 8;
  Parallelism p;
  EXPECT_FALSE(moeDropsAndPads(layer, p));
  layer.capacityFactor = 1.0;
  EXPECT_TRUE(moeDropsAndPads(layer, p));
  p.moeCapacityFactor = 0.0;  // dropless for every layer
  EXPECT_FALSE(moeDropsAndPads(layer, p));
  layer.capacityFactor.reset();
  p.moeCapacityFactor = 1.25;
  EXPECT_TRUE(moeDropsAndPads(layer, p));
}

TEST(Caveats, ADenseModelHasNone) { EXPECT_TRUE(costModelCaveats(blocksModel(false), Parallelism{}).empty()); }

TEST(Caveats, DroplessMoeThatWaitsOnTheHostOutsideAFullIterationGraphIsNoted) {
  const ModelSpec moe = blocksModel(true);
  Parallelism eager;
  eager.expert = 8;
  const auto notes = costModelCaveats(moe, eager);
  ASSERT_EQ(notes.size(), 1U);
  EXPECT_TRUE(mentions(notes, "host time is not in this prediction"));
  EXPECT_TRUE(mentions(notes, "docs/fidelity.md"));
  // TE-scoped graphs still wait in every dispatch.
  Parallelism scoped = eager;
  scoped.cudaGraphImpl = CudaGraphImpl::TransformerEngine;
  EXPECT_EQ(costModelCaveats(moe, scoped).size(), 1U);
  // The sync-free recipe the published runs match: HybridEP with a rank budget in one graph.
  Parallelism syncFree = eager;
  syncFree.moeFlexDispatcher = true;
  syncFree.moeFlexBackend = FlexBackend::HybridEp;
  syncFree.moeRankCapacityFactor = 1.5;
  syncFree.cudaGraphImpl = CudaGraphImpl::FullIteration;
  EXPECT_TRUE(costModelCaveats(moe, syncFree).empty());
  // A rank budget without the graph waits for nothing either: no published run says more.
  syncFree.cudaGraphImpl = CudaGraphImpl::None;
  EXPECT_TRUE(costModelCaveats(moe, syncFree).empty());
}

TEST(Caveats, TokenDroppingHasStaticShapesAndNoWait) {
  ModelSpec dropping = blocksModel(true);
  for (Layer& layer : dropping.components[0].layers) layer.transformer->capacityFactor = 1.0;
  EXPECT_TRUE(costModelCaveats(dropping, Parallelism{}).empty());
  // The recipe's capacity factor overrides every layer's: 0 is dropless again, more drops tokens.
  Parallelism recipe;
  recipe.moeCapacityFactor = 0.0;
  EXPECT_EQ(costModelCaveats(dropping, recipe).size(), 1U);
  recipe.moeCapacityFactor = 1.25;
  EXPECT_TRUE(costModelCaveats(blocksModel(true), recipe).empty());
  // DeepEP learns its received counts on the host whatever the shapes.
  recipe.moeFlexDispatcher = true;
  EXPECT_EQ(costModelCaveats(blocksModel(true), recipe).size(), 1U);
}

TEST(Caveats, FrozenExpertsAreNotTrainedAndNotNoted) {
  ModelSpec frozen = blocksModel(true);
  frozen.components[0].trainable = false;
  EXPECT_TRUE(costModelCaveats(frozen, Parallelism{}).empty());
}

TEST(Caveats, AttentionSinksSayWhatGptOssRunsMeasured) {
  ModelSpec sinks = blocksModel(false);
  sinks.components[0].layers[1].transformer->architecture.attentionSinks = true;
  const auto notes = costModelCaveats(sinks, Parallelism{});
  ASSERT_EQ(notes.size(), 1U);
  EXPECT_TRUE(mentions(notes, "attention sinks (GPT-OSS) are not timed"));
  EXPECT_TRUE(mentions(notes, "1.24× to 1.81×"));
}

}  // namespace
}  // namespace pipestudio
