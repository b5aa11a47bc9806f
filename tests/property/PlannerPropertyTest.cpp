// The relations the planner must never contradict (issue 45; docs/benchmarks.md, "Property
// suite"), over the bundled models and clusters (resources/) and a grid of schedules,
// partitioners, recipes and sizes:
//   - a memory-saving schedule holds no more than the schedule it saves against (pipeoffload
//     against 1f1b, v-half and v-min against zb-v, zb-auto under a limit against the limit and
//     against zb-auto without one);
//   - an optimal solver is never beaten by a heuristic on its own objective (dp against balanced
//     and uniform, on the simulated iteration);
//   - the parts of a device's memory add up to its peak, and the memory curve reaches it;
//   - more memory never gives a slower zb-auto plan;
//   - more microbatches never raise 1F1B's bubble ratio;
//   - `simulate` of a saved plan gives the plan again;
//   - export → import of the schedule CSV gives the same order and metrics.
// A failure prints the `pipestudio-cli` command that re-runs its case. The default grid runs in
// `make test`; PIPESTUDIO_PROPERTY_GRID=full runs the larger one (`make bench`, bench/property).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasValue;

namespace pipestudio::test {
namespace {

bool fullGrid() {
  const char* grid = std::getenv("PIPESTUDIO_PROPERTY_GRID");
  return grid != nullptr && std::string(grid) == "full";
}

// A bundled model on a bundled cluster with the hybrid-parallel degrees of one pipeline rank.
struct Recipe {
  std::string model;
  std::string cluster;
  int devices = 4;
  int tp = 1;
  int dp = 1;
  int ep = 1;
  int zero = 0;
  std::string recompute = "none";
};

// One plan request, and the command line that makes the same plan.
struct Case {
  Recipe recipe;
  std::string schedule;
  int microbatches = 8;
  int chunks = 0;  // 0: the schedule's default, as the CLI takes it
  std::string partition = "balanced";
  std::optional<std::int64_t> memoryLimitBytes;
  double offloadRatio = 0;

  int chunksOrDefault() const {
    if (chunks > 0) return chunks;
    const ScheduleGenerator* g = findScheduleGenerator(schedule);
    return g ? g->defaultChunksPerDevice() : 1;
  }

  PlanRequest request() const;

