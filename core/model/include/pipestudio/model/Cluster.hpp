#pragma once
/// \file ClusterSpec: `pipestudio.cluster/1` (docs/formats.md).

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/model/AttentionBackend.hpp"
#include "pipestudio/model/Precision.hpp"

namespace pipestudio {

inline constexpr const char* kClusterSchema = "pipestudio.cluster/1";

struct GpuSpec {
  std::string name;
  double peakTflops = 0;  ///< dense bf16 peak
  double memoryGib = 0;
  double efficiency = 0.5;  ///< achieved fraction of the bf16 peak by large GEMMs: the calibration knob
  /// HBM bandwidth from the datasheet, GB/s (memory-bound kernels, skinny GEMMs); 0: derived as
  /// peak FLOP/s / 200 FLOP per byte, typical of recent data-centre GPUs.
  double memoryBandwidthGBps = 0;
  /// Streaming multiprocessors (GEMM wave quantization); 0: not modelled.
  int smCount = 0;
  /// CPU–GPU link per direction, GB/s (PCIe or NVLink-C2C; activation offloading); 0: unknown.
  double hostLinkGBps = 0;
  /// CUDA compute capability as major.minor (9.0 Hopper, 10.0 Blackwell, 10.3 Blackwell Ultra);
  /// 0: unknown, taken as Hopper's behaviour where it matters (fp8GemmTakesAnyLayout).
  double computeCapability = 0;
  // The per-precision fields come last: GpuSpec{name, peak, memory, efficiency} keeps meaning what
  // it did before they existed.
  /// Dense peak per precision (indexed by Precision; the bf16 slot is unused: peakTflops), TFLOP/s;
  /// 0: fp16 uses peakTflops, a low-precision format is one this GPU has no tensor-core path for.
  std::array<double, kPrecisionCount> peakTflopsByPrecision{};
  /// Calibrated efficiency per precision (one per GPU type and precision, issue 25; the bf16 slot
  /// is unused: `efficiency`); 0: the bf16 `efficiency`.
  std::array<double, kPrecisionCount> efficiencyByPrecision{};
  /// A fused attention kernel at head dimension 128 on long sequences: the fraction of the bf16
  /// peak its forward and backward reach, from published kernel benchmarks (issue 26), per
  /// AttentionBackend (fused, flash); 0: the bf16 GEMM `efficiency`.
  struct AttentionEfficiency {
    double forward = 0, backward = 0;
    friend bool operator==(const AttentionEfficiency&, const AttentionEfficiency&) = default;
  };
  std::array<AttentionEfficiency, kAttentionBackendCount> attentionEfficiency{};
  /// A GEMM kernel's fixed work per output tile (loading its first operand tiles, filling the
  /// pipeline, the epilogue), in steps of the reduction dimension k, per precision (the bf16 slot
  /// is bf16's; fp16 falls back to it): a GEMM of depth k runs at k / (k + fill) of its
  /// long-k rate (GemmKernel.cpp; H100 with cuBLAS: bf16 71, fp8 341, bench/fidelity/
  /// kernels-h100.jsonl); 0: not modelled.
  std::array<double, kPrecisionCount> gemmFillK{};
  /// Of the time an expert all-to-all runs on its own stream beside compute kernels in
  /// Megatron-Core's overlaps, the share that comes off the pass; the rest is the two slowing
  /// each other (SMs, memory, the dispatcher's synchronisations). 0:
  /// kMeasuredEpOverlapEfficiency (CostModel.hpp).
  double epOverlapEfficiency = 0;
  /// Grouped expert GEMMs measured on this GPU (tests/gpu/expert_gemm_curve.py): at `tokens` rows
  /// per expert of experts `hidden` wide with `expertFfn` intermediate values, the time of one
  /// dense GEMM of the same FLOPs over the time of the expert GEMMs as the framework runs them
  /// (forward, input and weight gradients of both expert GEMMs together). Empty: the kernel model
  /// (GemmKernel.cpp).
  struct ExpertGemmPoint {
    Precision precision = Precision::Bf16;
    double tokens = 0, hidden = 0, expertFfn = 0;
    double efficiency = 0;
    friend bool operator==(const ExpertGemmPoint&, const ExpertGemmPoint&) = default;
  };
  std::vector<ExpertGemmPoint> expertGemmCurve{};
  /// NVLink SHARP (NVLS) of the NVSwitches this GPU ships with, as NCCL's tuner models it
  /// (src/graph/tuning.cc nvlsEfficiency, src/transport/nvls.cc NVLS_NCHANNELS_*): the
  /// efficiency of its multicast reductions and the channels NCCL gives them. 0: no NVLS (A100,
  /// PCIe and NVL-bridge parts). ClusterSpec::nvls turns it off for a cluster whose switches lack it.
  double nvlsEfficiency = 0;
  int nvlsChannels = 0;
  /// Sustained FLOP/s this GPU delivers on large bf16 GEMMs: peak × efficiency.
  double effectiveFlopsPerS() const { return peakTflops * 1e12 * efficiency; }
  /// Dense peak in `precision` (0: no tensor-core path for it).
  /// A format without values of its own takes those of the tensor cores it runs on
  /// (gemmRateFallback: fp8-block those of fp8).
  double peakTflopsFor(Precision precision) const {
    if (precision == Precision::Bf16) return peakTflops;
    const double p = peakTflopsByPrecision[static_cast<std::size_t>(precision)];
    if (p > 0) return p;
    if (gemmRateFallback(precision) != precision) return peakTflopsFor(gemmRateFallback(precision));
    return precision == Precision::Fp16 ? peakTflops : 0.0;
  }
  double efficiencyFor(Precision precision) const {
    if (precision == Precision::Bf16) return efficiency;
    const double e = efficiencyByPrecision[static_cast<std::size_t>(precision)];
    if (e > 0) return e;
    if (gemmRateFallback(precision) != precision) return efficiencyFor(gemmRateFallback(precision));
    return efficiency;
  }
  /// The GEMM fill of `precision`, in k steps (0: not modelled).
  double gemmFillKFor(Precision precision) const {
    const double v = gemmFillK[static_cast<std::size_t>(precision)];
    if (v > 0) return v;
    if (gemmRateFallback(precision) != precision) return gemmFillKFor(gemmRateFallback(precision));
    return precision == Precision::Fp16 ? gemmFillK[static_cast<std::size_t>(Precision::Bf16)] : 0.0;
  }
  /// Sustained FLOP/s of large GEMMs in `precision` (0: not supported).
  double gemmFlopsPerS(Precision precision) const { return peakTflopsFor(precision) * 1e12 * efficiencyFor(precision); }
  /// Whether this GPU's FP8 GEMMs take operands in any layout, so Transformer Engine keeps one
  /// copy of a per-tensor-scaled FP8 tensor for a GEMM and its transposed backward GEMM instead
  /// of the data and its transpose (nvte_is_non_tn_fp8_gemm_supported: compute capability
  /// 10.0–11.x and 13.0 on; Hopper takes only TN FP8 GEMMs).
  bool fp8GemmTakesAnyLayout() const {
    return (computeCapability >= 10.0 && computeCapability < 12.0) || computeCapability >= 13.0;
  }
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

/// The nodes of a cluster: read like a std::vector<NodeSpec>, copied in O(1). Copies share one list
/// until one of them is changed (copy on write), and the GPU → node lookup runs on prefix sums
/// built once per list: a request or a plan of a 16,384-node cluster is copied for every candidate
/// the configurator simulates, and its transfers ask which node a GPU is on, so both must not
/// grow with the node count.
///
///     c.nodes.push_back(NodeSpec{"node0", 8, std::nullopt, std::nullopt});
///     const int node = c.nodes.nodeOfGpu(42);
///
/// A reference from a changing access (non-const operator[], front, begin…) stays valid until the
/// next call on the list.
class NodeList {
 public:
  using value_type = NodeSpec;
  using size_type = std::size_t;
  using iterator = std::vector<NodeSpec>::iterator;
  using const_iterator = std::vector<NodeSpec>::const_iterator;

