#include "pipestudio/model/Precision.hpp"

namespace pipestudio {

std::string_view precisionName(Precision precision) {
  switch (precision) {
    case Precision::Bf16:
      return "bf16";
    case Precision::Fp16:
      return "fp16";
    case Precision::Fp8:
      return "fp8";
    case Precision::Fp8Block:
      return "fp8-block";
    case Precision::Mxfp8:
      return "mxfp8";
    case Precision::Nvfp4:
      return "nvfp4";
  }
  return "bf16";
}

std::optional<Precision> precisionFromName(std::string_view name) {
  for (Precision p : kPrecisions) {
    if (precisionName(p) == name) return p;
  }
  // Megatron-Bridge's recipe names for the same formats.
  if (name == "fp8-cs" || name == "fp8_cs") return Precision::Fp8;
  if (name == "fp8_ss" || name == "fp8-ss" || name == "fp8-blockwise") return Precision::Fp8Block;
  if (name == "fp8_mx" || name == "fp8-mx") return Precision::Mxfp8;
  return std::nullopt;
}

std::string_view precisionChoices() { return "bf16|fp16|fp8|fp8-block|mxfp8|nvfp4"; }

}  // namespace pipestudio
