#pragma once
/// \file The planner's entry point: makePlan; with it come the headers the CLI and the GUI call
/// around it (Request.hpp: the request and resolveRequest, which makePlan applies first;
/// Schedules.hpp: scheduleNames; Simulator.hpp: simulate, resimulate, checkMemory). No code that
/// makePlan calls includes this header: the solvers depend on Request.hpp only. Qt-free.
///
/// Pipeline of a solve: partition (layer ranges per virtual stage) → schedule (placement of
/// virtual stages on devices and the per-device op order) → fill (frozen-component N ops into
/// bubbles) → simulate (times, comms, metrics) → Plan.

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/planner/Request.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio {

/// Full solve: partition, schedule, fill, simulate. Impossible requests (m < p where the
/// schedule needs more, odd p for DualPipe, chunks that do not divide the layers, a memory
/// limit below one microbatch, …) return an Error saying what the schedule needs.
Expected<Plan> makePlan(const PlanRequest& request, const SolveControl& control = {});

}  // namespace pipestudio
