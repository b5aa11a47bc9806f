// Vocabulary parallelism (issue 4; Yeung et al. 2024, §3–4). See Vocab.hpp.
#include "pipestudio/planner/Vocab.hpp"

#include <algorithm>
#include <numeric>

#include "pipestudio/plan/Memory.hpp"
#include "pipestudio/planner/Fill.hpp"
#include "pipestudio/planner/Simulator.hpp"

namespace pipestudio {
namespace {

bool isVocabLayer(const Layer& l) {
  return (l.kind == "lm_head" || l.kind == "embedding") && l.transformer && l.transformer->vocab;
}

double imbalance(const Plan& plan) {
  double maxBusy = 0, sum = 0;
  for (const auto& d : plan.metrics.devices) {
    maxBusy = std::max(maxBusy, d.busyMs);
    sum += d.busyMs;
  }
  const double mean = plan.metrics.devices.empty() ? 0 : sum / static_cast<double>(plan.metrics.devices.size());
  return mean > 0 ? maxBusy / mean : 1.0;
}

}  // namespace

Expected<Plan> makeVocabParallelPlan(const PlanRequest& request, const SolveControl& control) {
  const int p = request.config.devices;
  if (p < 1) return Error{"vocabulary parallelism: needs at least one device"};
  // 1. The backbone without its vocabulary layers; the shards form their own component.
  PlanRequest base = request;
  Component vocab;
  vocab.name = "vocabulary";
  vocab.trainable = true;
  std::vector<Layer> heads;
  std::vector<Layer> embeddings;
  for (Component& c : base.model.components) {
    if (!c.trainable) continue;
    std::vector<Layer> keep;
    for (Layer& l : c.layers) {
      if (!isVocabLayer(l)) {
        keep.push_back(l);
      } else {
        (l.kind == "lm_head" ? heads : embeddings).push_back(l);
      }
    }
    c.layers = std::move(keep);
  }
  if (heads.empty() && embeddings.empty()) {
    return Error{"vocabulary parallelism: model '" + request.model.name +
                 "' has no embedding or lm_head layer with a transformer shape and vocab"};
  }
  auto backbone = makePlan(base, control);
  if (!backbone) return backbone.error();
  if (control.cancelled()) return Error::cancelled();

  // 2. Shard k: every vocabulary layer with ⌈V/p⌉ or ⌊V/p⌋ rows (measured costs scale by 1/p).
  for (int k = 0; k < p; ++k) {
    for (const auto* group : {&embeddings, &heads}) {
      for (const Layer& l : *group) {
        Layer s = l;
        s.name = l.name + ".shard" + std::to_string(k);
        const std::int64_t v = *l.transformer->vocab;
        s.transformer->vocab = v / p + (k < v % p ? 1 : 0);
        const double share = static_cast<double>(*s.transformer->vocab) / static_cast<double>(v);
        auto scale = [share](auto& field) {
          if (field) field = static_cast<std::decay_t<decltype(*field)>>(static_cast<double>(*field) * share);
        };
        scale(s.forwardMs);
        scale(s.backwardInputMs);
        scale(s.backwardWeightMs);
        scale(s.parameterBytes);
        vocab.layers.push_back(std::move(s));
      }
    }
  }
  const int perShard = static_cast<int>(embeddings.size() + heads.size());
  Plan shell;
  shell.config = request.config;
  shell.model = base.model;
  shell.cluster = request.cluster;
  shell.model.components.push_back(vocab);
  const int vocabComponent = static_cast<int>(shell.model.components.size()) - 1;

  // 3. Skeleton: the backbone's timed order plus one vocabulary stage per device (its own
  // chain, pipeline 1, so the data-flow chain of the backbone is untouched; S/T carry their
  // dependencies explicitly).
  ScheduleSkeleton sk;
  sk.virtualStages = backbone->virtualStages;
  std::vector<int> chunkCount(static_cast<std::size_t>(p), 0);
  for (const auto& vs : sk.virtualStages) {
    chunkCount[static_cast<std::size_t>(vs.device)] = std::max(chunkCount[static_cast<std::size_t>(vs.device)], vs.chunk + 1);
  }
  std::vector<int> vocabStage(static_cast<std::size_t>(p));
  for (int d = 0; d < p; ++d) {
    VirtualStage vs;
    vs.id = static_cast<int>(sk.virtualStages.size());
    vs.device = d;
    vs.chunk = chunkCount[static_cast<std::size_t>(d)];
    vs.component = vocabComponent;
    vs.firstLayer = d * perShard;
    vs.lastLayer = d * perShard + perShard - 1;
    vs.pipeline = 1;
    vocabStage[static_cast<std::size_t>(d)] = vs.id;
    sk.virtualStages.push_back(vs);
  }
  // The last trainable stage of pipeline 0 (it feeds the output layer; frozen stages of a
  // filled backbone come after it in id order).
  int last = -1;
  for (const auto& vs : backbone->virtualStages) {
    if (vs.pipeline == 0 && backbone->model.components[static_cast<std::size_t>(vs.component)].trainable) {
      last = std::max(last, vs.id);
    }
  }
  if (last < 0) return Error{"vocabulary parallelism: the backbone has no stage"};
  const int m = request.config.microbatches;
  std::vector<double> fLastEnd(static_cast<std::size_t>(m), 0.0);
  for (const Op& op : backbone->ops) {
    if (op.virtualStage == last && op.kind == OpKind::F) fLastEnd[static_cast<std::size_t>(op.microbatch)] = op.endMs;
  }

  // Merge: S(mb) and T(mb) go before the first op that starts at or after F(last, mb) ends.
  sk.devices.assign(static_cast<std::size_t>(p), {});
  std::vector<std::vector<Op>> lanes(static_cast<std::size_t>(p));
  for (const Op& op : backbone->ops) lanes[static_cast<std::size_t>(op.device)].push_back(op);
  std::vector<int> order(static_cast<std::size_t>(m));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return fLastEnd[static_cast<std::size_t>(a)] < fLastEnd[static_cast<std::size_t>(b)]; });
  for (int d = 0; d < p; ++d) {
    auto& dst = sk.devices[static_cast<std::size_t>(d)];
    const int shard = vocabStage[static_cast<std::size_t>(d)];
    std::size_t next = 0;
    for (const Op& op : lanes[static_cast<std::size_t>(d)]) {
      while (next < order.size() && fLastEnd[static_cast<std::size_t>(order[next])] <= op.startMs + 1e-9) {
        const int mb = order[next++];
        dst.push_back({shard, OpKind::S, mb, 0});
        dst.push_back({shard, OpKind::T, mb, 0});
      }
      dst.push_back({op.virtualStage, op.kind, op.microbatch, op.samples});
    }
    while (next < order.size()) {
      const int mb = order[next++];
      dst.push_back({shard, OpKind::S, mb, 0});
      dst.push_back({shard, OpKind::T, mb, 0});
    }
  }
  // The S/T edges (and any frozen-output edges of a filled backbone) come from the plan
  // itself, exactly as resimulate derives them.
  shell.virtualStages = sk.virtualStages;
  sk.extraDependencies = derivedDependencies(shell, sk.devices);
  auto plan = simulateSkeleton(std::move(shell), sk);
  if (!plan) return plan.error().withPrefix("vocabulary parallelism: ");
  if (auto st = checkMemory(*plan); !st) return st.error();
  return plan;
}

Expected<VocabComparison> compareVocabParallel(const PlanRequest& request, const SolveControl& control) {
  auto baseline = makePlan(request, control);
  if (!baseline) return baseline.error();
  auto vocab = makeVocabParallelPlan(request, control);
  if (!vocab) return vocab.error();
  VocabComparison out;
  out.baselineImbalance = imbalance(*baseline);
  out.vocabImbalance = imbalance(*vocab);
  out.baseline = std::move(*baseline);
  out.vocabParallel = std::move(*vocab);
  return out;
}

}  // namespace pipestudio
