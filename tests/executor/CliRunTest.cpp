// pipestudio-cli run: the CPU backend through the CLI into a real SQLite history.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "RunHelpers.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/ListScheduledPlan.hpp"
#include "support/RunCommand.hpp"

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

test::CommandResult cli(const std::string& args) {
  return test::runCommand(std::string(PIPESTUDIO_CLI_BINARY) + " " + args + " 2>/dev/null");
}

std::int64_t idOf(const std::string& json) {
  const auto at = json.find("\"id\":");
  return at == std::string::npos ? -1 : std::stoll(json.substr(at + 5));
}

// The history's summary of run `id` in the database at `db`.
Expected<history::RunSummary> recordedRun(const std::string& db, std::int64_t id) {
  PS_ASSIGN_OR_RETURN(auto store, history::HistoryStore::open(db));
  return store.runSummary(id);
}

TEST(CliRun, RecordsACompleteRunAndPrintsItsId) {
  const std::string plan = test::writePlan(test::makeTestPlan("zb-h1", 3, 4), "cli.plan.json");
  const std::string db = test::tempPath("cli-history.sqlite");
  const auto r = cli("run " + plan + " --backend cpu --iterations 2 --max-op-ms 1 --history " + db + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto id = idOf(r.out);
  ASSERT_GT(id, 0) << r.out;
  auto store = history::HistoryStore::open(db);
  ASSERT_THAT(store, HasValue());
  auto summary = store->runSummary(id);
  ASSERT_THAT(summary, HasValue());
  EXPECT_EQ(summary->status, history::RunStatus::Complete);
  EXPECT_EQ(summary->backend, "cpu");
  EXPECT_EQ(summary->devices, 3);
  EXPECT_TRUE(summary->planId.has_value());
  auto ops = store->loadEvents(id, history::EventCategory::Op);
  ASSERT_TRUE(ops.hasValue());
  // 2 iterations × (plan ops + one optimizer step per device).
  const Plan p = test::makeTestPlan("zb-h1", 3, 4);
  EXPECT_EQ(ops->size(), 2 * (p.ops.size() + 3));
  auto steps = store->stepTimesMs(id);
  ASSERT_TRUE(steps.hasValue());
  EXPECT_EQ(steps->size(), 2U);
}

// Runs a 4-device 1F1B plan through `pipestudio-cli run --history` with `fault` injected
// (PIPESTUDIO_EXEC_FAULT), its files named after `name`: the run fails (exit 1) and is recorded.
Expected<history::RunSummary> faultedRun(const std::string& name, const char* fault, const std::string& options) {
  const std::string plan = test::writePlan(test::makeTestPlan("1f1b", 4, 8), name + ".plan.json");
  const std::string db = test::tempPath(name + ".sqlite");
  test::ScopedEnv env("PIPESTUDIO_EXEC_FAULT", fault);
  const auto r = cli("run " + plan + " --backend cpu --max-op-ms 1 " + options + "--history " + db + " --json");
  EXPECT_EQ(r.status, 1);
  const auto id = idOf(r.out);
  EXPECT_GT(id, 0) << r.out;
  return recordedRun(db, id);
}

TEST(CliRun, KilledRankIsRecordedFailed) {
  auto summary = faultedRun("cli-crash", "crash:rank=2:after_ops=4", "");
  ASSERT_THAT(summary, HasValue());
  EXPECT_EQ(summary->status, history::RunStatus::Failed);
  EXPECT_NE(summary->error.find("signal 9"), std::string::npos) << summary->error;
  EXPECT_GT(summary->events, 0) << "events received before the kill are kept";
}

TEST(CliRun, HungDeviceIsRecordedFailedNamingIt) {
  auto summary = faultedRun("cli-hang", "hang:rank=3:after_ops=2", "--timeout-s 1 ");
  ASSERT_THAT(summary, HasValue());
  EXPECT_EQ(summary->status, history::RunStatus::Failed);
  EXPECT_NE(summary->error.find("device 3"), std::string::npos) << summary->error;
}

TEST(CliRun, BadInputIsExitOneAndUsageIsExitTwo) {
  EXPECT_EQ(cli("run " + test::tempPath("missing.plan.json") + " --history " + test::tempPath("x.sqlite")).status, 1);
  EXPECT_EQ(cli("run").status, 2);
  EXPECT_EQ(cli("run p.json --backend tpu").status, 2);
}

}  // namespace
}  // namespace pipestudio
