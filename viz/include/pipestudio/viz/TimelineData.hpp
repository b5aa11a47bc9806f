#pragma once
/// \file The timeline's view of a plan: lanes of intervals sorted by start, chunked into blocks
/// with min/max times, plus the dependency queries (waiting-for, chain, critical path) behind
/// the hover tooltip and the click highlight. Built once per plan; Qt-free so it can be
/// tested and benchmarked without a widget.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::viz {

namespace tracks {
struct LaneBuild;
}

/// Pass times of a virtual stage and their collective parts (from core/plan's StageCosts).
struct StageCostsLite {
  std::array<double, 3> passMs{};  ///< F, B, W
  std::array<double, 3> collectiveMs{};
  std::array<double, 3> hiddenMs{};  ///< collectives the recipe hides under the pass's compute
};

/// Colour slot of an interval: one per op kind, two for transfers (activations forward,
/// gradients backward) and four for the GPU activity of measured runs without op ranges. Each
/// slot has kShadesPerSlot shades: plans of one chunk per device alternate the first two by
/// microbatch (neighbouring ops of one kind stay distinguishable); interleaved and V-shaped
/// plans give each chunk its own shade (chunk % kShadesPerSlot).
enum class ColourSlot : std::uint8_t {
  F,
  B,
  W,
  BW,
  N,
  S,
  T,
  OPT,
  CommForward,
  CommBackward,
  Kernel,
  Memcpy,
  Memset,
  Nccl
};
inline constexpr int kColourSlotCount = 14;
inline constexpr int kShadesPerSlot = 4;
inline constexpr int kShadeCount = kShadesPerSlot * kColourSlotCount;

/// GPU activity of a measured run that has no op ranges (a plain PyTorch profiler trace):
/// kernels, memcpy, memset and NCCL kernels per device and stream, and the iterations the
/// trace marks (ProfilerStep#N). Times in ms on the timeline's axis. Qt- and history-free: the
/// window builds it from the run's events.
enum class ActivityKind : std::uint8_t { Kernel, Memcpy, Memset, Nccl };
struct ActivityEvent {
  double startMs = 0;
  double endMs = 0;
  ActivityKind kind = ActivityKind::Kernel;
  std::int32_t name = -1;  ///< index into ActivityTrace::names
};
struct ActivityStream {
  int device = 0;
  std::int64_t stream = 0;
  std::vector<ActivityEvent> events;  ///< sorted by start
};
struct ActivityIteration {
  std::string name;  ///< "ProfilerStep#551"
  double startMs = 0;
  double endMs = 0;
};
/// Multiplies the start and end of every span in `spans` (ops, transfers, events: anything with
/// startMs and endMs) by `factor`, as a run drawn to a plan's scale is.
template <typename Spans>
void scaleSpans(Spans& spans, double factor) {
  for (auto& span : spans) {
    span.startMs *= factor;
    span.endMs *= factor;
  }
}

struct ActivityTrace {
  std::vector<std::string> names;
  std::vector<ActivityStream> streams;        ///< by (device, stream)
  std::vector<ActivityIteration> iterations;  ///< in time order
  /// The same activity with every time multiplied by `factor` (a run drawn to a plan's scale).
  ActivityTrace scaled(double factor) const;
  /// GPU busy time (union over its streams) of `device` inside [fromMs, toMs].
  double busyMs(int device, double fromMs, double toMs) const;
};
std::string_view activityKindName(ActivityKind kind);

/// Reference to what an interval shows: an op (index into plan.ops), a transfer, or one
/// activity event (index into TimelineData's activity table).
struct ItemRef {
  enum class Kind : std::uint8_t { None, Op, Comm, Activity };
  Kind kind = Kind::None;
  std::int32_t index = -1;
  bool valid() const { return kind != Kind::None && index >= 0; }
  friend bool operator==(const ItemRef&, const ItemRef&) = default;
};

