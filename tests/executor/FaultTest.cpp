// A rank that dies, hangs or fails produces a failure naming it, within a bounded time.
#include <gtest/gtest.h>

#include <chrono>

#include "RunHelpers.hpp"
#include "support/ListScheduledPlan.hpp"

namespace pipestudio {
namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const trace::ErrorReport* errorFrame(const test::RunResult& r) {
  if (!r.frames.count(0)) return nullptr;
  for (const auto& f : r.frames.at(0)) {
    if (const auto* e = std::get_if<trace::ErrorReport>(&f)) return e;
  }
  return nullptr;
}

std::string planFor(const std::string& name) { return test::writePlan(test::makeTestPlan("1f1b", 4, 8), name); }

// Runs a plan with `fault` injected (PIPESTUDIO_EXEC_FAULT) under the given watchdog timeout and
// checks that the run failed within `withinS` seconds.
test::RunResult runFaulted(const char* fault, const std::string& plan, const char* timeoutS, double withinS) {
  test::ScopedEnv env("PIPESTUDIO_EXEC_FAULT", fault);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::runExec(planFor(plan), "cpu", 1, {"--max-op-ms", "1", "--timeout-s", timeoutS});
  EXPECT_LT(secondsSince(t0), withinS);
  EXPECT_FALSE(r.outcome.ok);
  return r;
}

// The run's error frame names the failed rank and says `what` happened to it.
void expectErrorFrom(const test::RunResult& r, int rank, const std::string& what) {
  const auto* e = errorFrame(r);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->rank, rank);
  EXPECT_NE(e->message.find(what), std::string::npos) << e->message;
}

TEST(Fault, KilledProcessIsAFailureNotAHang) {
  test::ScopedEnv fault("PIPESTUDIO_EXEC_FAULT", "crash:rank=1:after_ops=3");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = test::runExec(planFor("crash.plan.json"), "cpu", 1, {"--max-op-ms", "1"});
  EXPECT_LT(secondsSince(t0), 30.0);
  EXPECT_FALSE(r.outcome.ok);
  EXPECT_EQ(r.outcome.ranks[0].signal, 9);
  EXPECT_NE(r.outcome.failure.find("rank 0 was killed by signal 9"), std::string::npos) << r.outcome.failure;
  // Every frame written before the kill decodes; some op ranges made it out.
  ASSERT_TRUE(r.frames.count(0));
  EXPECT_TRUE(std::holds_alternative<trace::Header>(r.frames.at(0).front()));
  EXPECT_FALSE(r.outcome.ranks[0].streamError.has_value());
}

TEST(Fault, SilentlyDeadDeviceIsNamedByTheWatchdog) {
  const auto r = runFaulted("die:rank=2:after_ops=2", "die.plan.json", "1", 30.0);
  EXPECT_EQ(r.outcome.ranks[0].exitStatus, 1);
  expectErrorFrom(r, 2, "died");
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_NE(r.outcome.failure.find("rank 2 failed"), std::string::npos) << r.outcome.failure;
  EXPECT_FALSE(std::get<trace::Summary>(r.frames.at(0).back()).ok);
}

TEST(Fault, HungDeviceIsNamedByTheWatchdog) {
  const auto r = runFaulted("hang:rank=1:after_ops=4", "hang.plan.json", "1", 30.0);
  expectErrorFrom(r, 1, "hung");
}

TEST(Fault, ReportedErrorStopsEveryDevice) {
  // The error path does not wait for the watchdog.
  const auto r = runFaulted("error:rank=3:after_ops=1", "error.plan.json", "20", 15.0);
  expectErrorFrom(r, 3, "fault injection");
}

TEST(Fault, MalformedHookIsAUsageError) {
  test::ScopedEnv fault("PIPESTUDIO_EXEC_FAULT", "meltdown");
  const auto r = test::runExec(planFor("usage.plan.json"), "cpu", 1);
  EXPECT_FALSE(r.outcome.ok);
  EXPECT_EQ(r.outcome.ranks[0].exitStatus, 2);
}

}  // namespace
}  // namespace pipestudio
