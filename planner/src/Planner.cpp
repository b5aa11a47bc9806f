// makePlan: validate → place (schedule) → partition → order (schedule) → fill → simulate →
// memory check. Dispatch points for other helpers are marked "extension point".
#include "pipestudio/planner/Planner.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <sstream>

#include "partition/Partitioners.hpp"
#include "partition/Uniform.hpp"
#include "pipestudio/common/Text.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/common/Units.hpp"
#include "pipestudio/model/BlockHalves.hpp"
#include "pipestudio/plan/Costs.hpp"
#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/plan/SequenceSplits.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Schedules.hpp"
#include "pipestudio/planner/Simulator.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio {
namespace {

std::string knownSchedules() {
  std::string out;
  for (const auto& n : scheduleNames()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Extension point (partitioners): fills component and layer ranges into the placement.
Expected<std::vector<VirtualStage>> partitionStages(const PlanRequest& request, std::vector<VirtualStage> placement,
                                                    const SolveControl& control,
                                                    const partition::PartitionHints& hints) {
  const std::string& name = request.config.partition;
  if (name == "uniform") {
    return partition::partitionUniformStrict(request.model, std::move(placement), request.config.devices,
                                             request.config.schedule);
  }
  if (name == "megatron") return partition::partitionMegatron(request.model, std::move(placement));
  if (name == "layout") return partition::partitionLayout(request.model, std::move(placement), request.config.layout);
  return partition::partitionNamed(request, std::move(placement), control, hints);  // part: balanced, dp, diffusionpipe
}

// Extension point (bubble filling): adds frozen-component N ops to the skeleton.
Status fillBubbles(const PlanRequest& request, ScheduleSkeleton& skeleton, const SolveControl& control) {
  return fillSkeleton(request, skeleton, control);  // part: --fill none|greedy (Fill.hpp)
}

// A memory limit below what one microbatch needs can never be met by any order.
Status checkLimitAgainstOneMicrobatch(const Plan& shell, const std::vector<StageEstimate>& stages,
                                      const std::vector<std::int64_t>& staticBytes) {
  if (!shell.config.memoryLimitBytes) return {};
  const std::int64_t limit = *shell.config.memoryLimitBytes;
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
      return Error{"memory limit " + formatBytes(static_cast<double>(limit)) +
                   " is below what one microbatch needs on device " + std::to_string(d) + ": " +
                   formatBytes(static_cast<double>(needBytes)) + " (static " +
                   formatBytes(static_cast<double>(staticBytes[du])) + " + activations " +
                   formatBytes(static_cast<double>(oneMb[du])) + "); use more devices or a higher --memory-limit"};
    }
  }
  return {};
}

std::string str(std::int64_t v) { return std::to_string(v); }

// Sequence splits (Seq1F1B) and activation offloading (PipeOffload) against the schedule
// and the request.
Status checkSequenceAndOffload(const PlanRequest& request, const ScheduleGenerator& generator,
                               const CostedModel& costs) {
  const PlanConfig& cfg = request.config;
  const std::string name(generator.name());
  if (cfg.seqSplits < 1) return Error{"--seq-splits must be at least 1, got " + str(cfg.seqSplits)};
  if (cfg.seqSplits > 1) {
    if (!generator.splitsSequence()) {
      return Error{"--seq-splits " + str(cfg.seqSplits) + ": " + name +
                   " schedules whole microbatches (expected --schedule seq1f1b, or custom)"};
    }
    if (cfg.seqSplit != "balanced" && cfg.seqSplit != "even") {
      return Error{"--seq-split '" + cfg.seqSplit + "' is not a sequence split (expected balanced or even)"};
    }
    if (cfg.microbatches % cfg.seqSplits != 0) {
      return Error{"microbatches " + str(cfg.microbatches) + " is not a multiple of --seq-splits " +
                   str(cfg.seqSplits) + " (a plan's microbatches count sequence chunks)"};
    }
    if (cfg.parallel.context > 1) {
      return Error{"--seq-splits " + str(cfg.seqSplits) +
                   " needs --cp 1 (Seq1F1B splits the sequence over time, "
                   "context parallelism over GPUs; combine them is not modelled)"};
    }
    for (const Component& comp : request.model.components) {
      if (!comp.trainable) {
        return Error{"--seq-splits " + str(cfg.seqSplits) + ": component '" + excerpt(comp.name) +
                     "' is frozen (sequence chunks are scheduled for trainable models only)"};
      }
    }
    const std::int64_t tokens = tokensPerSample(request.model);
    const std::int64_t grain = std::max(1, cfg.parallel.tensor);
    if (tokens > 0 && tokens < cfg.seqSplits * grain) {
      return Error{"--seq-splits " + str(cfg.seqSplits) + " needs at least " + str(cfg.seqSplits * grain) +
                   " tokens per sample (chunks are multiples of --tp " + str(grain) + "); model '" +
                   excerpt(request.model.name) + "' has " + str(tokens)};
    }
    const auto& bounds = costs.seqChunkBounds();
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
      if (bounds[k + 1] <= bounds[k]) {
        return Error{"--seq-splits " + str(cfg.seqSplits) + ": sequence chunk " + str(static_cast<std::int64_t>(k)) +
                     " would be empty (" + str(tokens) + " tokens per sample)"};
      }
    }
  }
  if (!(cfg.offloadRatio >= 0.0 && cfg.offloadRatio <= 1.0)) {
    return Error{"--offload-ratio must be in [0, 1], got " + std::to_string(cfg.offloadRatio)};
  }
  if (cfg.offloadRatio > 0) {
    if (generator.pipelines() != 1 || cfg.overlapForwardBackward) {
      return Error{"--offload-ratio: " + name +
                   " holds the model twice or overlaps forward and backward passes (expected a one-pipeline schedule "
                   "such as pipeoffload, interleaved-1f1b or a V shape)"};
    }
    for (int d = 0; d < cfg.devices; ++d) {
      const GpuSpec& gpu = deviceGpu(request.cluster, cfg, d);
      if (gpu.hostLinkGBps <= 0) {
        return Error{"--offload-ratio: GPU '" + excerpt(gpu.name) + "' of device " + str(d) +
                     " names no host link bandwidth (expected host_link_gbps on the cluster's gpu, or a catalogue "
                     "GPU that has it)"};
      }
    }
  }
  return {};
}

