// The CPU backend running real plans end to end through the pipestudio-exec binary.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "RunHelpers.hpp"
#include "pipestudio/executor/Program.hpp"
#include "pipestudio/plan/Dependencies.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/ListScheduledPlan.hpp"
#if defined(PIPESTUDIO_TEST_HAVE_PLANNER)
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Vocab.hpp"
#endif

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

struct Measured {
  trace::OpRange range;
  std::size_t frameIndex;
};

// The op frames of a run's stream: the end frames per (iteration, device) in stream order, how
// many begin frames came, and the peak memory sampled per device.
struct StreamOps {
  std::map<std::pair<int, int>, std::vector<trace::OpRange>> ends;
  std::map<int, std::int64_t> peakMemory;
  int begins = 0;
};

StreamOps streamOps(const std::vector<trace::Frame>& frames) {
  StreamOps s;
  for (const auto& f : frames) {
    if (const auto* op = std::get_if<trace::OpRange>(&f)) {
      if (op->begin) {
        ++s.begins;
        continue;
      }
      EXPECT_LE(op->startNs, op->endNs);
      s.ends[{op->iteration, op->device}].push_back(*op);
    } else if (const auto* m = std::get_if<trace::MemorySample>(&f)) {
      s.peakMemory[m->device] = std::max(s.peakMemory[m->device], m->bytesInUse);
    }
  }
  return s;
}

// The run ended well and its stream starts with the CPU backend's header and ends with an ok
// summary of `iterations` steps.
void checkOutcomeAndFrames(const test::RunResult& r, int iterations) {
  ASSERT_TRUE(r.outcome.ok) << r.outcome.failure;
  ASSERT_EQ(r.outcome.ranks.size(), 1U);
  EXPECT_EQ(r.outcome.ranks[0].exitStatus, 0);
  EXPECT_EQ(r.outcome.ranks[0].truncatedBytes, 0U);
  const auto& frames = r.frames.at(0);
  ASSERT_FALSE(frames.empty());
  ASSERT_TRUE(std::holds_alternative<trace::Header>(frames.front()));
  const auto& header = std::get<trace::Header>(frames.front());
  EXPECT_EQ(header.backend, "cpu");
  EXPECT_EQ(header.deviceName, "cpu");
  ASSERT_TRUE(std::holds_alternative<trace::Summary>(frames.back()));
  const auto& summary = std::get<trace::Summary>(frames.back());
  EXPECT_TRUE(summary.ok);
  EXPECT_EQ(summary.iterations, iterations);
  EXPECT_EQ(summary.iterationMs.size(), static_cast<std::size_t>(iterations));
}

// An iteration's ops by (kind, stage, microbatch, occurrence).
using OpsByKey = std::map<std::tuple<int, int, int, int>, trace::OpRange>;

// Each device ran its program's steps of the iteration in order, one after another, and then
// the optimizer step; their ranges go into byKey.
void checkDeviceOrders(const exec::Program& program, int devices, int it, StreamOps& s, int& endsTotal,
                       OpsByKey& byKey) {
  for (int d = 0; d < devices; ++d) {
    const auto& got = s.ends[{it, d}];
    const auto& steps = program.perDevice[d].steps;
    ASSERT_EQ(got.size(), steps.size() + 1) << "iteration " << it << " device " << d;
    endsTotal += static_cast<int>(got.size());
    std::map<std::tuple<int, int, int>, int> seen;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      EXPECT_EQ(got[i].kind, steps[i].kind) << "device " << d << " op " << i;
      EXPECT_EQ(got[i].virtualStage, steps[i].virtualStage);
      EXPECT_EQ(got[i].microbatch, steps[i].microbatch);
      if (i > 0) {
        EXPECT_GE(got[i].startNs, got[i - 1].endNs) << "ops of one device overlap";
      }
      const auto k = std::make_tuple(static_cast<int>(got[i].kind), got[i].virtualStage, got[i].microbatch);
      byKey[{std::get<0>(k), std::get<1>(k), std::get<2>(k), seen[k]++}] = got[i];
    }
    EXPECT_EQ(got.back().kind, OpKind::OPT) << "the optimizer step comes after the flush";
  }
}

