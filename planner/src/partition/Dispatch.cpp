// Partitioner dispatch: balanced and dp over the stages a schedule placed (issue 4).
#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "partition/Partitioners.hpp"
#include "partition/Uniform.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio::partition {
namespace {

// Peak live microbatches per virtual stage under the schedule's order, measured on the
// uniform partition (the order of fixed schedules does not depend on the ranges).
Expected<std::vector<int>> liveCounts(const PlanRequest& request, const CostedModel& costs,
                                      const ScheduleGenerator& generator, const std::vector<VirtualStage>& uniform,
                                      const SolveControl& control) {
  const Plan shell = planShell(request, uniform);
  ScheduleInput input;
  input.shape = {request.config.devices, request.config.microbatches, request.config.chunksPerDevice};
  input.virtualStages = uniform;
  input.stages = stageEstimates(shell, costs);
  input.staticBytes = staticMemoryPerDevice(shell, costs.stages(uniform));
  input.request = &request;
  // The order as first built: a schedule's refinement searches (v-half/v-min) keep within the
  // same activation budget, and they run again on the real partition anyway.
  SolveControl firstBuilt = control;
  firstBuilt.refine = false;
  firstBuilt.orderOnly = true;
  input.control = &firstBuilt;
  PS_ASSIGN_OR_RETURN(auto skeleton, generator.order(input));
  return liveMicrobatchesPerStage(skeleton);
}

// The memory budget of every stage of `problem` (see partitionWith).
void setMemoryBudgets(const PlanRequest& request, const std::map<int, int>& stagesOnDevice, PartitionProblem& problem) {
  const double layers = std::max(1, problem.layers);
  double staticPerLayer = 0, activationPerLayer = 0;
  for (const double b : problem.staticBytes) staticPerLayer += b / layers;
  for (const double b : problem.activationBytes) activationPerLayer += b / layers;
  std::map<int, double> weightOnDevice;
  std::map<int, int> mineOnDevice;
  const auto weight = [&](const PartitionStage& st) {
    return staticPerLayer + st.liveMicrobatches * activationPerLayer;
  };
  for (const PartitionStage& st : problem.stages) {
    weightOnDevice[st.device] += weight(st);
    ++mineOnDevice[st.device];
  }
  for (PartitionStage& st : problem.stages) {
    // A --memory-limit is what the plan may allocate; a GPU's own capacity first keeps back the
    // margin, as the final memory check does (checkMemory).
    const GpuSpec& gpu = deviceGpu(request.cluster, request.config, st.device);
    const double limit = request.config.memoryLimitBytes
                             ? static_cast<double>(*request.config.memoryLimitBytes)
                             : static_cast<double>(gpu.memoryBytes() - memoryMarginBytes(gpu));
    if (limit <= 0) continue;
    const double share = limit * mineOnDevice[st.device] / std::max(1, stagesOnDevice.at(st.device));
    const double total = weightOnDevice[st.device];
    st.memoryBudgetBytes = total > 0 ? share * weight(st) / total : share / mineOnDevice[st.device];
  }
}

// Two backbones in opposite directions on a V: re-assign components per leg, with a uniform
// split inside each leg as the starting point for the live counts.
void assignDiffusionLegs(const ModelSpec& model, std::vector<VirtualStage>& stages) {
  std::vector<VirtualStage> legs = stages;
  if (!assignLegs(model, legs)) return;
  std::map<int, std::vector<std::size_t>> byComp;
  for (std::size_t i = 0; i < legs.size(); ++i) {
    if (legs[i].pipeline == 0) byComp[legs[i].component].push_back(i);
  }
  for (auto& [comp, idx] : byComp) {
    const int n = static_cast<int>(model.component(comp).layers.size());
    const int k = static_cast<int>(idx.size());
    for (int j = 0; const std::size_t i : idx) {
      legs[i].firstLayer = j * n / k;
      legs[i].lastLayer = (j + 1) * n / k - 1;
      ++j;
    }
  }
  stages = std::move(legs);
}

// Splits every trainable component's layers over the stages of pipeline 0 an assignment gives
// it, with the partitioner `algorithm`.
//
// Per-device budget: the GPU memory (or --memory-limit), shared by the device's virtual
// stages. Each component gets its stages' share of the device; within it a stage gets the part
// a layer of it needs (static bytes + its live microbatches' activations, averaged over the
// component's layers), so that an even split of layers fits exactly when the device fits
// (interleaved schedules keep more microbatches in flight in their first chunks). The
// simulator's memory check has the last word.
struct LayerSplitter {
  LayerSplitter(const PlanRequest& planRequest, const CostedModel& costed, const std::string& algorithmName,
                const SolveControl& solveControl, const std::vector<int>& liveCounts,
                const std::vector<VirtualStage>& stages, const BalancedMemory& memory, bool budgets)
      : request(planRequest),
        costs(costed),
        algorithm(algorithmName),
        control(solveControl),
        live(liveCounts),
        groups(dependentBackboneGroups(planRequest.model)),
        balancedMemory(memory),
        memoryBudgets(budgets) {
    for (const auto& vs : stages) ++stagesOnDevice[vs.device];
    for (std::size_t i = 0; i < stages.size(); ++i) {
      if (stages[i].pipeline == 0) pipeline0.push_back(i);
    }
    // Independent backbones (no `feeds` path between them) run as separate chains, so one
    // microbatch's latency is that of the longest chain, not the sum over all components.
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (int c : groups[g]) groupOf[c] = g;
    }
  }

