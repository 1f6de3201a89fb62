// The RMSNorm scale of one fp32 row, 1/sqrt(mean(x²) + eps), computed with one summation order
// for every block width: 256 lanes take elements i ≡ lane (mod 256), each warp's 32 lanes reduce
// with an xor-shuffle tree, and the 8 warp sums add up in warp order. A block of kThreads (32, 64,
// 128 or 256) plays 256 / kThreads lanes per thread; a wider block (512, 768 or 1,024) lets its
// first 256 threads play the lanes while the others add nothing. So add_rmsnorm (256 threads) and
// the norm prologue of the quantized GEMV (256 or 512 threads) give the same bits.
#pragma once

namespace ssdq::kernels {

// Lanes of the 256 a thread of a kThreads block plays (threads past the first 256: none).
template <int kThreads>
constexpr int kRmsLanesPerThread = kThreads >= 256 ? 1 : 256 / kThreads;

// The scale from each thread's partial sums (sum[j]: lane threadIdx.x + j·kThreads's elements).
template <int kThreads>
__device__ inline float rmsnorm_scale_from_lanes(float (&sum)[kRmsLanesPerThread<kThreads>], int dim, float eps) {
  static_assert(kThreads % 32 == 0 && (256 % kThreads == 0 || (kThreads % 256 == 0 && kThreads <= 1024)),
                "whole warps dividing 256, or whole multiples of 256");
  constexpr int kLanes = 256, kPer = kRmsLanesPerThread<kThreads>;
  constexpr int kWarpsPerPass = kThreads < kLanes ? kThreads / 32 : kLanes / 32;
  __shared__ float warp_sums[kLanes / 32];
#pragma unroll
  for (int j = 0; j < kPer; ++j)
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum[j] += __shfl_xor_sync(0xffffffffu, sum[j], offset);
  __syncthreads();  // a previous call's readers are done with warp_sums
  if (threadIdx.x % 32 == 0 && threadIdx.x < kLanes)
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
  constexpr int kLanes = 256, kPer = kRmsLanesPerThread<kThreads>;
  float sum[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    sum[j] = 0.f;
    const int first = threadIdx.x + j * kThreads;
    for (int i0 = first < kLanes ? first : dim; i0 < dim; i0 += kBatch * kLanes) {
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
