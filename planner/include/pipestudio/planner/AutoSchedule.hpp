#pragma once
/// \file zb-auto: automatic zero-bubble scheduling under a per-device memory limit for arbitrary
/// per-stage F/B/W times and communication cost (Qi et al. 2023, "Zero Bubble Pipeline
/// Parallelism", §3 automatic scheduling). A portfolio of greedy list-scheduling policies (the
/// paper's heuristic among them) is run, the best order is improved by critical-path moves, and
/// small instances can be solved exactly by an ILP through CBC. Qt-free.

#include <cstdint>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/planner/Request.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio {

struct AutoScheduleOptions {
  /// Work budget of the heuristics, in op steps (one op placed by a list-scheduling policy or
  /// timed by an evaluation is one step). Work, not wall-clock time, so the same request gives
  /// the same plan on any machine. The authors' published heuristic always runs first (a good
  /// answer at once); the policy portfolio and the local search improve it while the budget
  /// lasts. Small instances finish everything far below the default.
  std::int64_t workBudgetSteps = 15'000'000;
  /// Critical-path local search after the policy portfolio.
  bool localSearch = true;
  /// Upper bound on the orders the local search times.
  int maxSearchEvaluations = 2000;
  /// On cancel (SolveControl) after a first answer: return the best order so far (the report
  /// says stoppedEarly) instead of Error::cancelled().
  bool keepBestOnCancel = false;
  /// Solve the ILP through CBC (small instances only, see kExactMaxOps) starting from the
  /// heuristic's order; proves optimality or reports the remaining gap. The ILP's time limit
  /// is the one wall-clock budget, asked for explicitly (results may differ when it binds).
  bool exact = false;
  double exactTimeLimitS = 30;
};

/// Outcome of the exact (ILP) mode.
enum class ExactStatus {
  NotRun,       ///< exact mode not requested
  Unavailable,  ///< built without CBC
  TooLarge,     ///< instance above the size the ILP is offered for
  Optimal,      ///< proven optimal (among in-order schedules, see autoSchedule)
  TimeLimit,    ///< stopped at the time limit; exactBoundMs/exactGap say how far from proven
  Failed,       ///< CBC found no solution better than the heuristic's or failed
};
std::string_view exactStatusName(ExactStatus status);

/// Instances the ILP is offered for: at most 4 devices and 8 microbatches (p·v·m·3 ops ≤ 192).
inline constexpr int kExactMaxDevices = 4;
inline constexpr int kExactMaxMicrobatches = 8;

struct AutoScheduleReport {
  /// What zb-auto minimises: "makespan" (optimizer sync global) or "longest device span"
  /// (post-validation: iterations overlap and the steady-state period is the longest span).
  std::string objective = "makespan";
  double objectiveMs = 0;          ///< of the returned order
  double makespanMs = 0;           ///< of the returned order (auto-scheduler timing model)
  double busiestDeviceWorkMs = 0;  ///< lower bound: the busiest device's total F+B+W work
  double lowerBoundMs = 0;  ///< max(busiest work, earliest start + work, memory slots × round trip, one round trip)
  double gapToBusiestWork = 0;  ///< makespan / busiestDeviceWorkMs − 1
  double gapToLowerBound = 0;   ///< makespan / lowerBoundMs − 1
  /// The authors' published heuristic alone, as their code picks it (zb.py initial_solution for
  /// one stage per device, zbv.py create_schedule for one V per device; 0 when neither applies).
  double paperGreedyMakespanMs = 0;  ///< in the objective
  std::string publishedHeuristic;    ///< which one ("zb.py", "zbv.py" or empty)
  double bestPolicyMakespanMs = 0;   ///< best of the portfolio, before local search (in the objective)
  std::string bestPolicy;            ///< its name
  int policiesTried = 0;
  int searchEvaluations = 0;
  int searchImprovements = 0;
  std::int64_t workSteps = 0;           ///< op steps spent by the heuristics (see workBudgetSteps)
  bool stoppedEarly = false;            ///< cancelled with keepBestOnCancel: the best order so far
  std::vector<std::int64_t> peakBytes;  ///< per device, static included
  ExactStatus exactStatus = ExactStatus::NotRun;
  double exactMakespanMs = 0;  ///< ILP incumbent (its objective)
  double exactBoundMs = 0;     ///< ILP best bound
  double exactGap = 0;         ///< (incumbent − bound) / incumbent
  double exactSeconds = 0;
  std::string exactMessage;
};

struct AutoScheduleResult {
  ScheduleSkeleton skeleton;
  AutoScheduleReport report;
};

/// Schedules `input` (one pipeline, backward split into B and W, any placement). The memory
/// limit (input.memoryLimitBytes, else each device's GPU memory when input.request is set,
/// else unlimited) holds static bytes plus live activations (docs/formats.md) on every device.
/// Every stage processes its F, B and W passes in microbatch order ("in-order" schedules, as
/// every published schedule does); the ILP's optimality is proven within that class.
/// A limit below what one microbatch needs is an Error naming the minimum.
Expected<AutoScheduleResult> autoSchedule(const ScheduleInput& input, const AutoScheduleOptions& options = {});

/// Improves a complete order (one pipeline, B and W split) by zb-auto's critical-path moves
/// (an op that waited for its device's previous op runs before it, or a blocking W a little
/// later), each kept only when the whole order times faster and no device's live activation
/// bytes exceed capBytes[d]; at most `maxEvaluations` orders are timed (work, not time).
/// Returns the improved order (or `start` when no move helps); Error when `start` itself is
/// not a valid order within the caps.
Expected<ScheduleSkeleton> improveOrder(const ScheduleInput& input, const ScheduleSkeleton& start,
                                        const std::vector<std::int64_t>& capBytes, int maxEvaluations);

/// True when the build has CBC (exact mode available).
bool exactSchedulingAvailable();

/// Timing of a fixed order under the auto-scheduler's model: dependency-driven, transfers
/// take StageEstimate::sendMs and serialise per directed device pair.
struct OrderTiming {
  double makespanMs = 0;
  std::vector<std::int64_t> peakBytes;  ///< per device, static included
};
/// Error on a deadlocked or incomplete order.
Expected<OrderTiming> timeAutoOrder(const ScheduleInput& input, const ScheduleSkeleton& skeleton);

/// The lower bound of any plan: the busiest device's busy time (docs/formats.md metrics).
double busiestDeviceWorkMs(const Plan& plan);

/// makePlan with schedule `zb-auto` and these options (partition, memory checks and simulation
/// as makePlan does them); `report`, when given, receives the auto-scheduler's report.
Expected<Plan> makeAutoPlan(const PlanRequest& request, const AutoScheduleOptions& options,
                            AutoScheduleReport* report = nullptr, const SolveControl& control = {});

/// makePlan with schedule `custom`: the per-device order (and the placement of the virtual
/// stages, chunks per device = the most any device holds) comes from schedule CSV text
/// (Export.hpp format); config.partition splits the layers over those stages.
Expected<Plan> makeCustomPlan(const PlanRequest& request, const std::string& csvText, const std::string& source,
                              const SolveControl& control = {});

/// Reads a schedule CSV file (bounded size) for makeCustomPlan.
Expected<std::string> readScheduleCsvFile(const std::string& path);

/// Human-readable lines and a JSON object describing a report (CLI `plan --schedule zb-auto`).
std::string formatAutoScheduleReport(const AutoScheduleReport& report);
Json autoScheduleReportJson(const AutoScheduleReport& report);

}  // namespace pipestudio
