#include "pipestudio/plan/Memory.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <utility>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/plan/Costs.hpp"

namespace pipestudio {
namespace {

// Byte counts saturate instead of overflowing: a hostile plan (10^5 layers of 1 PiB each,
// millions of ops) must not reach signed-overflow undefined behaviour.
void addSaturating(std::int64_t& total, std::int64_t delta) {
  if (__builtin_add_overflow(total, delta, &total)) {
    total = delta > 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::min();
  }
}

std::int64_t sumSaturating(std::int64_t a, std::int64_t b) {
  addSaturating(a, b);
  return a;
}

}  // namespace

std::vector<StageCosts> stageCosts(const Plan& plan) { return CostedModel(plan).stages(plan.virtualStages); }

int effectiveZeroStage(const Plan& plan) {
  return std::max(plan.config.parallel.zeroStage, plan.model.optimizer.distributed ? 1 : 0);
}

std::vector<MemoryBreakdown> staticBreakdownPerDevice(const Plan& plan, const std::vector<StageCosts>& costs) {
  const auto devices = static_cast<std::size_t>(std::max(0, plan.config.devices));
  const int zero = effectiveZeroStage(plan);
  // Dense weights are sharded over the data-parallel ranks with the context-parallel ones (D·C).
  const int dp = static_cast<int>(std::min<std::int64_t>(plan.config.parallel.denseData(), 1 << 30));
  // Routed experts are replicated over the EDP = T·C·D / (ETP·EP) ranks of their
  // expert-data-parallel group (Megatron-Core MoE parallel folding).
  const int expertDp = static_cast<int>(std::min<std::int64_t>(plan.config.parallel.expertData(), 1 << 30));
  const bool fp32Grads = plan.config.parallel.gradReduceInFp32;
  const StaticBytesPerParameter dense = staticBytesPerParameter(zero, dp, fp32Grads);
  const StaticBytesPerParameter expert = staticBytesPerParameter(zero, expertDp, fp32Grads);
  std::vector<double> denseParams(devices, 0.0), expertParams(devices, 0.0), frozen(devices, 0.0);
  std::vector<double> denseQuantized(devices, 0.0), expertQuantized(devices, 0.0);
  std::vector<std::int64_t> buffers(devices, 0), lowPrecision(devices, 0), recompute(devices, 0);
  std::vector<std::int64_t> workspaces(devices, 0), userbuffers(devices, 0), graphs(devices, 0);
  // A tied LM head on the embedding's device shares its weight (one tensor, one gradient).
  std::vector<char> hasEmbedding(devices, 0);
  for (std::size_t i = 0; i < plan.virtualStages.size() && i < costs.size(); ++i) {
    const VirtualStage& vs = plan.virtualStages[i];
    if (!inRange(hasEmbedding, vs.device) || !inRange(plan.model.components, vs.component)) continue;
    const Component& comp = plan.model.component(vs.component);
    for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && inRange(comp.layers, l); ++l) {
      if (comp.layer(l).kind == "embedding") hasEmbedding[static_cast<std::size_t>(vs.device)] = 1;
    }
  }
  for (std::size_t i = 0; i < plan.virtualStages.size() && i < costs.size(); ++i) {
    const int d = plan.virtualStages[i].device;
    if (!inRange(denseParams, d)) continue;
    const auto du = static_cast<std::size_t>(d);
    const StageCosts& c = costs[i];
    double trainable = c.trainableParameters;
    if (hasEmbedding[du]) trainable -= c.tiedParameters;
    denseParams[du] += trainable - c.expertParameters;
    expertParams[du] += c.expertParameters;
    frozen[du] += c.frozenParameters;
    denseQuantized[du] += c.quantizedParameters - c.quantizedExpertParameters;
    expertQuantized[du] += c.quantizedExpertParameters;
    buffers[du] = std::max(buffers[du], c.communicationBytes);
    recompute[du] = std::max(recompute[du], c.recomputeBytes);
    // One set of workspaces and userbuffers per process, sized for its largest layer; every
    // captured graph keeps its own pool.
    workspaces[du] = std::max(workspaces[du], c.workspaceBytes);
    userbuffers[du] = std::max(userbuffers[du], c.userbufferBytes);
    addSaturating(graphs[du], c.cudaGraphBytes);
    // Under ZeRO-3 a layer's low-precision copy lives only while it is gathered (in its buffers).
    if (zero < 3) addSaturating(lowPrecision[du], c.lowPrecisionWeightBytes);
  }
  std::vector<MemoryBreakdown> out(devices);
  for (std::size_t d = 0; d < devices; ++d) {
    MemoryBreakdown& m = out[d];
    // Weights kept only in low precision have no bf16 copy: the low-precision line holds them
    // (under ZeRO-3 their shard, in the format they are gathered in).
    m.parameterBytes = static_cast<std::int64_t>(
        std::llround((denseParams[d] - denseQuantized[d]) * dense.parameter +
                     (expertParams[d] - expertQuantized[d]) * expert.parameter + frozen[d] * 2.0));
    if (zero >= 3) {
      const double lowPrecisionBytes = operandBytes(plan.config.precision);
      addSaturating(lowPrecision[d],
                    static_cast<std::int64_t>(
                        std::llround(lowPrecisionBytes * (denseQuantized[d] / dp + expertQuantized[d] / expertDp))));
    }
    m.gradientBytes =
        static_cast<std::int64_t>(std::llround(denseParams[d] * dense.gradient + expertParams[d] * expert.gradient));
    m.optimizerBytes =
        static_cast<std::int64_t>(std::llround(denseParams[d] * dense.optimizer + expertParams[d] * expert.optimizer));
    m.communicationBytes = buffers[d];
    m.lowPrecisionWeightBytes = lowPrecision[d];
    m.recomputeBytes = recompute[d];
    m.workspaceBytes = workspaces[d];
    m.userbufferBytes = userbuffers[d];
    m.cudaGraphBytes = graphs[d];
    const GpuSpec& gpu = deviceGpu(plan.cluster, plan.config, static_cast<int>(d));
    m.contextBytes = memoryContextBytes();
    m.fragmentationBytes = memoryFragmentationBytes(gpu);
  }
  return out;
}

