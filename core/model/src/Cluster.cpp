#include "pipestudio/model/Cluster.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace pipestudio {

// One list and, once asked for, the first GPU of each node (firstGpu[i], with the total at the
// end), built once under `once` however many threads share the list.
struct NodeList::Shared {
  std::vector<NodeSpec> nodes;
  std::once_flag once;
  std::atomic<bool> built{false};
  std::vector<std::int64_t> firstGpu;
};

NodeList::NodeList(std::initializer_list<NodeSpec> nodes) : m_shared(std::make_shared<Shared>()) {
  m_shared->nodes.assign(nodes.begin(), nodes.end());
}

const std::vector<NodeSpec>& NodeList::list() const {
  static const std::vector<NodeSpec> kEmpty;
  return m_shared ? m_shared->nodes : kEmpty;
}

std::vector<NodeSpec>& NodeList::edit() {
  if (!m_shared) {
    m_shared = std::make_shared<Shared>();
  } else if (m_shared.use_count() > 1) {
    auto own = std::make_shared<Shared>();
    own->nodes = m_shared->nodes;  // another copy still reads the shared list
    m_shared = std::move(own);
  } else if (m_shared->built.load(std::memory_order_acquire)) {
    auto fresh = std::make_shared<Shared>();  // the index describes the list before this change
    fresh->nodes = std::move(m_shared->nodes);
    m_shared = std::move(fresh);
  }
  return m_shared->nodes;
}

const NodeList::Shared& NodeList::indexed() const {
  std::call_once(m_shared->once, [this] {
    Shared& s = *m_shared;
    s.firstGpu.resize(s.nodes.size() + 1, 0);
    for (std::size_t i = 0; i < s.nodes.size(); ++i) s.firstGpu[i + 1] = s.firstGpu[i] + s.nodes[i].gpus;
    s.built.store(true, std::memory_order_release);
  });
  return *m_shared;
}

std::int64_t NodeList::totalGpus() const { return m_shared ? indexed().firstGpu.back() : 0; }

int NodeList::nodeOfGpu(std::int64_t gpu) const {
  if (!m_shared || m_shared->nodes.empty()) return 0;
  const std::vector<std::int64_t>& first = indexed().firstGpu;
  // The last node whose first GPU is at or before `gpu` (a node of 0 GPUs holds none).
  const auto after = std::upper_bound(first.begin(), first.end() - 1, gpu);
  const auto node = static_cast<int>(after - first.begin()) - 1;
  return std::clamp(node, 0, static_cast<int>(m_shared->nodes.size()) - 1);
}

int ClusterSpec::totalGpus() const { return static_cast<int>(nodes.totalGpus()); }

int ClusterSpec::gpusPerNode() const { return nodes.empty() ? 1 : std::max(1, nodes.front().gpus); }

// Devices past the cluster's GPUs (a plan for a larger cluster) stay on the last node.
int ClusterSpec::nodeOfDevice(int device) const { return nodes.nodeOfGpu(device); }

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
