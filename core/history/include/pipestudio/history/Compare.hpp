#pragma once
/// \file Comparisons over the history (docs/architecture.md, issue 6): run vs run, run vs its plan,
/// and the per-device idle-time breakdown. All functions read through a HistoryStore and
/// return value snapshots (safe to hand to the GUI thread).

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/history/HistoryStore.hpp"

namespace pipestudio::history {

/// Step-time statistics (ms). count == 0 when the run has no known steps.
struct StepStats {
  int count = 0;
  double meanMs = 0;
  double medianMs = 0;
  double minMs = 0;
  double maxMs = 0;
  double stddevMs = 0;
};
StepStats stepStats(std::vector<double> stepsMs);

/// Total duration and count of one kernel/op name in both runs (ops are named by kind: F, B…).
struct NameComparison {
  std::string name;
  double aMs = 0;
  double bMs = 0;
  double deltaMs = 0;  ///< b − a
  std::int64_t aCount = 0;
  std::int64_t bCount = 0;
};

/// Busy = union of the device's op ranges (or, for runs without op ranges, of its GPU
/// activity); idle = span − busy, span = first start … last end on the device (docs/formats.md).
struct DeviceComparison {
  int device = 0;
  double aBusyMs = 0;
  double bBusyMs = 0;
  double aIdleMs = 0;
  double bIdleMs = 0;
};

struct RunComparison {
  RunSummary a;
  RunSummary b;
  std::vector<NameComparison> byName;  ///< largest total first
  std::vector<DeviceComparison> byDevice;
  StepStats stepA;
  StepStats stepB;
};

/// `history compare A B`. Two 1M-event runs compare in well under a second (bench/history).
Expected<RunComparison> compareRuns(HistoryStore& store, RunId a, RunId b);
/// Exactly the keys of issue 6: a, b, by_name, by_device, step.
Json comparisonToJson(const RunComparison& c);
std::string comparisonTable(const RunComparison& c);

/// One planned op matched with its measured ranges (averaged over iterations). Start times
/// are relative to the start of the plan / of each measured iteration.
struct OpDrift {
  int device = 0;
  int virtualStage = 0;
  OpKind kind = OpKind::F;
  int microbatch = 0;
  double plannedStartMs = 0;
  double plannedMs = 0;
  double measuredStartMs = 0;
  double measuredMs = 0;
  double startDriftMs = 0;     ///< measured start − planned start
  double durationDeltaMs = 0;  ///< measured − planned duration
  int iterations = 0;          ///< measured ranges averaged
};

/// Per device, mean over measured iterations; the measured bubble is the window less busy time,
/// as the plan's is span less compute. Busy is the union of op ranges; in runs without op
/// ranges, of GPU activity with NCCL kernels counted only for their transfer part, so the time
/// a send/recv kernel spends waiting for its peer is bubble (a kernel starts before its peer's;
/// where the trace pairs them, through the `PP:` SEND/RECV annotations, the difference of their
/// starts is waiting). Windows: iterations of op ranges, else ProfilerStep ranges of the device.
struct DeviceBubble {
  int device = 0;
  double plannedBusyMs = 0;
  double plannedBubbleMs = 0;  ///< plan: span − busy
  double measuredBusyMs = 0;   ///< mean over iterations
  double measuredBubbleMs = 0;
  double measuredCommWaitMs = 0;      ///< idle time with an NCCL kernel waiting for its peer (part of the bubble)
  double measuredCommTransferMs = 0;  ///< NCCL kernel time moving data
};

/// Mean duration of one op kind, planned against measured.
struct KindComparison {
  OpKind kind = OpKind::F;
  int count = 0;  ///< matched ops of this kind
  double plannedMs = 0;
  double measuredMs = 0;
};

struct PlanComparison {
  RunSummary run;
  PlanId planId = 0;
  int iterations = 0;
  std::vector<OpDrift> ops;          ///< every matched op, in plan order
  std::vector<OpDrift> mostDrifted;  ///< by |start drift| + |duration delta|, largest first
  std::vector<OpDrift> latest;       ///< by start drift, the latest relative to plan first
  std::vector<DeviceBubble> devices;
  std::vector<KindComparison> byKind;
  int unmatchedPlanned = 0;   ///< planned ops with no measured range
  int unmatchedMeasured = 0;  ///< measured op ranges with no planned op
};

/// Run vs its plan (`plan` overrides the run's linked plan).
Expected<PlanComparison> compareRunToPlan(HistoryStore& store, RunId run, std::optional<PlanId> plan = std::nullopt,
                                          int mostDriftedCount = 10);
Json planComparisonToJson(const PlanComparison& c);
std::string planComparisonTable(const PlanComparison& c);

/// The ops whose output an op reads, named by (virtual stage, kind, microbatch), as the idle
/// breakdown uses them. With a plan, the simulator's rules: data flow along
/// plan/Dependencies.hpp's stageNeighbours (F after the previous stage's F, N after the previous
/// stage's N, B/BW after the next stage's B or BW; a W, and the last stage's B after its own F,
/// wait only for work of their own device) plus the plan's derived dependencies (frozen
/// outputs under `--fill none`, the vocabulary S/T passes). Without one (an imported trace
/// names no components), stage s feeds stage s+1: any forward-direction pass (F, N, S) of the
/// stage before, any backward-direction pass (B, BW, T) of the stage after.
class OpProducers {
 public:
  struct StageOp {
    int virtualStage = 0;
    OpKind kind = OpKind::F;
    int microbatch = 0;
    bool operator==(const StageOp&) const = default;
    bool operator<(const StageOp& o) const {
      return std::tie(virtualStage, kind, microbatch) < std::tie(o.virtualStage, o.kind, o.microbatch);
    }
  };
  /// `plan` may be null (no linked plan); `maxStage` is the highest stage a run names.
  OpProducers(const Plan* plan, int maxStage);
  /// Candidate producers of one op: those a run holds are what it waited for.
  std::vector<StageOp> of(int virtualStage, OpKind kind, int microbatch) const;