std::vector<std::int64_t> staticMemoryPerDevice(const Plan& plan, const std::vector<StageCosts>& costs) {
  std::vector<std::int64_t> out;
  for (const MemoryBreakdown& m : staticBreakdownPerDevice(plan, costs)) out.push_back(m.allocatedBytes());
  return out;
}

std::int64_t memoryContextBytes() {
  // The CUDA context (kernels of CUDA, cuBLAS, cuDNN, NCCL and Transformer Engine loaded on the
  // device) and NCCL's communicator buffers, allocated outside PyTorch's caching allocator: a
  // stated 1 GiB. The GEMM workspaces and TE's userbuffers are lines of their own.
  return std::int64_t{1} << 30;
}

std::int64_t memoryFragmentationBytes(const GpuSpec& gpu) {
  // What PyTorch's caching allocator keeps but cannot hand out. The recipes run it with
  // expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment of
  // Megatron-Bridge's recipes, src/megatron/bridge/perf_recipes/*/h100/), which maps memory page
  // by page as blocks grow instead of reserving fixed segments, so fragmentation stays a small
  // share of the capacity: 2 %.
  constexpr double kFragmentation = 0.02;
  return static_cast<std::int64_t>(kFragmentation * static_cast<double>(gpu.memoryBytes()));
}

std::int64_t memoryMarginBytes(const GpuSpec& gpu) { return memoryContextBytes() + memoryFragmentationBytes(gpu); }

double offloadFraction(const PlanConfig& config, const VirtualStage& stage) {
  if (config.offloadRatio <= 0) return 0.0;
  const double chunks = std::max(1, config.chunksPerDevice);
  return std::clamp(config.offloadRatio * chunks - static_cast<double>(stage.chunk), 0.0, 1.0);
}

std::int64_t offloadBytes(const PlanConfig& config, const VirtualStage& stage, const StageCosts& unitCosts) {
  return static_cast<std::int64_t>(
      std::llround(offloadFraction(config, stage) * static_cast<double>(unitCosts.activationBytes)));
}

