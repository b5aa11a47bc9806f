// Bad plan documents (tests/data/bad/plan-*.json): out-of-range devices and virtual stages,
// layer ranges, unknown components, broken ops and structural inconsistencies, each reported
// as `file:line:col: /json/pointer: what (expected …)`.
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <limits>
#include <string>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/FileCaseName.hpp"
#include "support/PointedMessage.hpp"

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

const std::string kData = std::string(PIPESTUDIO_TEST_DATA) + "/";

struct Case {
  const char* file;
  const char* pointer;
  int line;
  int column;
  const char* what;
};

class BadPlan : public ::testing::TestWithParam<Case> {};

TEST_P(BadPlan, NamesFileLinePointerAndExpectation) {
  const Case& c = GetParam();
  const std::string path = kData + "bad/" + c.file;
  auto plan = loadPlan(path);
  ASSERT_FALSE(plan) << c.file << " was accepted";
  test::expectPointedMessage(plan.message(), path, c.line, c.column, c.pointer, c.what);
}

const auto kCases = std::to_array<Case>({
    {"plan-op-device-out-of-range.json", "/ops/1/device", 84, 17, "is 5 (expected an integer in [0, 1])"},
    {"plan-stage-device-out-of-range.json", "/virtual_stages/1/device", 67, 17, "is 7 (expected an integer in [0, 1])"},
    {"plan-op-stage-out-of-range.json", "/ops/2/virtual_stage", 93, 24, "is 9 (expected an integer in [0, 1])"},
    {"plan-layer-out-of-range.json", "/virtual_stages/1/last_layer", 71, 21, "is 10 (expected an integer in [0, 1])"},
    {"plan-unknown-component.json", "/virtual_stages/1/component", 69, 20,
     "'unet' is not a component of the plan's model (expected one of: backbone)"},
    {"plan-op-kind.json", "/ops/0/kind", 78, 15, "(expected one of F, B, W, BW, N, S, T, OPT, D2H, H2D)"},
    {"plan-end-before-start.json", "/ops/3/end_ms", 105, 17, "is before start_ms"},
    {"plan-op-device-mismatch.json", "/ops/1/device", 84, 17, "virtual stage 0 is on device 0"},
    {"plan-duplicate-forward.json", "/ops/4", 107, 5, "appears twice, first at /ops/0 (expected exactly one)"},
    {"plan-embedded-model-bad.json", "/model/components/0/layers/1/forward_ms", 28, 27, "is -2"},
    {"plan-zero-devices.json", "/config/devices", 5, 16, "is 0 (expected an integer in [1, 1000000])"},
    {"plan-future-schema.json", "/schema", 2, 13, "'pipestudio.plan/2' is a version"},
    // Found by fuzz_loaders: a virtual stage without "id" made the reader throw.
    {"plan-stage-missing-id.json", "/virtual_stages/1", 65, 5, "missing required field 'id'"},
    {"plan-op-time-wrong-type.json", "/ops/0/start_ms", 80, 19, "is a string (expected a number)"},
    {"plan-moe-comm-sms-zero.json", "/config/moe_comm_sms", 10, 21, "is 0 (expected an integer in [1, 1024])"},
    {"plan-moe-rank-capacity-below-one.json", "/config/moe_expert_rank_capacity_factor", 10, 40,
     "is 0.5 (expected a number in [1, 64])"},
    {"plan-moe-flex-backend-unknown.json", "/config/moe_flex_backend", 11, 25,
     "'nccl' is not a flex dispatcher backend (expected deepep or hybridep)"},
    {"plan-cuda-graph-impl-unknown.json", "/config/cuda_graph_impl", 10, 24,
     "'eager' is not a CUDA graph implementation (expected none|local|transformer_engine|full_iteration)"},
});

INSTANTIATE_TEST_SUITE_P(Corpus, BadPlan, ::testing::ValuesIn(kCases), test::fileCaseName<Case>);

TEST(BadPlan, TheUnbrokenOriginalLoads) {
  auto plan = loadPlan(kData + "good/tiny-plan.json");
  ASSERT_THAT(plan, HasValue());
  EXPECT_EQ(plan->virtualStages.size(), 2U);
  EXPECT_EQ(plan->ops.size(), 4U);
  EXPECT_DOUBLE_EQ(plan->metrics.makespanMs, 6.0);
}

TEST(BadPlan, HugeByteCountsSaturateInsteadOfOverflowing) {
  // 4 layers of 1 PiB activations each and many forwards without backward: the memory
  // timeline must not overflow int64 (undefined behaviour) and must stay monotone.
  auto doc = loadJsonFile(kData + "good/tiny-plan.json");
  ASSERT_TRUE(doc);
  Json j = doc->root;
  for (auto& layer : j["model"]["components"][0]["layers"]) layer["activation_bytes"] = std::int64_t{1} << 50;
  j["config"]["microbatches"] = 20000;
  Json ops = Json::array();
  for (int mb = 0; mb < 20000; ++mb) {
    ops.push_back(Json{
        {"device", 0}, {"virtual_stage", 0}, {"kind", "F"}, {"microbatch", mb}, {"start_ms", mb}, {"end_ms", mb + 1}});
  }
  j["ops"] = ops;
  auto copy = parseJson(j.dump(), "<huge>");
  ASSERT_TRUE(copy);
  JsonReader r(*copy);
  auto plan = readPlan(r, r.root());
  ASSERT_TRUE(plan) << r.toError().message;
  const MemoryTimeline t = memoryTimeline(*plan);
  EXPECT_EQ(t.peakActivationBytes[0], std::numeric_limits<std::int64_t>::max());
  EXPECT_GT(t.peakBytes[0], 0);
}

}  // namespace
}  // namespace pipestudio
