#pragma once
// The expert and context layouts the configurator searches (issue 26): expert parallelism folded
// over the attention's T·C·D GPUs with its own expert tensor parallelism, token dropping, and
// context parallelism's communication type, each only where the model's shapes allow it.

#include <cstdint>
#include <optional>
#include <vector>

#include "pipestudio/model/Model.hpp"
#include "pipestudio/model/Parallelism.hpp"

namespace pipestudio::searchspace {

/// What the model's transformer blocks allow, gathered once per search.
struct LayoutLimits {
  std::int64_t experts = 0;    ///< gcd of the MoE layers' experts (0: no MoE)
  std::int64_t expertFfn = 0;  ///< gcd of their expert MLP sizes
  std::int64_t heads = 0;      ///< gcd of the query heads
  std::int64_t kvHeads = 0;    ///< gcd of the key/value heads (MLA: its heads)
  bool imbalanced = false;     ///< some MoE layer states a load imbalance above 1
  bool dropless = true;        ///< no MoE layer states a capacity factor
};
LayoutLimits layoutLimits(const ModelSpec& model);

struct ExpertLayout {
  int expert = 1;
  int expertTensor = 0;  ///< 0: = T
};

/// Expert layouts for T·C·D GPUs of a pipeline rank under MoE parallel folding: ETP = T (Megatron's
/// default) or 1 (what the MoE recipes use), or `fixedEtp` when the user named one; every E that
/// divides the experts with ETP·E dividing T·C·D and ETP dividing the expert MLP.
std::vector<ExpertLayout> expertLayouts(const LayoutLimits& limits, int T, int C, int D, int fixedEtp);

/// Context-parallel communication types for C: every type whose head split works (a2a needs the
/// heads per tensor-parallel rank divisible by C), or `fixed`.
std::vector<CpCommType> cpCommTypes(const LayoutLimits& limits, int T, int C, std::optional<CpCommType> fixed);

/// Capacity settings: `fixed` when given, else each layer's own and — where a layer's load is
/// imbalanced, so dropping saves time — a capacity factor of 1.
std::vector<std::optional<double>> capacityFactors(const LayoutLimits& limits, std::optional<double> fixed);

/// One point of the expert × capacity × context-communication space.
struct Layout {
  int expert = 1;
  int expertTensor = 0;
  std::optional<double> capacityFactor;
  CpCommType cpCommType = CpCommType::P2p;
};
/// The product of the three choices above; `recipe` fixes what the user named (expertTensor > 0,
/// moeCapacityFactor set), `cpCommType` likewise.
std::vector<Layout> layouts(const LayoutLimits& limits, int T, int C, int D, const Parallelism& recipe,
                            std::optional<CpCommType> cpCommType);

}  // namespace pipestudio::searchspace
