#pragma once
// Private to the CUDA backends: error checks, the kernels of Kernels.cu, the per-stage GEMM
// workload and the CUPTI activity collector. Kept small: everything that is not GPU-specific
// lives in the shared runtime (Runtime.hpp).

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "../Runtime.hpp"
#include "Kernels.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::exec::cuda {

Status check(cudaError_t rc, const char* what);
Status check(cublasStatus_t rc, const char* what);

/// Row-major GEMM shape: an M×K input times a K×N weight; `fp8`: FP8 (E4M3) operands with a
/// bf16 output through cuBLASLt, as Transformer Engine runs a linear layer under an FP8 recipe.
struct Gemm {
  std::int64_t m = 0;
  std::int64_t k = 0;
  std::int64_t n = 0;
  bool fp8 = false;
};

/// What one op of one virtual stage runs: GEMMs from the layer shapes plus a calibrated
/// remainder for layers given only as times.
struct PassWork {
  std::vector<Gemm> gemms;
  std::int64_t elementwise = 0;  ///< bf16 elements touched by the elementwise op
  double calibratedMs = 0;       ///< of the reference GEMM loop, before the run's time scale
};

/// F (also N, S), B and W work of every virtual stage. Shaped transformer layers without
/// measured times become their four GEMMs (QKV, projection, FC1, FC2; lm_head: the logits
/// GEMM) with tokens = samples × seq; the rest are calibrated time. Under an fp8, mxfp8 or
/// nvfp4 recipe the four block GEMMs are FP8 (E4M3, per-tensor scaling: Hopper has no
/// block-scaled formats) and the logits GEMM stays bf16, as Megatron's output layer does.
struct StageWork {
  PassWork forward, backwardInput, backwardWeight;
};
std::vector<StageWork> buildStageWork(const Plan& plan);

/// Runs the work of `kind` (F, B, W, BW, N, S, T) for one op on `stream`: GEMMs on the three
/// scratch buffers, the elementwise op, then `referenceCount` reference GEMMs.
class Workload {
 public:
  Status init(cudaStream_t stream, const std::vector<StageWork>& work);
  ~Workload();
  Workload() = default;
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  /// Milliseconds of one reference GEMM, measured with events (calibration at start-up).
  Expected<double> calibrate();
  /// variant: 0 forward (Y = X·W), 1 input gradient (dX = dY·Wᵀ), 2 weight gradient (dW = Xᵀ·dY).
  Status run(const PassWork& pass, int variant, double fraction, double timeScale);
  void* scratch(int i) const { return m_scratch[i]; }
  std::size_t scratchBytes() const { return m_scratchBytes; }
  double referenceMs() const { return m_referenceMs; }
  void setReferenceMs(double ms) { m_referenceMs = ms; }
  cudaStream_t stream() const { return m_stream; }

 private:
  Status gemm(const Gemm& g, int variant);
  Status gemmFp8(const Gemm& g, int variant);
  /// One FP8 GEMM shape's cuBLASLt descriptors and the algorithm its heuristic chose.
  struct LtGemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Expected<LtGemm*> ltGemm(int rows, int cols, int reduction);
  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_cublas = nullptr;
  cublasLtHandle_t m_lt = nullptr;
  void* m_ltWorkspace = nullptr;
  std::map<std::tuple<int, int, int>, LtGemm> m_ltGemms;
  void* m_scratch[3] = {nullptr, nullptr, nullptr};
  std::size_t m_scratchBytes = 0;
  double m_referenceMs = 0;
};

/// CUPTI Activity API collector: kernels (NCCL kernels recognised by name), memcpy and memset,
/// in 4 MiB buffers, converted to the host clock and written as Activity frames. One per
/// process (CUPTI's callbacks are process-wide).
class Cupti {
 public:
  /// `rankDevice` >= 0: the trace device of every record (cuda); -1: by stream (cuda-single).
  static Status start(const Clock& clock, FrameSink& sink, int rankDevice);
  /// Records made on `stream` belong to trace device `device` (cuda-single: one stream per
  /// plan device on one GPU).
  static void mapStream(cudaStream_t stream, int device);
  /// Delivers every completed record (end of iteration, after its work is synchronised).
  static void flush();
  /// Records CUPTI dropped (buffers full) or delivered incomplete (no timestamps): not written.
  static std::uint64_t dropped();
  static void stop();
  /// One clock: a clock-marker kernel (launchClockMarker) ran on `stream` and ended just before
  /// the event whose time on the lane's clock is `hostNs` (the iteration reference). Its record
  /// becomes an anchor of CUPTI time (ClockAnchors.hpp).
  static void expectMarker(cudaStream_t stream, std::int64_t hostNs);
  /// Measures the CUPTI → host clock offset from cuptiGetTimestamp (at start, before the first
  /// marker anchors it).
  static void resync();
};

}  // namespace pipestudio::exec::cuda