// The peak (static included, the busiest device) of the schedule a memory-saving schedule saves
// against (ScheduleGenerator::savesMemoryAgainst), planned on the same request with its own
// chunks and no offloading; empty when there is none or it does not plan (then the memory limit
// alone bounds the order).
Expected<std::optional<std::int64_t>> referencePeak(const PlanRequest& request, const SolveControl& control) {
  const ScheduleGenerator* generator = findScheduleGenerator(request.config.schedule);
  if (!generator || generator->savesMemoryAgainst().empty()) return std::optional<std::int64_t>{};
  const ScheduleGenerator* against = findScheduleGenerator(generator->savesMemoryAgainst());
  if (!against) return std::optional<std::int64_t>{};
  PlanRequest r = request;
  r.config.schedule = std::string(against->name());
  r.config.chunksPerDevice = against->defaultChunksPerDevice();
  r.config.offloadRatio = 0;
  SolveControl quiet;
  quiet.cancel = control.cancel;
  quiet.refine = control.refine;
  quiet.repairMemory = control.repairMemory;
  auto plan = makePlan(r, quiet);
  if (plan.isCancelled()) return plan.error();
  if (!plan) return std::optional<std::int64_t>{};
  std::int64_t peak = 0;
  for (const DeviceMetrics& dm : plan->metrics.devices) peak = std::max(peak, dm.peakMemoryBytes);
  return std::optional<std::int64_t>{peak};
}