 private:
  std::vector<int> m_previous;
  std::vector<int> m_next;
  std::map<StageOp, std::vector<StageOp>> m_derived;
  bool m_fallback = false;
};

/// Where a device's idle time went, in the spirit of Holistic Trace Analysis' idle-time
/// breakdown (github.com/facebookresearch/HolisticTraceAnalysis, "Idle Time Breakdown"),
/// per iteration window and summed. Definitions (a gap is a stretch of the iteration window
/// with no op running on the device; see Compare.cpp for the exact rules):
/// - communicationMs: gap time covered by the device's communication (NCCL) activity;
/// - dependencyWaitMs: gap time before the next op's input from another device was
///   produced, beyond what the plan itself leaves idle there (an upstream device was late);
/// - hostWaitMs: gap time after the input was ready and before the op started (the host had
///   not launched it: launch latency, CPU contention, synchronisation);
/// - bubbleMs: the pipeline's own bubble: idle before the device's first op and after its
///   last op in the iteration (fill/drain), plus dependency waits the plan also has.
struct IdleBreakdown {
  int device = 0;
  double windowMs = 0;  ///< sum of iteration windows
  double busyMs = 0;
  double idleMs = 0;  ///< = communication + dependency + host + bubble
  double communicationMs = 0;
  double dependencyWaitMs = 0;
  double hostWaitMs = 0;
  double bubbleMs = 0;
};
/// Uses the run's linked plan (if any) for dependencies between virtual stages (OpProducers)
/// and for the planned idle; without one, stage s feeds stage s+1 and only fill/drain counts
/// as bubble.
Expected<std::vector<IdleBreakdown>> idleBreakdown(HistoryStore& store, RunId run);
Json idleBreakdownToJson(const std::vector<IdleBreakdown>& rows);

/// id, name, status, events, created (ISO 8601 UTC), created_unix_ms, plan (id or null),
/// source, source_path, user, host, backend, gpu, executor_version, devices, iterations,
/// duration_ms, notes, error.
Json runSummaryToJson(const RunSummary& s);
std::string formatUnixMs(std::int64_t unixMs);

}  // namespace pipestudio::history
