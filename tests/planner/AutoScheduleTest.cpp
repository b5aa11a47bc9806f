// zb-auto: validity (every op once, dependencies, memory limit), quality against the lower
// bound, the published greedy heuristic and the ILP optimum on small instances, bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <set>
#include <tuple>

#include "PlannerFixtures.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

constexpr std::int64_t kMiBytes = 1 << 20;

// One stage per device (or a V placement with two), per-stage costs drawn at random.
ScheduleInput randomInput(int devices, int microbatches, unsigned seed, bool vShape = false, double sendMs = 0.1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> ms(0.5, 2.0);
  ScheduleInput in;
  const int chunks = vShape ? 2 : 1;
  in.shape = {devices, microbatches, chunks};
  const int stages = devices * chunks;
  for (int s = 0; s < stages; ++s) {
    VirtualStage vs;
    vs.id = s;
    vs.device = s < devices ? s : 2 * devices - 1 - s;
    vs.chunk = s < devices ? 0 : 1;
    in.virtualStages.push_back(vs);
    StageEstimate e;
    e.forwardMs = ms(rng);
    e.backwardInputMs = ms(rng);
    e.backwardWeightMs = ms(rng);
    e.activationBytes = 8 * kMiBytes;
    e.weightGradBytes = 3 * kMiBytes;
    in.stages.push_back(e);
  }
  for (int s = 0; s + 1 < stages; ++s) {
    const bool crossDevice = in.virtualStages[static_cast<std::size_t>(s)].device !=
                             in.virtualStages[static_cast<std::size_t>(s + 1)].device;
    in.stages[static_cast<std::size_t>(s)].sendMs = crossDevice ? sendMs : 0.0;
  }
  in.staticBytes.assign(static_cast<std::size_t>(devices), 100 * kMiBytes);
  return in;
}

ScheduleInput equalInput(int devices, int microbatches) {
  ScheduleInput in = randomInput(devices, microbatches, 1, false, 0.0);
  for (StageEstimate& e : in.stages) {
    e.forwardMs = e.backwardInputMs = e.backwardWeightMs = 1.0;
    e.sendMs = 0;
  }
  return in;
}

// Every op exactly once on its stage's device, per-stage in microbatch order, and the order
// times without deadlock (so every dependency can be met).
void expectValid(const ScheduleInput& in, const ScheduleSkeleton& sk) {
  ASSERT_EQ(sk.devices.size(), static_cast<std::size_t>(in.shape.devices));
  std::set<std::tuple<int, int, int>> seen;
  for (std::size_t d = 0; d < sk.devices.size(); ++d) {
    for (const OrderedOp& o : sk.devices[d]) {
      ASSERT_GE(o.virtualStage, 0);
      ASSERT_LT(o.virtualStage, static_cast<int>(in.virtualStages.size()));
      EXPECT_EQ(in.virtualStages[static_cast<std::size_t>(o.virtualStage)].device, static_cast<int>(d));
      EXPECT_TRUE(o.kind == OpKind::F || o.kind == OpKind::B || o.kind == OpKind::W);
      EXPECT_TRUE(seen.insert({o.virtualStage, static_cast<int>(o.kind), o.microbatch}).second) << "duplicate op";
    }
  }
  EXPECT_EQ(seen.size(), in.virtualStages.size() * 3 * static_cast<std::size_t>(in.shape.microbatches));
  // Same-device dependencies in order: W after its B, B after its F.
  for (const auto& ops : sk.devices) {
    std::set<std::tuple<int, int, int>> done;
    for (const OrderedOp& o : ops) {
      if (o.kind == OpKind::W) {
        EXPECT_TRUE(done.count({o.virtualStage, static_cast<int>(OpKind::B), o.microbatch}));
      }
      if (o.kind == OpKind::B) {
        EXPECT_TRUE(done.count({o.virtualStage, static_cast<int>(OpKind::F), o.microbatch}));
      }
      done.insert({o.virtualStage, static_cast<int>(o.kind), o.microbatch});
    }
  }
  auto timing = timeAutoOrder(in, sk);
  ASSERT_THAT(timing, HasValue());
}

