// Independent trainable backbones in opposite directions (issue 4; DiffusionPipe, Tian et al.,
// MLSys 2024, §4.2: several backbones share the devices, the second running the other way so
// one's warm-up and cool-down overlap the other's steady phase).
//
// Two trainable components with no `feeds` path between them (cascaded models trained
// together: a base UNet and a super-resolution UNet) need not wait on each other: the
// simulator and the executor time them as independent chains (plan/Dependencies.hpp
// stageNeighbours). The V placement (2 chunks per device) then holds backbone A on its down
// leg (virtual stages 0..p−1 on devices 0..p−1) and backbone B on its up leg (p..2p−1 on
// devices p−1..0): every device holds one chunk of each, A flows 0 → p−1 while B flows
// p−1 → 0, and both start at time 0.
//
// The order: the V schedules' greedy construction (zb-v's rules, Qi et al. 2023 §6) walks one
// chain per pipeline, so the two legs are handed to it as two pipelines with 2m
// pseudo-microbatches (even ones through A, odd ones through B); every pseudo-microbatch 2k+l
// is then renamed back to microbatch k. The plan itself keeps one pipeline (each microbatch
// runs both backbones, DESIGN.md §2), and stageNeighbours gives it the same two chains.
#include <algorithm>
#include <cmath>

#include "partition/Partitioners.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio::partition {

std::vector<std::vector<int>> dependentBackboneGroups(const ModelSpec& model) {
  const auto n = model.components.size();
  // reach[i][j]: a `feeds` path from component i to component j (through any components).
  std::vector<std::vector<char>> reach(n, std::vector<char>(n, 0));
  for (std::size_t i = 0; i < n; ++i) {
    for (const std::string& name : model.components[i].feeds) {
      for (std::size_t j = 0; j < n; ++j) {
        if (model.components[j].name == name) reach[i][j] = 1;
      }
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!reach[i][k]) continue;
      for (std::size_t j = 0; j < n; ++j) reach[i][j] = static_cast<char>(reach[i][j] | reach[k][j]);
    }
  }
  std::vector<std::vector<int>> groups;
  for (int c : model.trainableComponents()) {
    const auto uc = static_cast<std::size_t>(c);
    std::vector<std::size_t> joined;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (int o : groups[g]) {
        const auto uo = static_cast<std::size_t>(o);
        if (reach[uc][uo] || reach[uo][uc]) {
          joined.push_back(g);
          break;
        }
      }
    }
    if (joined.empty()) {
      groups.push_back({c});
      continue;
    }
    // c links several groups: merge them into the first.
    auto& into = groups[joined.front()];
    into.push_back(c);
    for (std::size_t k = joined.size(); k-- > 1;) {
      auto& from = groups[joined[k]];
      into.insert(into.end(), from.begin(), from.end());
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(joined[k]));
    }
    std::sort(into.begin(), into.end());
  }
  return groups;
}

bool independentBackbonePair(const ModelSpec& model) {
  return model.trainableComponents().size() == 2 && dependentBackboneGroups(model).size() == 2;
}

Expected<Plan> solveOpposedBackbones(const PlanRequest& request, const SolveControl& control) {
  if (!independentBackbonePair(request.model)) {
    return Error{"opposed backbones need exactly two trainable components with no 'feeds' path between them"};
  }
  PlanRequest r = request;
  r.config.schedule = "zb-v";
  r.config.chunksPerDevice = 2;
  const ScheduleGenerator* generator = findScheduleGenerator(r.config.schedule);
  if (!generator) return Error{"opposed backbones: schedule zb-v is not registered"};
  const int p = r.config.devices;
  const int m = r.config.microbatches;
  const ScheduleShape shape{p, m, 2};
  if (auto st = generator->validate(shape); !st) return st.error();

  // Partition: the V's legs (assignLegs), each backbone split over its leg by dp under zb-v's
  // live-activation counts; the shares stay the legs (keepBackboneShares).
  auto stages = partitionWithLegs(r, *generator, generator->placement(shape), control);
  if (!stages) return stages.error();
  const auto trainable = r.model.trainableComponents();
  for (int k = 0; k < 2 * p; ++k) {
    const VirtualStage& vs = (*stages)[static_cast<std::size_t>(k)];
    const int expectedDevice = k < p ? k : 2 * p - 1 - k;
    if (vs.pipeline != 0 || vs.device != expectedDevice || vs.component != trainable[k < p ? 0 : 1]) {
      return Error{"opposed backbones: the V placement did not split into one leg per backbone"};
    }
  }

  Plan shell;
  shell.config = r.config;
  shell.model = r.model;
  shell.cluster = r.cluster;
  shell.virtualStages = *stages;

  // The construction's view: two pipelines, one per leg, and 2m pseudo-microbatches.
  ScheduleInput input;
  input.shape = {p, 2 * m, 2};
  input.virtualStages = shell.virtualStages;
  for (std::size_t k = static_cast<std::size_t>(p); k < input.virtualStages.size(); ++k) input.virtualStages[k].pipeline = 1;
  input.stages = stageEstimates(shell);
  input.staticBytes = staticMemoryPerDevice(shell, stageCosts(shell));
  input.memoryLimitBytes = r.config.memoryLimitBytes;
  input.request = &r;
  input.control = &control;
  schedules::GreedyOptions options;
  options.splitBackward = true;
  options.preferContinuing = true;
  options.boundEveryForward = true;
  options.microbatchPipeline.resize(static_cast<std::size_t>(2 * m));
  for (int mb = 0; mb < 2 * m; ++mb) options.microbatchPipeline[static_cast<std::size_t>(mb)] = mb % 2;
  // Activation budget: p microbatches of both backbones per device, zb-v's 1F1B-level peak
  // (each real microbatch is one pseudo-microbatch per leg).
  const auto a0 = schedules::activationPerMicrobatch(input, 0);
  const auto a1 = schedules::activationPerMicrobatch(input, 1);
  options.capBytes.resize(static_cast<std::size_t>(p));
  for (std::size_t d = 0; d < static_cast<std::size_t>(p); ++d) {
    options.capBytes[d] = std::max<std::int64_t>(1, static_cast<std::int64_t>(p) * (a0[d] + a1[d]));
  }
  auto skeleton = schedules::greedyOrder(input, options);
  if (!skeleton) return Error{"opposed backbones: " + skeleton.message()};
  skeleton->virtualStages = shell.virtualStages;
  for (auto& lane : skeleton->devices) {
    for (OrderedOp& op : lane) op.microbatch /= 2;
  }
  if (control.cancelled()) return Error{"cancelled"};
  if (auto st = fillSkeleton(r, *skeleton, control); !st) return st.error();
  auto plan = simulateSkeleton(std::move(shell), *skeleton);
  if (!plan) return Error{"opposed backbones: " + plan.message()};
  if (auto st = checkMemory(*plan); !st) return st.error();
  return plan;
}

}  // namespace pipestudio::partition
