#pragma once
/// \file The one place a plan's costs are derived (DESIGN.md §3): layer costs under the plan's
/// hybrid parallelism on its devices' GPUs, the pipeline-rank → GPU placement, and transfers
/// between pipeline ranks. The simulator, memory accounting, bubble filling, partitioners,
/// configurator and executor read costs through here, never from the cost model directly.
///
/// A plan's device is a pipeline rank. Its first GPU is device · T·C·D (Megatron order: TP,
/// then CP, then DP inside, PP outermost; Parallelism.hpp); a pure pipeline maps device k to
/// GPU k.

#include <cstdint>

#include "pipestudio/model/CostModel.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

/// Index of the first GPU of pipeline rank `device`, clamped to int (cluster lookups).
int deviceFirstGpu(const PlanConfig& config, int device);
/// The GPU spec of pipeline rank `device` (a node may have its own GPU type).
const GpuSpec& deviceGpu(const ClusterSpec& cluster, const PlanConfig& config, int device);

/// What the cost model needs to cost a layer of `device` under `config`.
CostContext costContext(const ClusterSpec& cluster, const PlanConfig& config, std::int64_t samplesPerMicrobatch,
                        int device, bool trainable);

/// Costs of layer `layer` of component `component` on pipeline rank `device`.
LayerCosts planLayerCosts(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config, int component,
                          int layer, int device);

/// Time for pipeline rank `from` to send `bytesPerGpu` to pipeline rank `to`: each of its T·C
/// GPUs sends its shard to its counterpart at once, so when they cross nodes they share the
/// node's NICs (ClusterSpec::nicsPerNode). 0 when from == to.
double deviceTransferMs(const ClusterSpec& cluster, const PlanConfig& config, int from, int to, double bytesPerGpu);

}  // namespace pipestudio
