#pragma once
// Private helpers shared by the schedule generators: placements, the greedy list
// construction, and the factory functions Registry.cpp lists.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::schedules {

// Factories (VShaped.cpp: zb-v, dualpipe, dualpipe-v, bitpipe; BuildingBlock.cpp: v-half, v-min).
std::unique_ptr<ScheduleGenerator> makeGpipe();
std::unique_ptr<ScheduleGenerator> makeOneFOneB();
std::unique_ptr<ScheduleGenerator> makeInterleaved();
std::unique_ptr<ScheduleGenerator> makeZbH1();
std::unique_ptr<ScheduleGenerator> makeZbH2();
std::unique_ptr<ScheduleGenerator> makeZbV();
std::unique_ptr<ScheduleGenerator> makeVHalf();
std::unique_ptr<ScheduleGenerator> makeVMin();
std::unique_ptr<ScheduleGenerator> makeDualPipeV();
std::unique_ptr<ScheduleGenerator> makeBitPipe();
std::unique_ptr<ScheduleGenerator> makeDualPipe();
std::unique_ptr<ScheduleGenerator> makeInterleavedZeroBubble();
// Blockwise.cpp: zeropp, breadth-first.
std::unique_ptr<ScheduleGenerator> makeZeroPp();
std::unique_ptr<ScheduleGenerator> makeBreadthFirst();
// GroupInterleaved.cpp: pipeoffload; Sequence.cpp: seq1f1b; VOneFOneB.cpp: v-1f1b.
std::unique_ptr<ScheduleGenerator> makePipeOffload();
std::unique_ptr<ScheduleGenerator> makeSeq1F1B();
std::unique_ptr<ScheduleGenerator> makeVOneFOneB();

/// An op of an order: the pass `kind` of `stage` for the whole of `microbatch`.
inline OrderedOp orderedOp(int stage, OpKind kind, int microbatch) {
  OrderedOp o;
  o.virtualStage = stage;
  o.kind = kind;
  o.microbatch = microbatch;
  return o;
}

// Placements. Stage ids are dense; pipeline 1 (if any) follows pipeline 0.
/// Megatron-LM interleaving: stage s on device s % p, chunk s / p.
std::vector<VirtualStage> linearPlacement(int devices, int chunks, int pipeline = 0, int firstId = 0,
                                          bool reversed = false);
/// Wave ("V") placement: chunk c runs down the devices when c is even and back up when odd,
/// so consecutive chunks meet on the same device (Qi et al. 2023 ZB-V, §6).
std::vector<VirtualStage> wavePlacement(int devices, int chunks, int pipeline = 0, int firstId = 0,
                                        bool mirrored = false);

// Shared validation messages.
Status requireMicrobatchesAtLeast(std::string_view schedule, const ScheduleShape& shape, int minimum,
                                  std::string_view why);
Status requireChunks(std::string_view schedule, const ScheduleShape& shape, bool ok, std::string_view what);

/// Stage chains per pipeline (stage ids in data-flow order), from a placement.
std::vector<std::vector<int>> pipelineChains(const std::vector<VirtualStage>& stages);

