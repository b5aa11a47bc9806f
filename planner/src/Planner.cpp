// makePlan: validate → place (schedule) → partition → order (schedule) → fill → simulate →
// memory check. Dispatch points for other helpers are marked "extension point".
#include <algorithm>
#include <cmath>
#include <sstream>

#include "partition/Partitioners.hpp"
#include "partition/Uniform.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Planner.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio {
namespace {

std::string knownSchedules() {
  std::string out;
  for (const auto& n : scheduleNames()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Extension point (partitioners): fills component and layer ranges into the placement.
Expected<std::vector<VirtualStage>> partitionStages(const PlanRequest& request, std::vector<VirtualStage> placement,
                                                    const SolveControl& control) {
  const std::string& name = request.config.partition;
  if (name == "uniform") {
    return partition::partitionUniformStrict(request.model, std::move(placement), request.config.devices,
                                             request.config.schedule);
  }
  return partition::partitionNamed(request, std::move(placement), control);  // part: balanced, dp, diffusionpipe
}

// Extension point (bubble filling): adds frozen-component N ops to the skeleton.
Status fillBubbles(const PlanRequest& request, ScheduleSkeleton& skeleton, const SolveControl& control) {
  return fillSkeleton(request, skeleton, control);  // part: --fill none|greedy (Fill.hpp)
}

// A memory limit below what one microbatch needs can never be met by any order.
Status checkLimitAgainstOneMicrobatch(const Plan& shell, const std::vector<StageEstimate>& stages) {
  if (!shell.config.memoryLimitBytes) return {};
  const std::int64_t limit = *shell.config.memoryLimitBytes;
  const auto costs = stageCosts(shell);
  const auto staticBytes = staticMemoryPerDevice(shell, costs);
  std::vector<std::int64_t> oneMb(static_cast<std::size_t>(shell.config.devices), 0);
  for (std::size_t i = 0; i < shell.virtualStages.size(); ++i) {
    // One microbatch through one pipeline: count pipeline 0's stages.
    if (shell.virtualStages[i].pipeline != 0) continue;
    oneMb[static_cast<std::size_t>(shell.virtualStages[i].device)] += stages[i].activationBytes;
  }
  for (int d = 0; d < shell.config.devices; ++d) {
    const auto du = static_cast<std::size_t>(d);
    const std::int64_t needBytes = staticBytes[du] + oneMb[du];
    if (needBytes > limit) {
      return Error{"memory limit " + formatBytes(static_cast<double>(limit)) + " is below what one microbatch needs on device " +
                   std::to_string(d) + ": " + formatBytes(static_cast<double>(needBytes)) + " (static " +
                   formatBytes(static_cast<double>(staticBytes[du])) + " + activations " +
                   formatBytes(static_cast<double>(oneMb[du])) + "); use more devices or a higher --memory-limit"};
    }
  }
  return {};
}

}  // namespace

Expected<Plan> makePlan(const PlanRequest& request, const SolveControl& control) {
  const PlanConfig& cfg = request.config;
  if (cfg.partition == "diffusionpipe" && !partition::inDiffusionPipeSearch()) return partition::solveDiffusionPipe(request, control);  // part
  const ScheduleGenerator* generator = findScheduleGenerator(cfg.schedule);
  if (!generator) return Error{"unknown schedule '" + cfg.schedule + "' (known: " + knownSchedules() + ")"};
  if (cfg.devices < 1) return Error{"--devices must be at least 1, got " + std::to_string(cfg.devices)};
  if (cfg.microbatches < 1) return Error{"--microbatches must be at least 1, got " + std::to_string(cfg.microbatches)};
  if (cfg.chunksPerDevice < 1) return Error{"--chunks must be at least 1, got " + std::to_string(cfg.chunksPerDevice)};
  if (request.cluster.totalGpus() > 0 && cfg.devices > request.cluster.totalGpus()) {
    return Error{"--devices " + std::to_string(cfg.devices) + " exceeds the " + std::to_string(request.cluster.totalGpus()) +
                 " GPUs of cluster '" + request.cluster.name + "'"};
  }
  if (cfg.memoryLimitBytes && *cfg.memoryLimitBytes <= 0) return Error{"--memory-limit must be positive"};
  if (auto st = checkPlanSize(cfg.devices, cfg.chunksPerDevice, cfg.microbatches); !st) return st.error();
  const ScheduleShape shape{cfg.devices, cfg.microbatches, cfg.chunksPerDevice};
  if (auto st = generator->validate(shape); !st) return st.error();
  if (control.cancelled()) return Error{"cancelled"};

  auto stages = partitionStages(request, generator->placement(shape), control);
  if (!stages) return stages.error();
  Plan shell;
  shell.config = cfg;
  shell.model = request.model;
  shell.cluster = request.cluster;
  shell.virtualStages = std::move(*stages);

  ScheduleInput input;
  input.shape = shape;
  input.virtualStages = shell.virtualStages;
  input.stages = stageEstimates(shell);
  input.staticBytes = staticMemoryPerDevice(shell, stageCosts(shell));
  input.memoryLimitBytes = cfg.memoryLimitBytes;
  input.request = &request;
  input.control = &control;
  if (auto st = checkLimitAgainstOneMicrobatch(shell, input.stages); !st) return st.error();

  auto skeleton = generator->order(input);
  if (!skeleton) return skeleton.error();
  if (control.progress) control.progress(0.5);
  if (auto st = fillBubbles(request, *skeleton, control); !st) return st.error();
  if (control.cancelled()) return Error{"cancelled"};

  auto plan = simulateSkeleton(std::move(shell), *skeleton);
  if (!plan) return Error{cfg.schedule + ": " + plan.message()};
  if (auto st = checkMemory(*plan); !st) return st.error();
  if (control.progress) control.progress(1.0);
  return plan;
}

Status checkMemory(const Plan& plan) {
  std::ostringstream msg;
  bool fits = true;
  for (std::size_t d = 0; d < plan.metrics.devices.size(); ++d) {
    const DeviceMetrics& dm = plan.metrics.devices[d];
    const std::int64_t limit = plan.config.memoryLimitBytes ? *plan.config.memoryLimitBytes
                                                            : plan.cluster.gpuOfDevice(static_cast<int>(d)).memoryBytes();
    if (limit <= 0 || dm.peakMemoryBytes <= limit) continue;
    if (fits) {
      msg << plan.config.schedule << " does not fit in memory ("
          << (plan.config.memoryLimitBytes ? "--memory-limit " : "GPU memory ") << formatBytes(static_cast<double>(limit))
          << " per device):";
    }
    fits = false;
    msg << "\n  device " << d << ": peak " << formatBytes(static_cast<double>(dm.peakMemoryBytes)) << " = static "
        << formatBytes(static_cast<double>(dm.staticMemoryBytes)) << " + activations "
        << formatBytes(static_cast<double>(dm.peakActivationBytes)) << ", over by "
        << formatBytes(static_cast<double>(dm.peakMemoryBytes - limit));
  }
  if (fits) return {};
  msg << "\n  (use more devices, fewer in-flight microbatches, or a schedule with less activation memory such as v-half or v-min)";
  return Error{msg.str()};
}

}  // namespace pipestudio
