// `--partition dp` judged by what a plan is judged by (issue 45). dpPartition (Dp.cpp) minimises
// Σ stage time + (m − 1) · the largest stage time within per-stage memory budgets (Alpa / AMP's
// objective): exact for one stage per device, but an interleaved or V schedule runs several
// stages per device, whose bottleneck is the busiest device's sum, and the budgets share a
// device's memory among its stages by the peaks they reach at different moments, so they can
// rule out splits the device holds. So its split is one candidate among others, each planned in
// full (schedule, fill, simulation, memory check), and the plan is the one with the shortest
// simulated iteration that fits:
//   1. dpPartition within the stages' memory budgets;
//   2. dpPartition without them (the fastest split by the DP's estimate; the simulator says
//      whether it fits);
//   3. `balanced`'s split, with the repairs makePlan gives it when it does not fit;
//   4. `uniform`'s split, where the layers divide evenly.
// Ties go to the earlier candidate. `dp` is therefore never slower than balanced or uniform on
// the same request, and plans wherever either of them plans.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "partition/Partitioners.hpp"

namespace pipestudio::partition {

Expected<Plan> solveDp(const PlanRequest& request, const SolveControl& control, const PartitionHints& given) {
  struct Candidate {
    const char* name;
    const char* partition;
    bool memoryBudgets;
  };
  const std::vector<Candidate> candidates = {{"dp within the memory budgets", "dp", true},
                                             {"dp without memory budgets", "dp", false},
                                             {"balanced", "balanced", true},
                                             {"uniform", "uniform", true}};
  std::optional<Plan> best;
  std::string reasons;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    SolveControl inner = control;
    if (control.progress) {
      inner.progress = [&control, i, n = candidates.size()](double f) {
        control.progress((static_cast<double>(i) + f) / static_cast<double>(n));
      };
    }
    PlanRequest r = request;
    r.config.partition = c.partition;
    PartitionHints hints = given;
    hints.dpMemoryBudgets = c.memoryBudgets;
    auto plan = makeCandidatePlan(r, inner, hints);
    if (plan.isCancelled()) return plan.error();
    if (!plan) {
      reasons += std::string("\n  ") + c.name + ": " + plan.message();
      continue;
    }
    const double tolerance = 1e-12 * std::max(1.0, plan->metrics.iterationMs);
    if (!best || plan->metrics.iterationMs < best->metrics.iterationMs - tolerance) best = std::move(*plan);
  }
  if (!best) return Error{"partition dp: no split gives a plan that fits:" + reasons};
  best->config.partition = "dp";
  return std::move(*best);
}

}  // namespace pipestudio::partition
