#pragma once
// The training-recipe flags `plan` and `configure` share (issues 25 and 26): precision, the
// overlaps of the recipe's collectives, the gradient reduction type, the details of
// recomputation, expert tensor parallelism, token dropping and context parallelism's
// communication. Each defaults to what Megatron-Bridge's recipes use and can be turned off.
#include <CLI/CLI.hpp>
#include <string>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::cli {

struct RecipeOptions {
  std::string precision = "bf16";
  std::string gradReduceDtype = "bf16";
  int recomputeNumLayers = 0;
  std::string recomputeMethod = "uniform";
  std::string recomputeModules;
  // --x / --no-x pairs: neither keeps the default.
  bool noOverlapGradReduce = false, noOverlapParamGather = false, noTpCommOverlap = false;
  bool yesOverlapGradReduce = false, yesOverlapParamGather = false, yesTpCommOverlap = false;
  // Expert and context layouts (issue 26).
  int etp = 0;                    ///< 0: ETP = TP
  std::string moeCapacityFactor;  ///< empty: each layer's own; a number, or 0 / dropless
  std::string cpCommType;         ///< empty: p2p
  bool yesMoeA2aOverlap = false, noMoeA2aOverlap = false;
  bool moeSharedExpertOverlap = false;
  std::string moeTokenDispatcher;  ///< empty: alltoall
  std::string moeFlexBackend;      ///< empty: deepep
  int moeCommSms = 0;              ///< 0: the dispatcher's default
  std::string attentionBackend;    ///< empty: fused
  bool yesLowPrecisionParams = false, noLowPrecisionParams = false;
  bool yesMoePermuteFusion = false, noMoePermuteFusion = false;
  bool moePermuteFusionIntoHybridEp = false;
  int moeCombineChunkTokens = 0;     ///< 0: HybridEP's default
  double moeRankCapacityFactor = 0;  ///< 0: unset (HybridEP sizes its buffers on the host)
  bool moePagedStash = false;
  double moePagedStashBufferFactor = 0;  ///< 0: Megatron's default, 1.10
  std::string cudaGraphImpl;             ///< empty: none
  std::string cudaGraphModules;          ///< empty: the whole layer (with a per-layer impl)
  /// A file of grouped expert GEMM timings (tests/gpu/expert_gemm_curve.py) for the cluster's GPUs.
  std::string expertGemmCurve;
};

/// Adds the recipe flags to `cmd`.
void addRecipeFlags(CLI::App* cmd, RecipeOptions& o);

/// Applies them to `config` (after the degrees and --recompute are set). A contradiction or
/// an unknown name is a usage error naming the flag.
Status applyRecipeFlags(const RecipeOptions& o, PlanConfig& config);

/// --expert-gemm-curve: the measured points onto every GPU of `cluster` (nothing when not given);
/// an unreadable file is bad input naming it.
Status applyExpertGemmCurve(const RecipeOptions& o, ClusterSpec& cluster);

/// The recipe of `config` as the `config` object of `--json` output spells it.
void recipeToJson(const PlanConfig& config, Json& out);

}  // namespace pipestudio::cli
