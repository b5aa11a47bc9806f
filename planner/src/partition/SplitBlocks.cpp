// Transformer blocks split into their attention and MLP halves (issue 46): what
// `--partition balanced-split` / `dp-split` partition, so that a pipeline stage may end between a
// block's attention and its MLP, as Megatron-LM's HybridModel places them (its pattern gives each
// half a symbol of its own: `*-*-|*-` or `*-*|-*-`). The cost model costs each half as its share
// of the block (BlockHalves.hpp); the halves add up to the block.
#include <algorithm>
#include <optional>
#include <string>

#include "Partitioners.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/model/BlockHalves.hpp"
#include "pipestudio/planner/Partition.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio {

namespace {

// A decoder block the cost model can halve: a transformer shape without a vocabulary (not the
// embedding or the head), not a multi-token-prediction module, no measured costs (those are the
// whole block's; what each half takes is not known).
bool splittable(const Layer& l) {
  if (l.kind != "transformer" || !l.transformer || l.transformer->vocab || l.transformer->mtpLayers > 0) return false;
  return !l.forwardMs && !l.backwardInputMs && !l.backwardWeightMs && !l.activationBytes && !l.weightGradBytes &&
         !l.parameterBytes && !l.outputBytes;
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

}  // namespace

ModelSpec splitTransformerBlocks(const ModelSpec& model) {
  ModelSpec out = model;
  for (Component& c : out.components) {
    if (!c.trainable || std::none_of(c.layers.begin(), c.layers.end(), splittable)) continue;
    std::vector<Layer> layers;
    layers.reserve(2 * c.layers.size());
    for (const Layer& l : c.layers) {
      if (!splittable(l)) {
        layers.push_back(l);
        continue;
      }
      Layer attention = l;
      attention.name = l.name + ".attention";
      attention.kind = std::string(kAttentionHalfKind);
      Layer mlp = l;
      mlp.name = l.name + ".mlp";
      mlp.kind = std::string(kMlpHalfKind);
      layers.push_back(std::move(attention));
      layers.push_back(std::move(mlp));
    }
    c.layers = std::move(layers);
  }
  return out;
}

std::optional<std::string> splitPartitionBase(std::string_view partition) {
  if (partition == "balanced-split") return std::string("balanced");
  if (partition == "dp-split") return std::string("dp");
  return std::nullopt;
}

bool layoutCutsBlocks(const ModelSpec& model, std::string_view layout) {
  if (megatronLayoutSplit(model, layout)) return false;
  return megatronLayoutSplit(splitTransformerBlocks(model), layout).hasValue();
}

Expected<Plan> partition::planOverBlockHalves(const PlanRequest& request, const std::string& base,
                                              const SolveControl& control) {
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

}  // namespace pipestudio
