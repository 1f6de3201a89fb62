#include "kernels/gemv.h"

#include <cstring>

#include "kernels/block_reduce.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/row_stream.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane (8 measured slower on an H200)

// Writes the m input rows, as bf16, into shared memory.
__device__ void load_inputs(const GemvArgs& a, __nv_bfloat16* xs) {
  for (int r = 0; r < a.m; ++r) {
    __nv_bfloat16* row = xs + static_cast<int64_t>(r) * a.k;
    if (a.input == GemvInput::kBf16) {
      const __nv_bfloat16* src = a.x + r * a.ldx;
      for (int i = threadIdx.x; i < a.k; i += kThreads) row[i] = src[i];
    } else if (a.input == GemvInput::kRmsNorm) {
      const float* src = a.residual + static_cast<int64_t>(r) * a.k;
      float sum = 0.f;
      for (int i = threadIdx.x; i < a.k; i += kThreads) sum += src[i] * src[i];
      const float scale = rsqrtf(block_sum<kThreads>(sum) / a.k + a.eps);
      for (int i = threadIdx.x; i < a.k; i += kThreads) row[i] = __float2bfloat16_rn(src[i] * scale * a.norm_weight[i]);
    } else {
      const __nv_bfloat16* y = a.y + static_cast<int64_t>(r) * a.k;
      const __nv_bfloat16* z = a.z + r * a.z_stride;
      for (int g0 = 0; g0 < a.k; g0 += a.group_size) {
        float sum = 0.f;
        for (int i = threadIdx.x; i < a.group_size; i += kThreads) {
          const float g = __bfloat162float(y[g0 + i]) * silu(__bfloat162float(z[g0 + i]));
          sum += g * g;
        }
        const float total = block_sum<kThreads>(sum);
        const float scale = a.sum_squares ? 1.f : rsqrtf(total / a.group_size + a.eps);
        if (a.sum_squares && blockIdx.x == 0 && threadIdx.x == 0)
          a.sum_squares[r * (a.k / a.group_size) + g0 / a.group_size] = total;
        for (int i = threadIdx.x; i < a.group_size; i += kThreads) {
          const float g = __bfloat162float(y[g0 + i]) * silu(__bfloat162float(z[g0 + i]));
          row[g0 + i] = __float2bfloat16_rn(g * scale * a.norm_weight[g0 + i]);
        }
      }
    }
  }
  __syncthreads();
}

__device__ inline void accumulate8(const uint4& w, const uint4& x, float& acc) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 wf = __bfloat1622float2(w2[i]);
    const float2 xf = __bfloat1622float2(x2[i]);
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
}

// One warp per output column: lanes stream the weight row in 16-byte pieces.
template <int M>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(shared);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * kWarps + warp;
  if (col < a.n) prefetch_l2(a.w + static_cast<int64_t>(col) * a.k, a.k * 2ll, lane);
  wait_for_previous_grid();
  allow_next_grid();
  load_inputs(a, xs);
  if (col >= a.n) return;
  const uint4* w = reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(col) * a.k);
  const int pieces = a.k / 8;
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.f;
  stream_row_pieces<kUnroll>(w, pieces, lane, [&](int p, const uint4& wv) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const uint4 xv = reinterpret_cast<const uint4*>(xs + static_cast<int64_t>(r) * a.k)[p];
      accumulate8(wv, xv, acc[r]);
    }
  });
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float v = acc[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) {
      if (a.out_type == ElementType::kF32) {
        float* out = static_cast<float*>(a.out) + r * a.ldout + col;
        *out = a.accumulate ? *out + v : v;
      } else {
        static_cast<__nv_bfloat16*>(a.out)[r * a.ldout + col] = __float2bfloat16_rn(v);
      }
    }
  }
}

template <int M>
cudaError_t launch_rows(const GemvArgs& a, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(M) * a.k * sizeof(__nv_bfloat16);
  if (const cudaError_t status = allow_dynamic_shared(gemv_kernel<M>, shared); status != cudaSuccess) return status;
  return launch_kernel(gemv_kernel<M>, LaunchShape{dim3((a.n + kWarps - 1) / kWarps), dim3(kThreads), shared}, stream, a);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_supported(const GemvArgs& a) {
  if (a.m < 1 || a.m > kGemvMaxRows || a.n < 1 || a.k < 8 || a.k % 8 != 0 || a.k > 16384) return false;
  if (!a.w || !aligned16(a.w) || !a.out || a.ldout < a.n) return false;
  if (a.accumulate && a.out_type != ElementType::kF32) return false;
  switch (a.input) {
    case GemvInput::kBf16: return !a.sum_squares && a.x && a.ldx >= a.k;
    case GemvInput::kRmsNorm: return !a.sum_squares && a.residual && a.norm_weight;
    case GemvInput::kGatedRmsNorm:
      return (!a.sum_squares || !a.accumulate) && a.y && a.z && a.norm_weight && a.group_size > 0 && a.k % a.group_size == 0 && a.z_stride >= a.k;
  }
  return false;
}

cudaError_t launch_gemv(const GemvArgs& a, cudaStream_t stream) {
  if (!gemv_supported(a)) return cudaErrorInvalidValue;
  switch (a.m) {
    case 1: return launch_rows<1>(a, stream);
    case 2: return launch_rows<2>(a, stream);
    case 3: return launch_rows<3>(a, stream);
    case 4: return launch_rows<4>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ssdq::kernels
