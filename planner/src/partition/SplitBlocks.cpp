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

}  // namespace pipestudio