/// Greedy, dependency-driven list construction of an order (the zero-bubble family's
/// heuristic, Qi et al. 2023 §3 and Qi et al. 2024 §4): events are simulated with the stage
/// estimates; a free device runs, in this priority, a ready B (or BW), a ready F of a
/// microbatch it already admitted, a ready F admitting a new microbatch if the device's
/// activation budget allows it, then a pending W ("W into the first free slot after its B"
/// only when nothing on the critical path is ready).
struct GreedyOptions {
  bool splitBackward = true;
  /// Activation budget per device in bytes (live from F start to B/W end, docs/formats.md).
  /// A microbatch is admitted on a device only when its whole activation there fits.
  IdVector<std::int64_t> capBytes;  ///< by device
  /// Pipeline of each microbatch (size m); empty = all on pipeline 0.
  IdVector<int> microbatchPipeline;
  /// Prefer continuing admitted microbatches before starting a new one (V-shapes: true).
  bool preferContinuing = true;
  /// true: admitting a microbatch reserves its whole activation on the device at once, so
  /// the peak never exceeds the budget (memory-first: dualpipe, dualpipe-v); false: only live bytes
  /// count and the budget bounds admissions (throughput-first: zb-v keeps its zero bubble).
  bool reserveWholeMicrobatch = false;
  /// true: every forward, not only an admission, respects the budget while a pending W can
  /// free bytes first (W placed before the F instead of after it). With live accounting this
  /// bounds the peak by the budget whenever a W is pending (zb-v: 1F1B memory, Qi et al.
  /// 2023 §6; the same rule as the authors' ZB-V construction, which flushes W before an F
  /// that would exceed the memory limit).
  bool boundEveryForward = false;
};
/// What the construction's own timeline (stage estimates) says about the order it built.
struct GreedyEstimate {
  double makespanMs = 0;
  double maxDeviceBubbleMs = 0;  ///< max over devices of span − busy
};
Expected<ScheduleSkeleton> greedyOrder(const ScheduleInput& input, const GreedyOptions& options,
                                       GreedyEstimate* estimate = nullptr);

/// The memory limit of `device`, static bytes included (the request's limit, else its GPU's
/// memory); 0 when there is none.
std::int64_t deviceMemoryLimit(const ScheduleInput& input, int device);

/// Activation bytes one microbatch leaves on each device (sum over its stages there),
/// for the pipeline `pipeline`.
IdVector<std::int64_t> activationPerMicrobatch(const ScheduleInput& input, int pipeline);

/// The ZB-V construction of the Zero Bubble authors (VConstruction.cpp), for one V per device
/// (wavePlacement(p, 2)). Live activation bytes never exceed budgetBytes[d] on device d.
struct VConstructionOptions {
  IdVector<std::int64_t> budgetBytes;  ///< per device
  bool withTransfers = true;           ///< false: build as if every transfer were free
  int maxRefinements = 16;             ///< re-runs with approved bubbles per fill policy
  /// No re-run once the worst device bubble is at most this share of the makespan (0: the
  /// reference's rule, re-run while it improves).
  double refineAboveShare = 0;
  int onlyPolicy = -1;  ///< 0..3: build only this fill policy (VConstruction::policy)
};
struct VConstruction;
/// Called with each policy's order as soon as it is built (before the next policy runs).
using VConstructionSink = std::function<void(const VConstruction&)>;
struct VConstruction {
  std::vector<std::vector<OrderedOp>> order;
  double maxBubbleMs = 0;  ///< worst device bubble on the construction's own timeline
  double makespanMs = 0;   ///< makespan on that timeline (transfers as delays, no link contention)
  bool fillForward = false;
  bool fillBackward = false;
  int policy = 0;  ///< 0..3 in the reference's order (fill before B1 on/off × before forwards on/off)
};
/// The building-block search of the Controllable Memory authors (BlockSearch.cpp) for one V
/// per device, every pass one slot: the distinct orders of every block whose peak stays
/// within maxMemUnits chunk activations (F/f take one, W/w free it), each with the block's
/// key and peak, in the reference's order until the grids built would exceed maxCells slots
/// (work, not time). vBlockBuild builds the one block `key` names for another microbatch
/// count.
struct VBlockCandidate {
  std::array<int, 4> key{};  ///< starting pattern, offset k0, offset k1, devices on k0
  int peakUnits = 0;
  std::vector<std::vector<OrderedOp>> order;
};
std::vector<VBlockCandidate> vBlockSearch(int devices, int microbatches, int maxMemUnits, double maxCells,
                                          const SolveControl* control);
std::optional<std::vector<std::vector<OrderedOp>>> vBlockBuild(int devices, int microbatches, int maxMemUnits,
                                                               const std::array<int, 4>& key);

/// DualPipe's own eight-step order (DualPipeOrder.cpp) on the dualpipe placement (p even, one
/// chunk per direction on every device, microbatch k of direction q numbered 2k + q);
/// nullopt when the shape is not one it builds (m odd or m/2 < p − 1).
std::optional<std::vector<std::vector<OrderedOp>>> dualPipeOrder(const ScheduleInput& input);