/// Ops within a lane are grouped into blocks of kBlockSize consecutive intervals; a block keeps
/// the earliest start and the latest end so draw() and hit tests skip whole blocks.
struct LaneBlock {
  double minStartMs = 0;
  double maxEndMs = 0;
};

/// One horizontal row of the timeline: the compute ops of a device (or of one pipeline of a
/// bidirectional schedule on it), or the transfers a device sends.
struct Lane {
  int device = 0;
  bool comm = false;
  int pipeline = 0;
  bool activity = false;    ///< a stream of GPU activity (measured runs without op ranges)
  std::int64_t stream = 0;  ///< of an activity lane
  /// Compute lanes of two-pipe devices: where the device computes on neither pipe, by start
  /// (idle hatching is drawn there only). Empty for other lanes: idle is their span less ops.
  std::vector<std::pair<double, double>> idleGaps;
  bool hatchGapsOnly = false;
  double valueLo = 0;  ///< vertical extent in plot coordinates (device d spans [d, d + 1))
  double valueHi = 0;
  std::vector<double> startMs;  ///< sorted ascending
  std::vector<double> endMs;
  std::vector<std::uint8_t> shade;  ///< ColourSlot * kShadesPerSlot + variant
  std::vector<std::int32_t> microbatch;
  std::vector<ItemRef> items;
  std::vector<LaneBlock> blocks;
  double maxDurationMs = 0;  ///< the cull step-back: an interval starting before the window
                             ///< by at most this much may still reach into it
  double firstStartMs = 0;   ///< device span (compute lanes): idle inside it is bubble
  double lastEndMs = 0;
  std::size_t size() const { return startMs.size(); }
  /// First index whose interval can overlap [fromMs, ∞): steps back by maxDurationMs.
  std::size_t firstVisible(double fromMs) const;
};

/// Why an op started when it did.
struct WaitReason {
  ItemRef waitedFor;        ///< the op whose completion released it (none: it started at 0)
  bool sameDevice = false;  ///< the device's previous op (compute-bound) vs a data dependency
  double transferMs = 0;    ///< transfer time between the dependency and this op, if any
};

/// A search over a plan's ops (the timeline's Ctrl+F). Terms are separated by spaces or commas:
/// op kinds (`F`, `B`, `W`, `BW`, `N`, `S`, `T`, `OPT`), `mb 7` (microbatch), `vs 12` (virtual
/// stage), `gpu 3` (device), `chunk 1`; a number may be a range `4-7`. Terms of one key are
/// alternatives, different keys must all hold: "F B mb 4-7 gpu 0" = F or B of microbatches 4–7
/// on GPU 0. Empty queries match everything.
struct OpQuery {
  struct Range {
    int lo = 0;
    int hi = 0;
    bool contains(int v) const { return v >= lo && v <= hi; }
  };
  std::vector<OpKind> kinds;
  std::vector<Range> microbatches;
  std::vector<Range> virtualStages;
  std::vector<Range> devices;
  std::vector<Range> chunks;
  bool empty() const {
    return kinds.empty() && microbatches.empty() && virtualStages.empty() && devices.empty() && chunks.empty();
  }
  bool matches(const Plan& plan, const Op& op) const;
};
/// Parses a query; an unknown term says what is accepted.
Expected<OpQuery> parseOpQuery(std::string_view text);

/// What a device did inside a time window (the timeline's range measurement).
struct DeviceRangeUse {
  double busyMs = 0;  ///< compute ops overlapping the window, clipped to it
  double idleMs = 0;  ///< window − busy
};
struct RangeMeasurement {
  double fromMs = 0;
  double toMs = 0;
  IdVector<DeviceRangeUse> devices;  ///< by device
  double durationMs() const { return toMs - fromMs; }
  double idleMs() const;  ///< summed over devices
};

