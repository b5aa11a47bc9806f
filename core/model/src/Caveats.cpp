#include "pipestudio/model/Caveats.hpp"

#include <algorithm>

namespace pipestudio {

namespace {

// Whether any trainable transformer layer satisfies `pred`.
template <typename Pred>
bool anyTrainableBlock(const ModelSpec& model, Pred pred) {
  return std::any_of(model.components.begin(), model.components.end(), [&](const Component& c) {
    return c.trainable && std::any_of(c.layers.begin(), c.layers.end(), [&](const Layer& l) {
             return l.transformer.has_value() && pred(*l.transformer);
           });
  });
}

}  // namespace

bool moeDropsAndPads(const TransformerShape& block, const Parallelism& parallel) {
  return parallel.moeCapacityFactor ? *parallel.moeCapacityFactor > 0 : block.capacityFactor.has_value();
}

bool moeDispatchWaitsOnHost(const Parallelism& parallel, bool dropsAndPads) {
  if (!parallel.moeFlexDispatcher) return !dropsAndPads;
  return parallel.moeFlexBackend == FlexBackend::DeepEp || !parallel.moeRankCapacityFactor.has_value();
}

std::vector<std::string> costModelCaveats(const ModelSpec& model, const Parallelism& parallel) {
  std::vector<std::string> notes;
  // The figures are the bridge-moe-archive tables of `make fidelity` (docs/fidelity.md, "Every
  // release"): Megatron-Bridge's published MoE runs, 25.11 to 26.08, each planned as its release's
  // presets ran it, every one dropless.
  const bool waits = anyTrainableBlock(model, [&](const TransformerShape& t) {
    return t.isMoe() && moeDispatchWaitsOnHost(parallel, moeDropsAndPads(t, parallel));
  });
  if (waits && parallel.cudaGraphImpl != CudaGraphImpl::FullIteration) {
    notes.emplace_back(
        "host time is not in this prediction: the MoE dispatch waits on the host every layer and the step is not one "
        "CUDA graph; 58 published Megatron-Bridge runs of such recipes took a median 1.13× (eager) to 1.22× "
        "(TE-scoped graphs) the predicted time, up to 3.1× at micro-batch 1 (20 runs with full-iteration graphs and "
        "a rank budget came within 11 %; docs/fidelity.md)");
  }
  if (anyTrainableBlock(model, [](const TransformerShape& t) { return t.architecture.attentionSinks; })) {
    notes.emplace_back(
        "attention sinks (GPT-OSS) are not timed, and every published GPT-OSS-120B run (27, Megatron-Bridge "
        "25.11 to 26.08, every GPU and recipe) took 1.24× to 1.81× the predicted time (2.3× in 26.06.01, with a "
        "known kernel regression), for a cause the model does not have (docs/fidelity.md)");
  }
  return notes;
}

}  // namespace pipestudio
