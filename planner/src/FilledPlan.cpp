// makeFilledPlan: a plan made by makePlan and the fill report beside it (backbone only, --fill
// none, the request's mode, data parallelism). It sits above makePlan, beside it; the fill that
// makePlan calls (fill/Fill.cpp) does not depend on the entry point.
#include <utility>
#include <vector>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio {

Expected<FilledPlan> makeFilledPlan(const PlanRequest& request, const SolveControl& control) {
  // makePlan runs fillSkeleton itself; this re-runs the fill on the same skeleton path to
  // obtain the report for the request's mode.
  PS_ASSIGN_OR_RETURN(auto plan, makePlan(request, control));
  FilledPlan out;
  out.plan = std::move(plan);
  // Backbone skeleton = the plan without its N ops and frozen virtual stages.
  ScheduleSkeleton skeleton;
  IdVector<int> keep(out.plan.virtualStages.size(), -1);  // per plan stage: its backbone id
  for (const VirtualStage& vs : out.plan.virtualStages) {
    if (vs.component >= 0 && out.plan.model.component(vs.component).trainable) {
      keep[vs.id] = static_cast<int>(skeleton.virtualStages.size());
      VirtualStage copy = vs;
      copy.id = keep[vs.id];
      skeleton.virtualStages.push_back(copy);
    }
  }
  IdVector<std::vector<OrderedOp>> lanes(out.plan.config.devices);
  bool hasExtra = false;
  for (const Op& op : out.plan.ops) {
    if (op.kind == OpKind::N) continue;
    if (op.kind == OpKind::S || op.kind == OpKind::T) hasExtra = true;
    lanes[op.device].push_back(OrderedOp{keep[op.virtualStage], op.kind, op.microbatch, op.samples});
  }
  skeleton.devices = std::move(lanes.values());
  if (hasExtra) {
    // Vocabulary passes carry extra dependencies the plan does not store: report without
    // re-deriving (the plan itself is complete).
    out.report.mode = request.config.fill;
    out.report.iterationMs = out.plan.metrics.makespanMs;
    return out;
  }
  FillReport report;
  PlanRequest solved = request;
  solved.config = out.plan.config;  // diffusionpipe may have chosen another schedule
  PS_RETURN_IF_ERROR(fillSkeleton(solved, skeleton, control, &report));
  if (report.mode.empty()) {
    // No frozen components: every figure is the backbone's own.
    report.mode = request.config.fill;
    report.backboneOnlyMs = report.noFillMs = report.iterationMs = out.plan.metrics.makespanMs;
    report.devices.assign(static_cast<std::size_t>(out.plan.config.devices), {});
    auto dp =
        dataParallelIterationMs(request.model, request.cluster, request.config.devices, request.config.microbatches);
    if (dp) {
      report.dataParallelMs = *dp;
      report.speedupOverDataParallel = report.iterationMs > 0 ? *dp / report.iterationMs : 0;
    } else {
      report.dataParallelNote = dp.message();
    }
  }
  report.iterationMs = out.plan.metrics.makespanMs;
  for (const Comm& c : out.plan.comms) {
    if (c.kind != OpKind::N) continue;
    ++report.frozenTransfers;
    report.frozenTransferBytes += c.bytes;
  }
  report.speedupOverNoFill = report.iterationMs > 0 ? report.noFillMs / report.iterationMs : 1.0;
  if (report.dataParallelMs) report.speedupOverDataParallel = *report.dataParallelMs / report.iterationMs;
  out.report = std::move(report);
  return out;
}

}  // namespace pipestudio
