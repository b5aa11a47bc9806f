// Vocabulary parallelism (issue 20; Yeung et al. 2024, "Balancing Pipeline Parallelism with
// Vocabulary Parallelism"): the S/T passes sit in the steady state with one or two barriers
// per microbatch, so the pipeline keeps the paper's ~5% bubble instead of stalling at every
// barrier, within p + 1 (Algorithm 2) or p + 2 (Algorithm 1) microbatches of activations.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "PlannerFixtures.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Vocab.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;
using ::testing::Not;

namespace pipestudio {
namespace {

// The authors' artifact model (artifact/README.md of sail-sg/VocabularyParallelism): 32
// layers, hidden 3072, 24 heads, FFN 12288, microbatch 1, untied embedding and LM head.
ModelSpec artifactModel(int seq, int vocab) {
  ModelSpec m = test::backboneModel("vocab-4b");
  Component& c = m.components.front();
  TransformerShape v;
  v.hidden = 3072;
  v.seq = seq;
  v.heads = 24;
  v.vocab = vocab;
  // The embedding and the LM head: a layer of their own kind and name, of the vocabulary's shape.
  const auto addVocabLayer = [&](const char* kind) {
    Layer l;
    l.name = kind;
    l.kind = kind;
    l.transformer = v;
    c.layers.push_back(l);
  };
  addVocabLayer("embedding");
  TransformerShape block;
  block.hidden = 3072;
  block.seq = seq;
  block.heads = 24;
  block.ffn = 12288;
  test::addBlocks(c, 32, block);
  addVocabLayer("lm_head");
  return m;
}

PlanRequest artifactRequest(int seq, int vocab, int p, int m, int barriers) {
  PlanRequest r;
  r.model = artifactModel(seq, vocab);
  auto cluster = loadCluster(std::string(PIPESTUDIO_RESOURCES) + "/clusters/a100-1x8-nvlink.json");
  EXPECT_TRUE(cluster.hasValue());
  if (cluster) r.cluster = *cluster;
  r.config.schedule = "1f1b";
  r.config.devices = p;
  r.config.microbatches = m;
  r.config.partition = "uniform";
  r.config.vocabBarriers = barriers;
  r.config.memoryLimitBytes = std::int64_t{1} << 50;
  return r;
}

// Writes `text` to a fresh file and loads it as a plan document.
Expected<Plan> loadText(const std::string& text, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("ps-vocab-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  auto plan = loadPlan(path);
  std::filesystem::remove_all(dir);
  return plan;
}

// Microbatches whose activations a device holds at once (forward started, backward not done).
int maxInFlight(const Plan& plan, int device, const std::vector<int>& backboneStages) {
  std::vector<std::pair<double, int>> events;
  for (const Op& op : plan.ops) {
    if (op.device != device ||
        std::find(backboneStages.begin(), backboneStages.end(), op.virtualStage) == backboneStages.end())
      continue;
    if (op.kind == OpKind::F) events.emplace_back(op.startMs, +1);
    if (op.kind == OpKind::B || op.kind == OpKind::BW) events.emplace_back(op.endMs, -1);
  }
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;  // frees before starts at one instant
  });
  int live = 0, worst = 0;
  for (const auto& e : events) worst = std::max(worst, live += e.second);
  return worst;
}

// Issue 20's oracle: at p = 8, m = 128 the vocabulary-parallel 1F1B keeps its bubble below 8%
// with one and with two barriers, for every vocabulary size of the authors' artifact runs, and
// holds at most p + barriers microbatches of activations on any device.
TEST(VocabParallel, BubbleBelowEightPercentAtPEightMOneTwentyEight) {
  const int p = 8, m = 128;
  for (int vocab : {32000, 256000}) {
    for (int barriers : {1, 2}) {
      auto plan = makeVocabParallelPlan(artifactRequest(2048, vocab, p, m, barriers));
      ASSERT_THAT(plan, HasValue());
      EXPECT_LT(plan->metrics.bubbleRatio, 0.08) << "vocab " << vocab << ", " << barriers << " barrier(s)";
      EXPECT_EQ(plan->config.vocabBarriers, barriers);
      std::vector<int> backbone;
      for (const auto& vs : plan->virtualStages) {
        if (vs.pipeline == 0) backbone.push_back(vs.id);
      }
      for (int d = 0; d < p; ++d) {
        EXPECT_LE(maxInFlight(*plan, d, backbone), p + barriers) << "device " << d << ", " << barriers << " barrier(s)";
      }
    }
  }
}

// The barriers are where the paper puts them: with one barrier the last stage's backward waits
// for every S (input-gradient partial sums travel with the statistics), with two for every T.
// And the passes run in the steady state: S and T of a microbatch are not back to back on
// every device behind the last stage's forward (the naive placement's stall).
TEST(VocabParallel, BarriersFollowAlgorithmsOneAndTwo) {
  const int p = 4, m = 16;
  for (int barriers : {1, 2}) {
    auto plan = makeVocabParallelPlan(artifactRequest(2048, 128000, p, m, barriers));
    ASSERT_THAT(plan, HasValue());
    const auto lanes = planLanes(*plan);
    const auto deps = vocabDependencies(*plan, lanes);
    ASSERT_FALSE(deps.empty());
    std::map<OpKind, int> intoBackward;
    for (const OpDependency& dep : deps) {
      const OrderedOp& from =
          lanes[static_cast<std::size_t>(dep.from.device)][static_cast<std::size_t>(dep.from.index)];
      const OrderedOp& to = lanes[static_cast<std::size_t>(dep.to.device)][static_cast<std::size_t>(dep.to.index)];
      if (to.kind == OpKind::B || to.kind == OpKind::BW) ++intoBackward[from.kind];
    }
    EXPECT_EQ(intoBackward[barriers == 1 ? OpKind::S : OpKind::T], p * m) << barriers;
    EXPECT_EQ(intoBackward[barriers == 1 ? OpKind::T : OpKind::S], 0) << barriers;
    // S before the microbatch's T on every device, and between them other work on most devices.
    int separated = 0;
    for (const auto& lane : lanes) {
      for (std::size_t i = 0; i + 1 < lane.size(); ++i) {
        if (lane[i].kind == OpKind::S &&
            !(lane[i + 1].kind == OpKind::T && lane[i + 1].microbatch == lane[i].microbatch)) {
          ++separated;
        }
      }
    }
    EXPECT_GT(separated, p * m / 2) << "S and T back to back: the barrier stalls the device";
  }
}

// A plan written before vocab_barriers existed re-reads with two barriers; a new one keeps its
// count through the file; a count other than 1 or 2 is refused with where and what.
TEST(VocabParallel, BarrierCountRoundTripsAndOldPlansReadAsTwo) {
  auto plan = makeVocabParallelPlan(artifactRequest(2048, 64000, 4, 8, 1));
  ASSERT_THAT(plan, HasValue());
  const std::string text = planToJson(*plan).dump(1);
  ASSERT_NE(text.find("\"vocab_barriers\": 1"), std::string::npos);
  auto back = loadText(text, "one.plan.json");
  ASSERT_THAT(back, HasValue());
  EXPECT_EQ(back->config.vocabBarriers, 1);
  std::string old = text;
  old.erase(old.find("\"vocab_barriers\": 1"), std::string("\"vocab_barriers\": 1,").size());
  auto legacy = loadText(old, "old.plan.json");
  ASSERT_THAT(legacy, HasValue());
  EXPECT_EQ(legacy->config.vocabBarriers, 2);
  std::string bad = text;
  bad.replace(bad.find("\"vocab_barriers\": 1"), std::string("\"vocab_barriers\": 1").size(), "\"vocab_barriers\": 3");
  auto refused = loadText(bad, "bad.plan.json");
  EXPECT_THAT(refused, HasError("bad.plan.json"));
  EXPECT_THAT(refused, HasError("vocab_barriers"));

  PlanRequest wrong = artifactRequest(2048, 64000, 4, 8, 3);
  auto rejected = makeVocabParallelPlan(wrong);
  EXPECT_THAT(rejected, HasError("1 or 2"));
}

// A bidirectional schedule is refused with the reason (it said "vocabulary parallelism:
// vocabulary parallelism: the last stage does not run every microbatch's forward once").
TEST(VocabParallel, BidirectionalSchedulesAreRefusedWithTheReason) {
  PlanRequest r = artifactRequest(2048, 64000, 4, 8, 1);
  r.config.schedule = "dualpipe";
  r.config.chunksPerDevice = 2;  // one per direction
  auto refused = makeVocabParallelPlan(r);
  EXPECT_THAT(refused, HasError("'dualpipe' runs two pipelines"));
  EXPECT_THAT(refused, Not(HasError("vocabulary parallelism: vocabulary parallelism")));
}

}  // namespace
}  // namespace pipestudio