// Dependencies, checked from the plan's data flow rather than from the program.
void checkDataFlow(const Plan& plan, const OpsByKey& byKey) {
  for (const auto& [key, op] : byKey) {
    const auto [kind, stage, mb, occurrence] = key;
    const auto ok = static_cast<OpKind>(kind);
    const auto& vs = plan.stage(stage);
    int prev = -1, next = -1;
    for (const auto& other : plan.virtualStages) {
      if (other.component != vs.component || other.pipeline != vs.pipeline) continue;
      if (other.id < stage) prev = other.id;
      if (other.id > stage && next < 0) next = other.id;
    }
    auto endOf = [&, mb = mb](OpKind k, int s) -> std::int64_t {
      auto found = byKey.find({static_cast<int>(k), s, mb, 0});
      return found == byKey.end() ? -1 : found->second.endNs;
    };
    if (ok == OpKind::F && prev >= 0) {
      EXPECT_GE(op.startNs, endOf(OpKind::F, prev)) << "F after upstream F";
    }
    if (ok == OpKind::B || ok == OpKind::BW) {
      EXPECT_GE(op.startNs, endOf(OpKind::F, stage));
      if (next >= 0) {
        const std::int64_t b = std::max(endOf(OpKind::B, next), endOf(OpKind::BW, next));
        EXPECT_GE(op.startNs, b) << "B after downstream B";
      }
    }
    if (ok == OpKind::W) {
      EXPECT_GE(op.startNs, endOf(OpKind::B, stage));
    }
    if (ok == OpKind::N && prev >= 0 && occurrence == 0) {
      EXPECT_GE(op.startNs, endOf(OpKind::N, prev)) << "N after the upstream N of its samples";
    }
  }
}

// Dependencies beyond the data flow (frozen outputs to their consumers, vocabulary S/T),
// derived from the plan as the planner derives them.
void checkDerivedDependencies(const Plan& plan, StreamOps& s, int iterations) {
  const auto lanes = planLanes(plan);
  const auto derived = derivedDependencies(plan, lanes);
  for (int it = 0; it < iterations; ++it) {
    for (const OpDependency& dep : derived) {
      const auto& from = s.ends[{it, dep.from.device}];
      const auto& to = s.ends[{it, dep.to.device}];
      ASSERT_LT(static_cast<std::size_t>(dep.from.index), from.size());
      ASSERT_LT(static_cast<std::size_t>(dep.to.index), to.size());
      EXPECT_GE(to[static_cast<std::size_t>(dep.to.index)].startNs,
                from[static_cast<std::size_t>(dep.from.index)].endNs)
          << opKindName(to[static_cast<std::size_t>(dep.to.index)].kind) << " on device " << dep.to.device
          << " starts before the " << opKindName(from[static_cast<std::size_t>(dep.from.index)].kind) << " on device "
          << dep.from.device << " it depends on";
    }
  }
}

// Checks everything the issue asks of a run: header first, each plan op exactly once per
// iteration (plus one optimizer step per device), per-device plan order, every op after the
// ops it depends on, memory samples reaching the program's peak, an ok summary.
void checkRun(const Plan& plan, const test::RunResult& r, int iterations) {
  checkOutcomeAndFrames(r, iterations);
  if (::testing::Test::HasFatalFailure()) return;
  auto program = exec::compileProgram(plan);
  ASSERT_THAT(program, HasValue());
  StreamOps s = streamOps(r.frames.at(0));
  const int devices = plan.config.devices;
  int endsTotal = 0;
  for (int it = 0; it < iterations; ++it) {
    OpsByKey byKey;
    checkDeviceOrders(*program, devices, it, s, endsTotal, byKey);
    if (::testing::Test::HasFatalFailure()) return;
    checkDataFlow(plan, byKey);
  }
  checkDerivedDependencies(plan, s, iterations);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(s.begins, endsTotal) << "one begin frame per end frame";
  for (int d = 0; d < devices; ++d) {
    const auto& dp = program->perDevice[d];
    EXPECT_EQ(s.peakMemory[d], dp.staticBytes + dp.peakActivationBytes) << "device " << d;
  }
}

class CpuRun : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuRun, RunsThePlanEndToEnd) {
  const Plan plan = test::makeTestPlan(GetParam(), 4, 6);
  const std::string path = test::writePlan(plan, GetParam() + ".plan.json");
  const auto r = test::runExec(path, "cpu", 2, {"--max-op-ms", "1", "--timeout-s", "30"});
  checkRun(plan, r, 2);
}

INSTANTIATE_TEST_SUITE_P(Schedules, CpuRun, ::testing::Values("1f1b", "zb-h1", "zb-v", "fill"));

TEST(CpuRunWarmup, StreamsOnlyMeasuredIterations) {
  const Plan plan = test::makeTestPlan("zb-h1", 2, 3);
  const std::string path = test::writePlan(plan, "warmup.plan.json");
  const auto r = test::runExec(path, "cpu", 1, {"--max-op-ms", "0.5", "--warmup", "2"});
  checkRun(plan, r, 1);
}

TEST(CpuRunMemory, RefusesAPlanThatDoesNotFitBeforeTheFirstOp) {
  const Plan plan = test::makeTestPlan("1f1b", 2, 4);
  const std::string path = test::writePlan(plan, "oom.plan.json");
  const auto r = test::runExec(path, "cpu", 1, {"--device-memory", "3MiB"});
  EXPECT_FALSE(r.outcome.ok);
  EXPECT_NE(r.outcome.failure.find("exited with status 1"), std::string::npos) << r.outcome.failure;
  EXPECT_NE(r.outcome.ranks[0].lastLog.find("out of memory"), std::string::npos) << r.outcome.ranks[0].lastLog;
  // Refused before anything ran: not even a header.
  EXPECT_EQ(r.outcome.ranks[0].frames, 0U);
}

