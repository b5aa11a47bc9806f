#pragma once
/// \file The fused attention kernels a recipe runs (Megatron --attention-backend; issue 26).
/// Which one Transformer Engine picks decides how fast attention runs at long sequences: on
/// Hopper TE prefers cuDNN's fused attention (since TE 1.7), earlier versions and PyTorch's SDPA
/// run FlashAttention-2, and the unfused path materialises the score matrix.

#include <cstdint>
#include <optional>
#include <string_view>

namespace pipestudio {

enum class AttentionBackend : std::uint8_t {
  Fused,    ///< cuDNN fused attention (TE FusedAttention; FlashAttention-3-class on Hopper)
  Flash,    ///< FlashAttention-2 (flash-attn; PyTorch SDPA's flash kernel)
  Unfused,  ///< QKᵀ, softmax and PV as separate kernels (the s² scores go through HBM)
};
inline constexpr int kAttentionBackendCount = 3;

std::string_view attentionBackendName(AttentionBackend backend);
std::optional<AttentionBackend> attentionBackendFromName(std::string_view name);
/// "fused|flash|unfused": the choices, for messages and help texts.
std::string_view attentionBackendChoices();

}  // namespace pipestudio
