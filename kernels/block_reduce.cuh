// Sum of one float per thread over a whole block (warp shuffles, then one value per warp through
// shared memory); every thread gets the total. Shared by the norm kernels and the GEMV prologue.
#pragma once

namespace ssdq::kernels {

template <int kThreads>
__device__ inline float block_sum(float value) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

}  // namespace ssdq::kernels