/// Collective time inside an op (TP/CP/EP all-reduces, all-to-alls, ZeRO gathers and
/// scatters), from the plan's stage costs (core/plan stageCosts): the op's pass time, the
/// exposed collective part of it, and the collective time hidden under its compute (TP overlap,
/// the CP ring, prefetched gathers), which is not part of the duration.
struct CollectiveShare {
  double passMs = 0;
  double collectiveMs = 0;
  double hiddenMs = 0;
  double fraction() const { return passMs > 0 ? collectiveMs / passMs : 0.0; }
};

class TimelineData {
 public:
  static constexpr std::size_t kBlockSize = 256;

  TimelineData() = default;
  /// `activity` adds lanes per device and stream under the device's ops (measured runs).
  /// `collapsed`: one lane per device (both pipes of a bidirectional schedule on one lane, all
  /// streams on one lane, transfers not shown).
  explicit TimelineData(std::shared_ptr<const Plan> plan, std::shared_ptr<const ActivityTrace> activity = nullptr,
                        bool collapsed = false);
  bool collapsed() const { return m_collapsed; }

  const Plan* plan() const { return m_plan.get(); }
  std::shared_ptr<const Plan> planPtr() const { return m_plan; }
  const std::vector<Lane>& lanes() const { return m_lanes.values(); }
  /// Lane `l`, 0 <= l < lanes().size() (laneAt, laneOf).
  const Lane& lane(int l) const { return m_lanes[l]; }
  int deviceCount() const { return m_devices; }
  /// First lane of device `d` (its lanes follow it), or -1.
  int firstLaneOf(int device) const { return m_laneOfDevice.contains(device) ? m_laneOfDevice[device] : -1; }
  const ActivityTrace* activity() const { return m_activity.get(); }
  /// Chunks of a device shaded apart (interleaved and V-shaped plans): the shade variant of
  /// chunk c is c % kShadesPerSlot.
  bool shadesChunks() const { return m_shadesChunks; }
  int chunksPerDevice() const { return m_chunks; }
  double beginMs() const { return m_beginMs; }
  double endMs() const { return m_endMs; }
  bool empty() const { return m_lanes.empty(); }

  /// The interval under (timeMs, value), value in lane coordinates; tolerancePx-free (exact).
  /// `slackMs` widens every interval on both sides (sub-pixel ops remain clickable).
  ItemRef hitTest(double timeMs, double value, double slackMs = 0) const;
  /// Lane index at `value`, or -1.
  int laneAt(double value) const;
  /// Start/end of any item ({0, 0} for an invalid one).
  std::pair<double, double> itemSpanMs(ItemRef ref) const;
  double itemStartMs(ItemRef ref) const { return itemSpanMs(ref).first; }
  double itemEndMs(ItemRef ref) const { return itemSpanMs(ref).second; }
  /// Lane and position of an item, for drawing overlays.
  int laneOf(ItemRef ref) const;

  /// Data-flow predecessors of an op (stage neighbours from core/plan's stageNeighbours, the
  /// definition the simulator uses): previous virtual stage's F (N) for F (N), next stage's
  /// B for B/BW (the last stage's own F), own B for W; plus what the plan's derived
  /// dependencies add (frozen outputs, vocabulary passes). Not the device's previous op.
  std::vector<int> dataPredecessors(int op) const;
  /// The ops that list `op` as a data predecessor.
  std::vector<int> dataSuccessors(int op) const;
  int devicePredecessor(int op) const;
  int deviceSuccessor(int op) const;
  WaitReason waitReason(int op) const;
  /// The op's upstream dependency chain (transitively what it waited for by data flow and
  /// device order, following only the binding predecessor) plus everything downstream of it
  /// by data flow, as op indices.
  std::vector<int> dependencyChain(int op) const;
  /// Critical path of the iteration: from the last-ending op back through binding
  /// predecessors to the first op (in time order).
  std::vector<int> criticalPath() const;

