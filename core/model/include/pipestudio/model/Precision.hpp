#pragma once
/// \file The number formats a training recipe computes its GEMMs in (issue 25), as Transformer
/// Engine runs them: bf16/fp16 everywhere, or a low-precision format for the weight GEMMs of
/// linear layers only (fprop, dgrad and wgrad) while attention, norms, activations, softmax,
/// the router and the optimizer stay in bf16/fp32.
///
///  - fp8: E4M3/E5M2 with per-tensor current scaling (TE's Float8CurrentScaling, the recipe of
///    Megatron-Bridge's H100 benchmarks); Hopper and later.
///  - fp8-block: E4M3 with one FP32 scale per 1×128 values of an activation or gradient and per
///    128×128 block of a weight (TE's Float8BlockScaling, Megatron's `--fp8-recipe blockwise`,
///    Megatron-Bridge's "subchannel" recipe; DeepSeek-V3's training format, and what
///    Megatron-Core's MoE guide recommends on Hopper). Its GEMMs run on the FP8 tensor cores
///    (cuBLAS ≥ 12.9 applies the block scales); Hopper and later.
///  - mxfp8: E4M3 with one E8M0 scale per 32 values (OCP MX; TE's MXFP8BlockScaling);
///    Blackwell and later.
///  - nvfp4: E2M1 with one E4M3 scale per 16 values and a per-tensor scale (TE's NVFP4BlockScaling,
///    random Hadamard transforms on the weight-gradient inputs); Blackwell and later.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pipestudio {

enum class Precision : std::uint8_t { Bf16, Fp16, Fp8, Mxfp8, Nvfp4, Fp8Block };
inline constexpr int kPrecisionCount = 6;
inline constexpr std::array<Precision, kPrecisionCount> kPrecisions{
    Precision::Bf16, Precision::Fp16, Precision::Fp8, Precision::Fp8Block, Precision::Mxfp8, Precision::Nvfp4};

std::string_view precisionName(Precision precision);
/// bf16, fp16, fp8, fp8-block, mxfp8, nvfp4 (also fp8-cs / fp8_cs, fp8-ss / fp8_ss and fp8_mx, as
/// Megatron-Bridge spells its recipes, and fp8-blockwise as Megatron's flag does).
std::optional<Precision> precisionFromName(std::string_view name);
/// "bf16|fp16|fp8|fp8-block|mxfp8|nvfp4": the choices, for messages and help texts.
std::string_view precisionChoices();

/// Whether the weight GEMMs run in a format narrower than 16 bits (the casts and copies of
/// Transformer Engine's low-precision recipes apply).
constexpr bool isLowPrecision(Precision p) {
  return p == Precision::Fp8 || p == Precision::Fp8Block || p == Precision::Mxfp8 || p == Precision::Nvfp4;
}

/// The precision whose tensor-core peak, calibrated efficiency and GEMM fill a GEMM in `p` runs at
/// when the GPU states none of its own: fp8-block runs on the FP8 tensor cores (its scales are
/// applied as each 128-deep block of k is accumulated), so it takes fp8's values.
constexpr Precision gemmRateFallback(Precision p) { return p == Precision::Fp8Block ? Precision::Fp8 : p; }

/// Copies of a low-precision tensor Transformer Engine writes when it feeds a GEMM and the
/// transposed GEMM of the backward (a layer's input: fprop and wgrad; a weight: fprop and dgrad):
/// the row-wise and the column-wise one, since block scales run along one axis and Hopper's FP8
/// GEMMs take only TN operands; one for per-tensor FP8 where the GPU's FP8 GEMMs take any layout
/// (`fp8AnyLayout`, Blackwell: TE's Float8 quantizers then keep no transpose, quantizer.cpp).
constexpr double operandCopies(Precision p, bool fp8AnyLayout) {
  return p == Precision::Fp8 && fp8AnyLayout ? 1.0 : 2.0;
}

/// Bytes per value of a GEMM operand held in `p`, block scales included (fp8-block: 1 + 4/128, an
/// FP32 scale per 128 values of an activation; a weight's 128×128 blocks cost less, not counted
/// apart; mxfp8: 1 + 1/32; nvfp4: 1/2 + 1/16).
constexpr double operandBytes(Precision p) {
  switch (p) {
    case Precision::Fp8:
      return 1.0;
    case Precision::Fp8Block:
      return 1.0 + 4.0 / 128.0;
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
