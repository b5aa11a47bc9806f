// The CUDA backends' per-stage GEMM list (executor/src/cuda: buildStageWork), without a GPU:
// under an FP8 recipe the four block GEMMs of a transformer layer run as FP8 (cuBLASLt, E4M3)
// and the logits GEMM stays bf16, as in Megatron-LM's output layer (the planner costs it so too).
#include <gtest/gtest.h>

#if defined(PIPESTUDIO_EXECUTOR_CUDA)
#include "cuda/Cuda.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "support/ExpectedMatchers.hpp"

namespace pipestudio::exec::cuda {
namespace {

Plan gptPlan(Precision precision) {
  auto plan = loadPlan(std::string(PIPESTUDIO_TEST_DATA) + "/../gpu/gpt-small-1dev.plan.json");
  EXPECT_THAT(plan, ::pipestudio::test::HasValue());
  Plan p = plan ? *plan : Plan{};
  p.config.precision = precision;
  return p;
}

TEST(StageWork, AnFp8RecipeRunsTheBlockGemmsAsFp8AndTheLogitsAsBf16) {
  const auto work = buildStageWork(gptPlan(Precision::Fp8));
  ASSERT_EQ(work.size(), 1U);
  const auto& gemms = work[0].forward.gemms;
  ASSERT_EQ(gemms.size(), 8U * 4U + 1U) << "8 blocks of 4 GEMMs and the logits";
  for (std::size_t i = 0; i + 1 < gemms.size(); ++i) EXPECT_TRUE(gemms[i].fp8) << i;
  EXPECT_FALSE(gemms.back().fp8) << "lm_head";
  EXPECT_EQ(gemms.back().n, 50257) << "the vocabulary";
  for (const auto* pass : {&work[0].backwardInput, &work[0].backwardWeight}) {
    EXPECT_EQ(pass->gemms.size(), gemms.size());
    EXPECT_TRUE(pass->gemms.front().fp8);
  }
}

TEST(StageWork, Bf16AndFp16RecipesRunNoFp8Gemm) {
  for (const Precision p : {Precision::Bf16, Precision::Fp16}) {
    const auto work = buildStageWork(gptPlan(p));
    for (const auto& g : work[0].forward.gemms) EXPECT_FALSE(g.fp8);
  }
}

}  // namespace
}  // namespace pipestudio::exec::cuda
#endif
