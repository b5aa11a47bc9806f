// `diffusionpipe`: the dp partition searched jointly with the schedule (DiffusionPipe, Tian et
// al., MLSys 2024, §4.2: partitioning and scheduling of the trainable backbone(s) unified,
// then greedy filling of the frozen parts). Every candidate schedule is partitioned with dp
// under its own live-activation counts, filled and simulated; the fastest memory-feasible
// plan wins.
//
// Two trainable backbones (ControlNet: controlnet feeds unet; cascaded models) run in opposite
// directions on V-shaped placements: the first backbone takes the down leg (devices 0 → p−1),
// the second the up leg (p−1 → 0), so every device holds one chunk of each and one backbone's
// warm-up and cool-down overlap the other's steady phase. How many stages each backbone gets
// is searched (Dispatch.cpp); the candidates also keep the V's legs.
//
// Why one V chain and not two plan pipelines (pipeline 0 / 1, docs/formats.md): the plan format
// lets a bidirectional plan hold two pipelines only when every microbatch passes through
// exactly one of them (Chimera/DualPipe replicas). ControlNet and UNet are not independent:
// each microbatch runs both, and the ControlNet's output feeds the UNet (`feeds`), so the
// backward of the UNet must hand gradients back to the ControlNet. Placing them as pipeline 1
// (p−1 → 0) and pipeline 0 (0 → p−1) with that hand-over is the same V: the ControlNet's last
// stage and the UNet's first share device 0 (or p−1), the same ops, the same dependencies.
// A second pipeline would only win if the UNet could start a microbatch before the
// ControlNet finished it — true in the real network (Zhang et al. 2023 §3.2: the ControlNet's
// residuals enter the UNet's skip connections and middle block, so the UNet encoder does not
// wait for them) — but the model format names consuming components, not consuming layers, so
// any such overlap would rest on a guess; and it only shortens warm-up/cool-down, since the
// steady phase is bounded by the busiest device's work, which the V already balances.
// Independent backbones (no `feeds` path between them, cascaded models) are not chained: the
// simulator times them as separate chains (plan/Dependencies.hpp stageNeighbours), the share
// search (Dispatch.cpp) counts the latency of the longest chain instead of the sum, and for
// exactly two of them one more candidate puts them on zb-v's V in opposite directions with an
// order built for two concurrent chains (Opposed.cpp). With more than two independent
// backbones a V has no third direction: only the chain layouts are tried.
#include <algorithm>
#include <limits>

#include "partition/Partitioners.hpp"
#include "pipestudio/planner/Schedules.hpp"

namespace pipestudio::partition {

std::vector<PlanConfig> diffusionPipeCandidates(const PlanRequest& request) {
  std::vector<PlanConfig> out;
  auto add = [&](const std::string& schedule, int chunks) {
    PlanConfig c = request.config;
    c.schedule = schedule;
    c.chunksPerDevice = chunks;
    for (const auto& o : out) {
      if (o.schedule == c.schedule && o.chunksPerDevice == c.chunksPerDevice) return;
    }
    out.push_back(c);
  };
  add(request.config.schedule, request.config.chunksPerDevice);
  // Bidirectional schedules (DualPipe, BitPipe) hold the backbone twice, one copy per
  // direction: their bubbles differ from the one-directional ones, so they join the search.
  for (const char* name : {"1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "interleaved-1f1b", "gpipe", "dualpipe",
                           "dualpipe-v", "bitpipe"}) {
    const ScheduleGenerator* g = findScheduleGenerator(name);
    if (!g) continue;
    const int chunks = std::string(name) == "interleaved-1f1b" ? 2 : g->defaultChunksPerDevice();
    add(name, chunks);
  }
  return out;
}

Expected<Plan> solveDiffusionPipe(const PlanRequest& request, const SolveControl& control) {
  const auto candidates = diffusionPipeCandidates(request);
  std::optional<Plan> best;
  std::string reasons;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (control.cancelled()) return Error::cancelled();
    PlanRequest r = request;
    r.config = candidates[i];
    const ScheduleGenerator* g = findScheduleGenerator(r.config.schedule);
    if (!g || !g->validate({r.config.devices, r.config.microbatches, r.config.chunksPerDevice})) {
      reasons += "\n  " + r.config.schedule + ": not applicable to this shape";
      continue;
    }
    SolveControl inner;
    inner.cancel = control.cancel;
    inner.refine = control.refine;
    // With several backbones, the stage share that is best for the backbone alone is not
    // always best once the frozen work fills the bubbles (a perfectly balanced backbone has
    // fewer of them): try the searched shares and the default ones, keep the faster plan.
    const bool twoShares = request.model.trainableComponents().size() >= 2;
    for (int variant = 0; variant < (twoShares ? 2 : 1); ++variant) {
      auto plan = makeCandidatePlan(r, inner, PartitionHints{.keepBackboneShares = variant == 1, .balancedMemory = {}});
      if (!plan) {
        if (variant == 0) reasons += "\n  " + r.config.schedule + ": " + plan.message();
        continue;
      }
      if (!best || plan->metrics.makespanMs < best->metrics.makespanMs - 1e-9) best = std::move(*plan);
    }
    if (control.progress) control.progress(static_cast<double>(i + 1) / static_cast<double>(candidates.size()));
  }
  if (independentBackbonePair(request.model) && !control.cancelled()) {
    SolveControl inner;
    inner.cancel = control.cancel;
    inner.refine = control.refine;
    auto plan = solveOpposedBackbones(request, inner);
    if (!plan) {
      reasons += "\n  zb-v, backbones in opposite directions: " + plan.message();
    } else if (!best || plan->metrics.makespanMs < best->metrics.makespanMs - 1e-9) {
      best = std::move(*plan);
    }
  }
  if (!best) return Error{"partition diffusionpipe: no schedule gives a feasible plan:" + reasons};
  return std::move(*best);
}

Expected<std::vector<VirtualStage>> partitionWithLegs(const PlanRequest& request, const ScheduleGenerator& generator,
                                                      std::vector<VirtualStage> placement,
                                                      const SolveControl& control) {
  PlanRequest r = request;
  r.config.partition = "diffusionpipe";  // assignLegs applies to diffusionpipe's placements
  return partitionWith(r, generator, std::move(placement), "dp", control,
                       PartitionHints{.keepBackboneShares = true, .balancedMemory = {}});
}

// Leg assignment for V-shaped placements with two trainable backbones: the first half of the
// chain (down leg) holds the first backbone, the second half (up leg) the second.
bool assignLegs(const ModelSpec& model, std::vector<VirtualStage>& stages) {
  const auto trainable = model.trainableComponents();
  if (trainable.size() != 2) return false;
  std::vector<std::size_t> chain;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].pipeline == 0) chain.push_back(i);
  }
  if (chain.size() < 2 || chain.size() % 2 != 0) return false;
  const std::size_t half = chain.size() / 2;
  // A V shape: the turn sits on one device (chain[half−1] and chain[half] share it).
  if (stages[chain[half - 1]].device != stages[chain[half]].device) return false;
  for (std::size_t k = 0; k < 2; ++k) {
    if (static_cast<std::size_t>(half) > model.component(trainable[k]).layers.size()) return false;
  }
  for (std::size_t k = 0; k < chain.size(); ++k) stages[chain[k]].component = trainable[k < half ? 0 : 1];
  return true;
}

}  // namespace pipestudio::partition
