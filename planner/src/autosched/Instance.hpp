#pragma once
// The auto-scheduler's view of a request: one pipeline of S virtual stages on P devices,
// m microbatches, per-stage F/B/W times, activation bytes and transfer times, per-device
// activation budgets. Ops are numbered opId(stage, kind, microbatch).

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::autosched {

inline constexpr int kF = 0;
inline constexpr int kB = 1;
inline constexpr int kW = 2;
inline constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max() / 4;

struct Instance {
  int devices = 0;
  int stages = 0;
  int microbatches = 0;
  std::vector<int> device;                        // per stage
  std::array<std::vector<double>, 3> durationMs;  // [kind][stage]
  std::vector<std::int64_t> activationBytes;      // per stage, live F start → B end
  std::vector<std::int64_t> weightGradBytes;      // per stage, part of the above kept until W end
  std::vector<double> sendMs;                     // stage s → s+1 (and the gradient back)
  std::vector<std::int64_t> staticBytes;          // per device
  std::vector<std::int64_t> budgetBytes;          // per device: limit − static (kUnlimited if none)
  std::vector<std::vector<int>> stagesOf;         // per device, in pipeline order
  // The objective: the makespan, or with optimizer post-validation (iterations overlap, the
  // steady-state period is the longest device span, Qi et al. 2023 §5) the longest span.
  bool spanObjective = false;

  // The tables above read by an int stage or device id.
  int deviceOfStage(int s) const { return device[static_cast<std::size_t>(s)]; }
  double durationOf(int kind, int s) const { return durationMs[kind][static_cast<std::size_t>(s)]; }
  std::int64_t activationBytesOf(int s) const { return activationBytes[static_cast<std::size_t>(s)]; }
  std::int64_t weightGradBytesOf(int s) const { return weightGradBytes[static_cast<std::size_t>(s)]; }
  double sendMsOf(int s) const { return sendMs[static_cast<std::size_t>(s)]; }
  std::int64_t budgetBytesOf(int d) const { return budgetBytes[static_cast<std::size_t>(d)]; }
  const std::vector<int>& stagesOn(int d) const { return stagesOf[static_cast<std::size_t>(d)]; }

  int opCount() const { return stages * 3 * microbatches; }
  int opId(int stage, int kind, int mb) const { return (stage * 3 + kind) * microbatches + mb; }
  int stageOf(int op) const { return op / (3 * microbatches); }
  int kindOf(int op) const { return (op / microbatches) % 3; }
  int mbOf(int op) const { return op % microbatches; }
  double duration(int op) const { return durationOf(kindOf(op), stageOf(op)); }
  int deviceOf(int op) const { return deviceOfStage(stageOf(op)); }
};

/// Per-device op orders (op ids).
using Orders = std::vector<std::vector<int>>;

Expected<Instance> buildInstance(const ScheduleInput& input);

struct Timing {
  bool ok = false;
  double makespanMs = 0;
  double objectiveMs = 0;     // makespan or longest device span (Instance::spanObjective)
  int objectiveOp = -1;       // the op whose end sets it
  std::vector<double> start;  // per op
  std::vector<double> end;
  std::vector<int> cause;                         // op that bound the start (-1: none)
  std::vector<std::int64_t> peakActivationBytes;  // per device
  bool memoryOk = true;
  std::string problem;  // deadlock description when !ok
};
/// Times fixed orders (dependency-driven, transfers serialised per directed device pair).
Timing timeOrders(const Instance& inst, const Orders& orders, bool withCauses = false);

/// Peak live activation bytes per device of an order (time-independent: activations are
/// allocated and freed only by the device's own ops).
std::vector<std::int64_t> peakActivations(const Instance& inst, const Orders& orders);

/// Exact mode: ILP through CBC over in-order schedules, warm-started with `start`.
struct ExactResult {
  bool available = false;
  bool solved = false;  // an incumbent exists (maybe only the warm start)
  bool optimal = false;
  bool timeLimit = false;
  double objectiveMs = 0;
  double boundMs = 0;
  double seconds = 0;
  Orders orders;
  std::string message;
};
ExactResult solveExact(const Instance& inst, const Orders& start, double startMakespanMs, double timeLimitS);

}  // namespace pipestudio::autosched
