#include "pipestudio/plan/Costs.hpp"

#include <algorithm>
#include <limits>

#include "pipestudio/common/Index.hpp"

namespace pipestudio {

int deviceFirstGpu(const PlanConfig& config, int device) {
  const std::int64_t gpu = config.parallel.firstGpuOfDevice(device);
  return static_cast<int>(std::clamp<std::int64_t>(gpu, 0, std::numeric_limits<int>::max()));
}

const GpuSpec& deviceGpu(const ClusterSpec& cluster, const PlanConfig& config, int device) {
  return cluster.gpuOfDevice(deviceFirstGpu(config, device));
}

CostContext costContext(const ClusterSpec& cluster, const PlanConfig& config, std::int64_t samplesPerMicrobatch,
                        int device, bool trainable) {
  CostContext ctx;
  ctx.gpu = deviceGpu(cluster, config, device);
  ctx.parallel = config.parallel;
  ctx.links = collectiveLinks(cluster, config.parallel);
  ctx.samplesPerMicrobatch = samplesPerMicrobatch;
  ctx.trainable = trainable;
  return ctx;
}

LayerCosts planLayerCosts(const ModelSpec& model, const ClusterSpec& cluster, const PlanConfig& config, int component,
                          int layer, int device) {
  if (!inRange(model.components, component)) return {};
  const Component& comp = model.component(component);
  if (!inRange(comp.layers, layer)) return {};
  return layerCosts(comp.layer(layer),
                    costContext(cluster, config, model.samplesPerMicrobatch, device, comp.trainable));
}

double deviceTransferMs(const ClusterSpec& cluster, const PlanConfig& config, int from, int to, double bytesPerGpu) {
  if (from == to || bytesPerGpu <= 0) return 0.0;
  const int a = deviceFirstGpu(config, from);
  const int b = deviceFirstGpu(config, to);
  double ms = cluster.transferMs(a, b, bytesPerGpu);
  const std::int64_t senders =
      static_cast<std::int64_t>(std::max(1, config.parallel.tensor)) * std::max(1, config.parallel.context);
  if (senders > 1 && cluster.nicsPerNode > 0 && cluster.nodeOfDevice(a) != cluster.nodeOfDevice(b) &&
      cluster.interNode.bandwidthGBps > 0) {
    // Fewer NICs than concurrent senders: the bandwidth term stretches by senders / NICs.
    const double share = static_cast<double>(std::min<std::int64_t>(senders, cluster.gpusPerNode())) /
                         static_cast<double>(cluster.nicsPerNode);
    if (share > 1.0) {
      const double latencyMs = cluster.interNode.latencyUs / 1000.0;
      ms = latencyMs + (ms - latencyMs) * share;
    }
  }
  return ms;
}

}  // namespace pipestudio
