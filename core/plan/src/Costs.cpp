#include "pipestudio/plan/Costs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/plan/SequenceSplits.hpp"

namespace pipestudio {
namespace {

// Byte counts saturate instead of overflowing: a hostile plan (10^5 layers of 1 PiB each)
// must not reach signed-overflow undefined behaviour.
void addSaturating(std::int64_t& total, std::int64_t delta) {
  if (__builtin_add_overflow(total, delta, &total)) {
    total = delta > 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::min();
  }
}

// Two layers the cost model cannot tell apart (everything but the name): repeated blocks.
bool sameCosts(const Layer& a, const Layer& b) {
  return a.kind == b.kind && a.tied == b.tied && a.forwardMs == b.forwardMs && a.backwardInputMs == b.backwardInputMs &&
         a.backwardWeightMs == b.backwardWeightMs && a.activationBytes == b.activationBytes &&
         a.weightGradBytes == b.weightGradBytes && a.parameterBytes == b.parameterBytes &&
         a.outputBytes == b.outputBytes && a.transformer == b.transformer && a.flopsForward == b.flopsForward &&
         a.params == b.params;
}

// `cost(layer)` of every layer of `comp`; a layer with the same costs as the one before reuses
// its result (a model's blocks are usually alike).
template <typename CostOf>
std::vector<LayerCosts> costLayers(const Component& comp, CostOf cost) {
  std::vector<LayerCosts> out;
  out.reserve(comp.layers.size());
  const Layer* previous = nullptr;
  for (const Layer& layer : comp.layers) {
    if (previous && sameCosts(*previous, layer)) {
      out.push_back(out.back());
    } else {
      out.push_back(cost(layer));
    }
    previous = &layer;
  }
  return out;
}

std::vector<LayerCosts> costComponent(const Component& comp, const CostContext& ctx) {
  return costLayers(comp, [&](const Layer& layer) { return layerCosts(layer, ctx); });
}

// costComponent for the sequence chunk of tokens [q0, q1) of `tokens` (layerChunkCosts).
std::vector<LayerCosts> costComponentChunk(const Component& comp, const CostContext& ctx, std::int64_t tokens,
                                           std::int64_t q0, std::int64_t q1) {
  return costLayers(comp, [&](const Layer& layer) { return layerChunkCosts(layer, ctx, tokens, q0, q1); });
}

// Seq1F1B's computation-wise partition (Sun et al. 2024 §3.3): the boundaries where the
// trainable layers' F + B + W time of the prefix [0, t) reaches k/K of the whole sequence's, on
// pipeline rank 0's GPU, at multiples of `grain` tokens; or equal tokens ("even").
std::vector<std::int64_t> seqBounds(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config,
                                    std::int64_t samples) {
  const int k = std::max(1, config.seqSplits);
  std::int64_t tokens = tokensPerSample(model);
  const bool nominal = tokens <= 0;
  if (nominal) tokens = k;
  const std::int64_t grain = nominal ? 1 : std::max(1, config.parallel.tensor);
  std::vector<std::int64_t> bounds{0};
  if (k == 1) {
    bounds.push_back(tokens);
    return bounds;
  }
  auto onGrain = [&](std::int64_t t) { return std::clamp<std::int64_t>(t / grain * grain, 0, tokens); };
  if (config.seqSplit == "even" || nominal) {
    for (int i = 1; i < k; ++i) bounds.push_back(onGrain(tokens * i / k));
    bounds.push_back(tokens);
    return bounds;
  }
  // Only the transformer blocks: they are what every stage holds, and the embedding and LM head
  // (linear in the tokens) would pull the boundaries towards equal tokens on the stages without
  // them.
  const auto block = [](const Layer& layer) {
    return layer.transformer && !(layer.transformer->vocab && (layer.kind == "lm_head" || layer.kind == "embedding"));
  };
  const CostContext ctx = costContext(cluster, config, samples, 0, true);
  // The F + B + W time of the blocks for the chunk of tokens [a, b), as the plan will cost it.
  auto chunkMs = [&](std::int64_t a, std::int64_t b) {
    double ms = 0;
    for (const Component& comp : model.components) {
      if (!comp.trainable) continue;
      const std::vector<LayerCosts> costs = costComponentChunk(comp, ctx, tokens, a, b);
      for (std::size_t l = 0; l < costs.size(); ++l) {
        if (block(comp.layers[l])) ms += costs[l].forwardMs + costs[l].backwardInputMs + costs[l].backwardWeightMs;
      }
    }
    return ms;
  };
  double total = 0;
  for (int i = 0; i < k; ++i)
    total += chunkMs(onGrain(tokens * i / k), i + 1 == k ? tokens : onGrain(tokens * (i + 1) / k));
  if (!(total > 0)) {  // no transformer block to balance: equal tokens
    for (int i = 1; i < k; ++i) bounds.push_back(onGrain(tokens * i / k));
    bounds.push_back(tokens);
    return bounds;
  }
  // Chunk by chunk, the end whose chunk time is nearest the remaining time's equal share. A scan,
  // not a bisection: GEMM wave quantization makes the time jagged in the tokens. About 64 steps
  // per chunk.
  const std::int64_t step = std::max(grain, tokens / (64 * static_cast<std::int64_t>(k)) / grain * grain);
  double spent = 0;
  for (int i = 1; i < k; ++i) {
    const std::int64_t a = bounds.back();
    const double target = (total - spent) / (k - i + 1);
    const std::int64_t last = onGrain(tokens - static_cast<std::int64_t>(k - i) * grain);
    std::int64_t best = std::min(a + grain, last);
    double bestMs = chunkMs(a, best);
    for (std::int64_t b = best + step; b <= last; b += step) {
      const double ms = chunkMs(a, b);
      if (std::abs(ms - target) < std::abs(bestMs - target)) {
        best = b;
        bestMs = ms;
      }
      if (ms > 2 * target) break;  // well past: later ends only take longer
    }
    bounds.push_back(best);
    spent += bestMs;
  }
  bounds.push_back(tokens);
  return bounds;
}

const LayerCosts kNoCosts{};
const std::vector<LayerCosts> kNoLayers{};

}  // namespace

std::int64_t tokensPerSample(const ModelSpec& model) {
  for (const Component& comp : model.components) {
    if (!comp.trainable) continue;
    for (const Layer& layer : comp.layers) {
      if (layer.transformer) return layer.transformer->seq;
    }
  }
  return 0;
}

int deviceFirstGpu(const PlanConfig& config, int device) {
  const std::int64_t gpu = config.parallel.firstGpuOfDevice(device);
  return static_cast<int>(std::clamp<std::int64_t>(gpu, 0, std::numeric_limits<int>::max()));
}

const GpuSpec& deviceGpu(const ClusterSpec& cluster, const PlanConfig& config, int device) {
  return cluster.gpuOfDevice(deviceFirstGpu(config, device));
}

CostContext costContext(const ClusterSpec& cluster, const PlanConfig& config, std::int64_t samplesPerMicrobatch,
                        int device, bool trainable) {
  CostContext ctx;
  ctx.gpu = deviceGpu(cluster, config, device);
  ctx.parallel = config.parallel;
  // A schedule that overlaps F and B groups itself (DualPipe's pairing, overlap_forward_backward)
  // hides the expert all-to-alls in the simulator; the layers must not hide them a second time.
  if (config.overlapForwardBackward) ctx.parallel.moeA2aOverlap = false;
  ctx.precision = config.precision;
  ctx.links = collectiveLinks(cluster, config.parallel);
  ctx.samplesPerMicrobatch = samplesPerMicrobatch;
  ctx.trainable = trainable;
  return ctx;
}

double deviceTransferMs(const ClusterSpec& cluster, const PlanConfig& config, int from, int to, double bytesPerGpu) {
  if (from == to || bytesPerGpu <= 0) return 0.0;
  const int a = deviceFirstGpu(config, from);
  const int b = deviceFirstGpu(config, to);
  double ms = cluster.transferMs(a, b, bytesPerGpu);
  const std::int64_t senders =
      static_cast<std::int64_t>(std::max(1, config.parallel.tensor)) * std::max(1, config.parallel.context);
  if (senders > 1 && cluster.nicsPerNode > 0 && !cluster.sameNvlinkDomain(a, b) &&
      cluster.interNode.bandwidthGBps > 0) {
    // Fewer NICs than concurrent senders: the bandwidth term stretches by senders / NICs.
    const double share = static_cast<double>(std::min<std::int64_t>(senders, cluster.gpusPerNode())) /
                         static_cast<double>(cluster.nicsPerNode);
    if (share > 1.0) {
      const double latencyMs = cluster.interNode.latencyUs / 1000.0;
      ms = latencyMs + (ms - latencyMs) * share;
    }
  }
  return ms;
}

std::vector<std::pair<std::int64_t, int>> hostSwitchesOf(const ClusterSpec& cluster, const PlanConfig& config,
                                                         int device) {
  std::vector<std::pair<std::int64_t, int>> out;
  if (cluster.hostSwitchGpus <= 1 || cluster.hostSwitchGBps <= 0) return out;
  const std::int64_t g = cluster.hostSwitchGpus;
  const std::int64_t perRank = std::max<std::int64_t>(1, config.parallel.gpusPerPipelineRank());
  const std::int64_t first = config.parallel.firstGpuOfDevice(device);
  for (std::int64_t sw = first / g; sw * g < first + perRank; ++sw) {
    out.emplace_back(sw, static_cast<int>(std::min(first + perRank, (sw + 1) * g) - std::max(first, sw * g)));
  }
  return out;
}

double hostCopyGBps(const ClusterSpec& cluster, const PlanConfig& config, int device, bool everyGpuCopies) {
  double gbps = deviceGpu(cluster, config, device).hostLinkGBps;
  if (gbps <= 0) return gbps;
  for (const auto& [sw, own] : hostSwitchesOf(cluster, config, device)) {
    gbps = std::min(gbps, cluster.hostSwitchGBps / static_cast<double>(everyGpuCopies ? cluster.hostSwitchGpus : own));
  }
  return gbps;
}

double stageSendMs(const ClusterSpec& cluster, const PlanConfig& config, int from, int to, double bytesPerGpu) {
  if (from == to) return 0.0;
  if (bytesPerGpu > 0) return deviceTransferMs(cluster, config, from, to, bytesPerGpu);
  return cluster.latencyMs(deviceFirstGpu(config, from), deviceFirstGpu(config, to));
}

OffloadWaits offloadWaits(const std::vector<OffloadedLayer>& layers, int forwardLead, int backwardLead,
                          bool preloadLast) {
  OffloadWaits w;
  const int n = static_cast<int>(layers.size());
  const auto at = [&](int i) -> const OffloadedLayer& { return layers[static_cast<std::size_t>(i)]; };
  // Forward: the compute clock t, the copy stream free from `stream`; copy i ends at done[i].
  std::vector<double> done(layers.size(), 0.0);
  double t = 0, stream = 0;
  for (int i = 0; i < n; ++i) {
    const int waitFor = i - forwardLead;  // the copy that must be over before layer i starts
    if (forwardLead > 0 && waitFor >= 0 && at(waitFor).copyMs > 0) {
      const double wait = std::max(0.0, done[static_cast<std::size_t>(waitFor)] - t);
      w.forwardMs += wait;
      t += wait;
    }
    t += at(i).forwardMs;
    if (at(i).copyMs > 0) {
      stream = std::max(stream, t) + at(i).copyMs;
      done[static_cast<std::size_t>(i)] = stream;
    }
  }
  // Backward, last layer first: layer j's copy back starts when the backward of layer
  // j + backwardLead starts (at once for the last layers), after the copy before it.
  int last = -1;
  for (int i = n - 1; i >= 0 && last < 0; --i) {
    if (at(i).copyMs > 0) last = i;
  }
  std::vector<double> back(layers.size(), 0.0);
  std::vector<char> issued(layers.size(), 0);
  t = 0;
  stream = 0;
  const auto issue = [&](int j) {
    if (j < 0 || j >= n || issued[static_cast<std::size_t>(j)] || at(j).copyMs <= 0) return;
    issued[static_cast<std::size_t>(j)] = 1;
    if (preloadLast && j == last) return;  // brought back during the previous backward
    stream = std::max(stream, t) + at(j).copyMs;
    back[static_cast<std::size_t>(j)] = stream;
  };
  for (int j = n - 1; j >= 0; --j) {
    if (j + backwardLead >= n) issue(j);
  }
  for (int i = n - 1; i >= 0; --i) {
    issue(i - backwardLead);
    issue(i);  // a copy not issued yet is needed now
    if (at(i).copyMs > 0 && !(preloadLast && i == last)) {
      const double wait = std::max(0.0, back[static_cast<std::size_t>(i)] - t);
      w.backwardMs += wait;
      t += wait;
    }
    t += at(i).backwardMs;
  }
  return w;
}

CostedModel::CostedModel(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config,
                         std::int64_t samplesPerMicrobatch)
    : m_blockwiseGathers((config.unitMicrobatches > 0 || config.fsdpWindows) && config.parallel.zeroStage >= 3),
      m_cpuOffloadLayers(config.parallel.cpuOffloadingNumLayers),
      m_offloadModules(config.parallel.offloadModules),
      m_offloadFraction(config.parallel.activationOffloadFraction),
      m_recomputeMethod(config.parallel.recomputeMethod),
      m_recomputeNumLayers(config.parallel.recompute == Recompute::Full ? config.parallel.recomputeNumLayers : 0) {
  const std::int64_t samples = samplesPerMicrobatch > 0 ? samplesPerMicrobatch : model.samplesPerMicrobatch;
  // GPU classes: the distinct GPU specs the pipeline ranks sit on. Most clusters have one type
  // (no node overrides it), and then no per-device table is kept.
  std::vector<int> classDevice{0};  // a representative device per class
  const bool heterogeneous =
      std::any_of(cluster.nodes.begin(), cluster.nodes.end(), [](const NodeSpec& n) { return n.gpu.has_value(); });
  if (heterogeneous) {
    std::vector<const GpuSpec*> specs{&deviceGpu(cluster, config, 0)};
    m_deviceClass.assign(static_cast<std::size_t>(std::max(1, config.devices)), 0);
    for (int d = 1; d < config.devices; ++d) {
      const GpuSpec* g = &deviceGpu(cluster, config, d);
      auto it = std::find(specs.begin(), specs.end(), g);
      if (it == specs.end()) {
        specs.push_back(g);
        classDevice.push_back(d);
        it = specs.end() - 1;
      }
      m_deviceClass[static_cast<std::size_t>(d)] = static_cast<int>(it - specs.begin());
    }
  }
  PlanConfig resident = config;
  resident.parallel.zeroStage = 1;  // no per-pass gathers or scatters
  PlanConfig unrecomputed = config;
  unrecomputed.parallel.recompute = Recompute::None;
  for (const int device : classDevice) {
    auto& perComponent = m_costs.emplace_back();
    auto& residentComponent = m_resident.emplace_back();
    auto& unrecomputedComponent = m_unrecomputed.emplace_back();
    for (const Component& comp : model.components) {
      perComponent.push_back(costComponent(comp, costContext(cluster, config, samples, device, comp.trainable)));
      if (m_blockwiseGathers) {
        residentComponent.push_back(
            costComponent(comp, costContext(cluster, resident, samples, device, comp.trainable)));
      }
      if (m_recomputeNumLayers > 0) {
        unrecomputedComponent.push_back(
            costComponent(comp, costContext(cluster, unrecomputed, samples, device, comp.trainable)));
      }
    }
  }
  std::int64_t layerCount = 0;
  for (const Component& comp : model.components) layerCount += static_cast<std::int64_t>(comp.layers.size());
  // Beyond the chunk-layer budget (refused by the planner and the plan reader) the chunks keep
  // whole-microbatch costs rather than allocate without bound.
  if (config.seqSplits > 1 && config.seqSplits <= kMaxSeqSplits &&
      layerCount * config.seqSplits <= kMaxSeqChunkLayers) {
    // Sequence splits: every layer costed again per chunk (blockwise ZeRO-3 gathers are not
    // split: the planner refuses that combination).
    m_seqBounds = seqBounds(model, cluster, config, samples);
    const std::int64_t tokens = m_seqBounds.back();
    for (std::size_t k = 0; k + 1 < m_seqBounds.size(); ++k) {
      auto& costs = m_chunkCosts.emplace_back();
      auto& plain = m_chunkUnrecomputed.emplace_back();
      for (const int device : classDevice) {
        auto& perComponent = costs.emplace_back();
        auto& unrecomputedComponent = plain.emplace_back();
        for (const Component& comp : model.components) {
          perComponent.push_back(costComponentChunk(comp, costContext(cluster, config, samples, device, comp.trainable),
                                                    tokens, m_seqBounds[k], m_seqBounds[k + 1]));
          if (m_recomputeNumLayers > 0) {
            unrecomputedComponent.push_back(
                costComponentChunk(comp, costContext(cluster, unrecomputed, samples, device, comp.trainable), tokens,
                                   m_seqBounds[k], m_seqBounds[k + 1]));
          }
        }
      }
    }
  } else {
    m_seqBounds = {0, tokensPerSample(model)};
  }
  if (config.parallel.offloadsActivations()) {
    for (int d = 0; d < std::max(1, config.devices); ++d) m_hostGBps.push_back(hostCopyGBps(cluster, config, d, true));
  }
  for (const Component& comp : model.components) {
    m_trainable.push_back(comp.trainable ? 1 : 0);
    auto& tied = m_tiedHead.emplace_back();
    auto& block = m_block.emplace_back();
    for (const Layer& layer : comp.layers) {
      tied.push_back(layer.tied && layer.kind == "lm_head" ? 1 : 0);
      block.push_back(layer.transformer && layer.kind != "embedding" && layer.kind != "lm_head" ? 1 : 0);
    }
  }
}

int CostedModel::gpuClass(int device) const {
  if (m_deviceClass.empty() || !inRange(m_deviceClass, device)) return 0;
  return m_deviceClass[static_cast<std::size_t>(device)];
}

const std::vector<LayerCosts>& CostedModel::component(int component, int device) const {
  if (m_costs.empty()) return kNoLayers;
  const auto& perComponent = m_costs[static_cast<std::size_t>(gpuClass(device))];
  if (!inRange(perComponent, component)) return kNoLayers;
  return perComponent[static_cast<std::size_t>(component)];
}

const LayerCosts& CostedModel::layer(int component, int layer, int device) const {
  const auto& layers = this->component(component, device);
  if (!inRange(layers, layer)) return kNoCosts;
  return layers[static_cast<std::size_t>(layer)];
}

StageCosts CostedModel::stage(const VirtualStage& vs) const { return sumStage(vs, m_costs, &m_unrecomputed); }

StageCosts CostedModel::stage(const VirtualStage& vs, int seqChunk) const {
  if (m_chunkCosts.empty() || !inRange(m_chunkCosts, seqChunk)) return stage(vs);
  const auto k = static_cast<std::size_t>(seqChunk);
  return sumStage(vs, m_chunkCosts[k], &m_chunkUnrecomputed[k]);
}

std::vector<std::vector<StageCosts>> CostedModel::unitStages(const std::vector<VirtualStage>& stages) const {
  std::vector<std::vector<StageCosts>> out;
  out.reserve(stages.size());
  for (const VirtualStage& vs : stages) {
    auto& perChunk = out.emplace_back();
    if (m_chunkCosts.empty()) {
      perChunk.push_back(stage(vs));
      continue;
    }
    for (int k = 0; k < static_cast<int>(m_chunkCosts.size()); ++k) perChunk.push_back(stage(vs, k));
  }
  return out;
}

StageCosts CostedModel::sumStage(const VirtualStage& vs, const Tables& costs, const Tables* unrecomputedTables) const {
  StageCosts s;
  if (costs.empty()) return s;
  const auto gpu = static_cast<std::size_t>(gpuClass(vs.device));
  if (!inRange(costs[gpu], vs.component)) return s;
  const auto c = static_cast<std::size_t>(vs.component);
  const auto& layers = costs[gpu][c];
  if (layers.empty()) return s;
  const bool trainable = m_trainable[c] != 0;
  // Blockwise gathers are whole-microbatch costs (no sequence splits with them).
  const std::vector<LayerCosts>* resident = m_blockwiseGathers && &costs == &m_costs ? &m_resident[gpu][c] : nullptr;
  const std::vector<LayerCosts>* unrecomputed =
      m_recomputeNumLayers > 0 && unrecomputedTables != nullptr ? &(*unrecomputedTables)[gpu][c] : nullptr;
  std::int64_t chunkBuffers = 0;
  // ZeRO-3: each FSDP unit's gathered weights and unsharded gradients, in layer order.
  std::vector<std::int64_t> units;
  std::vector<LayerCosts> blocks;   // the transformer layers, for activation offloading
  int blockIndex = 0;               // transformer blocks of this stage so far
  std::int64_t groupRecompute = 0;  // uniform recomputation: the group being summed
  for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && inRange(layers, l); ++l) {
    const auto lu = static_cast<std::size_t>(l);
    LayerCosts lc = layers[lu];
    if (unrecomputed && !m_block[c][lu]) {
      // Megatron-LM recomputes transformer blocks only (not the embedding or the output layer).
      lc = (*unrecomputed)[lu];
    } else if (unrecomputed) {
      // --recompute-num-layers counts the transformer blocks of each virtual stage.
      const int position = blockIndex++;
      if (m_recomputeMethod == RecomputeMethod::Block) {
        // block: the first N blocks are recomputed, the others keep all their activations.
        if (position >= m_recomputeNumLayers) lc = (*unrecomputed)[lu];
      } else {
        // uniform: groups of N blocks keep only the group's input and rebuild the whole group.
        const bool opensGroup = position % m_recomputeNumLayers == 0;
        if (opensGroup) groupRecompute = 0;
        addSaturating(groupRecompute, lc.recomputeBytes);
        lc.recomputeBytes = groupRecompute;
        if (!opensGroup) lc.activationBytes = 0;
      }
    }
    if (resident) {
      // The share of each pass that is the gather is the difference to the same pass with
      // resident parameters (ZeRO-1), layer by layer.
      const LayerCosts& r = (*resident)[lu];
      s.zeroGatherForwardMs += std::max(0.0, lc.forwardMs - r.forwardMs);
      s.zeroGatherBackwardMs += std::max(0.0, lc.backwardInputMs - r.backwardInputMs);
      s.zeroScatterWeightMs += std::max(0.0, lc.backwardWeightMs - r.backwardWeightMs);
      // The whole chunk stays gathered over a block, and the next chunk is prefetched.
      addSaturating(chunkBuffers, 2 * lc.fsdpGatherBytes);
    }
    s.forwardMs += lc.forwardMs;
    s.backwardInputMs += lc.backwardInputMs;
    s.backwardWeightMs += lc.backwardWeightMs;
    s.forwardCommMs += lc.forwardCommMs;
    s.backwardInputCommMs += lc.backwardInputCommMs;
    s.backwardWeightCommMs += lc.backwardWeightCommMs;
    s.forwardHiddenCommMs += lc.forwardHiddenCommMs;
    s.backwardInputHiddenCommMs += lc.backwardInputHiddenCommMs;
    s.backwardWeightHiddenCommMs += lc.backwardWeightHiddenCommMs;
    addSaturating(s.lowPrecisionWeightBytes, lc.lowPrecisionWeightBytes);
    s.recomputeBytes = std::max(s.recomputeBytes, lc.recomputeBytes);
    addSaturating(s.activationBytes, lc.activationBytes);
    addSaturating(s.weightGradBytes, lc.weightGradBytes);
    s.outputBytes = lc.outputBytes;
    s.communicationBytes = std::max(s.communicationBytes, lc.communicationBytes);
    s.workspaceBytes = std::max(s.workspaceBytes, lc.workspaceBytes);
    s.userbufferBytes = std::max(s.userbufferBytes, lc.userbufferBytes);
    addSaturating(s.cudaGraphBytes, lc.cudaGraphBytes);
    (trainable ? s.trainableParameters : s.frozenParameters) += lc.parameterCount();
    if (trainable) s.expertParameters += static_cast<double>(lc.expertParameterBytes) / 2.0;
    if (trainable && m_tiedHead[c][lu]) s.tiedParameters += lc.parameterCount();
    if (trainable) {
      s.quantizedParameters += lc.quantizedParameters;
      s.quantizedExpertParameters += lc.quantizedExpertParameters;
    }
    if (lc.fsdpGatherBytes > 0 || lc.fsdpGradientBytes > 0) units.push_back(lc.fsdpGatherBytes + lc.fsdpGradientBytes);
    if (!m_hostGBps.empty() && trainable && m_block[c][lu]) blocks.push_back(lc);
    s.modelFlopsForward += lc.modelFlopsForward;
  }
  s.communicationBytes = std::max(s.communicationBytes, chunkBuffers);
  // Per pass one unit is gathered (or its gradient reduced) while its neighbour is prefetched
  // (Megatron-FSDP's all-gather prefetch, FSDP2's next module) or still reducing: at most two
  // units at a time (Megatron-FSDP's double buffer, fsdp_double_buffer). A stage of one unit
  // counts it twice, its neighbour being on the next stage.
  if (!blocks.empty()) addOffload(vs, blocks, s);
  if (!resident) {
    for (std::size_t i = 0; i < units.size(); ++i) {
      const std::int64_t neighbour = std::max(i > 0 ? units[i - 1] : 0, i + 1 < units.size() ? units[i + 1] : 0);
      s.communicationBytes = std::max(s.communicationBytes, units[i] + (units.size() > 1 ? neighbour : units[i]));
    }
  }
  return s;
}

