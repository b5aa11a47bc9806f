// Partitioner dispatch: balanced and dp over the stages a schedule placed (issue 4).
#include <algorithm>
#include <map>

#include "partition/Partitioners.hpp"
#include "partition/Uniform.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio::partition {
namespace {

// Peak live microbatches per virtual stage under the schedule's order, measured on the
// uniform partition (the order of fixed schedules does not depend on the ranges).
Expected<std::vector<int>> liveCounts(const PlanRequest& request, const ScheduleGenerator& generator,
                                      const std::vector<VirtualStage>& uniform, const SolveControl& control) {
  Plan shell;
  shell.config = request.config;
  shell.model = request.model;
  shell.cluster = request.cluster;
  shell.virtualStages = uniform;
  ScheduleInput input;
  input.shape = {request.config.devices, request.config.microbatches, request.config.chunksPerDevice};
  input.virtualStages = uniform;
  input.stages = stageEstimates(shell);
  input.staticBytes = staticMemoryPerDevice(shell, stageCosts(shell));
  input.request = &request;
  input.control = &control;
  auto skeleton = generator.order(input);
  if (!skeleton) return skeleton.error();
  return liveMicrobatchesPerStage(*skeleton);
}

}  // namespace

Expected<std::vector<VirtualStage>> partitionWith(const PlanRequest& request, const ScheduleGenerator& generator,
                                                  std::vector<VirtualStage> placement, const std::string& algorithm,
                                                  const SolveControl& control) {
  auto uniform = partitionUniform(request.model, placement);
  if (!uniform) return Error{"partition '" + algorithm + "': " + uniform.message()};
  std::vector<VirtualStage> stages = std::move(*uniform);
  if (request.config.partition == "diffusionpipe") {
    // Two backbones in opposite directions on a V: re-assign components per leg, with a
    // uniform split inside each leg as the starting point for the live counts.
    std::vector<VirtualStage> legs = stages;
    if (assignLegs(request.model, legs)) {
      std::map<int, std::vector<std::size_t>> byComp;
      for (std::size_t i = 0; i < legs.size(); ++i) {
        if (legs[i].pipeline == 0) byComp[legs[i].component].push_back(i);
      }
      for (auto& [comp, idx] : byComp) {
        const int n = static_cast<int>(request.model.components[static_cast<std::size_t>(comp)].layers.size());
        const int k = static_cast<int>(idx.size());
        for (int j = 0; j < k; ++j) {
          legs[idx[static_cast<std::size_t>(j)]].firstLayer = j * n / k;
          legs[idx[static_cast<std::size_t>(j)]].lastLayer = (j + 1) * n / k - 1;
        }
      }
      stages = std::move(legs);
    }
  }
  auto live = liveCounts(request, generator, stages, control);
  if (!live) return live.error();

  // Per-device budget: the GPU memory (or --memory-limit) shared evenly by the device's
  // virtual stages; exact for one stage per device, a conservative split otherwise (the
  // simulator's memory check has the last word).
  std::map<int, int> stagesOnDevice;
  for (const auto& vs : stages) ++stagesOnDevice[vs.device];

  std::vector<std::size_t> pipeline0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].pipeline == 0) pipeline0.push_back(i);
  }
  for (int comp : request.model.trainableComponents()) {
    std::vector<std::size_t> mine;
    for (std::size_t i : pipeline0) {
      if (stages[i].component == comp) mine.push_back(i);
    }
    if (mine.empty()) continue;
    std::vector<PartitionStage> ps;
    for (std::size_t i : mine) {
      PartitionStage st;
      st.device = stages[i].device;
      st.liveMicrobatches = (*live)[i];
      const double limit = request.config.memoryLimitBytes
                               ? static_cast<double>(*request.config.memoryLimitBytes)
                               : static_cast<double>(request.cluster.gpuOfDevice(st.device).memoryBytes());
      if (limit > 0) st.memoryBudgetBytes = limit / std::max(1, stagesOnDevice[st.device]);
      ps.push_back(st);
    }
    const PartitionProblem problem = buildPartitionProblem(request, comp, ps);
    auto result = algorithm == "balanced" ? balancedPartition(problem) : dpPartition(problem, control);
    if (!result) {
      // Name the virtual stage by its id in the plan, not by its index within the component.
      std::string msg = result.message();
      return Error{msg + " [component '" + request.model.components[static_cast<std::size_t>(comp)].name +
                   "', virtual stages " + std::to_string(stages[mine.front()].id) + ".." +
                   std::to_string(stages[mine.back()].id) + " of the plan]"};
    }
    for (std::size_t k = 0; k < mine.size(); ++k) {
      VirtualStage& vs = stages[mine[k]];
      vs.firstLayer = result->firstLayer[k];
      vs.lastLayer = (k + 1 < mine.size() ? result->firstLayer[k + 1] : problem.layers) - 1;
    }
  }
  // Bidirectional schedules hold the model twice: pipeline 1 mirrors pipeline 0's ranges.
  std::vector<std::size_t> pipeline1;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].pipeline == 1) pipeline1.push_back(i);
  }
  for (std::size_t k = 0; k < pipeline1.size() && k < pipeline0.size(); ++k) {
    stages[pipeline1[k]].component = stages[pipeline0[k]].component;
    stages[pipeline1[k]].firstLayer = stages[pipeline0[k]].firstLayer;
    stages[pipeline1[k]].lastLayer = stages[pipeline0[k]].lastLayer;
  }
  return stages;
}

Expected<std::vector<VirtualStage>> partitionNamed(const PlanRequest& request, std::vector<VirtualStage> placement,
                                                   const SolveControl& control) {
  const std::string& name = request.config.partition;
  const ScheduleGenerator* generator = findScheduleGenerator(request.config.schedule);
  if (!generator) return Error{"unknown schedule '" + request.config.schedule + "'"};
  if (name == "balanced" || name == "dp" || name == "diffusionpipe") {
    return partitionWith(request, *generator, std::move(placement), name == "balanced" ? "balanced" : "dp", control);
  }
  return Error{"partition '" + name + "' is not available (known: uniform, balanced, dp, diffusionpipe)"};
}

}  // namespace pipestudio::partition