namespace {

// The activation events of one op (docs/formats.md, with offloading): at most two (time, delta).
struct OpEvents {
  int count = 0;
  std::array<double, 2> timeMs{};
  std::array<std::int64_t, 2> delta{};
  void add(double t, std::int64_t d) {
    timeMs[static_cast<std::size_t>(count)] = t;
    delta[static_cast<std::size_t>(count)] = d;
    ++count;
  }
};

// Megatron-Core's activation offloading (StageCosts::offloadBytes): the bytes of a (virtual stage,
// microbatch) held on the host from its forward to its backward. Under
// --delta-offload-bytes-across-pp-ranks pipeline rank r keeps r · delta of them on the GPU, taken
// from its chunks in the order of their backward passes, each giving up its offload up to what is
// left (post_warmup_callback walks _cached_chunks_backward and disables groups until that many
// bytes stay; here continuous, where Megatron stops at a group boundary).
class OffloadedBytes {
 public:
  OffloadedBytes(const Plan& plan, const std::vector<std::vector<StageCosts>>& units) {
    const Parallelism& par = plan.config.parallel;
    if (par.offloadModules == 0 || par.deltaOffloadBytesAcrossPpRanks <= 0) return;
    std::vector<std::int64_t> left(static_cast<std::size_t>(std::max(0, plan.config.devices)), 0);
    for (std::size_t d = 0; d < left.size(); ++d) {
      left[d] = static_cast<std::int64_t>(
          std::min<double>(static_cast<double>(d) * static_cast<double>(par.deltaOffloadBytesAcrossPpRanks), 9.0e18));
    }
    for (const Op& op : plan.ops) {
      if ((op.kind != OpKind::B && op.kind != OpKind::BW) || !inRange(left, op.device)) continue;
      auto& l = left[static_cast<std::size_t>(op.device)];
      if (l <= 0 || !inRange(units, op.virtualStage)) continue;
      const auto& perChunk = units[static_cast<std::size_t>(op.virtualStage)];
      if (perChunk.empty()) continue;
      const std::int64_t kept = std::min(l, perChunk.front().offloadBytes);
      if (kept <= 0) continue;
      m_kept[{op.virtualStage, op.microbatch}] = kept;
      l -= kept;
    }
  }
  std::int64_t operator()(const Op& op, const StageCosts& c) const {
    if (c.offloadBytes <= 0 || m_kept.empty()) return std::max<std::int64_t>(0, c.offloadBytes);
    const auto it = m_kept.find({op.virtualStage, op.microbatch});
    return it == m_kept.end() ? c.offloadBytes : std::max<std::int64_t>(0, c.offloadBytes - it->second);
  }

 private:
  std::map<std::pair<int, int>, std::int64_t> m_kept;
};

// Bytes scale with a partial batch's share of the samples; an op of a sequence-split plan has
// its chunk's costs (`c` is the unit's). Activation offloading (`offloaded`, of the op's stage and
// microbatch) keeps that share of the activations on the host from the end of the forward to the
// start of the backward: the GPU holds the rest, and what W still reads.
OpEvents opMemoryEvents(const Plan& plan, const Op& op, const StageCosts& c, double samplesPerMb,
                        std::int64_t offloaded) {
  OpEvents e;
  const double fraction = op.samples > 0 ? static_cast<double>(op.samples) / samplesPerMb : 1.0;
  const auto scaled = [&](std::int64_t bytes) {
    return op.samples > 0 ? static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * fraction)) : bytes;
  };
  const std::int64_t act = std::max<std::int64_t>(0, scaled(c.activationBytes) - scaled(offloaded));
  const std::int64_t wgrad = std::min(scaled(c.weightGradBytes), act);
  switch (op.kind) {
    case OpKind::F:
    case OpKind::S:
      e.add(op.startMs, act);
      break;
    case OpKind::B:
      e.add(op.endMs, -(act - wgrad));
      break;
    case OpKind::W:
      e.add(op.endMs, -wgrad);
      break;
    case OpKind::BW:
    case OpKind::T:
      e.add(op.endMs, -act);
      break;
    case OpKind::N:
      // Frozen forward: no backward, activations live only while the op runs.
      e.add(op.startMs, act);
      e.add(op.endMs, -act);
      break;
    case OpKind::D2H:
      // The offloaded bytes leave the GPU once their copy to the host has ended…
      if (inRange(plan.virtualStages, op.virtualStage))
        e.add(op.endMs, -offloadBytes(plan.config, plan.stage(op.virtualStage), c));
      break;
    case OpKind::H2D:
      // …and are held again from the start of the copy back.
      if (inRange(plan.virtualStages, op.virtualStage))
        e.add(op.startMs, offloadBytes(plan.config, plan.stage(op.virtualStage), c));
      break;
    case OpKind::OPT:
      break;
  }
  return e;
}

// The unit costs of op `op` ([stage][chunk]); nullptr for a stage out of range.
const StageCosts* unitCostsOf(const std::vector<std::vector<StageCosts>>& units, const PlanConfig& config,
                              const Op& op) {
  if (!inRange(units, op.virtualStage)) return nullptr;
  const auto& perChunk = units[static_cast<std::size_t>(op.virtualStage)];
  const int k = seqChunkOf(config, op.microbatch);
  if (inRange(perChunk, k)) return &perChunk[static_cast<std::size_t>(k)];
  return perChunk.empty() ? nullptr : &perChunk.front();
}