  NodeList() = default;
  NodeList(std::initializer_list<NodeSpec> nodes);

  bool empty() const { return list().empty(); }
  std::size_t size() const { return list().size(); }
  const NodeSpec& operator[](std::size_t i) const { return list()[i]; }
  const NodeSpec& front() const { return list().front(); }
  const NodeSpec& back() const { return list().back(); }
  const_iterator begin() const { return list().begin(); }
  const_iterator end() const { return list().end(); }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }

  // Changing access: a shared list is copied first, and its index dropped.
  NodeSpec& operator[](std::size_t i) { return edit()[i]; }
  NodeSpec& front() { return edit().front(); }
  NodeSpec& back() { return edit().back(); }
  iterator begin() { return edit().begin(); }
  iterator end() { return edit().end(); }
  void push_back(NodeSpec node) { edit().push_back(std::move(node)); }
  void assign(std::size_t count, NodeSpec node) { edit().assign(count, node); }  // node may be one of ours
  void reserve(std::size_t count) { edit().reserve(count); }
  void clear() { edit().clear(); }

  /// Σ gpus over the nodes.
  std::int64_t totalGpus() const;
  /// The node of GPU `gpu` (GPUs numbered node by node, from 0); GPUs past the last node's are on
  /// the last node, and an empty list has node 0.
  int nodeOfGpu(std::int64_t gpu) const;

