#pragma once
/// \file The number formats a training recipe computes its GEMMs in (issue 25), as Transformer
/// Engine runs them: bf16/fp16 everywhere, or a low-precision format for the weight GEMMs of
/// linear layers only (fprop, dgrad and wgrad) while attention, norms, activations, softmax,
/// the router and the optimizer stay in bf16/fp32.
///
///  - fp8: E4M3/E5M2 with per-tensor current scaling (TE's Float8CurrentScaling, the recipe of
///    Megatron-Bridge's H100 benchmarks); Hopper and later.
///  - mxfp8: E4M3 with one E8M0 scale per 32 values (OCP MX; TE's MXFP8BlockScaling);
///    Blackwell and later.
///  - nvfp4: E2M1 with one E4M3 scale per 16 values and a per-tensor scale (TE's NVFP4BlockScaling,
///    random Hadamard transforms on the weight-gradient inputs); Blackwell and later.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pipestudio {

enum class Precision : std::uint8_t { Bf16, Fp16, Fp8, Mxfp8, Nvfp4 };
inline constexpr int kPrecisionCount = 5;
inline constexpr std::array<Precision, kPrecisionCount> kPrecisions{Precision::Bf16, Precision::Fp16, Precision::Fp8,
                                                                    Precision::Mxfp8, Precision::Nvfp4};

std::string_view precisionName(Precision precision);
/// bf16, fp16, fp8, mxfp8, nvfp4 (also fp8-cs / fp8_cs, as Megatron-Bridge spells its recipe).
std::optional<Precision> precisionFromName(std::string_view name);
/// "bf16|fp16|fp8|mxfp8|nvfp4": the choices, for messages and help texts.
std::string_view precisionChoices();

/// Whether the weight GEMMs run in a format narrower than 16 bits (the casts and copies of
/// Transformer Engine's low-precision recipes apply).
constexpr bool isLowPrecision(Precision p) {
  return p == Precision::Fp8 || p == Precision::Mxfp8 || p == Precision::Nvfp4;
}

/// Bytes per value of a GEMM operand held in `p`, block scales included (mxfp8: 1 + 1/32;
/// nvfp4: 1/2 + 1/16).
constexpr double operandBytes(Precision p) {
  switch (p) {
    case Precision::Fp8:
      return 1.0;
    case Precision::Mxfp8:
      return 1.0 + 1.0 / 32.0;
    case Precision::Nvfp4:
      return 0.5 + 1.0 / 16.0;
    case Precision::Bf16:
    case Precision::Fp16:
      break;
  }
  return 2.0;
}

}  // namespace pipestudio
