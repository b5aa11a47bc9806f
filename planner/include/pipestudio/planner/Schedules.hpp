#pragma once
/// \file Schedule generators: the extension point every pipeline schedule implements.
///
/// A generator places virtual stages on devices (device, chunk, pipeline) and produces each
/// device's op order (a ScheduleSkeleton). It never assigns times: the simulator does.
/// Register a new generator in planner/src/schedules/Registry.cpp.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/planner/Request.hpp"

namespace pipestudio {

/// The size of a schedule request. `chunksPerDevice` counts every virtual stage a device
/// holds, over both pipelines of a bidirectional schedule (dualpipe: 2, bitpipe: 4).
struct ScheduleShape {
  int devices = 1;
  int microbatches = 1;  ///< units: sequence chunks with seqSplits > 1 (PlanConfig::seqSplits)
  int chunksPerDevice = 1;
  int seqSplits = 1;
};

/// Cost estimates of one virtual stage, for generators whose order depends on costs
/// (greedy constructions, zb-auto). Same order as ScheduleInput::virtualStages.
struct StageEstimate {
  double forwardMs = 0;
  double backwardInputMs = 0;
  double backwardWeightMs = 0;
  std::int64_t activationBytes = 0;
  std::int64_t weightGradBytes = 0;
  /// Transfer time of this stage's output to the next virtual stage of its pipeline (0 for
  /// the last stage or when both sit on one device); the gradient coming back costs the same.
  double sendMs = 0;
};

/// What `ScheduleGenerator::order` gets: the placement with layer ranges filled in by the
/// partitioner, per-stage costs, and the request (memory limit, cancellation).
struct ScheduleInput {
  ScheduleShape shape;
  std::vector<VirtualStage> virtualStages;       ///< in id order; ids are 0..n-1
  std::vector<StageEstimate> stages;             ///< parallel to virtualStages
  std::vector<std::int64_t> staticBytes;         ///< per device: parameters, gradients, optimizer state
  std::optional<std::int64_t> memoryLimitBytes;  ///< per device, static included (zb-auto)
  const PlanRequest* request = nullptr;          ///< the whole request, for generators that need more
  const SolveControl* control = nullptr;         ///< may be null
  /// The request's costs under the schedule's settings (makePlan sets it; may be null), for
  /// generators that time candidates with the simulator (pipeoffload).
  const CostedModel* costs = nullptr;
  /// The peak memory (static included) a memory-saving schedule's order keeps every device
  /// under where it can: the peak of the schedule it saves against on the same request
  /// (ScheduleGenerator::savesMemoryAgainst; makePlan sets it). Empty: no such bound.
  std::optional<std::int64_t> peakCapBytes = std::nullopt;

  /// Virtual stage `id` (its device, chunk and pipeline).
  const VirtualStage& stage(int id) const { return virtualStages[static_cast<std::size_t>(id)]; }
  /// The cost estimates of virtual stage `id`.
  const StageEstimate& estimate(int id) const { return stages[static_cast<std::size_t>(id)]; }
};

/// One pipeline schedule (gpipe, 1f1b, zb-v, …).
class ScheduleGenerator {
 public:
  virtual ~ScheduleGenerator() = default;
  /// The name users type (`--schedule NAME`).
  virtual std::string_view name() const = 0;
  /// Virtual stages per device when `--chunks` is not given.
  virtual int defaultChunksPerDevice() const = 0;
  /// true: backward split into B (input gradient) and W (weight gradient); false: fused BW.
  virtual bool splitsBackward() const = 0;
  /// 2 for bidirectional schedules (the model is held twice), else 1.
  virtual int pipelines() const { return 1; }
  /// true for schedules whose units are sequence chunks (PlanConfig::seqSplits > 1: seq1f1b,
  /// and custom orders, whose microbatch numbers are then units).
  virtual bool splitsSequence() const { return false; }
  /// Sets what the simulator needs to know about the schedule in the plan's config before it
  /// is partitioned and timed: dualpipe overlaps F&B (overlapForwardBackward), zeropp and
  /// breadth-first gather ZeRO-3 parameters per unit of microbatches (unitMicrobatches).
  virtual void configure(PlanConfig& /*config*/) const {}
  /// The schedule this one exists to hold less memory than (pipeoffload: 1f1b), planned on the
  /// same request to bound its peak (ScheduleInput::peakCapBytes); empty for the others.
  virtual std::string_view savesMemoryAgainst() const { return {}; }
  /// Whether `shape` is possible; the error says what the schedule needs
  /// ("dualpipe needs an even number of devices, got 3").
  virtual Status validate(const ScheduleShape& shape) const = 0;
  /// Virtual stages in id order with device, chunk and pipeline set (layer ranges are left to
  /// the partitioner). Within a pipeline data flows in id order; pipeline 1's ids follow
  /// pipeline 0's.
  virtual std::vector<VirtualStage> placement(const ScheduleShape& shape) const = 0;
  /// Per-device op order. Called only with a shape that passed validate().
  virtual Expected<ScheduleSkeleton> order(const ScheduleInput& input) const = 0;
};

/// Every registered generator, in the order `pipestudio-cli schedules` prints.
const std::vector<const ScheduleGenerator*>& scheduleGenerators();
/// The generator named `name` (ours, or PyTorch's name for it: scheduleForAlias), or nullptr.
const ScheduleGenerator* findScheduleGenerator(std::string_view name);
/// Our schedule for one of torch.distributed.pipelining's schedule names (get_schedule_class,
/// matched ignoring case): GPipe → gpipe, 1F1B → 1f1b, Interleaved1F1B → interleaved-1f1b,
/// LoopedBFS → breadth-first, InterleavedZeroBubble → interleaved-zb, ZBVZeroBubble → zb-v,
/// DualPipeV → dualpipe-v; nullopt for any other name.
std::optional<std::string_view> scheduleForAlias(std::string_view name);

/// Names of every schedule the planner knows, in the order `pipestudio-cli schedules` prints.
std::vector<std::string> scheduleNames();

}  // namespace pipestudio
