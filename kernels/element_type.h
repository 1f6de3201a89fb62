// Element types kernels read and write, and conversions usable on host and device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ssdq::kernels {

// kS8 / kS32: the int8 operands and int32 accumulators of the integer GEMM (kernels/gemm.h).
enum class ElementType { kF32, kBF16, kF16, kS8, kS32 };

template <typename T>
__host__ __device__ inline float to_float(T value);
template <>
__host__ __device__ inline float to_float<float>(float value) { return value; }
template <>
__host__ __device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 value) { return __bfloat162float(value); }

template <>
__host__ __device__ inline float to_float<__half>(__half value) { return __half2float(value); }

template <typename T>
__host__ __device__ inline T from_float(float value);
template <>
__host__ __device__ inline float from_float<float>(float value) { return value; }
template <>
__host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float value) { return __float2bfloat16_rn(value); }

template <>
__host__ __device__ inline __half from_float<__half>(float value) { return __float2half_rn(value); }

#ifdef __CUDACC__
// PyTorch's softplus (identity above 20).
__device__ inline float softplus(float x) { return x > 20.f ? x : log1pf(__expf(x)); }
// x / (1 + __expf(-x)) with exp's flush-to-zero form, bit for bit: the two differ only where e^-x
// or its argument is subnormal, and 1 + e is 1 there either way (this skips exp's range fix-up).
__device__ inline float silu(float x) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.44269504088896341f));
  return x / (1.f + e);
}
#endif

}  // namespace ssdq::kernels
