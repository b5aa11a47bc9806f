// Memory as the recipes run (issue 42): every part of a device's peak is a line that the plan
// document, the summary and the out-of-memory message all show, and they add up to the peak;
// Megatron-Core's activation offloading (layers and modules) with its bad input; the recipes of
// the issue that ran and must fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipestudio/model/GpuCatalog.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/BundledPlans.hpp"
#include "support/ExpectedMatchers.hpp"

using pipestudio::test::HasValue;

namespace pipestudio {
namespace {

using test::bundledRequest;

// The part names one device's line of an out-of-memory message lists: between "= " and the
// first "; " (then "kept back: …" and "over by …").
std::vector<std::string> listedParts(const std::string& message, int device) {
  const std::string head = "device " + std::to_string(device) + ": peak ";
  const auto at = message.find(head);
  if (at == std::string::npos) return {};
  const auto from = message.find("= ", at) + 2;
  const auto to = message.find("; ", from);
  std::vector<std::string> names;
  const std::string parts = message.substr(from, to - from);
  std::size_t p = 0;
  while (p < parts.size()) {
    const auto end = std::min(parts.find(" + ", p), parts.size());
    std::string item = parts.substr(p, end - p);
    // "optimizer state 32.25 GiB": the name is what precedes the number.
    const auto digit = item.find_first_of("0123456789");
    names.push_back(item.substr(0, digit == std::string::npos ? item.size() : digit - 1));
    p = end == parts.size() ? end : end + 3;
  }
  return names;
}

std::int64_t bytesOf(const MemoryBreakdown& m, const std::string& name) {
  for (const MemoryPart& part : memoryParts()) {
    if (part.name == name) return m.*part.bytes;
  }
  ADD_FAILURE() << "no part named '" << name << "'";
  return 0;
}

// For plans across bundled models, schedules and recipes: the plan document's parts add up to
// each device's peak, and so do the parts its out-of-memory message names (every non-zero one).
TEST(MemoryParts, DocumentAndMessageAddUpToThePeak) {
  struct Recipe {
    const char* name;
    void (*apply)(PlanConfig&);
  };
  const std::vector<Recipe> recipes{{"plain", [](PlanConfig&) {}},
                                    {"tp2 fp8 zero1",
                                     [](PlanConfig& c) {
                                       c.parallel.tensor = 2;
                                       c.parallel.sequenceParallel = true;
                                       c.parallel.zeroStage = 1;
                                       c.parallel.data = 2;
                                       c.precision = Precision::Fp8;
                                     }},
                                    {"zero3 selective", [](PlanConfig& c) {
                                       c.parallel.data = 2;
                                       c.parallel.zeroStage = 3;
                                       c.parallel.recompute = Recompute::Selective;
                                     }}};
  int checked = 0;
  for (const auto& [model, cluster] :
       {std::pair{"llama3-8b", "h100-4x8-ib"}, std::pair{"qwen3-30b-a3b", "h100-4x8-ib"},
        std::pair{"gpt3-1.3b", "a100-4x8-ib"}, std::pair{"controlnet", "a100-1x8-nvlink"}}) {
    for (const char* schedule : {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v"}) {
      for (const Recipe& recipe : recipes) {
        PlanRequest r = bundledRequest(model, cluster);
        r.config.schedule = schedule;
        r.config.devices = 2;
        r.config.chunksPerDevice =
            std::string(schedule) == "interleaved-1f1b" || std::string(schedule) == "zb-v" ? 2 : 1;
        r.config.microbatches = 4;
        r.config.memoryLimitBytes = std::int64_t{1} << 60;
        recipe.apply(r.config);
        auto plan = makePlan(r);
        if (!plan) continue;  // a recipe the model or GPU cannot take (an A100 has no fp8)
        const std::string what = std::string(model) + " " + schedule + " " + recipe.name;
        const Json doc = planToJson(*plan);
        Plan over = *plan;
        over.config.memoryLimitBytes = 1;
        const std::string message = checkMemory(over).message();
        for (std::size_t d = 0; d < plan->metrics.devices.size(); ++d) {
          const DeviceMetrics& dm = plan->metrics.devices[d];
          const Json& jm = doc["metrics"]["devices"][d]["memory"];
          std::int64_t fromDocument = 0;
          for (const MemoryPart& part : memoryParts()) {
            if (!part.keptBack) fromDocument += jm[std::string(part.jsonKey)].get<std::int64_t>();
          }
          EXPECT_EQ(fromDocument, dm.peakMemoryBytes) << what << " device " << d;
          std::int64_t fromMessage = 0;
          for (const std::string& name : listedParts(message, static_cast<int>(d)))
            fromMessage += bytesOf(dm.memory, name);
          EXPECT_EQ(fromMessage, dm.peakMemoryBytes) << what << " device " << d << "\n" << message;
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, 40);  // most combinations plan
}

// --- Megatron-Core's activation offloading ---

// Megatron-Bridge's Llama 3 70B recipe on 64 GB200s (perf_recipes/llama/gb200/llama3.py,
// llama3_70b_pretrain_64gpu_gb200_fp8cs_config): Megatron-FSDP, micro batch 2, no recomputation.
PlanRequest llama70bFsdp(const char* gpu = nullptr) {
  PlanRequest r = bundledRequest("llama3-70b", "gb200-nvl72-4racks");
  if (gpu) r.cluster.gpu = findCatalogGpu(gpu)->gpu;
  r.config.schedule = "1f1b";
  r.config.devices = 1;
  r.config.precision = Precision::Fp8;
  r.config.parallel.data = 64;
  r.config.parallel.zeroStage = 3;
  r.config.globalBatch = 256;
  r.config.microBatchSize = 2;
  return r;
}

// The first N layers' activations are on the host between a microbatch's forward and backward:
// with one pipeline rank running F then B per microbatch, the peak holds exactly N layers' less.
TEST(ActivationOffload, LayersLeaveTheirActivationsOnTheHost) {
  PlanRequest none = llama70bFsdp();
  none.config.memoryLimitBytes = std::int64_t{1} << 60;
  PlanRequest offload = none;
  offload.config.parallel.cpuOffloadingNumLayers = 40;
  auto a = makePlan(none);
  auto b = makePlan(offload);
  ASSERT_THAT(a, HasValue());
  ASSERT_THAT(b, HasValue());
  const CostedModel costs(*a);
  const std::int64_t layer = costs.layer(0, 1).activationBytes;  // layer 1: the first block
  ASSERT_GT(layer, 0);
  EXPECT_EQ(a->metrics.devices[0].peakActivationBytes - b->metrics.devices[0].peakActivationBytes, 40 * layer);
  EXPECT_EQ(CostedModel(*b).stage(b->stage(0)).offloadBytes, 40 * layer);
  // NVLink-C2C (450 GB/s) hides the copies under the layers' compute: the same iteration.
  EXPECT_DOUBLE_EQ(b->metrics.iterationMs, a->metrics.iterationMs);
  // Over a slow host link the forward waits for its copies.
  PlanRequest slow = offload;
  slow.cluster.gpu.hostLinkGBps = 8;
  slow.config.parallel.cpuOffloadingNumLayers = 70;
  auto c = makePlan(slow);
  ASSERT_THAT(c, HasValue());
  const StageCosts sc = CostedModel(*c).stage(c->stage(0));
  EXPECT_GT(sc.offloadWaitForwardMs, 0.0);
  EXPECT_GT(c->metrics.iterationMs, a->metrics.iterationMs);
}

// The recipes of issue 42 that ran, and were predicted not to fit: they fit now.
TEST(ActivationOffload, BridgeFsdpRecipesOnGraceFit) {
  PlanRequest gb200 = llama70bFsdp();
  gb200.config.parallel.cpuOffloadingNumLayers = 40;
  PlanRequest gb300 = llama70bFsdp("GB300");
  gb300.config.parallel.cpuOffloadingNumLayers = 20;
  for (const PlanRequest& r : {gb200, gb300}) {
    auto plan = makePlan(r);
    ASSERT_THAT(plan, HasValue()) << r.cluster.gpu.name;
    const DeviceMetrics& d = plan->metrics.devices[0];
    EXPECT_LE(d.peakMemoryBytes + d.memory.marginBytes(), r.cluster.gpu.memoryBytes()) << r.cluster.gpu.name;
  }
}

TEST(LowPrecisionParams, BridgeMxfp8RecipesOnGb300Fit) {
  // perf_recipes/llama/gb300: llama31_405b_pretrain_256gpu_gb300_fp8mx_config (TP 2, CP 2, PP 8,
  // VP 4) and llama3_70b_pretrain_64gpu_gb300_fp8mx_config (TP 1, PP 4, VP 5).
  PlanRequest r405 = bundledRequest("llama3-405b", "gb200-nvl72-4racks");
  r405.cluster.gpu = findCatalogGpu("GB300")->gpu;
  r405.config.schedule = "interleaved-1f1b";
  r405.config.devices = 8;
  r405.config.chunksPerDevice = 4;
  r405.config.partition = "megatron";
  r405.config.precision = Precision::Mxfp8;
  r405.config.parallel.tensor = 2;
  r405.config.parallel.context = 2;
  r405.config.parallel.sequenceParallel = true;
  r405.config.parallel.data = 8;
  r405.config.parallel.zeroStage = 1;
  r405.config.globalBatch = 1536;
  r405.config.microBatchSize = 1;
  PlanRequest r70 = bundledRequest("llama3-70b", "gb200-nvl72-4racks");
  r70.cluster.gpu = r405.cluster.gpu;
  r70.config = r405.config;
  r70.config.devices = 4;
  r70.config.chunksPerDevice = 5;
  r70.config.parallel.tensor = 1;
  r70.config.parallel.context = 1;
  r70.config.parallel.sequenceParallel = false;
  r70.config.parallel.data = 16;
  r70.config.globalBatch = 256;
  for (const PlanRequest& r : {r405, r70}) {
    auto plan = makePlan(r);
    ASSERT_THAT(plan, HasValue()) << r.model.name;
    for (const DeviceMetrics& d : plan->metrics.devices) {
      // The weights are MXFP8 only (Megatron-Bridge's bf16_with_mxfp8_mixed: fp8_param_gather).
      EXPECT_GT(d.memory.lowPrecisionWeightBytes, 4 * d.memory.parameterBytes) << r.model.name;
    }
  }
}

// Fine-grained offloading of the attention: core_attn holds Q, K, V and the softmax statistics
// (FlashAttention's fp32 log-sum-exp per head), attn_proj the output in bf16 — the attention's
// whole term of the activations; --activation-offload-fraction 0.5 keeps the later half of the
// groups on the GPU, and --delta-offload-bytes-across-pp-ranks keeps that many more on rank 1.
TEST(ActivationOffload, FineGrainedGroupsFractionAndDelta) {
  PlanRequest r = bundledRequest("llama3-8b", "h100-4x8-ib", "1f1b", 2, 4);
  r.config.partition = "megatron";
  r.config.parallel.tensor = 2;
  r.config.parallel.sequenceParallel = true;
  r.config.parallel.offloadModules = kOffloadCoreAttn | kOffloadAttnProj;
  auto plan = makePlan(r);
  ASSERT_THAT(plan, HasValue());
  const Layer& block = plan->model.components[0].layers[1];
  ASSERT_TRUE(block.transformer.has_value());
  const TransformerShape& t = *block.transformer;
  const auto tokens = static_cast<double>(t.seq);             // one sample per microbatch
  const double hq = t.hidden, hk = 8.0 * t.hidden / t.heads;  // 8 key/value heads
  const double perLayer = tokens / 2 * (2.0 * (hq + hk + hk) + 4.0 * t.heads + 2.0 * t.hidden);
  const CostedModel costs(*plan);
  const StageCosts s0 = costs.stage(plan->stage(0));
  EXPECT_NEAR(static_cast<double>(s0.offloadBytes), 16 * perLayer, 16.0);  // 16 of the 32 blocks
  r.config.parallel.activationOffloadFraction = 0.5;
  auto half = makePlan(r);
  ASSERT_THAT(half, HasValue());
  EXPECT_NEAR(static_cast<double>(CostedModel(*half).stage(half->stage(0)).offloadBytes), 8 * perLayer, 8.0);
  // Rank 1 keeps one microbatch's offload on the GPU: its peak rises by at most that much.
  r.config.parallel.activationOffloadFraction = 1.0;
  r.config.parallel.deltaOffloadBytesAcrossPpRanks = s0.offloadBytes;
  auto delta = makePlan(r);
  ASSERT_THAT(delta, HasValue());
  EXPECT_EQ(delta->metrics.devices[0].peakActivationBytes, plan->metrics.devices[0].peakActivationBytes);
  EXPECT_GT(delta->metrics.devices[1].peakActivationBytes, plan->metrics.devices[1].peakActivationBytes);
  EXPECT_LE(delta->metrics.devices[1].peakActivationBytes - plan->metrics.devices[1].peakActivationBytes,
            s0.offloadBytes);
}

// Bad input: each a message naming the flag and the numbers.
TEST(ActivationOffload, RefusedWithTheFlagAndTheNumbers) {
  const auto refusal = [](const PlanRequest& r) {
    auto plan = makePlan(r);
    EXPECT_FALSE(plan.hasValue());
    return plan ? std::string() : plan.message();
  };
  PlanRequest r = llama70bFsdp();
  r.config.parallel.cpuOffloadingNumLayers = 80;
  std::string m = refusal(r);
  EXPECT_NE(m.find("--cpu-offloading-num-layers 80"), std::string::npos) << m;
  EXPECT_NE(m.find("it holds 80 transformer layers"), std::string::npos) << m;
  EXPECT_NE(m.find("at most 79"), std::string::npos) << m;

  r.config.parallel.cpuOffloadingNumLayers = 20;
  r.cluster.gpu.hostLinkGBps = 0;
  m = refusal(r);
  EXPECT_NE(m.find("--cpu-offloading-num-layers 20"), std::string::npos) << m;
  EXPECT_NE(m.find("no host link"), std::string::npos) << m;

  PlanRequest pipeline = bundledRequest("llama3-8b", "h100-4x8-ib", "1f1b", 2, 4);
  pipeline.config.parallel.cpuOffloadingNumLayers = 4;
  m = refusal(pipeline);
  EXPECT_NE(m.find("needs one pipeline rank, got --devices 2"), std::string::npos) << m;

  PlanRequest modules = pipeline;
  modules.config.parallel.cpuOffloadingNumLayers = 0;
  modules.config.parallel.offloadModules = kOffloadAttnProj;
  m = refusal(modules);
  EXPECT_NE(m.find("attn_proj needs core_attn"), std::string::npos) << m;
  modules.config.parallel.offloadModules = kOffloadCoreAttn | kOffloadExpertFc1;
  m = refusal(modules);
  EXPECT_NE(m.find("--offload-modules expert_fc1"), std::string::npos) << m;
  EXPECT_NE(m.find("no mixture-of-experts layers"), std::string::npos) << m;
}

}  // namespace
}  // namespace pipestudio
