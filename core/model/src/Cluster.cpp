#include "pipestudio/model/Cluster.hpp"

#include <algorithm>

namespace pipestudio {

int ClusterSpec::totalGpus() const {
  int total = 0;
  for (const auto& n : nodes) total += n.gpus;
  return total;
}

int ClusterSpec::gpusPerNode() const { return nodes.empty() ? 1 : std::max(1, nodes.front().gpus); }

int ClusterSpec::nodeOfDevice(int device) const {
  int first = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (device < first + nodes[i].gpus) return static_cast<int>(i);
    first += nodes[i].gpus;
  }
  // Devices past the cluster's GPUs (a plan for a larger cluster) stay on the last node.
  return nodes.empty() ? 0 : static_cast<int>(nodes.size()) - 1;
}

bool ClusterSpec::sameNvlinkDomain(int a, int b) const {
  if (nvlinkDomain > gpusPerNode()) return a / nvlinkDomain == b / nvlinkDomain;
  return nodeOfDevice(a) == nodeOfDevice(b);
}

const GpuSpec& ClusterSpec::gpuOfDevice(int device) const {
  if (nodes.empty()) return gpu;
  const auto& node = nodes[static_cast<std::size_t>(nodeOfDevice(device))];
  return node.gpu ? *node.gpu : gpu;
}

double ClusterSpec::latencyMs(int from, int to) const {
  if (from == to) return 0.0;
  return (sameNvlinkDomain(from, to) ? intraNode : interNode).latencyUs / 1000.0;
}

double ClusterSpec::transferMs(int from, int to, double bytes) const {
  if (from == to || bytes <= 0) return 0.0;
  double bandwidthGBps = 0;
  double latencyUs = 0;
  const LinkSpec& link = sameNvlinkDomain(from, to) ? intraNode : interNode;
  bandwidthGBps = link.bandwidthGBps;
  latencyUs = link.latencyUs;
  const auto f = static_cast<std::size_t>(from);
  const auto t = static_cast<std::size_t>(to);
  if (f < bandwidthMatrixGBps.size() && t < bandwidthMatrixGBps[f].size() && bandwidthMatrixGBps[f][t] > 0) {
    bandwidthGBps = bandwidthMatrixGBps[f][t];
  }
  if (bandwidthGBps <= 0) return latencyUs / 1000.0;
  // GB/s = 1e9 bytes/s → ms = bytes / (GB/s · 1e6)
  return bytes / (bandwidthGBps * 1e6) + latencyUs / 1000.0;
}

}  // namespace pipestudio