  /// How long an op could be delayed without delaying the end of the iteration (its total
  /// float: device order and transfer times held). 0 on the critical path.
  double slackMs(int op) const;
  /// Collective share of an op (zero when the plan has no costed model, e.g. measured runs).
  CollectiveShare collectiveShare(int op) const;

  /// Ops matching a query, in plan order.
  std::vector<int> findOps(const OpQuery& query) const;
  /// Busy and idle time of every device inside [fromMs, toMs].
  RangeMeasurement measure(double fromMs, double toMs) const;
  /// Name of a lane for the axis ("GPU 3", "GPU 3 · pipeline 1", "GPU 3 transfers").
  std::string laneName(int lane) const;
  /// Whether the plan's N ops compute frozen outputs for the next iteration (cross-iteration
  /// fill) rather than for this one.
  bool frozenWorkIsNextIteration() const;

  /// Human text for the tooltip (kind, microbatch, virtual stage, layers, times, collective
  /// share, waiting-for).
  std::string describe(ItemRef ref) const;

  /// Approximate heap bytes held by this view (bench: view memory).
  std::size_t memoryBytes() const;

 private:
  void buildIndex() const;
  void buildSuccessors() const;
  void buildSlack() const;
  int findOp(int virtualStage, OpKind kind, int microbatch) const;
  /// Transfer time between an op and a data successor on another device (0 on one device).
  double transferMs(int from, int to) const;

  const ActivityEvent& activityEvent(int index) const;
  /// Takes the lanes the tracks built (TimelineTracks.hpp), sorted, with each item's slot.
  void takeLanes(tracks::LaneBuild build);
  void computeIdleGaps();

  std::shared_ptr<const Plan> m_plan;
  std::shared_ptr<const ActivityTrace> m_activity;
  /// Activity events in lane order: (stream index, event index), their lane and slot.
  std::vector<std::pair<std::int32_t, std::int32_t>> m_activityRefs;
  IdVector<std::int32_t> m_activityLane;
  IdVector<std::int32_t> m_activitySlot;
  bool m_shadesChunks = false;
  bool m_collapsed = false;
  int m_chunks = 1;
  IdVector<Lane> m_lanes;
  IdVector<int> m_laneOfDevice;     ///< first lane of device d
  IdVector<std::int32_t> m_opLane;  ///< lane of each op
  IdVector<std::int32_t> m_opSlot;  ///< position of each op inside its lane
  IdVector<std::int32_t> m_commLane;
  IdVector<std::int32_t> m_commSlot;
  IdVector<std::int32_t> m_prevOnDevice;
  IdVector<int> m_prevStage;  ///< stageNeighbours(plan).previous: -1 for a chain's first
  IdVector<int> m_nextStage;
  IdVector<std::int32_t> m_nextOnDevice;
  int m_devices = 0;
  double m_beginMs = 0;
  double m_endMs = 0;
  // (virtualStage × kind, microbatch) → op; built on first dependency query.
  mutable Grid<std::int32_t> m_opIndex;
  mutable bool m_indexBuilt = false;
  // Derived dependencies (frozen outputs, vocabulary passes) as predecessor lists, CSR.
  mutable IdVector<std::int32_t> m_extraPredBegin;
  mutable IdVector<std::int32_t> m_extraPred;
  // Data successors, CSR; built on first successor or slack query.
  mutable IdVector<std::int32_t> m_succBegin;
  mutable IdVector<std::int32_t> m_succ;
  mutable bool m_successorsBuilt = false;
  mutable IdVector<double> m_slackMs;
  mutable std::map<std::tuple<int, int, int, int>, double> m_transferMs;  ///< (stage, kind, mb, to) → ms
  mutable bool m_transfersBuilt = false;
  mutable IdVector<StageCostsLite> m_stageCosts;
  mutable bool m_stageCostsBuilt = false;
  int m_maxMicrobatch = 0;
};

}  // namespace pipestudio::viz