  std::string command() const {
    std::ostringstream out;
    out << "pipestudio-cli plan --model resources/models/" << recipe.model << ".json --cluster resources/clusters/"
        << recipe.cluster << ".json --schedule " << schedule << " --devices " << recipe.devices << " --microbatches "
        << microbatches << " --chunks " << chunksOrDefault() << " --partition " << partition;
    if (recipe.tp > 1) out << " --tp " << recipe.tp;
    if (recipe.dp > 1) out << " --dp " << recipe.dp;
    if (recipe.ep > 1) out << " --ep " << recipe.ep;
    if (recipe.zero > 0) out << " --zero " << recipe.zero;
    if (recipe.recompute != "none") out << " --recompute " << recipe.recompute;
    if (memoryLimitBytes) out << " --memory-limit " << *memoryLimitBytes;
    if (offloadRatio > 0) out << " --offload-ratio " << offloadRatio;
    return out.str();
  }
};

// The bundled documents (resources/<folder>/<name>.json), each loaded once.
template <class Spec, class Load>
const Spec& loadedOnce(const std::string& folder, const std::string& name, const Load& load) {
  static std::map<std::string, Spec> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    auto doc = load(std::string(PIPESTUDIO_RESOURCES) + "/" + folder + "/" + name + ".json");
    EXPECT_THAT(doc, HasValue());
    it = loaded.emplace(name, doc ? *doc : Spec{}).first;
  }
  return it->second;
}

const ModelSpec& bundledModel(const std::string& name) {
  return loadedOnce<ModelSpec>("models", name, [](const std::string& path) { return loadModel(path); });
}

const ClusterSpec& bundledCluster(const std::string& name) {
  return loadedOnce<ClusterSpec>("clusters", name, [](const std::string& path) { return loadCluster(path); });
}

PlanRequest Case::request() const {
  PlanRequest r;
  r.model = bundledModel(recipe.model);
  r.cluster = bundledCluster(recipe.cluster);
  PlanConfig& c = r.config;
  c.schedule = schedule;
  c.devices = recipe.devices;
  c.microbatches = microbatches;
  c.chunksPerDevice = chunksOrDefault();
  c.partition = partition;
  c.memoryLimitBytes = memoryLimitBytes;
  c.offloadRatio = offloadRatio;
  Parallelism& par = c.parallel;
  par.tensor = recipe.tp;
  par.data = recipe.dp;
  par.expert = recipe.ep;
  par.zeroStage = recipe.zero;
  par.sequenceParallel = recipe.tp > 1;
  par.recompute = recomputeFromName(recipe.recompute).value_or(Recompute::None);
  return r;
}

Case caseOf(const Recipe& recipe, const std::string& schedule, int microbatches,
            const std::string& partition = "balanced", int chunks = 0) {
  Case c;
  c.recipe = recipe;
  c.schedule = schedule;
  c.microbatches = microbatches;
  c.partition = partition;
  c.chunks = chunks;
  return c;
}

std::string rerun(const Case& c) { return "\n  re-run: " + c.command(); }

// The plans of the suite, made once per case (several properties read the same plan).
const Expected<Plan>& planOf(const Case& c) {
  static std::map<std::string, Expected<Plan>> made;
  const std::string key = c.command();
  auto it = made.find(key);
  if (it == made.end()) it = made.emplace(key, makePlan(c.request())).first;
  return it->second;
}

std::int64_t peakBytes(const Plan& plan) {
  std::int64_t peak = 0;
  for (const DeviceMetrics& dm : plan.metrics.devices) peak = std::max(peak, dm.peakMemoryBytes);
  return peak;
}

bool noSlower(double a, double b) { return a <= b * (1 + 1e-9) + 1e-9; }

// A property skips the cases whose plan it compares against does not exist (it does not fit the
// GPUs); it must still have checked most of its cases, or it says nothing.
struct Coverage {
  int tried = 0;
  int checked = 0;
  // Counts a case tried, and checked where it planned; whether it planned (is to be checked).
  bool count(bool planned) {
    ++tried;
    if (planned) ++checked;
    return planned;
  }
  void expectMost(const char* property) const {
    EXPECT_GT(checked, 0) << property << ": no case checked";
    EXPECT_GE(2 * checked, tried) << property << ": only " << checked << " of " << tried
                                  << " cases planned (the rest did not fit the GPUs)";
  }
};

// --- the grid -------------------------------------------------------------------------------

std::vector<Recipe> recipes() {
  std::vector<Recipe> out = {
      {.model = "gpt3-1.3b", .cluster = "a100-1x8-nvlink", .devices = 4},
      {.model = "llama3-8b", .cluster = "h100-4x8-ib", .devices = 4},
      {.model = "qwen3-30b-a3b", .cluster = "h100-4x8-ib", .devices = 4, .dp = 4, .ep = 4, .zero = 1},
      {.model = "llama3-70b", .cluster = "h100-8x8-ib", .devices = 8, .tp = 4, .dp = 2, .zero = 1},
  };
  if (fullGrid()) {
    out.push_back({.model = "gpt3-1.3b", .cluster = "h100-4x8-ib", .devices = 8});
    out.push_back({.model = "llama3-8b",
                   .cluster = "a100-1x8-nvlink",
                   .devices = 4,
                   .tp = 2,
                   .zero = 1,
                   .recompute = "selective"});
    out.push_back(
        {.model = "mixtral-8x7b", .cluster = "h100-8x8-ib", .devices = 4, .tp = 2, .dp = 4, .ep = 4, .zero = 1});
    out.push_back({.model = "llama3-8b", .cluster = "workstation-2gpu", .devices = 2, .recompute = "full"});
    out.push_back({.model = "qwen3-30b-a3b", .cluster = "h100-8x8-ib", .devices = 8, .dp = 8, .ep = 8, .zero = 1});
  }
  return out;
}

// Microbatches per pipeline: multiples of the devices.
std::vector<int> microbatchFactors() { return fullGrid() ? std::vector<int>{2, 4} : std::vector<int>{4}; }

std::vector<std::string> partitions() {
  return fullGrid() ? std::vector<std::string>{"balanced", "uniform", "dp"} : std::vector<std::string>{"balanced"};
}

// --- memory-saving schedules ------------------------------------------------------------------

// PipeOffload (Wan et al. 2025) holds no more than 1F1B on the same request, whatever the host
// link carries and whatever share of the activations it is asked to offload.
TEST(PlannerProperty, PipeoffloadHoldsNoMoreThanOneFOneB) {
  Coverage coverage;
  for (const Recipe& recipe : recipes()) {
    for (const int factor : microbatchFactors()) {
      for (const std::string& partition : partitions()) {
        for (const double ratio : fullGrid() ? std::vector<double>{0, 0.25, 1} : std::vector<double>{0, 1}) {
          const Case base = caseOf(recipe, "1f1b", recipe.devices * factor, partition);
          Case saving = base;
          saving.schedule = "pipeoffload";
          saving.offloadRatio = ratio;
          const auto& one = planOf(base);
          const auto& offload = planOf(saving);
          // `uniform` refuses layer counts that pipeoffload's chunks do not divide (its shape, not
          // its memory): no case.
          if (::testing::Value(offload, HasError("cannot divide"))) continue;
          if (!coverage.count(one.hasValue())) continue;  // 1F1B does not fit: nothing to hold pipeoffload to
          ASSERT_THAT(offload, HasValue()) << rerun(saving);
          EXPECT_LE(peakBytes(*offload), peakBytes(*one))
              << "pipeoffload peaks above 1f1b (" << formatBytes(static_cast<double>(peakBytes(*offload))) << " > "
              << formatBytes(static_cast<double>(peakBytes(*one))) << ")" << rerun(saving) << rerun(base);
        }
      }
    }
  }
  coverage.expectMost("pipeoffload against 1f1b");
}

// V-Half and V-Min (Qi et al. 2024) hold no more than ZB-V, whose memory they trade time for.
TEST(PlannerProperty, VHalfAndVMinHoldNoMoreThanZbV) {
  Coverage coverage;
  for (const Recipe& recipe : recipes()) {
    for (const int factor : microbatchFactors()) {
      for (const std::string& partition : partitions()) {
        const Case zbv = caseOf(recipe, "zb-v", recipe.devices * factor, partition);
        const auto& full = planOf(zbv);
        if (!coverage.count(full.hasValue())) continue;
        for (const char* name : {"v-half", "v-min"}) {
          Case saving = zbv;
          saving.schedule = name;
          const auto& plan = planOf(saving);
          ASSERT_THAT(plan, HasValue()) << rerun(saving);
          EXPECT_LE(peakBytes(*plan), peakBytes(*full)) << name << " peaks above zb-v" << rerun(saving) << rerun(zbv);
        }
      }
    }
  }
  coverage.expectMost("v-half and v-min against zb-v");
}

// zb-auto under a memory limit stays within it, holds no more than without it, and is never
// slower with more memory. Slower is the makespan, zb-auto's objective: the optimizer step after
// it depends on the split, which a limit can change (balanced re-splits within the memory
// budgets), so the iteration of a limited plan can be shorter by a different step.
TEST(PlannerProperty, ZbAutoStaysWithinItsLimitAndMoreMemoryIsNeverSlower) {
  int checked = 0;
  for (const Recipe& recipe : recipes()) {
    const Case free = caseOf(recipe, "zb-auto", recipe.devices * 2);
    const auto& unlimited = planOf(free);
    if (!unlimited) continue;  // does not fit the GPUs: no limit below it plans either
    ++checked;
    // Limits between what one microbatch in flight needs and what the unlimited plan holds.
    std::int64_t floor = 0;
    for (const DeviceMetrics& dm : unlimited->metrics.devices) floor = std::max(floor, dm.staticMemoryBytes);
    const std::int64_t top = peakBytes(*unlimited);
    std::optional<double> slower;  // the iteration under the previous, smaller limit
    std::string previous;
    for (const double share :
         fullGrid() ? std::vector<double>{0.3, 0.5, 0.7, 0.85, 1.0} : std::vector<double>{0.5, 1.0}) {
      Case limited = free;
      limited.memoryLimitBytes = floor + static_cast<std::int64_t>(share * static_cast<double>(top - floor));
      const auto& plan = planOf(limited);
      if (!plan) continue;  // below what the order needs
      EXPECT_LE(peakBytes(*plan), *limited.memoryLimitBytes) << "zb-auto above its limit" << rerun(limited);
      EXPECT_LE(peakBytes(*plan), top) << "zb-auto holds more under a limit than without" << rerun(limited)
                                       << rerun(free);
      if (slower) {
        EXPECT_TRUE(noSlower(plan->metrics.makespanMs, *slower))
            << "more memory gave a slower zb-auto plan: makespan " << plan->metrics.makespanMs << " ms against "
            << *slower << " ms" << rerun(limited) << previous;
      }
      slower = plan->metrics.makespanMs;
      previous = rerun(limited);
    }
    if (slower) {
      EXPECT_TRUE(noSlower(unlimited->metrics.makespanMs, *slower))
          << "zb-auto without a limit is slower than under one: makespan " << unlimited->metrics.makespanMs
          << " ms against " << *slower << " ms" << rerun(free) << previous;
    }
  }
  EXPECT_GE(checked, 2) << "too few recipes fit for the property to say anything";
}

// --- optimal solvers against heuristics --------------------------------------------------------

// dp minimises the simulated iteration: never slower than balanced's or uniform's split, and it
// plans wherever they do.
TEST(PlannerProperty, DpIsNeverSlowerThanBalancedOrUniform) {
  struct Shape {
    const char* schedule;
    int chunks;
  };
  std::vector<Shape> shapes = {{"1f1b", 1}, {"interleaved-1f1b", 2}};
  Coverage coverage;
  if (fullGrid()) shapes.insert(shapes.end(), {{"zb-v", 2}, {"zb-h1", 1}, {"interleaved-1f1b", 4}});
  for (const Recipe& recipe : recipes()) {
    for (const Shape& shape : shapes) {
      const Case dp = caseOf(recipe, shape.schedule, recipe.devices * 4, "dp", shape.chunks);
      const auto& optimal = planOf(dp);
      for (const char* heuristic : {"balanced", "uniform"}) {
        Case other = dp;
        other.partition = heuristic;
        const auto& plan = planOf(other);
        if (!coverage.count(plan.hasValue())) continue;
        ASSERT_THAT(optimal, HasValue()) << "dp refuses where " << heuristic << " plans" << rerun(dp) << rerun(other);
        EXPECT_TRUE(noSlower(optimal->metrics.iterationMs, plan->metrics.iterationMs))
            << "dp " << optimal->metrics.iterationMs << " ms, " << heuristic << " " << plan->metrics.iterationMs
            << " ms" << rerun(dp) << rerun(other);
      }
    }
  }
  coverage.expectMost("dp against balanced and uniform");
}

// --- memory accounting -------------------------------------------------------------------------

// Every plan the suite made: each device's parts add up to its peak, static plus activations is
// the peak, and the memory curve reaches exactly that peak.
void expectMemoryAddsUp(const Case& c, const Plan& plan) {
  const MemoryTimeline timeline = memoryTimeline(plan);
  for (std::size_t d = 0; d < plan.metrics.devices.size(); ++d) {
    const DeviceMetrics& dm = plan.metrics.devices[d];
    const MemoryBreakdown& mb = dm.memory;
    std::int64_t parts = 0;  // every line of the breakdown but what the GPU keeps back
    for (const MemoryPart& part : memoryParts()) parts += part.keptBack ? 0 : mb.*part.bytes;
    EXPECT_EQ(parts, dm.peakMemoryBytes) << "device " << d << ": the parts do not add up to the peak" << rerun(c);
    EXPECT_EQ(dm.staticMemoryBytes + dm.peakActivationBytes, dm.peakMemoryBytes) << "device " << d << rerun(c);
    EXPECT_EQ(mb.totalBytes(), dm.peakMemoryBytes + mb.marginBytes()) << "device " << d << rerun(c);
    ASSERT_LT(d, timeline.peakBytes.size()) << rerun(c);
    EXPECT_EQ(timeline.peakBytes[d], dm.peakMemoryBytes) << "device " << d << ": the curve's peak" << rerun(c);
    EXPECT_GE(mb.offloadSavedBytes, 0) << rerun(c);
  }
}

TEST(PlannerProperty, MemoryPartsAddUpToThePeak) {
  std::vector<std::string> schedules = {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "v-half", "pipeoffload"};
  if (fullGrid()) schedules.insert(schedules.end(), {"gpipe", "zb-h2", "v-min", "zb-auto", "dualpipe-v"});
  Coverage coverage;
  for (const Recipe& recipe : recipes()) {
    for (const std::string& schedule : schedules) {
      const Case c = caseOf(recipe, schedule, recipe.devices * 4);
      const auto& plan = planOf(c);
      if (!coverage.count(plan.hasValue())) continue;  // another property says whether it should have planned
      expectMemoryAddsUp(c, *plan);
    }
  }
  coverage.expectMost("memory parts");
}

// --- sizes -------------------------------------------------------------------------------------

// 1F1B's bubble is (p − 1) stage times against m of work: more microbatches never raise its
// share.
TEST(PlannerProperty, MoreMicrobatchesNeverRaiseOneFOneBsBubble) {
  Coverage coverage;
  for (const Recipe& recipe : recipes()) {
    std::optional<double> before;
    std::string previous;
    for (const int factor : fullGrid() ? std::vector<int>{1, 2, 3, 4, 8, 16} : std::vector<int>{1, 2, 4, 8}) {
      const Case c = caseOf(recipe, "1f1b", recipe.devices * factor);
      const auto& plan = planOf(c);
      if (!coverage.count(plan.hasValue())) continue;
      if (before) {
        EXPECT_LE(plan->metrics.bubbleRatio, *before + 1e-12) << "1f1b's bubble ratio rose from " << *before << " to "
                                                              << plan->metrics.bubbleRatio << rerun(c) << previous;
      }
      before = plan->metrics.bubbleRatio;
      previous = rerun(c);
    }
  }
  coverage.expectMost("1f1b's bubble against microbatches");
}

// --- round trips -------------------------------------------------------------------------------

// The plans a user saves and re-times, and exports as schedule CSV and imports back.
std::vector<Case> roundTripCases() {
  std::vector<Case> out;
  std::vector<std::string> schedules = {"1f1b", "interleaved-1f1b", "zb-v", "pipeoffload"};
  if (fullGrid()) schedules.insert(schedules.end(), {"zb-h1", "zb-h2", "v-half", "zb-auto", "gpipe"});
  for (const Recipe& recipe : recipes()) {
    for (const std::string& schedule : schedules) out.push_back(caseOf(recipe, schedule, recipe.devices * 4));
  }
  return out;
}

void expectSamePlan(const Case& c, const Plan& a, const Plan& b, const std::string& what) {
  ASSERT_EQ(a.ops.size(), b.ops.size()) << what << rerun(c);
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const Op& x = a.ops[i];
    const Op& y = b.ops[i];
    ASSERT_TRUE(x.device == y.device && x.virtualStage == y.virtualStage && x.kind == y.kind &&
                x.microbatch == y.microbatch)
        << what << ": op " << i << " differs" << rerun(c);
    EXPECT_NEAR(x.startMs, y.startMs, 1e-9 * std::max(1.0, std::abs(x.startMs))) << what << ": op " << i << rerun(c);
  }
  EXPECT_NEAR(a.metrics.iterationMs, b.metrics.iterationMs, 1e-9 * a.metrics.iterationMs) << what << rerun(c);
  EXPECT_DOUBLE_EQ(a.metrics.bubbleRatio, b.metrics.bubbleRatio) << what << rerun(c);
  ASSERT_EQ(a.metrics.devices.size(), b.metrics.devices.size()) << what << rerun(c);
  for (std::size_t d = 0; d < a.metrics.devices.size(); ++d) {
    EXPECT_EQ(a.metrics.devices[d].peakMemoryBytes, b.metrics.devices[d].peakMemoryBytes)
        << what << ": device " << d << rerun(c);
  }
}

