// Configurator and vocabulary parallelism (issue 4).
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Configurator.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Vocab.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;
using pipestudio::test::IsCancelled;

namespace pipestudio {
namespace {

std::string res(const std::string& rel) { return std::string(PIPESTUDIO_RESOURCES) + "/" + rel; }

TEST(Configure, RanksFeasibleConfigurationsAndExplainsRejections) {
  const PlanRequest request = test::bundledRequest("gpt3-1.3b", "a100-1x8-nvlink");
  ConfigureOptions options;
  options.schedules = {"1f1b", "zb-v", "dualpipe", "interleaved-1f1b", "bitpipe"};
  options.globalBatch = 64;
  auto result = configure(request.model, request.cluster, options);
  ASSERT_THAT(result, HasValue());
  ASSERT_FALSE(result->feasible.empty());
  EXPECT_EQ(result->globalBatch, 64);
  for (std::size_t i = 1; i < result->feasible.size(); ++i) {
    EXPECT_GE(result->feasible[i - 1].throughputSamplesPerS, result->feasible[i].throughputSamplesPerS);
  }
  for (const auto& c : result->feasible) {
    EXPECT_EQ(c.config.totalGpus(), 8);
    // The recipe is held fixed: every configuration trains the same global batch.
    EXPECT_EQ(static_cast<std::int64_t>(c.config.microbatches) * c.samplesPerMicrobatch * c.config.parallel.data, 64);
    EXPECT_LE(c.peakMemoryBytes + memoryMarginBytes(request.cluster.gpu), request.cluster.gpu.memoryBytes());
    EXPECT_GE(c.iterationMs, c.makespanMs);
    // At P = 1 every schedule is the same plan: only one name survives.
    if (c.config.devices == 1) {
      EXPECT_EQ(c.config.schedule, "1f1b");
    }
  }
  // BitPipe on eight devices holds four chunks each: 32 virtual stages, more than 26 layers.
  bool sawReason = false;
  for (const auto& r : result->rejected) {
    EXPECT_FALSE(r.reason.empty());
    if (r.schedule == "bitpipe" && r.pipelineDegree == 8 && r.reason.find("virtual stages") != std::string::npos) {
      sawReason = true;
    }
  }
  EXPECT_TRUE(sawReason);
}

TEST(Configure, MemoryInfeasibleFamiliesAreRejectedWithNumbers) {
  const PlanRequest request = test::bundledRequest("gpt3-175b", "a100-1x8-nvlink");
  ConfigureOptions options;
  options.schedules = {"1f1b"};
  options.globalBatch = 8;
  auto result = configure(request.model, request.cluster, options);
  ASSERT_THAT(result, HasValue());
  EXPECT_TRUE(result->feasible.empty());  // 175B does not fit on 8 × 80 GB, whatever the split
  ASSERT_FALSE(result->rejected.empty());
  for (const auto& r : result->rejected) EXPECT_NE(r.reason.find("memory"), std::string::npos) << r.reason;
}

TEST(Configure, CancelStopsTheSearch) {
  const PlanRequest request = test::bundledRequest("gpt3-1.3b", "a100-1x8-nvlink");
  std::atomic<bool> cancel{true};
  SolveControl control;
  control.cancel = &cancel;
  auto result = configure(request.model, request.cluster, {}, control);
  EXPECT_THAT(result, IsCancelled());
}

// The list is screened on short runs extended to the full microbatch count, but every
// configuration returned was simulated in full: planning it again gives the same numbers.
TEST(Configure, EveryRankedConfigurationReplaysExactly) {
  const PlanRequest request = test::bundledRequest("llama3-8b", "h100-8x8-ib");
  ConfigureOptions options;
  options.keep = 5;
  options.schedules = {"1f1b", "zb-h1", "gpipe", "interleaved-1f1b"};
  auto result = configure(request.model, request.cluster, options);
  ASSERT_THAT(result, HasValue());
  ASSERT_FALSE(result->feasible.empty());
  for (const auto& c : result->feasible) {
    PlanRequest r = request;
    r.config = c.config;
    auto plan = makePlan(r);
    ASSERT_THAT(plan, HasValue());
    EXPECT_DOUBLE_EQ(plan->metrics.iterationMs, c.iterationMs) << c.config.schedule;
    EXPECT_DOUBLE_EQ(plan->metrics.throughputSamplesPerS, c.throughputSamplesPerS);
  }
  // gpipe keeps every microbatch in flight: at 1024 samples and no recomputation it never
  // fits, however short the screening runs were.
  for (const auto& c : result->feasible) {
    EXPECT_FALSE(c.config.schedule == "gpipe" && c.config.parallel.recompute == Recompute::None &&
                 c.config.microbatches > 64)
        << c.config.microbatches;
  }
}

// A cancellation deep in the solve (fill, partition, search) comes back as a cancellation,
// whatever context the layers above add to the message.
TEST(Cancel, KindSurvivesEveryLayer) {
  for (const char* model : {"models/controlnet.json", "models/stable-diffusion-2.1.json"}) {
    for (const char* partition : {"dp", "diffusionpipe"}) {
      auto m = loadModel(res(model));
      auto c = loadCluster(res("clusters/a100-1x8-nvlink.json"));
      ASSERT_TRUE(m.hasValue() && c.hasValue());
      PlanRequest r;
      r.model = *m;
      r.cluster = *c;
      r.config.devices = 4;
      r.config.microbatches = 8;
      r.config.schedule = "1f1b";
      r.config.partition = partition;
      r.config.fill = "greedy";
      std::atomic<bool> cancel{false};
      SolveControl control;
      control.cancel = &cancel;
      int calls = 0;
      control.progress = [&](double) {
        if (++calls == 1) cancel = true;
      };
      auto plan = makePlan(r, control);
      ASSERT_FALSE(plan.hasValue()) << model << " " << partition;
      EXPECT_THAT(plan, IsCancelled()) << model << " " << partition;
    }
  }
}

TEST(Vocab, SplitsVocabularyLayersAndReducesImbalance) {
  const PlanRequest request = test::bundledRequest("gpt3-1.3b", "a100-1x8-nvlink");
  for (const char* schedule : {"1f1b", "v-half"}) {
    PlanRequest r = request;
    r.config.schedule = schedule;
    r.config.devices = 4;
    r.config.microbatches = 8;
    r.config.chunksPerDevice = std::string(schedule) == "v-half" ? 2 : 1;
    // V schedules want chunks of equal cost; uniform cannot split every layer count evenly.
    if (r.config.chunksPerDevice > 1) r.config.partition = "balanced";
    auto cmp = compareVocabParallel(r);
    ASSERT_THAT(cmp, HasValue()) << schedule;
    EXPECT_LT(cmp->vocabImbalance, cmp->baselineImbalance) << schedule;
    // Every device runs one S and one T per microbatch.
    std::vector<int> s(4, 0), t(4, 0);
    for (const Op& op : cmp->vocabParallel.ops) {
      if (op.kind == OpKind::S) ++s[static_cast<std::size_t>(op.device)];
      if (op.kind == OpKind::T) ++t[static_cast<std::size_t>(op.device)];
    }
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(s[static_cast<std::size_t>(d)], 8);
      EXPECT_EQ(t[static_cast<std::size_t>(d)], 8);
    }
    // Activation count grows by at most 2 microbatches' worth of one stage (Yeung et al.):
    // compare peak activation bytes against baseline + 2 × the largest stage's activations.
    const auto costs = stageCosts(cmp->baseline);
    std::int64_t largest = 0;
    for (const auto& c : costs) largest = std::max(largest, c.activationBytes);
    std::int64_t basePeak = 0, vocabPeak = 0;
    for (const auto& d : cmp->baseline.metrics.devices) basePeak = std::max(basePeak, d.peakActivationBytes);
    for (const auto& d : cmp->vocabParallel.metrics.devices) vocabPeak = std::max(vocabPeak, d.peakActivationBytes);
    EXPECT_LE(vocabPeak, basePeak + 2 * largest) << schedule;
    // S after the last stage's F, T after every S, the last stage's B after every T.
    const auto& ops = cmp->vocabParallel.ops;
    for (const Op& sOp : ops) {
      if (sOp.kind != OpKind::S) continue;
      for (const Op& f : ops) {
        if (f.kind == OpKind::F && f.microbatch == sOp.microbatch &&
            f.virtualStage == cmp->baseline.virtualStages.back().id &&
            cmp->vocabParallel.stage(f.virtualStage).pipeline == 0) {
          EXPECT_GE(sOp.startMs, f.endMs - 1e-9);
        }
      }
      for (const Op& tOp : ops) {
        if (tOp.kind == OpKind::T && tOp.microbatch == sOp.microbatch) {
          EXPECT_GE(tOp.startMs, sOp.endMs - 1e-9);
        }
      }
    }
  }
}

TEST(Vocab, ModelWithoutVocabularyIsAnError) {
  const PlanRequest r = test::bundledRequest("synthetic-measured", "a100-1x8-nvlink", "1f1b", 4, 8);
  EXPECT_THAT(makeVocabParallelPlan(r), HasError("no embedding or lm_head"));
}

}  // namespace
}  // namespace pipestudio
