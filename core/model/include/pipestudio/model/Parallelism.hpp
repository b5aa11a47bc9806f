#pragma once
/// \file Hybrid parallelism of a plan in Megatron-LM's vocabulary (DESIGN.md §2, issue 13):
/// tensor (T), context (C), expert (E) and data (D) parallel degrees around the pipeline (P),
/// sequence parallelism, activation recomputation and the ZeRO stage.
///
/// Placement follows Megatron-LM's rank order: TP innermost, then CP, then DP (EP is carved out
/// of DP), PP outermost. GPU index of (pipeline rank k, data rank r, context rank c, tensor
/// rank t) = t + T·(c + C·(r + D·k)). A plan's device lane is one pipeline rank; its T·C GPUs
/// move together (their collectives are part of its ops' durations).

#include <cstdint>
#include <optional>
#include <string_view>

namespace pipestudio {

/// Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in
/// Large Transformer Models"): `Selective` recomputes the attention core (the s² terms),
/// `Full` keeps only each layer's input and recomputes its forward inside its backward.
enum class Recompute : std::uint8_t { None, Selective, Full };

std::string_view recomputeName(Recompute recompute);
std::optional<Recompute> recomputeFromName(std::string_view name);

struct Parallelism {
  int tensor = 1;                 ///< T: Megatron tensor parallelism (QKV/MLP split over T GPUs of a node)
  int context = 1;                ///< C: context parallelism (ring attention, sequence split over C)
  int expert = 1;                 ///< E: expert parallelism inside the data-parallel group (D % E == 0)
  int data = 1;                   ///< D: data-parallel replicas of the whole pipeline
  bool sequenceParallel = false;  ///< Korthikanti 2022 §4.2.2; the CLI turns it on when T > 1
  Recompute recompute = Recompute::None;
  int zeroStage =
      0;  ///< 0 none, 1 optimizer state (Megatron's distributed optimizer), 2 + gradients, 3 + parameters (FSDP)
  /// Gradient reduction overlapped with the last backward passes (Megatron `--overlap-grad-reduce`,
  /// PyTorch DDP/FSDP buckets). Off: it runs after the pipeline drains.
  bool overlapGradReduce = true;

  /// GPUs of one pipeline rank: T·C·D.
  std::int64_t gpusPerPipelineRank() const { return static_cast<std::int64_t>(tensor) * context * data; }
  /// GPU index of the first GPU of pipeline rank `device` (its tensor/context/data rank 0).
  std::int64_t firstGpuOfDevice(int device) const { return static_cast<std::int64_t>(device) * gpusPerPipelineRank(); }
  bool isPurePipeline() const {
    return tensor == 1 && context == 1 && expert == 1 && recompute == Recompute::None && zeroStage == 0;
  }
  friend bool operator==(const Parallelism&, const Parallelism&) = default;
};

}  // namespace pipestudio
