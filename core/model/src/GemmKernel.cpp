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
#include <limits>
#include <optional>
#include <vector>

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

std::optional<double> measuredExpertGemmEfficiency(const GpuSpec& gpu, Precision precision, double tokens,
                                                   double hidden, double expertFfn) {
  if (gpu.expertGemmCurve.empty() || tokens <= 0 || hidden <= 0 || expertFfn <= 0) return std::nullopt;
  // The points of this precision, or of the format whose tensor cores it runs on (fp8-block: fp8).
  auto pointsOf = [&](Precision p) {
    std::vector<const GpuSpec::ExpertGemmPoint*> out;
    for (const GpuSpec::ExpertGemmPoint& point : gpu.expertGemmCurve) {
      if (point.precision == p) out.push_back(&point);
    }
    return out;
  };
  std::vector<const GpuSpec::ExpertGemmPoint*> points = pointsOf(precision);
  if (points.empty() && gemmRateFallback(precision) != precision) points = pointsOf(gemmRateFallback(precision));
  if (points.empty()) return std::nullopt;
  // The measured expert shape nearest this one (distance of the logs of hidden and expert_ffn),
  // then linear in log(tokens) between its two points around `tokens`, flat beyond the ends.
  auto shapeDistance = [&](const GpuSpec::ExpertGemmPoint& p) {
    return std::abs(std::log(p.hidden / hidden)) + std::abs(std::log(p.expertFfn / expertFfn));
  };
  double nearest = std::numeric_limits<double>::infinity();
  for (const auto* p : points) nearest = std::min(nearest, shapeDistance(*p));
  std::vector<const GpuSpec::ExpertGemmPoint*> shape;
  for (const auto* p : points) {
    if (shapeDistance(*p) <= nearest + 1e-12) shape.push_back(p);
  }
  std::sort(shape.begin(), shape.end(), [](const auto* a, const auto* b) { return a->tokens < b->tokens; });
  if (tokens <= shape.front()->tokens) return shape.front()->efficiency;
  if (tokens >= shape.back()->tokens) return shape.back()->efficiency;
  for (std::size_t i = 1; i < shape.size(); ++i) {
    const auto* lo = shape[i - 1];
    const auto* hi = shape[i];
    if (tokens > hi->tokens) continue;
    if (hi->tokens <= lo->tokens) return hi->efficiency;
    const double t = std::log(tokens / lo->tokens) / std::log(hi->tokens / lo->tokens);
    return lo->efficiency + t * (hi->efficiency - lo->efficiency);
  }
  return shape.back()->efficiency;
}

double expertGemmMs(const GpuSpec& gpu, Precision precision, const ExpertGemm& g, double outputBytesPerValue) {
  if (g.experts <= 0 || g.m <= 0 || g.n <= 0 || g.k <= 0) return 0.0;
  const double tokens = g.weightGradient ? g.k : g.m;
  if (const auto efficiency = measuredExpertGemmEfficiency(gpu, precision, tokens, g.hidden, g.expertFfn)) {
    // The dense GEMM of the experts' tokens stacked, over the efficiency measured against it.
    const double stackedM = g.weightGradient ? g.m : g.experts * g.m;
    const double stackedK = g.weightGradient ? g.experts * g.k : g.k;
    return gemmMs(gpu, precision, stackedM, g.n, stackedK, outputBytesPerValue) / *efficiency;
  }
  return groupedGemmMs(gpu, precision, g.experts, g.m, g.n, g.k, outputBytesPerValue) +
         g.experts * kExpertGemmLatencyMs;
}

}  // namespace pipestudio::costparts