// How many splits of smaller budgets makeCandidatePlan plans beside `balanced`'s own: each is a whole plan, and the
// walk goes from the largest budgets down, so the splits of the limits nearest the request's are the ones tried.
constexpr int kMaxSmallerBudgetSplits = 8;

bool sameSplit(const std::vector<VirtualStage>& a, const std::vector<VirtualStage>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const VirtualStage& x, const VirtualStage& y) {
    return x.component == y.component && x.firstLayer == y.firstLayer && x.lastLayer == y.lastLayer;
  });
}

// `balanced` takes the most even split at its bottleneck within the stages' memory budgets, so
// its split depends on the budgets (a --memory-limit, or the GPU) only through which splits meet
// them: a larger limit can admit a more even split that plans slower than the one a smaller limit
// gave. These are the distinct other splits it takes under smaller budgets than `first`'s:
// budgets scaled just below the share the last split needed (`share`) give the next one, down to
// none met (the most even split, which the smallest limits take). Planned beside `first`, they
// make the candidates under a limit a superset of those under any smaller one (up to
// kMaxSmallerBudgetSplits), so more memory does not give a slower plan.
Expected<std::vector<std::vector<VirtualStage>>> splitsUnderSmallerBudgets(
    const PlanRequest& request, const std::vector<VirtualStage>& placement, const SolveControl& control,
    const partition::PartitionHints& hints, double share, const std::vector<VirtualStage>& first) {
  std::vector<std::vector<VirtualStage>> out;
  for (int i = 0; i < kMaxSmallerBudgetSplits && share > 0; ++i) {
    partition::PartitionHints smaller = hints;
    smaller.balancedMemory.budgetScale = share * (1 - 1e-9);
    double next = 0;
    smaller.budgetShare = &next;
    PS_ASSIGN_OR_RETURN(auto split, partitionStages(request, placement, control, smaller));
    share = next;
    const auto seen = [&](const std::vector<VirtualStage>& s) { return sameSplit(s, split); };
    if (!sameSplit(split, first) && std::none_of(out.begin(), out.end(), seen)) out.push_back(std::move(split));
  }
  return out;
}

// The faster pipeline: the makespan, which the schedule and the split shape (zb-auto's
// objective); the iteration breaks ties.
bool fasterPipeline(const Plan& a, const Plan& b) {
  const double tie = 1e-9 * std::max(a.metrics.makespanMs, b.metrics.makespanMs);
  if (std::abs(a.metrics.makespanMs - b.metrics.makespanMs) > tie) return a.metrics.makespanMs < b.metrics.makespanMs;
  return a.metrics.iterationMs < b.metrics.iterationMs;
}

// `balanced` took its most even split although the stages' memory budgets (which add up peaks
// the stages of a device reach at different moments) ruled every split out, and that split did
// not fit (`failed`). Plan again with splits at the same bottleneck within the budgets scaled by
// the least factor that admits one and by a little more (closer to the most even split), and
// with the splits that meet the budgets (and 90 % and 80 % of them) at a larger bottleneck; keep
// the fastest that fits.
Expected<Plan> repairBalancedMemory(const PlanRequest& request, const SolveControl& control,
                                    const partition::PartitionHints& hints, const Error& failed) {
  std::vector<BalancedMemory> tries;
  for (const double slack : {1.0, 1.02, 1.05, 1.1, 1.2}) tries.push_back({.overrunSlack = slack, .withinBudgets = 0});
  for (const double scale : {1.0, 0.9, 0.8}) tries.push_back({.overrunSlack = 0, .withinBudgets = scale});
  std::optional<Plan> fastest;
  for (const BalancedMemory& how : tries) {
    partition::PartitionHints retry = hints;
    retry.balancedMemory = how;
    retry.budgetShare = nullptr;
    auto again = partition::makeCandidatePlan(request, control, retry);
    if (again.isCancelled()) return again;
    if (!again) continue;
    if (!fastest || again->metrics.iterationMs < fastest->metrics.iterationMs) fastest = std::move(*again);
  }
  if (fastest) return std::move(*fastest);
  return failed;
}

