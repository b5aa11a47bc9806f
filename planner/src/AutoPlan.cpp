// makeAutoPlan and makeCustomPlan: makePlan with the zb-auto or custom generator given what its
// shape cannot carry (autosched::ContextScope). They sit above makePlan, beside it; the
// generators that makePlan calls (autosched/Generators.cpp) do not depend on the entry point.
#include <algorithm>
#include <string>
#include <vector>

#include "autosched/Generators.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Export.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio {

Expected<Plan> makeAutoPlan(const PlanRequest& request, const AutoScheduleOptions& options, AutoScheduleReport* report,
                            const SolveControl& control) {
  PlanRequest r = request;
  r.config.schedule = "zb-auto";
  autosched::ContextScope scope({&options, report, nullptr, nullptr});
  return makePlan(r, control);
}

Expected<Plan> makeCustomPlan(const PlanRequest& request, const std::string& csvText, const std::string& source,
                              const SolveControl& control) {
  // The CSV is read against the request's microbatches, which a global batch gives (G / (B·D)).
  PS_ASSIGN_OR_RETURN(PlanRequest r, resolveRequest(request));
  r.config.schedule = "custom";
  // The CSV decides the placement; chunks per device is the most any device holds.
  PS_ASSIGN_OR_RETURN(auto parsed, parseScheduleCsv(csvText, {r.config.devices, r.config.microbatches, {}}, source));
  std::vector<int> perDevice(static_cast<std::size_t>(std::max(1, r.config.devices)), 0);
  for (const VirtualStage& vs : parsed.virtualStages) ++perDevice[static_cast<std::size_t>(vs.device)];
  r.config.chunksPerDevice = std::max(1, *std::max_element(perDevice.begin(), perDevice.end()));
  autosched::ContextScope scope({nullptr, nullptr, &csvText, &source});
  return makePlan(r, control);
}

}  // namespace pipestudio
