#pragma once
/// \file ClusterSpec: `pipestudio.cluster/1` (DESIGN.md §2).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipestudio {

inline constexpr const char* kClusterSchema = "pipestudio.cluster/1";

struct GpuSpec {
  std::string name;
  double peakTflops = 0;  ///< dense bf16 peak
  double memoryGib = 0;
  double efficiency = 0.5;  ///< achieved fraction of peak by large GEMMs: the one calibration knob
  /// HBM bandwidth from the datasheet, GB/s (memory-bound kernels, skinny GEMMs); 0: derived as
  /// peak FLOP/s / 200 FLOP per byte, typical of recent data-centre GPUs.
  double memoryBandwidthGBps = 0;
  /// Streaming multiprocessors (GEMM wave quantization); 0: not modelled.
  int smCount = 0;
  /// Sustained FLOP/s this GPU delivers on large GEMMs: peak × efficiency.
  double effectiveFlopsPerS() const { return peakTflops * 1e12 * efficiency; }
  double memoryBytesPerS() const {
    return memoryBandwidthGBps > 0 ? memoryBandwidthGBps * 1e9 : peakTflops * 1e12 / 200.0;
  }
  std::int64_t memoryBytes() const { return static_cast<std::int64_t>(memoryGib * 1024.0 * 1024.0 * 1024.0); }
};

struct SshSpec {
  std::string user;
  int port = 22;
  std::string identityFile;
};

struct NodeSpec {
  std::string host;
  int gpus = 0;
  std::optional<SshSpec> ssh;
  std::optional<GpuSpec> gpu;  ///< a node with other GPUs than the cluster default
};

struct LinkSpec {
  double bandwidthGBps = 0;  ///< gigabytes per second
  double latencyUs = 0;
};

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  std::vector<NodeSpec> nodes;
  LinkSpec intraNode;
  LinkSpec interNode;  ///< per NIC
  /// NICs per node for inter-node traffic; 0: one per GPU (DGX-style). When fewer, the GPUs of a
  /// node that cross nodes at once share them.
  int nicsPerNode = 0;
  /// Optional measured device-to-device bandwidth, [from][to], GB/s; overrides links.
  std::vector<std::vector<double>> bandwidthMatrixGBps;

  /// Node `i` (0 <= i < nodes.size()).
  const NodeSpec& node(int i) const { return nodes[static_cast<std::size_t>(i)]; }
  int totalGpus() const;
  /// GPUs of the first node (the node size collectives are placed against).
  int gpusPerNode() const;
  /// Node index of global device `device` (devices numbered node by node).
  int nodeOfDevice(int device) const;
  const GpuSpec& gpuOfDevice(int device) const;
  /// Time to move `bytes` from `from` to `to`: bytes / bandwidth + latency (0 when from == to).
  double transferMs(int from, int to, double bytes) const;
};

}  // namespace pipestudio
