// The hand-written kernels of the CUDA backends; everything else is cuBLAS.
#include <cuda_bf16.h>

#include "Kernels.hpp"

namespace pipestudio::exec::cuda {
namespace {

__global__ void elementwiseKernel(__nv_bfloat16* data, std::size_t count) {
  // A GELU-like pointwise op (tanh approximation, Hendrycks & Gimpel 2016): the activation
  // that follows a layer's GEMMs. Grid-stride loop.
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const float x = __bfloat162float(data[i]);
    const float y = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    data[i] = __float2bfloat16(y);
  }
}

__global__ void adamKernel(float* p, float* m, float* v, const float* g, std::size_t count) {
  constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kLr = 1e-4f, kEps = 1e-8f;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    m[i] = kBeta1 * m[i] + (1.0f - kBeta1) * g[i];
    v[i] = kBeta2 * v[i] + (1.0f - kBeta2) * g[i] * g[i];
    p[i] -= kLr * m[i] / (sqrtf(v[i]) + kEps);
  }
}

unsigned blocksFor(std::size_t count) {
  const std::size_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? (blocks == 0 ? 1 : blocks) : 65535);
}

}  // namespace

// Empty, with a C name CUPTI reports as is: the clock marker of Cupti::expectMarker.
extern "C" __global__ void pipestudio_clock_marker() {}

cudaError_t launchClockMarker(cudaStream_t stream) {
  pipestudio_clock_marker<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t launchElementwise(void* data, std::size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  elementwiseKernel<<<blocksFor(count), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count);
  return cudaGetLastError();
}

cudaError_t launchAdam(float* params, float* moment1, float* moment2, const float* grads, std::size_t count,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  adamKernel<<<blocksFor(count), 256, 0, stream>>>(params, moment1, moment2, grads, count);
  return cudaGetLastError();
}

}  // namespace pipestudio::exec::cuda
