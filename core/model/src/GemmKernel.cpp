// The GEMM kernel model: one cuBLAS/CUTLASS-class GEMM, and the grouped GEMMs of a MoE layer's
// experts, on one GPU. Time is the longer of compute and HBM traffic (roofline); compute is the
// FLOPs at the precision's calibrated rate, slowed by
//  - wave quantization: each SM computes one 128 × 128 output tile at a time, so the last wave of
//    a small or skinny GEMM runs partly empty (NVIDIA, "Matrix Multiplication Background" user
//    guide: tiles, waves and arithmetic intensity);
//  - the main-loop fill: a tile's fixed work (its first operand tiles in flight, the pipeline's
//    fill and drain, the epilogue that scales and writes the output) costs as much as `fill` steps
//    of its reduction loop, so a GEMM of depth k runs at k / (k + fill) of the long-k rate. The
//    fill is the GPU's, per precision (GpuSpec::gemmFillK, a GPU's `gemm_fill_k`): the intercept
//    of 1 / throughput against 1 / k over GEMMs that fill every SM. Measured with cuBLAS on an
//    H100 SXM5 (bench/fidelity/kernels-h100.jsonl, which `make fidelity` fits): bf16 71 and fp8
//    341 k steps; low-precision GEMMs have the larger fill, their loop running twice as fast and
//    their epilogue applying the scales. The bundled catalogue does not set it yet
//    (docs/fidelity.md, "Kernels"): a GPU without one runs every depth at the long-k rate.

#include <algorithm>
#include <cmath>

#include "CostParts.hpp"

namespace pipestudio::costparts {
namespace {

constexpr double kTile = 128;  // output tile rows and columns

// Sustained FLOP/s of weight GEMMs in `precision`: the GPU's dense peak for that format at its
// calibrated efficiency for it. A format the GPU lacks falls back to bf16 (requests for it are
// refused before costing; a hand-built context must not divide by zero).
double rateFor(const GpuSpec& gpu, Precision precision) {
  const double rate = gpu.gemmFlopsPerS(precision);
  return rate > 0 ? rate : gpu.effectiveFlopsPerS();
}

}  // namespace

double msAt(double amount, double perS) { return perS > 0 ? amount / perS * 1000.0 : 0.0; }

double memoryMs(const GpuSpec& gpu, double bytes) { return msAt(bytes, gpu.memoryBytesPerS()); }

double waveUtilisation(const GpuSpec& gpu, double rows, double cols) {
  if (gpu.smCount <= 0) return 1.0;
  const double tiles = std::ceil(std::max(1.0, rows) / kTile) * std::ceil(std::max(1.0, cols) / kTile);
  const double sms = gpu.smCount;
  const double waves = std::ceil(tiles / sms);
  return std::clamp(tiles / (waves * sms), 1e-3, 1.0);
}

double mainLoopFill(const GpuSpec& gpu, Precision precision, double k) {
  if (k <= 0) return 1.0;
  return (k + gpu.gemmFillKFor(precision)) / k;
}

double gemmMs(const GpuSpec& gpu, Precision precision, double m, double n, double k, double outputBytesPerValue) {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  const double flops = 2.0 * m * n * k;
  const double compute =
      msAt(flops, rateFor(gpu, precision) * waveUtilisation(gpu, m, n)) * mainLoopFill(gpu, precision, k);
  const double memory =
      msAt(operandBytes(precision) * (m * k + k * n) + outputBytesPerValue * m * n, gpu.memoryBytesPerS());
  return std::max(compute, memory);
}

double groupedGemmMs(const GpuSpec& gpu, Precision precision, double groups, double m, double n, double k,
                     double outputBytesPerValue) {
  if (groups <= 0 || m <= 0 || n <= 0 || k <= 0) return 0.0;
  const double rowTiles = std::ceil(m / kTile);
  const double tiles = groups * rowTiles * std::ceil(n / kTile);
  double utilisation = 1.0;
  if (gpu.smCount > 0) {
    const double waves = std::ceil(tiles / gpu.smCount);
    utilisation = tiles / (waves * gpu.smCount);
  }
  utilisation *= m / (rowTiles * kTile);
  const double compute = msAt(2.0 * groups * m * n * k, rateFor(gpu, precision) * std::max(1e-3, utilisation)) *
                         mainLoopFill(gpu, precision, k);
  const double bytes = groups * (operandBytes(precision) * (m * k + k * n) + outputBytesPerValue * m * n);
  return std::max(compute, memoryMs(gpu, bytes));
}

}  // namespace pipestudio::costparts
