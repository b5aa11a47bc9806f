#include "partition/Uniform.hpp"

#include <algorithm>
#include <string>

#include "pipestudio/common/Text.hpp"

namespace pipestudio::partition {

Expected<std::vector<VirtualStage>> partitionUniform(const ModelSpec& model, std::vector<VirtualStage> placement) {
  const std::vector<int> trainable = model.trainableComponents();
  if (trainable.empty()) return Error{"model '" + excerpt(model.name) + "' has no trainable component to schedule"};
  int pipelines = 1;
  for (const auto& vs : placement) pipelines = std::max(pipelines, vs.pipeline + 1);
  std::vector<std::vector<std::size_t>> chains(static_cast<std::size_t>(pipelines));
  for (std::size_t i = 0; i < placement.size(); ++i)
    chains[static_cast<std::size_t>(placement[i].pipeline)].push_back(i);
  const auto stages = static_cast<long>(chains.front().size());

  long totalLayers = 0;
  std::vector<long> layers;
  for (int c : trainable) {
    layers.push_back(static_cast<long>(model.component(c).layers.size()));
    totalLayers += layers.back();
  }
  if (stages > totalLayers) {
    return Error{"partition 'uniform' cannot divide " + std::to_string(totalLayers) + " trainable layers over " +
                 std::to_string(stages) +
                 " virtual stages (devices × chunks per pipeline): every virtual stage needs "
                 "at least one layer; use fewer --chunks or devices"};
  }
  if (static_cast<long>(trainable.size()) > stages) {
    return Error{"partition 'uniform' needs at least one virtual stage per trainable component (" +
                 std::to_string(trainable.size()) + "), got " + std::to_string(stages) +
                 " (a virtual stage never spans two components)"};
  }
  // Stages per component: largest remainder of stages·layers_c/total, each at least one and
  // never more than its layers.
  const auto comps = trainable.size();
  std::vector<long> share(comps, 1);
  long given = static_cast<long>(comps);
  while (given < stages) {
    std::size_t best = comps;
    double bestDeficit = -1e300;
    for (std::size_t c = 0; c < comps; ++c) {
      if (share[c] >= layers[c]) continue;
      const double ideal =
          static_cast<double>(stages) * static_cast<double>(layers[c]) / static_cast<double>(totalLayers);
      const double deficit = ideal - static_cast<double>(share[c]);
      if (deficit > bestDeficit) {
        bestDeficit = deficit;
        best = c;
      }
    }
    if (best == comps) break;  // cannot happen: stages <= totalLayers
    ++share[best];
    ++given;
  }
  for (const auto& chain : chains) {
    std::size_t pos = 0;
    for (std::size_t c = 0; c < comps; ++c) {
      const long n = share[c];
      const long base = layers[c] / n;
      const long extra = layers[c] % n;
      long first = 0;
      for (long j = 0; j < n && pos < chain.size(); ++j, ++pos) {
        // The last `extra` stages of a component take one more layer: early stages hold the
        // most in-flight activations under 1F1B-like schedules.
        const long size = base + (j >= n - extra ? 1 : 0);
        VirtualStage& vs = placement[chain[pos]];
        vs.component = trainable[c];
        vs.firstLayer = static_cast<int>(first);
        vs.lastLayer = static_cast<int>(first + size - 1);
        first += size;
      }
    }
  }
  return placement;
}

Expected<std::vector<VirtualStage>> partitionUniformStrict(const ModelSpec& model, std::vector<VirtualStage> placement,
                                                           int devices, const std::string& schedule) {
  auto stages = partitionUniform(model, std::move(placement));
  if (!stages) return stages;
  // Virtual stages per pipeline, and how many of them each device holds.
  const int perPipeline = static_cast<int>(
      std::count_if(stages->begin(), stages->end(), [](const VirtualStage& vs) { return vs.pipeline == 0; }));
  const int chunks = devices > 0 ? perPipeline / devices : 1;
  if (chunks <= 1) return stages;
  for (int c : model.trainableComponents()) {
    long count = 0;
    long minLayers = -1;
    long maxLayers = 0;
    for (const VirtualStage& vs : *stages) {
      if (vs.pipeline != 0 || vs.component != c) continue;
      const long size = static_cast<long>(vs.lastLayer) - vs.firstLayer + 1;
      ++count;
      minLayers = minLayers < 0 ? size : std::min(minLayers, size);
      maxLayers = std::max(maxLayers, size);
    }
    if (count == 0 || minLayers == maxLayers) continue;
    const Component& comp = model.component(c);
    const std::string what =
        count == perPipeline ? std::to_string(count) + " virtual stages (" + std::to_string(devices) + " devices × " +
                                   std::to_string(chunks) + " chunks)"
                             : std::to_string(count) + " of the " + std::to_string(perPipeline) + " virtual stages (" +
                                   std::to_string(devices) + " devices × " + std::to_string(chunks) + " chunks)";
    std::string message = schedule + " needs chunks of equal size, but partition 'uniform' cannot divide the ";
    message.append(std::to_string(comp.layers.size()))
        .append(" layers of component '")
        .append(comp.name)
        .append("' evenly over its ")
        .append(what)
        .append(": the layer count must be a multiple of ")
        .append(std::to_string(count))
        .append(
            "; use --partition balanced or --partition dp (they balance unequal chunks), or other "
            "--devices/--chunks");
    return Error{message};
  }
  return stages;
}

namespace {

bool isTrailingExtra(const Layer& l) { return l.kind == "lm_head" || l.kind == "norm" || l.kind == "final_norm"; }

}  // namespace

Expected<std::vector<VirtualStage>> partitionMegatron(const ModelSpec& model, std::vector<VirtualStage> placement) {
  const std::vector<int> trainable = model.trainableComponents();
  if (trainable.size() != 1) {
    return Error{"partition 'megatron' splits one decoder as Megatron-LM does; model '" + excerpt(model.name) +
                 "' has " + std::to_string(trainable.size()) +
                 " trainable components (expected one; use --partition balanced or dp)"};
  }
  const int component = trainable.front();
  const std::vector<Layer>& layers = model.component(component).layers;
  const auto total = static_cast<long>(layers.size());
  long lead = 0;
  while (lead < total && layers[static_cast<std::size_t>(lead)].kind == "embedding") ++lead;
  long trail = 0;
  while (trail < total - lead && isTrailingExtra(layers[static_cast<std::size_t>(total - 1 - trail)])) ++trail;
  const long blocks = total - lead - trail;
  long stages = 0;
  for (const VirtualStage& vs : placement) stages += vs.pipeline == 0 ? 1 : 0;
  if (stages <= 0) return Error{"partition 'megatron': no virtual stages"};
  // Megatron's --account-for-embedding/loss-in-pipeline-split: every stage the same count of
  // layers with the embedding and the loss counted as one each.
  if (blocks % stages != 0 && total % stages == 0) return partitionUniform(model, std::move(placement));
  if (blocks < stages) {
    return Error{"partition 'megatron' cannot give each of " + std::to_string(stages) +
                 " virtual stages (devices × chunks) a transformer block: the decoder has " + std::to_string(blocks) +
                 " (expected at least one block per virtual stage; use fewer --devices or --chunks)"};
  }
  const long base = blocks / stages;
  const long extra = blocks % stages;
  std::vector<std::vector<std::size_t>> chains;
  for (std::size_t i = 0; i < placement.size(); ++i) {
    const auto p = static_cast<std::size_t>(placement[i].pipeline);
    if (chains.size() <= p) chains.resize(p + 1);
    chains[p].push_back(i);
  }
  for (const auto& chain : chains) {
    long first = 0;
    for (long j = 0; j < static_cast<long>(chain.size()); ++j) {
      long size = base + (j >= stages - extra ? 1 : 0);
      if (j == 0) size += lead;
      if (j + 1 == static_cast<long>(chain.size())) size += trail;
      VirtualStage& vs = placement[chain[static_cast<std::size_t>(j)]];
      vs.component = component;
      vs.firstLayer = static_cast<int>(first);
      vs.lastLayer = static_cast<int>(first + size - 1);
      first += size;
    }
  }
  return placement;
}

}  // namespace pipestudio::partition