// Whether a virtual stage of the plan ends between a block's attention and its MLP.
bool endsInsideABlock(const Plan& plan) {
  return std::any_of(plan.virtualStages.begin(), plan.virtualStages.end(), [&](const VirtualStage& vs) {
    const auto& layers = plan.model.component(vs.component).layers;
    const auto first = static_cast<std::size_t>(vs.firstLayer);
    return vs.firstLayer <= vs.lastLayer && first < layers.size() && blockHalfOf(layers[first]) == BlockHalf::Mlp;
  });
}

// Strictly shorter iteration (a tie keeps whole blocks).
bool shorterIteration(const Plan& a, const Plan& b) {
  return a.metrics.iterationMs < b.metrics.iterationMs * (1 - 1e-9);
}

// `balanced-split` / `dp-split` (issue 46): `base` (balanced or dp) over the model's whole blocks
// and over their attention and MLP halves (splitTransformerBlocks); the plan over the halves where
// a stage of it ends inside a block and it runs a shorter iteration than the whole blocks' plan,
// or fits where that one does not; the whole blocks' plan otherwise. The plan names the partition
// asked for; its model is the one it was planned over. It calls makePlan twice, so it lives
// beside it (the partitioners below it never include the entry point).
Expected<Plan> planOverBlockHalves(const PlanRequest& request, const std::string& base, const SolveControl& control) {
  PlanRequest whole = request;
  whole.config.partition = base;
  auto wholePlan = makePlan(whole, control);
  if (wholePlan.isCancelled()) return wholePlan;
  // Megatron counts --recompute-num-layers in its pattern's layers: halves would change the
  // groups, so such a recipe keeps whole blocks.
  const bool groups =
      request.config.parallel.recompute == Recompute::Full && request.config.parallel.recomputeNumLayers > 0;
  PlanRequest halves = whole;
  halves.model = splitTransformerBlocks(request.model);
  const bool anySplit = [&] {
    for (std::size_t c = 0; c < halves.model.components.size(); ++c) {
      if (halves.model.components[c].layers.size() != request.model.components[c].layers.size()) return true;
    }
    return false;
  }();
  if (anySplit && !groups) {
    SolveControl quiet = control;
    quiet.progress = nullptr;
    auto halvesPlan = makePlan(halves, quiet);
    if (halvesPlan.isCancelled()) return halvesPlan;
    if (halvesPlan && endsInsideABlock(*halvesPlan) && (!wholePlan || shorterIteration(*halvesPlan, *wholePlan))) {
      wholePlan = std::move(halvesPlan);
    }
  }
  if (wholePlan) wholePlan->config.partition = request.config.partition;
  return wholePlan;
}

}  // namespace

Expected<Plan> makePlan(const PlanRequest& original, const SolveControl& control) {
  // `balanced-split` / `dp-split`: that partitioner over whole blocks and over the blocks'
  // attention and MLP halves (issue 46); a given hybrid pattern that ends a segment inside a block
  // is planned over the halves.
  if (const auto base = splitPartitionBase(original.config.partition)) {
    return planOverBlockHalves(original, *base, control);
  }
  if (original.config.partition == "layout" && layoutCutsBlocks(original.model, original.config.layout)) {
    PlanRequest halves = original;
    halves.model = splitTransformerBlocks(original.model);
    return makePlan(halves, control);
  }
  PS_ASSIGN_OR_RETURN(auto resolved, resolveRequest(original));
  // DiffusionPipe searches the schedule jointly with the partition; its candidates come back
  // through makeCandidatePlan.
  if (resolved.config.partition == "diffusionpipe") return partition::solveDiffusionPipe(resolved, control);
  partition::PartitionHints hints;
  PS_ASSIGN_OR_RETURN(auto cap, referencePeak(resolved, control));
  hints.peakCapBytes = cap;
  if (resolved.config.partition == "dp") return partition::solveDp(resolved, control, hints);
  return partition::makeCandidatePlan(resolved, control, hints);
}