MemoryTimeline timelineOf(const Plan& plan, const std::vector<StageCosts>& costs,
                          const std::vector<std::vector<StageCosts>>& units) {
  MemoryTimeline t;
  const auto devices = static_cast<std::size_t>(std::max(0, plan.config.devices));
  t.staticBytes = staticMemoryPerDevice(plan, costs);
  t.devices.assign(devices, {});
  t.peakBytes.assign(devices, 0);
  t.peakActivationBytes.assign(devices, 0);

  // (time, delta) events per device; at equal times releases go first (a device finishing a
  // B and starting an F at the same instant does not hold both).
  struct Event {
    double timeMs;
    std::int64_t delta;
  };
  std::vector<std::vector<Event>> events(devices);
  {
    std::vector<std::size_t> perDevice(devices, 0);
    for (const Op& op : plan.ops) {
      if (inRange(perDevice, op.device)) ++perDevice[static_cast<std::size_t>(op.device)];
    }
    for (std::size_t d = 0; d < devices; ++d) events[d].reserve(perDevice[d] + perDevice[d] / 8);
  }
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch));
  const OffloadedBytes offloaded(plan, units);
  for (const Op& op : plan.ops) {
    const StageCosts* c = unitCostsOf(units, plan.config, op);
    if (!inRange(events, op.device) || c == nullptr) continue;
    auto& ev = events[static_cast<std::size_t>(op.device)];
    const OpEvents e = opMemoryEvents(plan, op, *c, samplesPerMb, offloaded(op, *c));
    for (int i = 0; i < e.count; ++i) {
      ev.push_back({e.timeMs[static_cast<std::size_t>(i)], e.delta[static_cast<std::size_t>(i)]});
    }
  }
  for (std::size_t d = 0; d < devices; ++d) {
    auto& ev = events[d];
    const auto earlier = [](const Event& a, const Event& b) {
      if (a.timeMs != b.timeMs) return a.timeMs < b.timeMs;
      return a.delta < b.delta;
    };
    // A simulated device's ops do not overlap, so its events usually come in order already.
    if (!std::is_sorted(ev.begin(), ev.end(), earlier)) std::stable_sort(ev.begin(), ev.end(), earlier);
    const std::int64_t base = t.staticBytes[d];
    std::int64_t live = 0;
    std::int64_t peakLive = 0;
    auto& curve = t.devices[d];
    curve.push_back({ev.empty() ? 0.0 : ev.front().timeMs, base});
    for (const Event& e : ev) {
      addSaturating(live, e.delta);
      peakLive = std::max(peakLive, live);
      if (!curve.empty() && curve.back().timeMs == e.timeMs) {
        curve.back().bytes = sumSaturating(base, live);
      } else {
        curve.push_back({e.timeMs, sumSaturating(base, live)});
      }
    }
    t.peakActivationBytes[d] = peakLive;
    t.peakBytes[d] = sumSaturating(base, peakLive);
  }
  return t;
}

}  // namespace

MemoryTimeline memoryTimeline(const Plan& plan) { return memoryTimeline(plan, CostedModel(plan)); }

MemoryTimeline memoryTimeline(const Plan& plan, const CostedModel& costs) {
  return timelineOf(plan, costs.stages(plan.virtualStages), costs.unitStages(plan.virtualStages));
}

MemoryTimeline memoryTimeline(const Plan& plan, const std::vector<StageCosts>& costs) {
  // Sequence chunks have costs of their own: derive them.
  if (plan.config.seqSplits > 1) return memoryTimeline(plan, CostedModel(plan));
  std::vector<std::vector<StageCosts>> units;
  units.reserve(costs.size());
  for (const StageCosts& c : costs) units.push_back({c});
  return timelineOf(plan, costs, units);
}

