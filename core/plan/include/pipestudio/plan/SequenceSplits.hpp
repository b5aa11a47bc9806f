#pragma once
/// \file Bounds of sequence-split plans (PlanConfig::seqSplits, Seq1F1B): every layer is costed
/// once per sequence chunk, so the planner, the plan reader and the GUI refuse more than these.

#include <cstdint>

namespace pipestudio {

/// Most sequence chunks per microbatch (Seq1F1B splits in 2 to 16).
inline constexpr int kMaxSeqSplits = 64;
/// Most (chunk, layer) pairs a model is costed for: seqSplits times its layers.
inline constexpr std::int64_t kMaxSeqChunkLayers = 100'000;

}  // namespace pipestudio