  // Returns the estimated iteration: one microbatch's latency through the longest chain (Σ
  // stage times of a group of dependent backbones) plus (m − 1) × the busiest device's time
  // per microbatch (the steady-state bottleneck; with one stage per device this is dp's own
  // objective). `fittingShare`, where given, receives the largest PartitionResult::budgetShare
  // among the components whose `balanced` split meets their scaled budgets (0: none does).
  Expected<double> split(std::vector<VirtualStage>& assigned, double* fittingShare = nullptr) const {
    std::vector<double> chainMs(groups.size() + 1, 0.0);
    std::map<int, double> deviceMs;
    double share = 0;
    for (int comp : request.model.trainableComponents()) {
      PS_RETURN_IF_ERROR(splitComponent(comp, assigned, chainMs, deviceMs, share));
    }
    if (fittingShare) *fittingShare = share;
    double maxDeviceMs = 0;
    for (const auto& [d, ms] : deviceMs) maxDeviceMs = std::max(maxDeviceMs, ms);
    const double sumMs = *std::max_element(chainMs.begin(), chainMs.end());
    return sumMs + static_cast<double>(std::max(0, request.config.microbatches - 1)) * maxDeviceMs;
  }

  Status splitComponent(int comp, std::vector<VirtualStage>& assigned, std::vector<double>& chainMs,
                        std::map<int, double>& deviceMs, double& fittingShare) const {
    std::vector<std::size_t> mine;
    for (std::size_t i : pipeline0) {
      if (assigned[i].component == comp) mine.push_back(i);
    }
    if (mine.empty()) return {};
    std::vector<PartitionStage> ps;
    for (std::size_t i : mine) {
      PartitionStage st;
      st.device = assigned[i].device;
      st.liveMicrobatches = live[i];
      ps.push_back(st);
    }
    const auto layers = static_cast<std::int64_t>(request.model.component(comp).layers.size());
    if (auto st = checkPartitionSize(static_cast<std::int64_t>(ps.size()), layers); !st) {
      return st.error().withPrefix("partition " + algorithm + ": component '" +
                                   excerpt(request.model.component(comp).name) + "': ");
    }
    PartitionProblem problem = buildPartitionProblem(request, costs, comp, ps);
    if (memoryBudgets) setMemoryBudgets(request, stagesOnDevice, problem);
    auto result = algorithm == "balanced" ? balancedPartition(problem, balancedMemory) : dpPartition(problem, control);
    if (result.isCancelled()) return result.error();
    if (!result) {
      // Name the virtual stage by its id in the plan, not by its index within the component.
      return Error{result.message() + " [component '" + excerpt(request.model.component(comp).name) +
                   "', virtual stages " + std::to_string(assigned[mine.front()].id) + ".." +
                   std::to_string(assigned[mine.back()].id) + " of the plan]"};
    }
    if (result->budgetShare <= balancedMemory.budgetScale * (1 + 1e-12)) {
      fittingShare = std::max(fittingShare, result->budgetShare);
    }
    for (std::size_t k = 0; k < mine.size(); ++k) {
      VirtualStage& vs = assigned[mine[k]];
      vs.firstLayer = result->firstLayer[k];
      vs.lastLayer = (k + 1 < mine.size() ? result->firstLayer[k + 1] : problem.layers) - 1;
      const double ms = k < result->stageMs.size() ? result->stageMs[k] : 0.0;
      chainMs[groupOf.count(comp) ? groupOf.at(comp) : groups.size()] += ms;
      deviceMs[vs.device] += ms;
    }
    return {};
  }

  const PlanRequest& request;
  const CostedModel& costs;
  const std::string& algorithm;
  const SolveControl& control;
  const std::vector<int>& live;
  const std::vector<std::vector<int>> groups;
  const BalancedMemory balancedMemory;
  const bool memoryBudgets;
  std::map<int, int> stagesOnDevice;
  std::vector<std::size_t> pipeline0;
  std::map<int, std::size_t> groupOf;
};

