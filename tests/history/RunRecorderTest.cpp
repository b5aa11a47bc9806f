// RunRecorder: what `pipestudio-cli deploy` and the GUI's deploy dialog record (issue 18 item 6).
#include <gtest/gtest.h>

#include "TestSupport.hpp"
#include "pipestudio/history/RunRecorder.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio::history {
namespace {

class RunRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = HistoryStore::open(m_dir.file("h.sqlite"));
    ASSERT_THAT(s, HasValue());
    m_store = std::make_unique<HistoryStore>(std::move(*s));
  }
  std::string rankStream(int rank, bool withSummary = true) {
    testing::StreamOptions o;
    o.rank = rank;
    o.iterations = 1;
    o.withSummary = withSummary;
    return trace::encodeStream(testing::executorFrames(testing::smallPlan(), o));
  }
  testing::TempDir m_dir;
  std::unique_ptr<HistoryStore> m_store;
};

TEST_F(RunRecorderTest, RecordsEveryRankIntoOneRun) {
  RunInfo info;
  info.name = "deployed";
  RunRecorder recorder(*m_store, info);
  EXPECT_FALSE(recorder.started());
  ASSERT_TRUE(recorder.start(2));
  ASSERT_TRUE(recorder.started());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string bytes = rankStream(rank);
    // In two chunks, as a stream arrives.
    ASSERT_TRUE(recorder.feed(rank, std::string_view(bytes).substr(0, bytes.size() / 2)));
    ASSERT_TRUE(recorder.feed(rank, std::string_view(bytes).substr(bytes.size() / 2)));
  }
  ASSERT_TRUE(recorder.finish(RunStatus::Complete, "all ranks exited 0"));
  auto summary = m_store->runSummary(recorder.runId());
  ASSERT_THAT(summary, HasValue());
  EXPECT_EQ(summary->name, "deployed");
  EXPECT_EQ(summary->status, RunStatus::Complete);
  EXPECT_EQ(summary->error, "");
  auto ops = m_store->loadEvents(recorder.runId(), EventCategory::Op);
  ASSERT_TRUE(ops);
  EXPECT_EQ(ops->size(), 2 * testing::smallPlan().ops.size());
}

TEST_F(RunRecorderTest, StreamsMakeAVerdictStricterNeverMilder) {
  {
    // The deployment says complete, a rank's stream has no summary: incomplete, with the reason.
    RunRecorder recorder(*m_store, {});
    ASSERT_TRUE(recorder.start(2));
    ASSERT_TRUE(recorder.feed(0, rankStream(0)));
    ASSERT_TRUE(recorder.feed(1, rankStream(1, false)));
    ASSERT_TRUE(recorder.finish(RunStatus::Complete, "done"));
    auto s = m_store->runSummary(recorder.runId());
    ASSERT_TRUE(s);
    EXPECT_EQ(s->status, RunStatus::Incomplete);
    EXPECT_FALSE(s->error.empty());
  }
  {
    // The deployment failed; complete streams do not make it complete.
    RunRecorder recorder(*m_store, {});
    ASSERT_TRUE(recorder.start(1));
    ASSERT_TRUE(recorder.feed(0, rankStream(0)));
    ASSERT_TRUE(recorder.finish(RunStatus::Failed, "rank 0 on node1 exited with status 3"));
    auto s = m_store->runSummary(recorder.runId());
    ASSERT_TRUE(s);
    EXPECT_EQ(s->status, RunStatus::Failed);
    EXPECT_EQ(s->error, "rank 0 on node1 exited with status 3");
  }
}

TEST_F(RunRecorderTest, MisuseIsAnErrorNotACrash) {
  RunRecorder recorder(*m_store, {});
  EXPECT_FALSE(recorder.finish(RunStatus::Complete, ""));  // nothing started
  EXPECT_FALSE(recorder.start(0));
  EXPECT_FALSE(recorder.started());
  ASSERT_TRUE(recorder.start(2));
  EXPECT_FALSE(recorder.start(2));  // once only
  auto bad = recorder.feed(2, "x");
  EXPECT_THAT(bad, HasError("rank 2"));
  EXPECT_FALSE(recorder.feed(-1, "x"));
  ASSERT_TRUE(recorder.finish(RunStatus::Incomplete, "cancelled"));
  auto s = m_store->runSummary(recorder.runId());
  ASSERT_TRUE(s);
  EXPECT_NE(s->status, RunStatus::Complete);
}

}  // namespace
}  // namespace pipestudio::history
