#include "pipestudio/model/CostModel.hpp"

#include <algorithm>
#include <cmath>

namespace pipestudio {
namespace {

constexpr double kBytesPerValue = 2.0;  // bf16/fp16 activations and weights

double msForFlops(double flops, const GpuSpec& gpu) {
  const double flopsPerS = gpu.effectiveFlopsPerS();
  if (flopsPerS <= 0) return 0;
  return flops / flopsPerS * 1000.0;
}

// Saturates instead of overflowing: shapes at the loader's bounds (seq, hidden up to 1e7) give
// byte counts beyond int64, and converting those is undefined behaviour.
std::int64_t toBytes(double v) {
  constexpr double kMaxBytes = 9.0e18;
  if (!(v > 0)) return 0;
  return static_cast<std::int64_t>(std::llround(std::min(v, kMaxBytes)));
}

}  // namespace

double transformerForwardFlops(const TransformerShape& shape, std::int64_t batch) {
  // Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters
  // Using Megatron-LM", §5.1): a layer's forward costs 24·b·s·h² + 4·b·s²·h FLOPs with a 4h
  // MLP. The h² term is 8·b·s·h² (QKV + output projections) + 4·b·s·h·ffn (the two MLP GEMMs),
  // which is how a non-4h ffn generalises.
  const double b = static_cast<double>(batch);
  const double s = static_cast<double>(shape.seq);
  const double h = static_cast<double>(shape.hidden);
  const double ffn = shape.ffn > 0 ? static_cast<double>(shape.ffn) : 4.0 * h;
  return 8.0 * b * s * h * h + 4.0 * b * s * h * ffn + 4.0 * b * s * s * h;
}

LayerCosts layerCosts(const Layer& layer, const GpuSpec& gpu, std::int64_t samplesPerMicrobatch, bool trainable) {
  LayerCosts c;
  const double b = static_cast<double>(std::max<std::int64_t>(1, samplesPerMicrobatch));

  if (layer.transformer) {
    const TransformerShape& t = *layer.transformer;
    const double s = static_cast<double>(t.seq);
    const double h = static_cast<double>(t.hidden);
    const double a = static_cast<double>(std::max<std::int64_t>(1, t.heads));
    const double ffn = t.ffn > 0 ? static_cast<double>(t.ffn) : 4.0 * h;
    if (layer.kind == "lm_head" && t.vocab) {
      // Logits GEMM: 2·b·s·h·V FLOPs forward (Narayanan et al. 2021, §5.1); backward input and
      // weight gradients are one GEMM each of the same size.
      const double v = static_cast<double>(*t.vocab);
      const double flops = 2.0 * b * s * h * v;
      c.forwardMs = msForFlops(flops, gpu);
      c.backwardInputMs = c.forwardMs;
      c.backwardWeightMs = c.forwardMs;
      // Input (2·s·b·h) plus fp32 logits kept for the softmax/cross-entropy backward (4·s·b·V).
      c.activationBytes = toBytes(kBytesPerValue * s * b * h + 4.0 * s * b * v);
      c.weightGradBytes = toBytes(kBytesPerValue * s * b * h);
      c.parameterBytes = toBytes(kBytesPerValue * v * h);
      c.outputBytes = toBytes(4.0 * b * s);  // per-token loss
    } else if (layer.kind == "embedding" && t.vocab) {
      // A lookup: memory-bound, a few bytes per element; modelled as reading b·s·h values.
      const double v = static_cast<double>(*t.vocab);
      c.forwardMs = msForFlops(2.0 * b * s * h, gpu);
      c.backwardInputMs = 0;
      c.backwardWeightMs = msForFlops(2.0 * b * s * h, gpu);
      c.activationBytes = toBytes(8.0 * b * s);  // token ids
      c.weightGradBytes = c.activationBytes;
      c.parameterBytes = toBytes(kBytesPerValue * v * h);
      c.outputBytes = toBytes(kBytesPerValue * s * b * h);
    } else {
      const double forward = transformerForwardFlops(t, static_cast<std::int64_t>(b));
      const double gemmFlops = 8.0 * b * s * h * h + 4.0 * b * s * h * ffn;
      c.forwardMs = msForFlops(forward, gpu);
      // Zero Bubble (Qi et al. 2023, §2): B and W each cost about one forward for the GEMMs;
      // the attention score/context products (4·b·s²·h) have no weights, so they fall in B.
      c.backwardInputMs = msForFlops(forward, gpu);
      c.backwardWeightMs = msForFlops(gemmFlops, gpu);
      // Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
      // Models", §4.1): s·b·h·(34 + 5·a·s/h) bytes without recomputation, 4h MLP.
      c.activationBytes = toBytes(s * b * h * (34.0 + 5.0 * a * s / h));
      // W needs the inputs of the four GEMMs: 2·s·b·h each for QKV, projection and FC1 input,
      // 2·s·b·ffn for FC2's input (bf16).
      c.weightGradBytes = toBytes(kBytesPerValue * s * b * (3.0 * h + ffn));
      // 12·h² parameters for a 4h MLP: 4h² attention + 2·h·ffn MLP (biases and norms ignored).
      c.parameterBytes = toBytes(kBytesPerValue * (4.0 * h * h + 2.0 * h * ffn));
      c.outputBytes = toBytes(kBytesPerValue * s * b * h);
    }
  } else if (layer.flopsForward) {
    // Generic layer (conv, attention, …): given FLOPs; backward ≈ 2× forward split evenly
    // into input and weight gradients (each one GEMM-sized pass).
    const double flops = *layer.flopsForward * b;
    c.forwardMs = msForFlops(flops, gpu);
    c.backwardInputMs = c.forwardMs;
    c.backwardWeightMs = layer.params && *layer.params > 0 ? c.forwardMs : 0.0;
    if (layer.params) c.parameterBytes = toBytes(kBytesPerValue * static_cast<double>(*layer.params));
  } else if (layer.params) {
    c.parameterBytes = toBytes(kBytesPerValue * static_cast<double>(*layer.params));
  }

  // Measured fields always win.
  if (layer.forwardMs) c.forwardMs = *layer.forwardMs;
  if (layer.backwardInputMs) c.backwardInputMs = *layer.backwardInputMs;
  if (layer.backwardWeightMs) c.backwardWeightMs = *layer.backwardWeightMs;
  if (layer.activationBytes) c.activationBytes = *layer.activationBytes;
  if (layer.parameterBytes) c.parameterBytes = *layer.parameterBytes;
  if (layer.outputBytes) c.outputBytes = *layer.outputBytes;
  if (layer.weightGradBytes) {
    c.weightGradBytes = *layer.weightGradBytes;
  } else if (layer.activationBytes && !layer.transformer) {
    // Measured activations without a split: assume half is needed by W (inputs of GEMMs).
    c.weightGradBytes = c.activationBytes / 2;
  }
  c.weightGradBytes = std::min(c.weightGradBytes, c.activationBytes);

  if (!trainable) {
    c.backwardInputMs = 0;
    c.backwardWeightMs = 0;
    c.weightGradBytes = 0;
  }
  return c;
}

double staticBytesPerParameter(const OptimizerSpec& optimizer, int dataParallel) {
  // Mixed-precision Adam: bf16 weight (2) + fp32 grad accumulation (4) + fp32 master weight,
  // momentum and variance (12) = 18 bytes (Korthikanti et al. 2022; Megatron-LM distributed
  // optimizer docs). The distributed optimizer shards the 12 optimizer bytes over d replicas.
  if (optimizer.distributed) return 6.0 + 12.0 / std::max(1, dataParallel);
  return 18.0;
}

double staticMemoryBytes(double trainableParameters, double frozenParameters, const OptimizerSpec& optimizer,
                         int dataParallel) {
  return trainableParameters * staticBytesPerParameter(optimizer, dataParallel) + frozenParameters * 2.0;
}

}  // namespace pipestudio