// Several trainable backbones share the chain in data-flow order (DiffusionPipe §4.2): search
// how many consecutive stages each one gets instead of keeping the share uniform (or the V's
// legs) gave it; a backbone much cheaper than the other then takes fewer stages. Compositions
// of the chain's stages are enumerated while they stay few. `firstMs` is the estimate of
// `stages` as they are.
Status searchBackboneShares(const LayerSplitter& splitter, double firstMs, std::vector<VirtualStage>& stages) {
  const std::vector<std::size_t>& pipeline0 = splitter.pipeline0;
  const ModelSpec& model = splitter.request.model;
  const IdVector<int> trainable(model.trainableComponents());
  const auto chainStages = static_cast<int>(pipeline0.size());
  const int components = trainable.size();
  bool contiguous = components >= 2 && chainStages >= components;
  for (std::size_t k = 1; contiguous && k < pipeline0.size(); ++k) {
    // Only chains whose components already come in data-flow order as consecutive blocks.
    const auto prevAt = std::find(trainable.begin(), trainable.end(), stages[pipeline0[k - 1]].component);
    const auto at = std::find(trainable.begin(), trainable.end(), stages[pipeline0[k]].component);
    contiguous = at != trainable.end() && prevAt != trainable.end() && at >= prevAt;
  }
  constexpr double kMaxCompositions = 2048;
  double compositions = 1;  // C(S − 1, C − 1)
  for (int i = 1; i < components && contiguous; ++i) {
    compositions = compositions * static_cast<double>(chainStages - i) / static_cast<double>(i);
  }
  if (!contiguous || compositions > kMaxCompositions) return {};
  double bestMs = firstMs;
  IdVector<int> share(components, 1);
  // Enumerate shares (k_0, …, k_{C−1}), each ≥ 1 and ≤ the component's layers, Σ = S.
  auto layersOf = [&](int i) { return static_cast<int>(model.component(trainable[i]).layers.size()); };
  auto visit = [&](auto&& self, int i, int left) -> Status {
    if (splitter.control.cancelled()) return Error::cancelled();
    if (i == components - 1) {
      if (left < 1 || left > layersOf(i)) return {};
      share[i] = left;
      std::vector<VirtualStage> trial = stages;
      std::size_t pos = 0;
      for (int c = 0; c < components; ++c) {
        for (int k = 0; k < share[c]; ++k) trial[pipeline0[pos++]].component = trainable[c];
      }
      auto ms = splitter.split(trial);
      if (ms && *ms < bestMs - 1e-9) {
        bestMs = *ms;
        stages = std::move(trial);
      }
      return {};
    }
    for (int k = 1; k <= std::min(layersOf(i), left - (components - 1 - i)); ++k) {
      share[i] = k;
      PS_RETURN_IF_ERROR(self(self, i + 1, left - k));
    }
    return {};
  };
  return visit(visit, 0, chainStages);
}

}  // namespace

Expected<std::vector<VirtualStage>> partitionWith(const PlanRequest& request, const ScheduleGenerator& generator,
                                                  std::vector<VirtualStage> placement, const std::string& algorithm,
                                                  const SolveControl& control, const PartitionHints& hints) {
  auto uniform = partitionUniform(request.model, std::move(placement));
  if (!uniform) return uniform.error().withPrefix("partition '" + algorithm + "': ");
  std::vector<VirtualStage> stages = std::move(*uniform);
  if (request.config.partition == "diffusionpipe") assignDiffusionLegs(request.model, stages);
  std::optional<CostedModel> derived;
  const CostedModel& costs =
      hints.costs ? *hints.costs : derived.emplace(request.model, request.cluster, request.config);
  PS_ASSIGN_OR_RETURN(auto live, liveCounts(request, costs, generator, stages, control));

  const LayerSplitter splitter(request, costs, algorithm, control, live, stages, hints.balancedMemory,
                               algorithm != "dp" || hints.dpMemoryBudgets);
  PS_ASSIGN_OR_RETURN(auto first, splitter.split(stages, hints.budgetShare));
  if (!hints.keepBackboneShares) {
    const std::vector<VirtualStage> asFirst = stages;
    PS_RETURN_IF_ERROR(searchBackboneShares(splitter, first, stages));
    const auto sameComponents = [&] {
      return std::equal(stages.begin(), stages.end(), asFirst.begin(), asFirst.end(),
                        [](const VirtualStage& a, const VirtualStage& b) { return a.component == b.component; });
    };
    // The search re-assigned components: the share is the chosen split's.
    if (hints.budgetShare && !sameComponents()) PS_RETURN_IF_ERROR(splitter.split(stages, hints.budgetShare));
  }
  // Bidirectional schedules hold the model twice: pipeline 1 mirrors pipeline 0's ranges.
  const std::vector<std::size_t>& pipeline0 = splitter.pipeline0;
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
                                                   const SolveControl& control, const PartitionHints& hints) {
  const std::string& name = request.config.partition;
  const ScheduleGenerator* generator = findScheduleGenerator(request.config.schedule);
  if (!generator) return Error{"unknown schedule '" + request.config.schedule + "'"};
  if (name == "balanced" || name == "dp" || name == "diffusionpipe") {
    return partitionWith(request, *generator, std::move(placement), name == "balanced" ? "balanced" : "dp", control,
                         hints);
  }
  return Error{"partition '" + excerpt(name) +
               "' is not available (known: uniform, balanced, dp, diffusionpipe, megatron)"};
}

}  // namespace pipestudio::partition
