#pragma once
/// \file The ranges the model and cluster loaders accept, named once: ModelIO.cpp reads files
/// with them and the GUI's cell editors (viz SpecModels) check typed values with them, so a
/// value the editor accepts always loads back and one the loader refuses cannot be typed.
/// The bounds separate "large" from "absurd": past them is a typo or an attack.

#include <cstdint>

namespace pipestudio::limits {

/// Inclusive bounds of a number field.
struct NumberRange {
  double min;
  double max;
  constexpr bool contains(double x) const { return x >= min && x <= max; }
};

/// Inclusive bounds of an integer field.
struct IntegerRange {
  std::int64_t min;
  std::int64_t max;
  constexpr bool contains(std::int64_t x) const { return x >= min && x <= max; }
};

// --- model files (pipestudio.model/1) ---------------------------------------------------
inline constexpr double kMaxMs = 1.0e7;                           ///< ~2.8 hours for one layer pass
inline constexpr std::int64_t kMaxBytes = std::int64_t{1} << 50;  ///< 1 PiB
inline constexpr std::int64_t kMaxLayers = 100000;                ///< layers in one model, all components
inline constexpr std::int64_t kMaxDim = 10'000'000;               ///< hidden, seq, ffn, …
inline constexpr NumberRange kLayerMs{0, kMaxMs};                 ///< forward_ms, backward_*_ms
inline constexpr IntegerRange kLayerBytes{0, kMaxBytes};          ///< activation_bytes, parameter_bytes, …

// --- cluster files (pipestudio.cluster/1) -----------------------------------------------
inline constexpr std::int64_t kMaxGpus = 1'000'000;            ///< GPUs in one cluster
inline constexpr IntegerRange kGpusPerNode{1, 1024};           ///< nodes[].gpus, gpus_per_node
inline constexpr NumberRange kPeakTflops{1e-3, 1e5};           ///< gpu.peak_tflops
inline constexpr NumberRange kMemoryGib{1e-3, 1e5};            ///< gpu.memory_gib
inline constexpr NumberRange kEfficiency{1e-3, 1.0};           ///< gpu.efficiency (fraction of peak)
inline constexpr NumberRange kMemoryBandwidthGBps{1e-3, 1e6};  ///< gpu.memory_bandwidth_gbps
inline constexpr IntegerRange kSmCount{1, 100000};             ///< gpu.sm_count
inline constexpr NumberRange kComputeCapability{1.0, 99.9};    ///< gpu.compute_capability (CUDA major.minor)
inline constexpr NumberRange kGemmFillK{0, 65536};             ///< gpu.gemm_fill_k (k steps per output tile)
/// gpu.nvls.channels: NCCL runs NVLS on at least 2 channels and at most MAXCHANNELS (64,
/// src/include/device.h; "NVLS/NVLStree needs at least 2 channels", src/graph/tuning.cc).
inline constexpr IntegerRange kNvlsChannels{2, 64};
inline constexpr NumberRange kLinkBandwidthGBps{1e-6, 1e6};  ///< links.*.bandwidth_gbps
inline constexpr NumberRange kLinkLatencyUs{0, 1e7};         ///< links.*.latency_us
/// gpu.expert_gemm_curve: points, and each point's efficiency (a grouped GEMM can beat the dense
/// GEMM of its FLOPs a little: measured up to 1.16 on H100)
inline constexpr std::int64_t kMaxExpertGemmPoints = 4096;
inline constexpr NumberRange kExpertGemmEfficiency{1e-3, 4.0};

}  // namespace pipestudio::limits