/// Megatron-LM's interleaved 1F1B order (Linear.cpp) on the linear placement with
/// input.shape.chunksPerDevice chunks, microbatches in groups of `groupSize` (any m ≥ 1: when
/// groupSize does not divide m, ⌊m / groupSize⌋ groups of near-equal size), fused backward.
std::vector<std::vector<OrderedOp>> interleavedOrder(const ScheduleInput& input, int groupSize, int ahead = 0);
/// A fused-backward order with each BW written as B then its W (the same memory and time).
std::vector<std::vector<OrderedOp>> splitFusedBackward(std::vector<std::vector<OrderedOp>> order);

/// The compute orders of torch.distributed.pipelining's ScheduleDualPipeV (V placement, two
/// chunks per device, m ≥ 2p) and ScheduleInterleavedZeroBubble (linear placement, m a multiple
/// of max(1, m / p)), rebuilt from their step rules (TorchOrders.cpp); nullopt for shapes they
/// refuse. Overlapped F&B pairs are emitted back to back, a full backward as B then its W.
std::optional<std::vector<std::vector<OrderedOp>>> torchDualPipeVOrder(const ScheduleInput& input);
std::optional<std::vector<std::vector<OrderedOp>>> torchInterleavedZeroBubbleOrder(const ScheduleInput& input);

/// Activation offloading (PlanConfig::offloadRatio > 0; Offload.cpp): D2H and H2D ops added
/// to a complete order without lengthening its step, offloading every (stage, microbatch) of
/// the ratio's chunks whose time between forward and backward holds both copies on the
/// device's host link. Nothing when the ratio is 0 or the order has copies already.
/// `waits`: then also addOffloadWaits. Copies are placed at the rate each can count on when
/// every GPU on its PCIe switch copies (hostCopyGBps), or with `atSoloRate` at the rate it gets
/// when no other rank copies (the simulator times them at the rate they get either way).
Status addOffload(const Plan& shell, const CostedModel& costs, ScheduleSkeleton& skeleton, bool waits = true,
                  bool atSoloRate = false);
/// Whether some rank's copies are faster alone than with every GPU on its switch copying (the
/// two placements of addOffload differ).
bool hostCopiesShareSwitches(const Plan& shell);
/// Forwards that wait for an offload of their device (ScheduleSkeleton::offloadWaits), where
/// that lowers a device's peak and the step gets no longer; on an order with its copies.
Status addOffloadWaits(const Plan& shell, const CostedModel& costs, ScheduleSkeleton& skeleton);

/// The Zero Bubble authors' V-1F1B order (VOneFOneB.cpp, after their v1f1b.py) on the V
/// placement wavePlacement(p, 2), fused backward; nullopt for a shape it does not build.
std::optional<std::vector<std::vector<OrderedOp>>> vOneFOneBOrder(int p, int m);

/// The authors' group-interleaved 1F1B order (GroupInterleaved.cpp, after their
/// group_interleaved_1f1b.py without recomputation) on linearPlacement(p, v): groups of g
/// microbatches, `minGroup` the authors' minimum group size; B and W split, each W right after
/// its B; nullopt for a shape whose building block does not fit.
std::optional<std::vector<std::vector<OrderedOp>>> groupInterleavedOrder(int p, int m, int v, int g, int minGroup);

/// Whether the placement is one V per device (stage d and 2p−1−d on device d, one pipeline).
bool isSingleV(const ScheduleInput& input);
/// The orders of the four fill policies that finish within the budgets, in the reference's
/// order (fill before B1 on/off × fill before forwards on/off); empty when none does or
/// the placement is not a single V.
/// `first` (optional) also sees the very first order built, before its policy's refinements.
std::vector<VConstruction> vShapeConstructions(const ScheduleInput& input, const VConstructionOptions& options,
                                               const VConstructionSink& each = {}, const VConstructionSink& first = {});

}  // namespace pipestudio::schedules