TEST(CpuRunRefusal, UnknownKindAndMissingFileAreClearErrors) {
  const Plan plan = test::makeTestPlan("1f1b", 2, 2);
  std::string text = planToJson(plan).dump();
  const auto at = text.find(R"("kind":"BW")");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 11, R"("kind":"QQ")");
  const std::string path = test::tempPath("badkind.plan.json");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  const auto r = test::runExec(path, "cpu", 1);
  EXPECT_FALSE(r.outcome.ok);
  EXPECT_NE(r.outcome.ranks[0].lastLog.find("plan refused"), std::string::npos) << r.outcome.ranks[0].lastLog;
  EXPECT_NE(r.outcome.ranks[0].lastLog.find("kind"), std::string::npos) << r.outcome.ranks[0].lastLog;

  const auto missing = test::runExec(test::tempPath("nope.json"), "cpu", 1);
  EXPECT_FALSE(missing.outcome.ok);
  EXPECT_NE(missing.outcome.ranks[0].lastLog.find("nope.json"), std::string::npos);
}

#if defined(PIPESTUDIO_TEST_HAVE_PLANNER)
// Plans from the real planner, scaled down to ≤ 1 ms per op.
TEST(CpuRunPlanner, RunsPlannerPlans) {
  for (const std::string schedule : {"1f1b", "zb-h1", "zb-v"}) {
    PlanRequest req;
    req.model.name = "planner-test";
    req.model.samplesPerMicrobatch = 1;
    Component bb{"backbone", true, {}, {}};
    for (int l = 0; l < 8; ++l) bb.layers.push_back(test::testLayer("l" + std::to_string(l), 1.0));
    req.model.components.push_back(bb);
    req.cluster = test::makeTestPlan("1f1b", 4, 1).cluster;
    req.config.schedule = schedule;
    req.config.devices = 4;
    req.config.microbatches = 8;
    req.config.chunksPerDevice = schedule == "zb-v" ? 2 : 1;
    auto plan = makePlan(req);
    if (!plan) {
      ADD_FAILURE() << schedule << ": " << plan.message();
      continue;
    }
    const std::string path = test::writePlan(*plan, schedule + "-planner.plan.json");
    const auto r = test::runExec(path, "cpu", 1, {"--max-op-ms", "1"});
    checkRun(*plan, r, 1);
  }
}

// Plans whose dependencies go beyond the data flow: vocabulary-parallel S/T passes, and frozen
// outputs that must reach their consumers (in the iteration for --fill none, by the end of the
// iteration for the next one with --fill greedy).
TEST(CpuRunPlanner, RunsVocabularyParallelAndFrozenOutputPlans) {
  const std::string resources = PIPESTUDIO_RESOURCES;
  auto cluster = loadCluster(resources + "/clusters/a100-1x8-nvlink.json");
  ASSERT_THAT(cluster, HasValue());
  struct Case {
    std::string model;
    std::string fill;
    bool vocab;
  };
  for (const Case& c : {Case{"gpt3-1.3b.json", "none", true}, Case{"stable-diffusion-2.1.json", "none", false},
                        Case{"stable-diffusion-2.1.json", "greedy", false}}) {
    auto model = loadModel(resources + "/models/" + c.model);
    ASSERT_THAT(model, HasValue());
    PlanRequest req;
    req.model = *model;
    req.cluster = *cluster;
    req.config.schedule = "1f1b";
    req.config.devices = 4;
    req.config.microbatches = 8;
    req.config.partition = "balanced";
    req.config.fill = c.fill;
    auto plan = c.vocab ? makeVocabParallelPlan(req) : makePlan(req);
    ASSERT_THAT(plan, HasValue()) << c.model;
    const auto lanes = planLanes(*plan);
    if (c.vocab) {
      EXPECT_FALSE(vocabDependencies(*plan, lanes).empty()) << "a vocabulary-parallel plan has S/T dependencies";
    } else if (c.fill == "none") {
      EXPECT_FALSE(frozenDependencies(*plan, lanes).empty()) << "frozen outputs cross devices";
    } else {
      EXPECT_FALSE(crossIterationFrozenOutputs(*plan, lanes).empty()) << "frozen outputs cross devices";
    }
    auto program = exec::compileProgram(*plan);
    ASSERT_THAT(program, HasValue());
    const Status rendezvous = exec::checkRendezvous(*program);
    EXPECT_THAT(rendezvous, HasValue());
    const std::string path = test::writePlan(*plan, c.model + "-" + c.fill + ".plan.json");
    const auto r = test::runExec(path, "cpu", 2, {"--max-op-ms", "1"});
    checkRun(*plan, r, 2);
  }
}
#endif

}  // namespace
}  // namespace pipestudio
