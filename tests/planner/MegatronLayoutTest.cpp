// Planning a given Megatron-LM layout (issue 46): `plan --megatron-layout`. NVIDIA pins uneven
// layouts in its recipes; Megatron-Bridge's Llama-3-70B H100 FP8 recipe runs PP 8 × VP 5 with
// `Et*2|(t*2|)*34,t*3|(t*2|)*3,tL`. The plan takes exactly that split, and what the export writes
// for it reads back to the same split.
#include <gtest/gtest.h>

#include <algorithm>

#include "PlannerFixtures.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

ModelSpec bundled(const std::string& name) {
  auto model = loadModel(std::string(PIPESTUDIO_RESOURCES) + "/models/" + name + ".json");
  EXPECT_THAT(model, HasValue());
  return model ? *model : ModelSpec{};
}

std::vector<int> layersPerStage(const Plan& plan) {
  std::vector<int> out(plan.virtualStages.size());
  for (const VirtualStage& vs : plan.virtualStages) {
    out[static_cast<std::size_t>(vs.id)] = vs.lastLayer - vs.firstLayer + 1;
  }
  return out;
}

}  // namespace

TEST(MegatronLayout, TheRecipesUnevenLayoutIsPlannedExactlyAndExportsBack) {
  const ModelSpec model = bundled("llama3-70b");
  const std::string layout = "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL";
  auto split = megatronLayoutSplit(model, layout);
  ASSERT_THAT(split, HasValue());
  ASSERT_EQ(split->size(), 40U);  // PP 8 × VP 5
  // Stage 0 holds the embedding and two layers, stage 35 three, stage 39 one and the head.
  EXPECT_EQ((*split)[0], 3);
  EXPECT_EQ((*split)[35], 3);
  EXPECT_EQ((*split)[39], 2);
  EXPECT_EQ(std::count((*split).begin(), (*split).end(), 2), 38);
  PlanRequest r = test::request(model, test::freeCluster(64, 100, 1), "interleaved-1f1b", 8, 16, 5);
  r.config.partition = "layout";
  r.config.layout = layout;
  r.config.parallel.tensor = 4;
  r.config.parallel.sequenceParallel = true;
  r.config.parallel.recompute = Recompute::Full;
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(layersPerStage(*plan), *split);
  // GPTModel's export writes the plan's split as a layout Megatron reads to the same stages.
  auto gpt = megatronExport(*plan, {MegatronModel::Gpt});
  ASSERT_THAT(gpt, HasValue());
  auto back = megatronLayoutSplit(model, gpt->layout);
  ASSERT_THAT(back, HasValue());
  EXPECT_EQ(*back, *split) << gpt->layout;
  // HybridModel's pattern too, and planning the pattern gives the same plan.
  auto hybrid = megatronExport(*plan);
  ASSERT_THAT(hybrid, HasValue());
  auto fromPattern = megatronLayoutSplit(model, hybrid->hybridPattern);
  ASSERT_THAT(fromPattern, HasValue());
  EXPECT_EQ(*fromPattern, *split);
  r.config.layout = hybrid->hybridPattern;
  auto again = makePlan(r);
  ASSERT_THAT(again, HasValue());
  EXPECT_EQ(again->metrics.iterationMs, plan->metrics.iterationMs);
}

TEST(MegatronLayout, DeepSeekMtpAndMoeSymbolsMustBeTheModels) {
  const ModelSpec model = bundled("deepseek-v3-moe");
  // DeepSeek-V3's 1,024-GPU recipe layout: the embedding and a layer, 30 stages of two, then MTP
  // and the loss.
  auto split = megatronLayoutSplit(model, "Et|(t*2|)*30mL");
  ASSERT_THAT(split, HasValue());
  EXPECT_EQ(split->size(), 32U);
  EXPECT_EQ(split->back(), 2);  // the MTP layer and the head
  // As a hybrid pattern: three dense MLA blocks (+-) then MoE ones (+E); a dense symbol where the
  // model has experts is refused, naming the layer.
  std::string pattern = "+-+-+-";
  for (int i = 3; i < 61; ++i) pattern += i == 31 ? "|+E" : "+E";
  auto hybrid = megatronLayoutSplit(model, pattern + "/+E");
  ASSERT_THAT(hybrid, HasValue());
  EXPECT_EQ(hybrid->size(), 2U);
  auto wrong = megatronLayoutSplit(model, "+-+-+-+-" + pattern.substr(8) + "/+E");
  EXPECT_THAT(wrong, HasError("which is '+E'"));
  auto noMtp = megatronLayoutSplit(model, pattern);
  EXPECT_THAT(noMtp, HasError("0 MTP depths; the model has 1"));
}

TEST(MegatronLayout, LayoutsThatDoNotFitTheModelOrThePipelineAreRefused) {
  const ModelSpec model = bundled("llama3-8b");  // embedding, 32 decoder layers, lm_head
  const auto refusal = [&](const std::string& layout) {
    auto split = megatronLayoutSplit(model, layout);
    EXPECT_FALSE(split.hasValue()) << layout;
    return split ? std::string() : split.message();
  };
  EXPECT_NE(refusal("Et*8|t*8|t*8|t*7L").find("stage 3: 'L' where the model has layer 32 'block.31'"),
            std::string::npos);
  EXPECT_NE(refusal("Et*8|t*8|t*8|t*7").find("and the rest have no stage"), std::string::npos);
  EXPECT_NE(refusal("Et*8|t*8|t*8|t*9L").find("a decoder layer 't' where the model has layer 33"), std::string::npos);
  EXPECT_NE(refusal("|Et*16|t*16L").find("stage 0 holds no layer"), std::string::npos);
  EXPECT_NE(refusal("*-*-*|-").find(
                "'s attention and its MLP (plan --megatron-layout plans such a pattern over the blocks' halves"),
            std::string::npos);
  EXPECT_NE(refusal("Et*32L/m").find("invalid layer character '/'"), std::string::npos);
  // Four stages on two devices need two chunks each: the plan's placement is checked.
  PlanRequest r = test::request(model, test::freeCluster(8, 100, 1), "1f1b", 2, 4, 1);
  r.config.partition = "layout";
  r.config.layout = "Et*8|t*8|t*8|t*8L";
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  auto plan = makePlan(r);
  EXPECT_THAT(plan, HasError("the layout has 4 stages and the schedule 2 virtual stages"));
}

}  // namespace pipestudio
