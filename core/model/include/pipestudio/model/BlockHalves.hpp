#pragma once
/// \file A transformer block as two layers of its own (issue 46): its attention half (the input
/// norm, the attention and its residual add; Megatron-LM HybridModel's `*`, or `+` with MLA) and
/// its MLP half (the same around the MLP or MoE; HybridModel's `-` or `E`), so that a pipeline
/// stage may end between them. A half is a layer of kind kAttentionHalfKind or kMlpHalfKind with
/// the block's transformer shape; the cost model costs it as its share of the block
/// (CostModel.cpp, blockHalfCosts), and the two halves add up to the block.
///
///     Layer attention = block;  attention.kind = std::string(kAttentionHalfKind);
///     Layer mlp = block;        mlp.kind = std::string(kMlpHalfKind);
///     if (blockHalfOf(layer) == BlockHalf::Mlp) …

#include <cstdint>
#include <optional>
#include <string_view>

#include "pipestudio/model/Model.hpp"

namespace pipestudio {

inline constexpr std::string_view kAttentionHalfKind = "transformer_attention";
inline constexpr std::string_view kMlpHalfKind = "transformer_mlp";

enum class BlockHalf : std::uint8_t { Attention, Mlp };

/// Which half of a block `layer` is; nullopt for a whole block or any other layer. A half needs
/// the block's transformer shape.
inline std::optional<BlockHalf> blockHalfOf(const Layer& layer) {
  if (!layer.transformer) return std::nullopt;
  if (layer.kind == kAttentionHalfKind) return BlockHalf::Attention;
  if (layer.kind == kMlpHalfKind) return BlockHalf::Mlp;
  return std::nullopt;
}

}  // namespace pipestudio
