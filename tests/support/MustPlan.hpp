#pragma once
// A plan a test needs in order to go on: the planner's plan, or a failed expectation that says
// which schedule was refused and why, and an empty Plan so the test still reports the rest.
//
//     const Plan zbv = test::mustPlan(test::request(model, cluster, "zb-v", 4, 8, 2));
//     const Plan imported = test::mustPlan(makeCustomPlan(request, csv, "s.csv"));

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "pipestudio/planner/Planner.hpp"
#include "support/ExpectedMatchers.hpp"

namespace pipestudio::test {

/// The value of `plan`; an error fails the test (the message, then `what`) and gives Plan{}.
inline Plan mustPlan(Expected<Plan> plan, const std::string& what = {}) {
  EXPECT_THAT(plan, HasValue()) << what;
  return plan ? std::move(*plan) : Plan{};
}

/// makePlan(request), as above; a refusal names the schedule.
inline Plan mustPlan(const PlanRequest& request) { return mustPlan(makePlan(request), request.config.schedule); }

}  // namespace pipestudio::test
