#pragma once
/// \file The planner's entry point: makePlan, and resolveRequest as it applies first; with it come
/// the headers the CLI and the GUI call around it (Schedules.hpp: scheduleNames; Simulator.hpp:
/// simulate, resimulate, checkMemory). The types every solver shares (PlanRequest,
/// ScheduleSkeleton, SolveControl) are in Request.hpp: a solver includes this header only where
/// it calls makePlan or resolveRequest. Qt-free.
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

/// Resolves and checks the hybrid-parallel part of a request (issue 13), as makePlan does first:
/// a global batch G with micro-batch size B gives microbatches = G / (B·D) and B samples per
/// microbatch (the model's samples_per_microbatch otherwise); sequence parallelism is off at
/// T = 1. Degrees must divide every transformer layer's heads and KV heads (T), the sequence
/// (2·C, Megatron's load-balanced ring; T·C with sequence parallelism), the experts (E), the
/// data-parallel degree (E), and
/// T·C·P·D must fit the cluster. Errors name the flag and the numbers, never round silently.
Expected<PlanRequest> resolveRequest(PlanRequest request);

/// Full solve: partition, schedule, fill, simulate. Impossible requests (m < p where the
/// schedule needs more, odd p for DualPipe, chunks that do not divide the layers, a memory
/// limit below one microbatch, …) return an Error saying what the schedule needs.
Expected<Plan> makePlan(const PlanRequest& request, const SolveControl& control = {});

}  // namespace pipestudio