namespace {

// The request's schedule, with the shape it asks for checked.
Expected<const ScheduleGenerator*> candidateGenerator(const PlanConfig& cfg) {
  const ScheduleGenerator* generator = findScheduleGenerator(cfg.schedule);
  if (!generator) return Error{"unknown schedule '" + cfg.schedule + "' (known: " + knownSchedules() + ")"};
  if (cfg.devices < 1) return Error{"--devices must be at least 1, got " + std::to_string(cfg.devices)};
  if (cfg.microbatches < 1) return Error{"--microbatches must be at least 1, got " + std::to_string(cfg.microbatches)};
  if (cfg.chunksPerDevice < 1) return Error{"--chunks must be at least 1, got " + std::to_string(cfg.chunksPerDevice)};
  if (cfg.memoryLimitBytes && *cfg.memoryLimitBytes <= 0) return Error{"--memory-limit must be positive"};
  PS_RETURN_IF_ERROR(checkPlanSize(cfg.devices, cfg.chunksPerDevice, cfg.microbatches));
  return generator;
}

// The request's config under the schedule's own settings.
Expected<PlanConfig> scheduleConfig(const PlanRequest& request, const ScheduleGenerator& generator) {
  const PlanConfig& cfg = request.config;
  PlanConfig configured = cfg;
  configured.schedule = std::string(generator.name());  // PyTorch's name → ours
  generator.configure(configured);
  if (cfg.offloadRatio <= 0 && configured.offloadRatio > 0) {
    // A schedule's default offloading (pipeoffload's) needs a host link on every device; without
    // one the plan is its order alone and says so (offload ratio 0), not a ratio nothing honours.
    for (int d = 0; d < cfg.devices; ++d) {
      if (deviceGpu(request.cluster, cfg, d).hostLinkGBps <= 0) configured.offloadRatio = 0;
    }
  }
  if (configured.seqSplits > 1) {
    // Every layer is costed once per sequence chunk: bound that before costing.
    std::int64_t layers = 0;
    for (const Component& comp : request.model.components) layers += static_cast<std::int64_t>(comp.layers.size());
    if (configured.seqSplits > kMaxSeqSplits || layers * configured.seqSplits > kMaxSeqChunkLayers) {
      return Error{"--seq-splits " + str(configured.seqSplits) + " for a model of " + str(layers) +
                   " layers: expected at most " + str(kMaxSeqSplits) + " chunks and " + str(kMaxSeqChunkLayers) +
                   " chunk-layers in all"};
    }
  }
  return configured;
}

// What the schedule's order() sees of a partitioned plan.
ScheduleInput scheduleInputOf(const Plan& shell, const ScheduleShape& shape, const CostedModel& costs,
                              const PlanRequest& request, const SolveControl& control,
                              const partition::PartitionHints& hints) {
  ScheduleInput input;
  input.shape = shape;
  input.virtualStages = shell.virtualStages;
  input.stages = stageEstimates(shell, costs);
  input.staticBytes = staticMemoryPerDevice(shell, costs.stages(shell.virtualStages));
  input.memoryLimitBytes = request.config.memoryLimitBytes;
  input.request = &request;
  input.control = &control;
  input.costs = &costs;
  input.peakCapBytes = hints.peakCapBytes;
  return input;
}

}  // namespace