TEST(AutoSchedule, RandomInstancesAreValidAndRespectTheMemoryLimit) {
  for (unsigned seed = 1; seed <= 12; ++seed) {
    const int p = 2 + static_cast<int>(seed % 5);
    const int m = p + static_cast<int>(seed % 7);
    ScheduleInput in = randomInput(p, m, seed, seed % 3 == 0);
    // Room for static memory plus 2–4 microbatches of activations per stage.
    const std::int64_t perMb = in.shape.chunksPerDevice * 8 * kMiBytes;
    in.memoryLimitBytes = 100 * kMiBytes + perMb * (2 + seed % 3);
    auto r = autoSchedule(in);
    ASSERT_THAT(r, HasValue());
    expectValid(in, r->skeleton);
    for (std::int64_t peak : r->report.peakBytes) EXPECT_LE(peak, *in.memoryLimitBytes) << "seed " << seed;
    auto timing = timeAutoOrder(in, r->skeleton);
    ASSERT_TRUE(timing);
    EXPECT_DOUBLE_EQ(timing->makespanMs, r->report.makespanMs);
    EXPECT_GE(r->report.makespanMs, r->report.lowerBoundMs - 1e-9);
    EXPECT_GE(r->report.lowerBoundMs, r->report.busiestDeviceWorkMs);
    // The authors' heuristic (zb.py for one stage per device, zbv.py for a V) gives the first
    // answer, so zb-auto is never worse than it.
    ASSERT_FALSE(r->report.publishedHeuristic.empty()) << "seed " << seed;
    EXPECT_EQ(r->report.publishedHeuristic, seed % 3 == 0 ? "zbv.py" : "zb.py");
    if (r->report.paperGreedyMakespanMs > 0) {
      EXPECT_LE(r->report.makespanMs, r->report.paperGreedyMakespanMs + 1e-9);
    }
  }
}

TEST(AutoSchedule, TightestLimitRunsOneMicrobatchAtATime) {
  ScheduleInput in = randomInput(3, 4, 5);
  in.memoryLimitBytes = 100 * kMiBytes + 8 * kMiBytes;
  auto r = autoSchedule(in);
  ASSERT_THAT(r, HasValue());
  expectValid(in, r->skeleton);
  for (std::int64_t peak : r->report.peakBytes) EXPECT_LE(peak, *in.memoryLimitBytes);
}

TEST(AutoSchedule, EqualStagesWithEnoughMemoryReachZeroBubble) {
  // F = B = W, free transfers, 2p activations allowed: ZB-H2's setting, where the steady state
  // has no bubble; only the warm-up/cool-down offset (p−1)·F remains above the busiest work.
  const int p = 4, m = 16;
  ScheduleInput in = equalInput(p, m);
  in.memoryLimitBytes = 100 * kMiBytes + 2 * p * 8 * kMiBytes;
  auto r = autoSchedule(in);
  ASSERT_THAT(r, HasValue());
  EXPECT_DOUBLE_EQ(r->report.busiestDeviceWorkMs, 3.0 * m);
  EXPECT_LE(r->report.makespanMs, 3.0 * m + (p - 1) * 1.0 + 1e-9);
}

TEST(AutoSchedule, MemoryLimitBelowOneMicrobatchSaysTheMinimum) {
  ScheduleInput in = randomInput(4, 8, 3);
  in.memoryLimitBytes = 100 * kMiBytes + 4 * kMiBytes;
  auto r = autoSchedule(in);
  EXPECT_THAT(r, HasError("below one microbatch"));
  EXPECT_THAT(r, HasError("needs at least"));
  EXPECT_THAT(r, HasError(std::to_string(108 * kMiBytes) + " bytes"));
}

TEST(AutoSchedule, BadInputIsAnError) {
  ScheduleInput in = randomInput(2, 2, 1);
  in.stages.pop_back();
  EXPECT_FALSE(autoSchedule(in));
  ScheduleInput two = randomInput(2, 2, 1);
  two.virtualStages[1].pipeline = 1;
  EXPECT_FALSE(autoSchedule(two));
  ScheduleInput empty = randomInput(2, 2, 1);
  empty.virtualStages[1].device = 0;  // device 1 holds nothing
  EXPECT_FALSE(autoSchedule(empty));
}

