#pragma once
/// \file Layer shapes → per-microbatch costs (times, bytes) on a given GPU.

#include <cstdint>

#include "pipestudio/model/Cluster.hpp"
#include "pipestudio/model/Model.hpp"

namespace pipestudio {

/// Costs of one layer for one microbatch on one GPU. Frozen layers have zero backward.
struct LayerCosts {
  double forwardMs = 0;
  double backwardInputMs = 0;
  double backwardWeightMs = 0;
  std::int64_t activationBytes = 0;
  std::int64_t weightGradBytes = 0;
  std::int64_t parameterBytes = 0;
  std::int64_t outputBytes = 0;
  double parameterCount() const { return static_cast<double>(parameterBytes) / 2.0; }  // bf16 weights
  double backwardMs() const { return backwardInputMs + backwardWeightMs; }
};

/// Resolves a layer: measured fields win, missing ones come from the shape formulas.
/// `trainable` false zeroes the backward costs and the weight-gradient bytes.
LayerCosts layerCosts(const Layer& layer, const GpuSpec& gpu, std::int64_t samplesPerMicrobatch, bool trainable);

/// FLOPs of one forward pass of a transformer layer (24·b·s·h² + 4·b·s²·h for ffn = 4h).
double transformerForwardFlops(const TransformerShape& shape, std::int64_t batch);

/// Static bytes per parameter of trainable weights: 18 (mixed-precision Adam) or 6 + 12/d
/// with a distributed optimizer over `dataParallel` replicas.
double staticBytesPerParameter(const OptimizerSpec& optimizer, int dataParallel);

/// Static memory of a set of layers: trainable parameters × staticBytesPerParameter,
/// frozen parameters × 2 (bf16 weights only).
double staticMemoryBytes(double trainableParameters, double frozenParameters, const OptimizerSpec& optimizer,
                         int dataParallel);

}  // namespace pipestudio