namespace {

// Model FLOPs of one microbatch through the whole model (Korthikanti et al. 2022 Appendix A:
// a trainable layer counts its forward and a backward of twice its forward, no recomputation;
// a frozen layer its forward only).
double modelFlopsPerMicrobatch(const Plan& plan, const CostedModel& costs) {
  double flops = 0;
  for (int c = 0; c < static_cast<int>(plan.model.components.size()); ++c) {
    const double passes = plan.model.component(c).trainable ? 3.0 : 1.0;
    for (const LayerCosts& layer : costs.component(c)) flops += passes * layer.modelFlopsForward;
  }
  return flops;
}

// What each device holds of the model, for its gradient sync: its dense and expert parameters,
// whether it holds the embedding or a tied head, and the tied weight's fp32 bytes.
struct DeviceParameters {
  std::vector<double> dense, expert;
  std::vector<char> embedding, tiedHead;
  double tiedBytes = 0;
};

DeviceParameters deviceParameters(const Plan& plan, const std::vector<StageCosts>& costs, std::size_t devices) {
  DeviceParameters p{std::vector<double>(devices, 0.0), std::vector<double>(devices, 0.0),
                     std::vector<char>(devices, 0), std::vector<char>(devices, 0)};
  for (std::size_t i = 0; i < plan.virtualStages.size() && i < costs.size(); ++i) {
    const VirtualStage& vs = plan.virtualStages[i];
    if (!inRange(p.dense, vs.device)) continue;
    const auto d = static_cast<std::size_t>(vs.device);
    p.dense[d] += costs[i].trainableParameters - costs[i].expertParameters;
    p.expert[d] += costs[i].expertParameters;
    if (costs[i].tiedParameters > 0) {
      p.tiedHead[d] = 1;
      p.tiedBytes = std::max(p.tiedBytes, 4.0 * costs[i].tiedParameters);
    }
    if (inRange(plan.model.components, vs.component)) {
      const Component& comp = plan.model.component(vs.component);
      for (int l = std::max(0, vs.firstLayer); l <= vs.lastLayer && inRange(comp.layers, l); ++l) {
        if (comp.layer(l).kind == "embedding") p.embedding[d] = 1;
      }
    }
  }
  return p;
}

// Per device, the pipeline time its sync can hide under: the last training microbatch's
// backward passes (the gradient reduction) and the first one's forward passes (the parameter
// gather). Sequence-split plans: the units of that microbatch.
struct SyncWindows {
  std::vector<double> reduce, gather;
};

SyncWindows syncWindows(const Plan& plan, std::size_t devices) {
  const int splits = std::max(1, plan.config.seqSplits);
  const int lastMb = plan.config.trainingMicrobatches() - 1;
  SyncWindows w{std::vector<double>(devices, 0.0), std::vector<double>(devices, 0.0)};
  for (const Op& op : plan.ops) {
    if (!inRange(w.reduce, op.device) || op.microbatch < 0) continue;
    const auto d = static_cast<std::size_t>(op.device);
    const int trainingMb = op.microbatch / splits;
    if (trainingMb == lastMb && (op.kind == OpKind::B || op.kind == OpKind::W || op.kind == OpKind::BW)) {
      w.reduce[d] += op.durationMs();
    }
    if (trainingMb == 0 && op.kind == OpKind::F) w.gather[d] += op.durationMs();
  }
  return w;
}

// The tied embedding's gradient all-reduce between the ranks of its two copies.
struct TiedSync {
  bool split = false;  // the copies live on different ranks
  double ms = 0;
};

TiedSync tiedSync(const Plan& plan, const DeviceParameters& p) {
  // The tied weight's two copies live on different ranks only when no device has both halves.
  TiedSync tied;
  int firstEmbeddingDevice = -1, firstHeadDevice = -1;
  for (std::size_t d = 0; d < p.dense.size(); ++d) {
    if (p.embedding[d] && firstEmbeddingDevice < 0) firstEmbeddingDevice = static_cast<int>(d);
    if (p.tiedHead[d] && firstHeadDevice < 0) firstHeadDevice = static_cast<int>(d);
  }
  if (firstEmbeddingDevice >= 0 && firstHeadDevice >= 0 && !p.embedding[static_cast<std::size_t>(firstHeadDevice)]) {
    tied.split = true;
  }
  if (tied.split && p.tiedBytes > 0) {
    const bool sameNode = plan.cluster.sameNvlinkDomain(deviceFirstGpu(plan.config, firstEmbeddingDevice),
                                                        deviceFirstGpu(plan.config, firstHeadDevice));
    const LinkSpec& l = sameNode ? plan.cluster.intraNode : plan.cluster.interNode;
    tied.ms = allReduceMs(CollectiveLink{l.bandwidthGBps, l.latencyUs, !sameNode}, 2, p.tiedBytes);
  }
  return tied;
}

// Throughput, model TFLOPs per GPU and MFU of a step of m.iterationMs.
void addThroughput(const Plan& plan, const CostedModel& costed, Metrics& m) {
  const Parallelism& par = plan.config.parallel;
  if (m.iterationMs <= 0) return;
  // Every data-parallel rank trains its own microbatches; context-parallel ranks share theirs.
  const double microbatches = static_cast<double>(plan.config.trainingMicrobatches()) * std::max(1, par.data);
  const double samples = microbatches * static_cast<double>(plan.model.samplesPerMicrobatch);
  const double seconds = m.iterationMs / 1000.0;
  m.throughputSamplesPerS = samples / seconds;
  m.tokensPerS = m.throughputSamplesPerS * static_cast<double>(tokensPerSample(plan.model));
  const double gpus = static_cast<double>(std::max<std::int64_t>(1, plan.config.totalGpus()));
  m.modelTflopsPerGpu = modelFlopsPerMicrobatch(plan, costed) * microbatches / seconds / gpus / 1e12;
  // MFU against the dense peak of the recipe's precision (FP8 recipes against the FP8 peak, so
  // 100 % stays the ceiling).
  const double peak = plan.cluster.gpu.peakTflopsFor(plan.config.precision);
  if (peak > 0) m.mfu = m.modelTflopsPerGpu / peak;
}

// The training step around the pipeline: each device's gradients are reduced over its data-
// parallel group (Megatron-LM / PyTorch DDP overlap that with the last backward passes; ZeRO-3
// reduce-scatters inside its W passes instead), a tied embedding's gradient is all-reduced
// between the first and last pipeline ranks, then the optimizer steps and ZeRO-1/2 re-gather the
// updated bf16 weights. Gradients travel in bf16, or fp32 with --grad-reduce-dtype fp32.
//
// Megatron-Core's DDP reduces in buckets (ddp_bucket_size, default max(40M, 1M·D) parameters;
// megatron/core/distributed/distributed_data_parallel_config.py), each as soon as the backward
// has produced it: with --overlap-grad-reduce the reduction runs under the last microbatch's
// backward passes except the last bucket, which starts when they end. With
// --overlap-param-gather the distributed optimizer's all-gather is issued bucket by bucket ahead
// of the next iteration's forward passes: it hides under the device's idle start and its first
// microbatch's forward, except the first bucket, which the first forward waits for.
void addStepMetrics(const Plan& plan, const CostedModel& costed, const std::vector<StageCosts>& costs,
                    const std::vector<double>& devFirst, const std::vector<double>& devLast, double first, Metrics& m) {
  const auto devices = static_cast<std::size_t>(std::max(0, plan.config.devices));
  const Parallelism& par = plan.config.parallel;
  const int dp = static_cast<int>(std::min<std::int64_t>(par.denseData(), 1 << 30));  // D·C
  const int expertDp = static_cast<int>(std::min<std::int64_t>(par.expertData(), 1 << 30));
  const int zero = effectiveZeroStage(plan);
  const CollectiveLinks links = collectiveLinks(plan.cluster, par);
  const DeviceParameters params = deviceParameters(plan, costs, devices);
  const std::vector<double>& dense = params.dense;
  const std::vector<double>& expert = params.expert;
  const SyncWindows windows = syncWindows(plan, devices);
  const TiedSync tied = tiedSync(plan, params);

  double pipelineEnd = first;
  double period = 0;
  double worstExposed = 0;
  double worstOptimizer = 0;
  const double gradBytes = par.gradReduceInFp32 ? 4.0 : 2.0;
  const double bucketParams = std::max(4.0e7, 1.0e6 * dp);
  for (std::size_t d = 0; d < devices; ++d) {
    double syncMs = 0, lastBucketMs = 0;
    // From ZeRO-2 on, every W reduce-scatters its gradients inside the pipeline (CostModel.cpp).
    if (zero <= 1) {
      const auto reduce = [&](const CollectiveLink& link, int ranks, double parameters) {
        const double bytes = gradBytes * parameters;
        return zero == 0 ? allReduceMs(link, ranks, bytes) : allGatherMs(link, ranks, bytes);
      };
      syncMs = reduce(links.data, dp, dense[d]) + reduce(links.expertData, expertDp, expert[d]);
      lastBucketMs = reduce(links.data, dp, std::min(bucketParams, dense[d]));
    }
    const double syncExposedMs =
        par.overlapGradReduce ? std::min(syncMs, std::max(lastBucketMs, syncMs - windows.reduce[d])) : syncMs;
    const double exposed = syncExposedMs + (tied.split && (params.embedding[d] || params.tiedHead[d]) ? tied.ms : 0.0);
    const double shardDense = zero >= 1 ? dense[d] / dp : dense[d];
    const double shardExpert = zero >= 1 ? expert[d] / expertDp : expert[d];
    double optimizerMs =
        optimizerStepMs(deviceGpu(plan.cluster, plan.config, static_cast<int>(d)), shardDense + shardExpert);
    double gatherExposedMs = 0;
    if (zero == 1 || zero == 2) {
      const double gatherMs =
          allGatherMs(links.data, dp, 2.0 * dense[d]) + allGatherMs(links.expertData, expertDp, 2.0 * expert[d]);
      gatherExposedMs = gatherMs;
      if (par.overlapParamGather && devLast[d] >= devFirst[d]) {
        const double firstBucketMs = allGatherMs(links.data, dp, 2.0 * std::min(bucketParams, dense[d]));
        const double idleStartMs = devFirst[d] - first;
        gatherExposedMs = std::min(gatherMs, std::max(firstBucketMs, gatherMs - idleStartMs - windows.gather[d]));
      }
      optimizerMs += gatherExposedMs;
      m.devices[d].hiddenCommMs += gatherMs - gatherExposedMs;
    }
    m.devices[d].exposedCommMs += exposed + gatherExposedMs;
    m.devices[d].hiddenCommMs += syncMs - syncExposedMs;
    if (devLast[d] >= devFirst[d]) {
      pipelineEnd = std::max(pipelineEnd, devLast[d] + exposed);
      period = std::max(period, devLast[d] - devFirst[d] + exposed + optimizerMs);
    }
    worstExposed = std::max(worstExposed, exposed);
    worstOptimizer = std::max(worstOptimizer, optimizerMs);
  }
  m.optimizerMs = worstOptimizer;
  if (plan.config.optimizerSync == "post-validation") {
    // Zero Bubble §5 (optimizer post-validation): a device starts its next iteration right after
    // its own step, so iterations overlap and the steady-state period is the longest device span.
    m.gradientSyncMs = worstExposed;
    m.iterationMs = period;
  } else {
    m.gradientSyncMs = std::max(0.0, pipelineEnd - first - m.makespanMs);
    m.iterationMs = (pipelineEnd - first) + worstOptimizer;
  }
  addThroughput(plan, costed, m);
}

// The collective time inside an op's duration (exposed) and beside it (hidden), by its pass.
void addOpComm(const Op& op, const StageCosts& c, double samplesPerMb, DeviceMetrics& dm) {
  double exposed = 0, hidden = 0;
  switch (op.kind) {
    case OpKind::F:
    case OpKind::N:
      exposed = c.forwardCommMs;
      hidden = c.forwardHiddenCommMs;
      break;
    case OpKind::B:
      exposed = c.backwardInputCommMs;
      hidden = c.backwardInputHiddenCommMs;
      break;
    case OpKind::W:
      exposed = c.backwardWeightCommMs;
      hidden = c.backwardWeightHiddenCommMs;
      break;
    case OpKind::BW:
      exposed = c.backwardInputCommMs + c.backwardWeightCommMs;
      hidden = c.backwardInputHiddenCommMs + c.backwardWeightHiddenCommMs;
      break;
    case OpKind::S:
    case OpKind::T:
    case OpKind::OPT:
    case OpKind::D2H:
    case OpKind::H2D:
      break;
  }
  const double fraction = op.samples > 0 ? static_cast<double>(op.samples) / samplesPerMb : 1.0;
  dm.exposedCommMs += fraction * exposed;
  dm.hiddenCommMs += fraction * hidden;
}

// Per device: the peak activations of the plan's ops without their host copies (same times),
// less `peakLive`, the peak with them; zeros when the plan makes no copies.
std::vector<std::int64_t> offloadSavings(const Plan& plan, const std::vector<StageCosts>& costs,
                                         const std::vector<std::vector<StageCosts>>& units,
                                         const std::vector<std::int64_t>& peakLive) {
  std::vector<std::int64_t> saved(peakLive.size(), 0);
  if (std::none_of(plan.ops.begin(), plan.ops.end(), [](const Op& op) { return isHostCopy(op.kind); })) return saved;
  Plan kept;
  kept.config = plan.config;
  kept.model = plan.model;
  kept.virtualStages = plan.virtualStages;
  kept.ops.reserve(plan.ops.size());
  std::copy_if(plan.ops.begin(), plan.ops.end(), std::back_inserter(kept.ops),
               [](const Op& op) { return !isHostCopy(op.kind); });
  const MemoryTimeline without = timelineOf(kept, costs, units);
  for (std::size_t d = 0; d < saved.size() && d < without.peakActivationBytes.size(); ++d) {
    saved[d] = std::max<std::int64_t>(0, without.peakActivationBytes[d] - peakLive[d]);
  }
  return saved;
}

}  // namespace