bool sameOrder(const ScheduleSkeleton& a, const ScheduleSkeleton& b) {
  if (a.devices.size() != b.devices.size()) return false;
  for (std::size_t d = 0; d < a.devices.size(); ++d) {
    if (a.devices[d].size() != b.devices[d].size()) return false;
    for (std::size_t i = 0; i < a.devices[d].size(); ++i) {
      const OrderedOp& x = a.devices[d][i];
      const OrderedOp& y = b.devices[d][i];
      if (x.virtualStage != y.virtualStage || x.kind != y.kind || x.microbatch != y.microbatch) return false;
    }
  }
  return true;
}

// The same request gives the same plan, byte for byte: every budget is work, not time
// (issue 14 saw one run in eight differ when the portfolio stopped at a wall-clock deadline).
TEST(AutoSchedule, SameRequestSameOrder) {
  for (const auto& [p, m, vShape] : {std::tuple{8, 64, false}, std::tuple{6, 48, true}, std::tuple{12, 48, false}}) {
    ScheduleInput in = randomInput(p, m, 77, vShape);
    in.memoryLimitBytes = 100 * kMiBytes + in.shape.chunksPerDevice * 8 * kMiBytes * (p / 2 + 1);
    auto a = autoSchedule(in);
    auto b = autoSchedule(in);
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(sameOrder(a->skeleton, b->skeleton)) << "p=" << p;
    EXPECT_EQ(a->report.workSteps, b->report.workSteps);
    EXPECT_EQ(autoScheduleReportJson(a->report).dump(), autoScheduleReportJson(b->report).dump());
  }
}

// Through makePlan, as the CLI and the GUI plan: the same request twice, the same plan JSON.
TEST(AutoSchedule, SameRequestSamePlanJson) {
  ModelSpec model = test::equalLayers(16, 1.0, 1.2, 0.8, 1 << 20, 1 << 18, 1 << 16);
  for (std::size_t i = 0; i < model.components[0].layers.size(); ++i) {
    model.components[0].layers[i].forwardMs = 0.6 + 0.11 * static_cast<double>(i % 5);
  }
  for (int chunks : {1, 2}) {
    PlanRequest request = test::request(model, test::freeCluster(8, 20.0, 3.0), "zb-auto", 8, 32, chunks);
    request.config.memoryLimitBytes = 6 * (std::int64_t{1} << 20) + 400000;
    auto a = makeAutoPlan(request, {});
    auto b = makeAutoPlan(request, {});
    ASSERT_THAT(a, HasValue());
    ASSERT_THAT(b, HasValue());
    EXPECT_EQ(planToJson(*a).dump(), planToJson(*b).dump()) << "chunks " << chunks;
  }
}

// With optimizer post-validation iterations overlap and the steady-state period is the longest
// device span (Qi et al. 2023 §5): zb-auto then minimises that, not the makespan.
TEST(AutoSchedule, PostValidationMinimisesTheLongestSpan) {
  ModelSpec model = test::equalLayers(8, 1.0, 1.0, 1.0, 1 << 20, 1 << 19, 1 << 16);
  for (std::size_t i = 0; i < model.components[0].layers.size(); ++i) {
    model.components[0].layers[i].backwardInputMs = 0.7 + 0.2 * static_cast<double>(i % 3);
  }
  PlanRequest request = test::request(model, test::freeCluster(8, 20.0, 3.0), "zb-auto", 8, 24, 1);
  request.config.memoryLimitBytes = 16 * (std::int64_t{1} << 20) + 400000;  // about 2p in flight
  AutoScheduleReport globalReport, spanReport;
  auto global = makeAutoPlan(request, {}, &globalReport);
  request.config.optimizerSync = "post-validation";
  auto overlapped = makeAutoPlan(request, {}, &spanReport);
  ASSERT_THAT(global, HasValue());
  ASSERT_THAT(overlapped, HasValue());
  EXPECT_EQ(globalReport.objective, "makespan");
  EXPECT_EQ(spanReport.objective, "longest device span");
  EXPECT_NEAR(spanReport.objectiveMs, test::longestSpan(*overlapped), 1e-9);
  EXPECT_NEAR(globalReport.objectiveMs, global->metrics.makespanMs, 1e-9);
  EXPECT_LE(test::longestSpan(*overlapped), test::longestSpan(*global) + 1e-9);
  EXPECT_LE(global->metrics.makespanMs, overlapped->metrics.makespanMs + 1e-9);
  EXPECT_NE(formatAutoScheduleReport(spanReport).find("longest device span"), std::string::npos);
}

