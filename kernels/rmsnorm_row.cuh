// The RMSNorm scale of one fp32 row, 1/sqrt(mean(x²) + eps), computed with one summation order
// for every block width: 256 lanes take elements i ≡ lane (mod 256), each warp's 32 lanes reduce
// with an xor-shuffle tree, and the 8 warp sums add up in warp order. A block of kThreads (32, 64,
// 128 or 256) plays 256 / kThreads lanes per thread, so add_rmsnorm (256 threads) and the norm
// prologue of the quantized GEMV (128 or 256 threads) give the same bits.
#pragma once

namespace ssdq::kernels {

// The scale from each thread's partial sums (sum[j]: lane threadIdx.x + j·kThreads's elements).
template <int kThreads>
__device__ inline float rmsnorm_scale_from_lanes(float (&sum)[256 / kThreads], int dim, float eps) {
  constexpr int kLanes = 256, kPer = kLanes / kThreads, kWarpsPerPass = kThreads / 32;
  __shared__ float warp_sums[kLanes / 32];
#pragma unroll
  for (int j = 0; j < kPer; ++j)
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum[j] += __shfl_xor_sync(0xffffffffu, sum[j], offset);
  __syncthreads();  // a previous call's readers are done with warp_sums
  if (threadIdx.x % 32 == 0)
#pragma unroll
    for (int j = 0; j < kPer; ++j) warp_sums[j * kWarpsPerPass + threadIdx.x / 32] = sum[j];
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kLanes / 32; ++w) total += warp_sums[w];
  return rsqrtf(total / dim + eps);
}

// kBatch: a thread's elements loaded kBatch at a time, all loads issued before the first is summed.
template <int kThreads, int kBatch = 1>
__device__ inline float rmsnorm_row_scale(const float* row, int dim, float eps) {
  constexpr int kLanes = 256, kPer = kLanes / kThreads;
  static_assert(kThreads % 32 == 0 && kLanes % kThreads == 0, "whole warps dividing 256");
  float sum[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    sum[j] = 0.f;
    for (int i0 = threadIdx.x + j * kThreads; i0 < dim; i0 += kBatch * kLanes) {
      float v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) v[u] = i0 + u * kLanes < dim ? row[i0 + u * kLanes] : 0.f;
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (i0 + u * kLanes < dim) sum[j] = __fmaf_rn(v[u], v[u], sum[j]);
    }
  }
  return rmsnorm_scale_from_lanes<kThreads>(sum, dim, eps);
}

// rmsnorm_row_scale<256> for rows of at most 256·kMaxPer elements, keeping the thread's elements in
// v (v[k] = row[threadIdx.x + 256·k]): the same sum in the same order, every load issued before
// the first is needed.
template <int kMaxPer>
__device__ inline float rmsnorm_row_scale_kept(const float* row, int dim, float eps, float (&v)[kMaxPer]) {
#pragma unroll
  for (int k = 0; k < kMaxPer; ++k) {
    const int i = threadIdx.x + 256 * k;
    v[k] = i < dim ? row[i] : 0.f;
  }
  float sum[1] = {0.f};
#pragma unroll
  for (int k = 0; k < kMaxPer; ++k)
    if (threadIdx.x + 256 * k < dim) sum[0] = __fmaf_rn(v[k], v[k], sum[0]);
  return rmsnorm_scale_from_lanes<256>(sum, dim, eps);
}

// One normalized element, as the norm kernels round it: (x · scale) · weight.
__device__ inline float rmsnorm_value(float x, float scale, float weight) { return __fmul_rn(__fmul_rn(x, scale), weight); }

}  // namespace ssdq::kernels