Metrics computeMetrics(const Plan& plan) { return computeMetrics(plan, CostedModel(plan)); }

Metrics computeMetrics(const Plan& plan, const CostedModel& costed) {
  Metrics m;
  const auto devices = static_cast<std::size_t>(std::max(0, plan.config.devices));
  m.devices.assign(devices, {});
  if (plan.ops.empty()) return m;
  // Host copies (D2H/H2D) run beside the compute: neither busy time nor spans count them.
  double first = INFINITY;
  double last = -INFINITY;
  std::vector<double> devFirst(devices, INFINITY), devLast(devices, -INFINITY);
  // Peak memory in the same pass, without memoryTimeline's per-device event lists and
  // curves: each device's events are replayed in plan order, which is memoryTimeline's
  // order whenever its events are sorted (a simulated plan's are, unless it offloads). A
  // device whose events come out of order sends the whole computation to memoryTimeline below.
  const auto costs = costed.stages(plan.virtualStages);
  const auto units = costed.unitStages(plan.virtualStages);
  const double samplesPerMb = static_cast<double>(std::max<std::int64_t>(1, plan.model.samplesPerMicrobatch));
  struct Replay {
    double lastTimeMs = -INFINITY;
    std::int64_t lastDelta = 0;
    std::int64_t live = 0;
    std::int64_t peakLive = 0;
  };
  std::vector<Replay> replay(devices);
  const OffloadedBytes offloaded(plan, units);
  bool inOrder = true;
  auto apply = [&](Replay& r, double timeMs, std::int64_t delta) {
    // memoryTimeline's order: by time, releases (smaller deltas) first at one instant.
    if (timeMs < r.lastTimeMs || (timeMs == r.lastTimeMs && delta < r.lastDelta)) inOrder = false;
    r.lastTimeMs = timeMs;
    r.lastDelta = delta;
    addSaturating(r.live, delta);
    r.peakLive = std::max(r.peakLive, r.live);
  };
  for (const Op& op : plan.ops) {
    const StageCosts* c = unitCostsOf(units, plan.config, op);
    if (!isHostCopy(op.kind)) {
      first = std::min(first, op.startMs);
      last = std::max(last, op.endMs);
    }
    if (!inRange(m.devices, op.device)) continue;
    const auto d = static_cast<std::size_t>(op.device);
    if (!isHostCopy(op.kind)) {
      m.devices[d].busyMs += op.durationMs();
      devFirst[d] = std::min(devFirst[d], op.startMs);
      devLast[d] = std::max(devLast[d], op.endMs);
    }
    if (c != nullptr) addOpComm(op, *c, samplesPerMb, m.devices[d]);
    if (!inOrder || c == nullptr) continue;
    // The events of memoryTimeline, in the same order per op.
    const OpEvents e = opMemoryEvents(plan, op, *c, samplesPerMb, offloaded(op, *c));
    for (int i = 0; i < e.count; ++i) {
      apply(replay[d], e.timeMs[static_cast<std::size_t>(i)], e.delta[static_cast<std::size_t>(i)]);
    }
  }
  if (!std::isfinite(first)) first = last = 0;
  m.makespanMs = last - first;
  double busy = 0;
  for (std::size_t d = 0; d < devices; ++d) {
    if (devLast[d] >= devFirst[d]) m.devices[d].spanMs = devLast[d] - devFirst[d];
    busy += m.devices[d].busyMs;
  }
  if (m.makespanMs > 0 && devices > 0) m.bubbleRatio = 1.0 - busy / (static_cast<double>(devices) * m.makespanMs);
  std::vector<std::int64_t> peakLive(devices, 0);
  if (!inOrder) {
    const MemoryTimeline mem = timelineOf(plan, costs, units);
    for (std::size_t d = 0; d < devices; ++d) peakLive[d] = mem.peakActivationBytes[d];
  } else {
    for (std::size_t d = 0; d < devices; ++d) peakLive[d] = replay[d].peakLive;
  }
  const std::vector<MemoryBreakdown> statics = staticBreakdownPerDevice(plan, costs);
  const std::vector<std::int64_t> saved = offloadSavings(plan, costs, units, peakLive);
  for (std::size_t d = 0; d < devices; ++d) {
    DeviceMetrics& dm = m.devices[d];
    dm.memory = statics[d];
    dm.staticMemoryBytes = dm.memory.allocatedBytes();
    dm.memory.activationBytes = peakLive[d];
    dm.memory.offloadSavedBytes = saved[d];
    dm.peakActivationBytes = peakLive[d];
    dm.peakMemoryBytes = dm.memory.allocatedBytes();
  }
  addStepMetrics(plan, costed, costs, devFirst, devLast, first, m);
  return m;
}

}  // namespace pipestudio
