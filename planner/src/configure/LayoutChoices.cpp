#include "configure/LayoutChoices.hpp"

#include <numeric>

namespace pipestudio::searchspace {

LayoutLimits layoutLimits(const ModelSpec& model) {
  LayoutLimits l;
  for (int c : model.trainableComponents()) {
    for (const Layer& layer : model.component(c).layers) {
      if (!layer.transformer || layer.kind == "embedding" || layer.kind == "lm_head") continue;
      const TransformerShape& t = *layer.transformer;
      l.heads = std::gcd(l.heads, t.heads);
      l.kvHeads = std::gcd(l.kvHeads, t.mla ? t.heads : t.kvHeadsOrHeads());
      if (!t.isMoe()) continue;
      l.experts = std::gcd(l.experts, t.experts);
      l.expertFfn = std::gcd(l.expertFfn, t.expertFfnOrDefault());
      l.imbalanced = l.imbalanced || t.loadImbalance > 1.0;
      l.dropless = l.dropless && !t.capacityFactor;
    }
  }
  return l;
}

std::vector<ExpertLayout> expertLayouts(const LayoutLimits& limits, int T, int C, int D, int fixedEtp) {
  if (limits.experts <= 0) return {ExpertLayout{1, 0}};
  std::vector<int> etps;
  if (fixedEtp > 0) {
    etps = {fixedEtp};
  } else {
    etps = {T};
    if (T > 1) etps.push_back(1);
  }
  const std::int64_t gpus = static_cast<std::int64_t>(T) * C * D;
  std::vector<ExpertLayout> out;
  for (int etp : etps) {
    if (gpus % etp != 0 || limits.expertFfn % etp != 0) continue;
    const std::int64_t room = std::gcd(limits.experts, gpus / etp);
    for (std::int64_t e = 1; e <= room; ++e) {
      if (room % e == 0) out.push_back({static_cast<int>(e), etp == T && fixedEtp <= 0 ? 0 : etp});
    }
  }
  return out;
}

std::vector<CpCommType> cpCommTypes(const LayoutLimits& limits, int T, int C, std::optional<CpCommType> fixed) {
  if (fixed) return {*fixed};
  if (C <= 1) return {CpCommType::P2p};
  std::vector<CpCommType> out{CpCommType::P2p};
  const std::int64_t heads = limits.heads / std::max(1, T);
  const std::int64_t kv = limits.kvHeads / std::max(1, T);
  if (heads > 0 && kv > 0 && heads % C == 0 && kv % C == 0) out.push_back(CpCommType::A2a);
  out.push_back(CpCommType::A2aP2p);
  return out;
}

std::vector<std::optional<double>> capacityFactors(const LayoutLimits& limits, std::optional<double> fixed) {
  if (fixed) return {fixed};
  if (limits.experts > 0 && limits.imbalanced) return {std::nullopt, 1.0};
  return {std::nullopt};
}

std::vector<Layout> layouts(const LayoutLimits& limits, int T, int C, int D, const Parallelism& recipe,
                            std::optional<CpCommType> cpCommType) {
  std::vector<Layout> out;
  for (const ExpertLayout& e : expertLayouts(limits, T, C, D, recipe.expertTensor)) {
    for (const std::optional<double>& capacity : capacityFactors(limits, recipe.moeCapacityFactor)) {
      for (CpCommType type : cpCommTypes(limits, T, C, cpCommType)) {
        out.push_back({e.expert, e.expertTensor, capacity, type});
      }
    }
  }
  return out;
}

}  // namespace pipestudio::searchspace