Expected<Plan> partition::makeCandidatePlan(const PlanRequest& request, const SolveControl& control,
                                            const PartitionHints& hints) {
  const PlanConfig& cfg = request.config;
  PS_ASSIGN_OR_RETURN(const ScheduleGenerator* generator, candidateGenerator(cfg));
  const ScheduleShape shape{cfg.devices, cfg.microbatches, cfg.chunksPerDevice, std::max(1, cfg.seqSplits)};
  PS_RETURN_IF_ERROR(generator->validate(shape));
  if (control.cancelled()) return Error::cancelled();

  // The request's costs under the schedule's own settings, derived once: every step below
  // reads them. The partitioners see the request's config, whose costs are the same unless
  // the schedule's settings change them (blockwise ZeRO-3 gathers one chunk per block).
  PS_ASSIGN_OR_RETURN(const PlanConfig configured, scheduleConfig(request, *generator));
  const CostedModel costs(request.model, request.cluster, configured);
  PS_RETURN_IF_ERROR(checkSequenceAndOffload(request, *generator, costs));
  partition::PartitionHints withCosts = hints;
  if (configured.unitMicrobatches == cfg.unitMicrobatches) withCosts.costs = &costs;
  // `balanced` on its own budgets also plans the splits it takes under smaller ones (a split
  // handed in, or one of a repair, is planned as it is).
  const bool walkSmallerBudgets = cfg.partition == "balanced" && !hints.stages && !hints.repairingMemory() &&
                                  hints.balancedMemory.budgetScale >= 1.0;
  double share = 0;
  if (walkSmallerBudgets) withCosts.budgetShare = &share;
  PS_ASSIGN_OR_RETURN(auto stages, hints.stages
                                       ? Expected<std::vector<VirtualStage>>(*hints.stages)
                                       : partitionStages(request, generator->placement(shape), control, withCosts));
  std::vector<std::vector<VirtualStage>> smallerBudgetSplits;
  if (walkSmallerBudgets) {
    withCosts.budgetShare = nullptr;
    PS_ASSIGN_OR_RETURN(smallerBudgetSplits, splitsUnderSmallerBudgets(request, generator->placement(shape), control,
                                                                       withCosts, share, stages));
  }
  Plan shell = planShell(request, std::move(stages));
  shell.config = configured;

  const ScheduleInput input = scheduleInputOf(shell, shape, costs, request, control, hints);
  PS_RETURN_IF_ERROR(checkLimitAgainstOneMicrobatch(shell, input.stages, input.staticBytes));

  PS_ASSIGN_OR_RETURN(auto skeleton, generator->order(input));
  if (control.progress) control.progress(0.5);
  PS_RETURN_IF_ERROR(fillBubbles(request, skeleton, control));
  if (control.cancelled()) return Error::cancelled();
  if (configured.seqSplits > 1) {
    // A chunk after the earlier chunks of its microbatch (their keys and values).
    auto sequence = sequenceDependencies(shell, skeleton.devices);
    skeleton.extraDependencies.insert(skeleton.extraDependencies.end(), sequence.begin(), sequence.end());
  }
  // Activation offloading on whatever order the schedule built (pipeoffload offloads its own).
  if (auto st = schedules::addOffload(shell, costs, skeleton); !st) return st.error().withPrefix(cfg.schedule + ": ");

  SimulationOptions timing;
  timing.costs = &costs;
  auto plan = simulateSkeleton(std::move(shell), skeleton, timing);
  if (!plan) return plan.error().withPrefix(cfg.schedule + ": ");
  if (auto st = checkMemory(*plan); !st) {
    if (walkSmallerBudgets && control.repairMemory) {
      plan = repairBalancedMemory(request, control, hints, st.error());
      if (plan.isCancelled()) return plan;
    } else {
      plan = st.error();
    }
  }
  SolveControl quiet = control;  // one solve's progress: the splits below report none of their own
  quiet.progress = nullptr;
  for (const std::vector<VirtualStage>& split : smallerBudgetSplits) {
    partition::PartitionHints given = hints;
    given.stages = split;
    auto other = makeCandidatePlan(request, quiet, given);
    if (other.isCancelled()) return other;
    if (other && (!plan || fasterPipeline(*other, *plan))) plan = std::move(other);
  }
  if (plan && control.progress) control.progress(1.0);
  return plan;
}

}  // namespace pipestudio