// `pipestudio-cli simulate` of what `plan -o` saved: loadPlan, then resimulate.
TEST(PlannerProperty, SimulateOfASavedPlanIsThePlan) {
  const auto dir = std::filesystem::temp_directory_path() / ("pipestudio-property-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Coverage coverage;
  for (const Case& c : roundTripCases()) {
    const auto& plan = planOf(c);
    if (!coverage.count(plan.hasValue())) continue;
    const std::string path = (dir / "plan.json").string();
    ASSERT_TRUE(savePlan(path, *plan)) << rerun(c);
    auto loaded = loadPlan(path);
    ASSERT_THAT(loaded, HasValue()) << rerun(c);
    auto again = resimulate(*loaded);
    ASSERT_THAT(again, HasValue()) << rerun(c) << " -o plan.json && pipestudio-cli simulate plan.json";
    expectSamePlan(c, *plan, *again, "simulate of the saved plan");
  }
  std::filesystem::remove_all(dir);
  coverage.expectMost("simulate of a saved plan");
}

// `export --format csv` then `plan --schedule custom --csv` (and importing the CSV into the plan).
TEST(PlannerProperty, ScheduleCsvRoundTripIsExact) {
  Coverage coverage;
  for (const Case& c : roundTripCases()) {
    const auto& plan = planOf(c);
    if (!coverage.count(plan.hasValue())) continue;
    if (std::any_of(plan->ops.begin(), plan->ops.end(), [](const Op& op) { return isHostCopy(op.kind); })) {
      continue;  // schedule CSV has no host copies (docs/formats.md)
    }
    auto csv = scheduleCsv(*plan);
    ASSERT_THAT(csv, HasValue()) << rerun(c);
    auto imported = importScheduleCsv(*plan, *csv, "roundtrip.csv");
    ASSERT_THAT(imported, HasValue()) << rerun(c);
    expectSamePlan(c, *plan, *imported, "schedule CSV imported into the plan");
    auto again = scheduleCsv(*imported);
    ASSERT_THAT(again, HasValue()) << rerun(c);
    EXPECT_EQ(*again, *csv) << "the CSV changed on its way back" << rerun(c);
  }
  coverage.expectMost("schedule CSV round trip");
}

}  // namespace
}  // namespace pipestudio::test
