#pragma once
// Plans of the bundled examples (resources/), made by the planner: for suites that link it
// and check what the planner's own plans look like downstream (history, viz, transfers).

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "pipestudio/model/ModelIO.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/MustPlan.hpp"

namespace pipestudio::test {

/// A request for resources/models/<model>.json on resources/clusters/<cluster>.json, with the
/// config left at its defaults; a file that does not load fails the test.
inline PlanRequest bundledRequest(const std::string& model, const std::string& cluster = "a100-1x8-nvlink") {
  PlanRequest r;
  auto m = loadModel(std::string(PIPESTUDIO_RESOURCES) + "/models/" + model + ".json");
  auto c = loadCluster(std::string(PIPESTUDIO_RESOURCES) + "/clusters/" + cluster + ".json");
  EXPECT_THAT(m, HasValue());
  EXPECT_THAT(c, HasValue());
  if (m) r.model = *m;
  if (c) r.cluster = *c;
  return r;
}

/// The same, pipelined: `schedule` over `devices` pipeline ranks with `microbatches` microbatches.
inline PlanRequest bundledRequest(const std::string& model, const std::string& cluster, const std::string& schedule,
                                  int devices, int microbatches) {
  PlanRequest r = bundledRequest(model, cluster);
  r.config.schedule = schedule;
  r.config.devices = devices;
  r.config.microbatches = microbatches;
  return r;
}

/// A bundled diffusion model under 1F1B with DiffusionPipe's partition and bubble fill `fill`
/// (none | greedy), on one A100 node; a plan that does not solve fails the test (empty plan).
inline Plan diffusionPlan(const std::string& model, const std::string& fill, int devices = 4, int microbatches = 8) {
  PlanRequest r = bundledRequest(model);
  r.config.schedule = "1f1b";
  r.config.devices = devices;
  r.config.microbatches = microbatches;
  r.config.partition = "diffusionpipe";
  r.config.fill = fill;
  return mustPlan(r);
}

/// (model, fill) pairs whose data flow the history and viz suites check against the simulator:
/// a frozen ControlNet branch and two cascaded backbones, without and with bubble filling.
inline auto diffusionDataFlowCases() {
  return ::testing::Combine(::testing::Values(std::string("controlnet"), std::string("cascaded-sd")),
                            ::testing::Values(std::string("none"), std::string("greedy")));
}

/// "controlnet_greedy": a test name for a (model, fill) case.
inline std::string diffusionCaseName(const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
  std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}

}  // namespace pipestudio::test