void CostedModel::addOffload(const VirtualStage& vs, const std::vector<LayerCosts>& blocks, StageCosts& s) const {
  const double gbps = inRange(m_hostGBps, vs.device) ? m_hostGBps[static_cast<std::size_t>(vs.device)] : 0.0;
  if (!(gbps > 0)) return;  // no host link: nothing leaves the GPU (the planner refuses such requests)
  const int n = static_cast<int>(blocks.size());
  std::vector<std::int64_t> bytes(blocks.size(), 0);
  if (m_cpuOffloadLayers > 0) {
    // The first N layers, every activation they save.
    for (int i = 0; i < std::min(n, m_cpuOffloadLayers); ++i) {
      bytes[static_cast<std::size_t>(i)] = blocks[static_cast<std::size_t>(i)].activationBytes;
    }
  } else {
    // One group per module and layer in forward order; the last floor(count · (1 − fraction)) of
    // the non-empty ones stay on the GPU (post_warmup_callback).
    std::vector<std::pair<int, std::int64_t>> groups;
    for (int i = 0; i < n; ++i) {
      for (const std::int64_t g : blocks[static_cast<std::size_t>(i)].offloadGroupBytes) {
        if (g > 0) groups.emplace_back(i, g);
      }
    }
    const auto kept = static_cast<std::size_t>(
        std::floor(static_cast<double>(groups.size()) * (1.0 - std::clamp(m_offloadFraction, 0.0, 1.0))));
    for (std::size_t k = 0; k + kept < groups.size(); ++k) {
      addSaturating(bytes[static_cast<std::size_t>(groups[k].first)], groups[k].second);
    }
  }
  std::vector<OffloadedLayer> seq;
  seq.reserve(blocks.size());
  for (int i = 0; i < n; ++i) {
    const LayerCosts& lc = blocks[static_cast<std::size_t>(i)];
    const std::int64_t b = std::min(bytes[static_cast<std::size_t>(i)], lc.activationBytes);
    addSaturating(s.offloadBytes, b);
    seq.push_back({lc.forwardMs, lc.backwardInputMs + lc.backwardWeightMs, static_cast<double>(b) / (gbps * 1e6)});
  }
  const bool layerLevel = m_cpuOffloadLayers > 0;
  const int offloaded = std::min(n, m_cpuOffloadLayers);
  const OffloadWaits w =
      layerLevel ? offloadWaits(seq, n - offloaded, n - 1 - offloaded, false) : offloadWaits(seq, 0, 1, true);
  s.offloadBytes = std::min(s.offloadBytes, s.activationBytes);
  s.offloadWaitForwardMs = w.forwardMs;
  s.offloadWaitBackwardMs = w.backwardMs;
  s.forwardMs += w.forwardMs;
  s.backwardInputMs += w.backwardMs;
}

std::vector<StageCosts> CostedModel::stages(const std::vector<VirtualStage>& stages) const {
  std::vector<StageCosts> out;
  out.reserve(stages.size());
  for (const VirtualStage& vs : stages) out.push_back(stage(vs));
  return out;
}

}  // namespace pipestudio
