#pragma once
// Launchers of the kernels in Kernels.cu (kept apart so nvcc compiles only this small file).
#include <cuda_runtime_api.h>

#include <cstddef>

namespace pipestudio::exec::cuda {

/// The name CUPTI reports for the kernel launchClockMarker runs.
inline constexpr const char* kClockMarkerKernel = "pipestudio_clock_marker";
/// An empty kernel on `stream`: its CUPTI record anchors CUPTI time to the lane's event clock.
cudaError_t launchClockMarker(cudaStream_t stream);
/// bf16 in-place activation-like elementwise op (the "plus an elementwise op" of each pass).
cudaError_t launchElementwise(void* data, std::size_t count, cudaStream_t stream);
/// One Adam step (Kingma & Ba 2015, Algorithm 1) over fp32 params/moments with given grads.
cudaError_t launchAdam(float* params, float* moment1, float* moment2, const float* grads, std::size_t count,
                       cudaStream_t stream);

}  // namespace pipestudio::exec::cuda