// A small work budget still gives the authors' heuristic's answer (it always runs first),
// and a larger one never a worse plan.
TEST(AutoSchedule, WorkBudgetBoundsTheSearch) {
  ScheduleInput in = randomInput(8, 32, 5);
  in.memoryLimitBytes = 100 * kMiBytes + 4 * 8 * kMiBytes;
  AutoScheduleOptions small;
  small.workBudgetSteps = 1;
  auto first = autoSchedule(in, small);
  ASSERT_THAT(first, HasValue());
  EXPECT_EQ(first->report.bestPolicy.rfind("zb.py", 0), 0U) << first->report.bestPolicy;
  EXPECT_LE(first->report.makespanMs, first->report.paperGreedyMakespanMs + 1e-9);
  auto full = autoSchedule(in);
  ASSERT_TRUE(full);
  EXPECT_LE(full->report.makespanMs, first->report.makespanMs + 1e-9);
  EXPECT_GT(full->report.workSteps, first->report.workSteps);
  EXPECT_LE(full->report.workSteps, AutoScheduleOptions{}.workBudgetSteps + 8 * in.shape.devices * 3 * 32);
}

// Cancel after the first answer: an error by default, the best order so far when asked for.
TEST(AutoSchedule, CancelKeepsTheBestSoFarWhenAskedTo) {
  ScheduleInput in = randomInput(8, 32, 6);
  in.memoryLimitBytes = 100 * kMiBytes + 4 * 8 * kMiBytes;
  std::atomic<bool> cancel{false};
  int calls = 0;
  SolveControl control;
  control.cancel = &cancel;
  control.progress = [&](double) {
    if (++calls == 2) cancel = true;  // after the heuristic and one policy
  };
  in.control = &control;
  EXPECT_FALSE(autoSchedule(in));
  cancel = false;
  calls = 0;
  AutoScheduleOptions keep;
  keep.keepBestOnCancel = true;
  auto r = autoSchedule(in, keep);
  ASSERT_THAT(r, HasValue());
  EXPECT_TRUE(r->report.stoppedEarly);
  expectValid(in, r->skeleton);
  for (std::int64_t peak : r->report.peakBytes) EXPECT_LE(peak, *in.memoryLimitBytes);
}

TEST(AutoSchedule, TimingRejectsBrokenOrders) {
  ScheduleInput in = randomInput(2, 2, 1);
  auto r = autoSchedule(in);
  ASSERT_TRUE(r);
  ScheduleSkeleton missing = r->skeleton;
  missing.devices[0].pop_back();
  EXPECT_FALSE(timeAutoOrder(in, missing));
  ScheduleSkeleton deadlock = r->skeleton;
  std::reverse(deadlock.devices[1].begin(), deadlock.devices[1].end());
  auto t = timeAutoOrder(in, deadlock);
  EXPECT_THAT(t, HasError("deadlock"));
}

TEST(AutoScheduleExact, TooLargeOrUnavailableIsReported) {
  ScheduleInput in = randomInput(5, 10, 2);
  AutoScheduleOptions options;
  options.exact = true;
  auto r = autoSchedule(in, options);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->report.exactStatus, exactSchedulingAvailable() ? ExactStatus::TooLarge : ExactStatus::Unavailable);
}

