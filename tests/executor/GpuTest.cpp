// CUDA backends. They skip cleanly where no GPU is usable (CI, this workstation);
// tests/gpu/run.sh runs them on a GPU node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "RunHelpers.hpp"
#include "support/ListScheduledPlan.hpp"

#if defined(PIPESTUDIO_EXECUTOR_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace pipestudio {
namespace {

int usableGpus() {
#if defined(PIPESTUDIO_EXECUTOR_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

#define REQUIRE_GPU()                                                                                      \
  do {                                                                                                     \
    if (usableGpus() == 0) GTEST_SKIP() << "no usable CUDA GPU (cudaGetDeviceCount failed or returned 0)"; \
  } while (0)

TEST(Gpu, CudaSingleRunsFourDevicesOnOneGpu) {
  REQUIRE_GPU();
  const Plan plan = test::makeTestPlan("zb-h1", 4, 8);
  const std::string path = test::writePlan(plan, "gpu-single.plan.json");
  const auto r = test::runExec(path, "cuda-single", 2, {"--max-op-ms", "2"});
  ASSERT_TRUE(r.outcome.ok) << r.outcome.failure;
  std::size_t ops = 0, kernels = 0;
  for (const auto& f : r.frames.at(0)) {
    if (const auto* op = std::get_if<trace::OpRange>(&f); op != nullptr && !op->begin) ++ops;
    if (const auto* a = std::get_if<trace::Activity>(&f); a != nullptr && a->kind == trace::Activity::Kind::Kernel) {
      ++kernels;
    }
  }
  EXPECT_EQ(ops, 2 * (plan.ops.size() + 4));
  EXPECT_GT(kernels, ops) << "CUPTI kernel records arrive";
  EXPECT_TRUE(std::get<trace::Summary>(r.frames.at(0).back()).ok);

  // One clock (ClockAnchors.hpp): between a device's first and last op, its kernels start inside
  // its own op ranges. Before the marker anchoring, CUPTI's conversion put a third of them
  // milliseconds away on an H200.
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> ranges;
  for (const auto& f : r.frames.at(0)) {
    if (const auto* op = std::get_if<trace::OpRange>(&f); op != nullptr && !op->begin) {
      ranges[op->device].emplace_back(op->startNs, op->endNs);
    }
  }
  for (auto& [device, list] : ranges) std::sort(list.begin(), list.end());
  constexpr std::int64_t kSlackNs = 20'000;
  std::size_t between = 0, inside = 0;
  for (const auto& f : r.frames.at(0)) {
    const auto* a = std::get_if<trace::Activity>(&f);
    if (a == nullptr || a->kind != trace::Activity::Kind::Kernel || !ranges.contains(a->device)) continue;
    const auto& list = ranges.at(a->device);
    if (a->startNs < list.front().first || a->startNs > list.back().second) continue;
    ++between;
    auto it = std::upper_bound(list.begin(), list.end(), std::make_pair(a->startNs + kSlackNs, INT64_MAX));
    if (it != list.begin() && a->startNs <= std::prev(it)->second + kSlackNs) ++inside;
  }
  EXPECT_GT(between, 0U);
  EXPECT_GE(static_cast<double>(inside), 0.95 * static_cast<double>(between))
      << inside << " of " << between << " kernels start inside an op range of their device";
}

TEST(Gpu, CudaBackendWithNcclOnEveryGpu) {
  REQUIRE_GPU();
  const int gpus = std::min(usableGpus(), 4);
  if (gpus < 2) GTEST_SKIP() << "the cuda backend needs two GPUs (NCCL refuses two ranks on one GPU)";
  const Plan plan = test::makeTestPlan("1f1b", gpus, 2 * gpus);
  const std::string path = test::writePlan(plan, "gpu-nccl.plan.json");
  const auto r = test::runExec(path, "cuda", 1, {"--max-op-ms", "2"}, gpus);
  ASSERT_TRUE(r.outcome.ok) << r.outcome.failure;
  for (int rank = 0; rank < gpus; ++rank) {
    EXPECT_TRUE(std::get<trace::Summary>(r.frames.at(rank).back()).ok) << rank;
  }
}

TEST(Gpu, KilledRankStopsTheOthers) {
  REQUIRE_GPU();
  if (usableGpus() < 2) GTEST_SKIP() << "needs two GPUs";
  test::ScopedEnv fault("PIPESTUDIO_EXEC_FAULT", "crash:rank=1:after_ops=3");
  const Plan plan = test::makeTestPlan("1f1b", 2, 4);
  const auto r = test::runExec(test::writePlan(plan, "gpu-crash.plan.json"), "cuda", 1,
                               {"--max-op-ms", "2", "--timeout-s", "5"}, 2);
  EXPECT_FALSE(r.outcome.ok);
  EXPECT_NE(r.outcome.failure.find("rank 1"), std::string::npos) << r.outcome.failure;
  EXPECT_NE(r.outcome.ranks[0].exitStatus, 0);
}

TEST(Gpu, WithoutAGpuTheCudaBackendsRefuseClearly) {
  if (usableGpus() > 0) GTEST_SKIP() << "a GPU is present";
  const Plan plan = test::makeTestPlan("1f1b", 2, 2);
  const auto r = test::runExec(test::writePlan(plan, "nogpu.plan.json"), "cuda-single", 1);
  EXPECT_FALSE(r.outcome.ok);
  EXPECT_EQ(r.outcome.ranks[0].exitStatus, 1);
  EXPECT_NE(r.outcome.ranks[0].lastLog.find("cuda"), std::string::npos) << r.outcome.ranks[0].lastLog;
}

}  // namespace
}  // namespace pipestudio
