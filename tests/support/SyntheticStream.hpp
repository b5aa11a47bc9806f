#pragma once
// An executor-like trace stream of any size, for ingest tests and the history bench: one op
// range in ten records, the rest kernels, NCCL and copies with the long names real CUDA kernels
// have, round-robin over the devices, then a summary of ten steps.
//
//     auto run = store.ingestStream(test::syntheticStream(1'000'000, 4));

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pipestudio/trace/Stream.hpp"

namespace pipestudio::test {

inline std::string syntheticStream(std::int64_t events, int devices) {
  std::string out;
  trace::encodeStreamStart(out);
  trace::Header h;
  h.runId = "bench";
  h.world = devices;
  h.host = "bench";
  h.backend = "cuda";
  h.deviceName = "NVIDIA H100 80GB HBM3";
  trace::encodeFrame(h, out);
  static const std::array<const char*, 8> kNames = {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                                                    "flash_fwd_kernel",
                                                    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
                                                    "elementwise_kernel",
                                                    "ncclDevKernel_SendRecv",
                                                    "Memcpy DtoD (Device -> Device)",
                                                    "vectorized_layer_norm_kernel",
                                                    "reduce_kernel"};
  std::vector<std::int64_t> clock(static_cast<std::size_t>(devices), 0);
  for (std::int64_t i = 0; i < events; ++i) {
    const int device = static_cast<int>(i % devices);
    auto& t = clock[static_cast<std::size_t>(device)];
    const std::int64_t dur = 1000 + (i * 7919) % 50000;
    if (i % 10 == 0) {
      const auto kind = static_cast<OpKind>((i / 10) % 3);
      trace::encodeFrame(trace::OpRange{false, device, device, kind, static_cast<std::int32_t>((i / 40) % 16),
                                        static_cast<std::int32_t>(i / 100000), t, t + dur},
                         out);
    } else {
      const int n = static_cast<int>(i % 8);
      const auto kind = n == 4   ? trace::Activity::Kind::Nccl
                        : n == 5 ? trace::Activity::Kind::Memcpy
                                 : trace::Activity::Kind::Kernel;
      trace::encodeFrame(
          trace::Activity{kind, device, static_cast<std::uint32_t>(n % 3), t, t + dur, n == 5 ? 1u << 20 : 0u,
                          static_cast<std::uint64_t>(i), kNames[static_cast<std::size_t>(n)]},
          out);
    }
    t += dur + 500;
  }
  trace::Summary s;
  s.iterations = 10;
  s.iterationMs = {100, 101, 99, 100.5, 100, 102, 98, 100, 100, 101};
  trace::encodeFrame(s, out);
  return out;
}

}  // namespace pipestudio::test