// The heuristic against the ILP optimum on small instances with a binding memory limit.
// Measured (2026-11, CBC 2.10.8): the heuristic matched the proven optimum on all of these
// (gap 0.00 %, also on p=3 m=6 and p=2 m=8, which take CBC 20–30 s to prove and are left out to
// keep the suite fast); the published greedy alone was up to 15 % worse. The assertion allows 1 %.
TEST(AutoScheduleExact, HeuristicIsCloseToTheIlpOptimum) {
  if (!exactSchedulingAvailable()) GTEST_SKIP() << "built without CBC";
  struct Case {
    int p;
    int m;
    unsigned seed;
    int mbsOfMemory;
  };
  const Case cases[] = {{2, 4, 11, 2}, {3, 4, 12, 2}, {4, 4, 14, 2}, {4, 6, 15, 3}};
  double worstGap = 0;
  int proven = 0;
  for (const Case& c : cases) {
    ScheduleInput in = randomInput(c.p, c.m, c.seed);
    in.memoryLimitBytes = 100 * kMiBytes + c.mbsOfMemory * 8 * kMiBytes;
    auto heuristic = autoSchedule(in);
    ASSERT_THAT(heuristic, HasValue());
    AutoScheduleOptions options;
    options.exact = true;
    options.exactTimeLimitS = 60;  // these prove in ≤ 2 s; the limit only guards a loaded machine
    auto exact = autoSchedule(in, options);
    ASSERT_THAT(exact, HasValue());
    const AutoScheduleReport& rep = exact->report;
    ASSERT_TRUE(rep.exactStatus == ExactStatus::Optimal || rep.exactStatus == ExactStatus::TimeLimit)
        << exactStatusName(rep.exactStatus) << ": " << rep.exactMessage;
    expectValid(in, exact->skeleton);
    for (std::int64_t peak : rep.peakBytes) EXPECT_LE(peak, *in.memoryLimitBytes);
    // The ILP's bound never exceeds what the heuristic found (it started from it).
    EXPECT_LE(rep.exactBoundMs, heuristic->report.makespanMs + 1e-6);
    if (rep.exactStatus == ExactStatus::Optimal) ++proven;
    const double gap = heuristic->report.makespanMs / rep.exactBoundMs - 1.0;
    worstGap = std::max(worstGap, gap);
    std::printf(
        "p=%d m=%d: heuristic %.3f ms, paper greedy %.3f ms, ILP %.3f ms (bound %.3f, %s, %.1f s), gap %.2f%%\n", c.p,
        c.m, heuristic->report.makespanMs, heuristic->report.paperGreedyMakespanMs, rep.exactMakespanMs,
        rep.exactBoundMs, std::string(exactStatusName(rep.exactStatus)).c_str(), rep.exactSeconds, 100 * gap);
  }
  EXPECT_EQ(proven, 4);
  EXPECT_LE(worstGap, 0.01);
}

}  // namespace
}  // namespace pipestudio

#include "PlannerFixtures.hpp"

namespace pipestudio {
namespace {

// Through makePlan: the simulator's makespan equals the auto-scheduler's own timing (both time
// transfers on directed links, first come first served), and the memory limit holds.
TEST(AutoSchedulePlan, SimulatorAgreesWithTheAutoSchedulerTiming) {
  ModelSpec model = test::equalLayers(8, 1.0, 1.0, 1.0, 1 << 20, 1 << 18, 1 << 16);
  for (std::size_t i = 0; i < model.components[0].layers.size(); ++i) {
    model.components[0].layers[i].forwardMs = 0.5 + 0.15 * static_cast<double>(i);
  }
  for (int chunks : {1, 2}) {
    PlanRequest request = test::request(model, test::freeCluster(4, 20.0, 3.0), "zb-auto", 4, 12, chunks);
    // Static memory is ~18 kB; one microbatch holds 2 MiB per device: room for 6 in flight.
    request.config.memoryLimitBytes = 12 * (std::int64_t{1} << 20) + 200000;
    AutoScheduleReport report;
    auto plan = makeAutoPlan(request, {}, &report);
    ASSERT_THAT(plan, HasValue());
    EXPECT_EQ(plan->config.schedule, "zb-auto");
    EXPECT_NEAR(plan->metrics.makespanMs, report.makespanMs, 1e-9);
    EXPECT_NEAR(busiestDeviceWorkMs(*plan), report.busiestDeviceWorkMs, 1e-9);
    for (const DeviceMetrics& d : plan->metrics.devices) EXPECT_LE(d.peakMemoryBytes, *request.config.memoryLimitBytes);
    EXPECT_FALSE(formatAutoScheduleReport(report).empty());
    EXPECT_TRUE(autoScheduleReportJson(report).contains("gap_to_busiest_work"));
  }
}

TEST(AutoSchedulePlan, RegisteredAndLimitBelowOneMicrobatchIsRefused) {
  const auto names = scheduleNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "zb-auto"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "custom"), names.end());
  PlanRequest request = test::request(test::equalLayers(4, 1, 1, 1, 1 << 20), test::freeCluster(4), "zb-auto", 4, 8, 1);
  request.config.memoryLimitBytes = 1000;
  auto plan = makePlan(request);
  EXPECT_THAT(plan, HasError("one microbatch"));
}

}  // namespace
}  // namespace pipestudio
