#include <gtest/gtest.h>

#include <QSignalSpy>

#include "QtTestApp.hpp"
#include "SolveController.hpp"
#include "pipestudio/planner/SolverNames.hpp"
#include "pipestudio/workspace/Workspace.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio::gui {
namespace {

PlanRequest defaultRequest() {
  auto ws = loadWorkspace(std::string(PIPESTUDIO_RESOURCES) + "/workspaces/default.pipestudio", solverNames());
  EXPECT_THAT(ws, HasValue());
  return PlanRequest{ws->model, ws->cluster, ws->solver};
}

/// A solve that is large enough to still run when cancelled: a deep pipeline, many microbatches.
PlanRequest largeRequest() {
  PlanRequest r = defaultRequest();
  r.config.schedule = "1f1b";
  r.config.partition = "uniform";
  r.config.fill = "none";
  r.config.devices = 8;
  r.config.microbatches = 4096;
  return r;
}

/// A solve controller and spies on what it says; the Qt application comes first.
class SolveControllerTest : public ::testing::Test {
 protected:
  QApplication* app = pipestudio::testing::qtApp();
  SolveController solver;
  QSignalSpy solved{&solver, &SolveController::solved};
  QSignalSpy failed{&solver, &SolveController::failed};
  QSignalSpy cancelled{&solver, &SolveController::cancelled};
};

TEST_F(SolveControllerTest, SolvesOffTheGuiThread) {
  solver.solve(defaultRequest());
  ASSERT_TRUE(solver.waitForIdle(60000));
  ASSERT_EQ(failed.count(), 0) << failed.value(0).value(0).toString().toStdString();
  ASSERT_EQ(solved.count(), 1);
  auto plan = solved.value(0).value(0).value<std::shared_ptr<const Plan>>();
  ASSERT_TRUE(plan);
  EXPECT_FALSE(plan->ops.empty());
  EXPECT_FALSE(solver.isRunning());
}

TEST_F(SolveControllerTest, CancelStopsTheSolveAndDropsItsResult) {
  solver.solve(largeRequest());
  EXPECT_TRUE(solver.isRunning());
  solver.cancel();
  ASSERT_TRUE(solver.waitForIdle(60000));
  EXPECT_EQ(cancelled.count(), 1);
  EXPECT_EQ(solved.count(), 0);
  EXPECT_FALSE(solver.isRunning());
}

TEST_F(SolveControllerTest, StaleResultsAreDropped) {
  PlanRequest first = defaultRequest();
  first.config.microbatches = 8;
  PlanRequest second = defaultRequest();
  second.config.microbatches = 24;
  solver.solve(first);
  const quint64 generation = solver.solve(second);
  EXPECT_EQ(generation, solver.generation());
  ASSERT_TRUE(solver.waitForIdle(60000));
  ASSERT_EQ(failed.count(), 0) << failed.value(0).value(0).toString().toStdString();
  ASSERT_EQ(solved.count(), 1);
  EXPECT_EQ(solved.value(0).value(0).value<std::shared_ptr<const Plan>>()->config.microbatches, 24);
}

TEST_F(SolveControllerTest, ScheduledSolvesCoalesce) {
  solver.setDebounceMs(50);
  QSignalSpy started(&solver, &SolveController::started);
  for (int m = 8; m <= 12; ++m) {
    PlanRequest r = defaultRequest();
    r.config.microbatches = m;
    solver.scheduleSolve(r);
  }
  EXPECT_TRUE(solver.isPending());
  ASSERT_TRUE(solver.waitForIdle(60000));
  EXPECT_EQ(started.count(), 1);
  ASSERT_EQ(solved.count(), 1);
  EXPECT_EQ(solved.value(0).value(0).value<std::shared_ptr<const Plan>>()->config.microbatches, 12);
}

TEST_F(SolveControllerTest, ImpossibleRequestsFailWithAMessage) {
  PlanRequest r = defaultRequest();
  r.config.schedule = "no-such-schedule";
  r.config.partition = "uniform";  // diffusionpipe plans its own schedule
  r.config.fill = "none";
  solver.solve(r);
  ASSERT_TRUE(solver.waitForIdle(60000));
  ASSERT_EQ(failed.count(), 1);
  EXPECT_FALSE(failed.value(0).value(0).toString().isEmpty());
}

}  // namespace
}  // namespace pipestudio::gui