 private:
  struct Shared;
  const std::vector<NodeSpec>& list() const;
  std::vector<NodeSpec>& edit();
  const Shared& indexed() const;
  std::shared_ptr<Shared> m_shared;
};

struct LinkSpec {
  double bandwidthGBps = 0;  ///< gigabytes per second
  double latencyUs = 0;
};

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  NodeList nodes;
  LinkSpec intraNode;
  LinkSpec interNode;  ///< per NIC
  /// NICs per node for inter-node traffic; 0: one per GPU (DGX-style). When fewer, the GPUs of a
  /// node that cross nodes at once share them.
  int nicsPerNode = 0;
  /// GPUs one NVLink fabric joins, consecutive in GPU order (GB200/GB300 NVL72: 72 GPUs over 18
  /// nodes of 4); 0: one node. Traffic inside a domain takes `intraNode`.
  int nvlinkDomain = 0;
  /// Whether the NVLink switches run NVLink SHARP (NCCL's NVLS algorithms) where the GPU has the
  /// figures for it (GpuSpec::nvlsEfficiency); false: NCCL's rings and trees only.
  bool nvls = true;
  /// Host copies (activation offloading) through shared PCIe switches: `hostSwitchGpus`
  /// consecutive GPUs (in GPU order) hang off one switch whose uplink to the host carries
  /// `hostSwitchGBps` per direction. GPUs copying at once share it evenly, each at most its own
  /// GpuSpec::hostLinkGBps (PipeOffload's paired GPUs: a copy alone runs faster than two at once,
  /// offloading.py's solo_offload_time). 0: no sharing, every GPU has its own host link.
  int hostSwitchGpus = 0;
  double hostSwitchGBps = 0;
  /// Optional measured device-to-device bandwidth, [from][to], GB/s; overrides links.
  std::vector<std::vector<double>> bandwidthMatrixGBps;

  /// Node `i` (0 <= i < nodes.size()).
  const NodeSpec& node(int i) const { return nodes[static_cast<std::size_t>(i)]; }
  int totalGpus() const;
  /// GPUs of the first node (the node size collectives are placed against).
  int gpusPerNode() const;
  /// Node index of global device `device` (devices numbered node by node).
  int nodeOfDevice(int device) const;
  /// GPUs of one NVLink domain (nvlinkDomain, or the node size).
  int nvlinkDomainGpus() const { return nvlinkDomain > gpusPerNode() ? nvlinkDomain : gpusPerNode(); }
  /// Whether GPUs `a` and `b` share an NVLink domain.
  bool sameNvlinkDomain(int a, int b) const;
  const GpuSpec& gpuOfDevice(int device) const;
  /// Time to move `bytes` from `from` to `to`: bytes / bandwidth + latency (0 when from == to
  /// or bytes ≤ 0).
  double transferMs(int from, int to, double bytes) const;
  /// The latency of the link between `from` and `to` in ms (0 when from == to).
  double latencyMs(int from, int to) const;
};

}  // namespace pipestudio
