#include "kernels/gated_rmsnorm.h"

#include "kernels/block_reduce.cuh"
#include "kernels/element_type.h"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPerThread = 32;  // group_size up to 8192 held in registers

// One block per (row, group): the gated values stay in registers between the two passes.
__global__ void __launch_bounds__(kThreads) gated_rmsnorm_kernel(GatedRmsNormArgs a) {
  const int64_t row = blockIdx.x;
  const int g0 = blockIdx.y * a.group_size;
  const __nv_bfloat16* y = a.y + row * a.width + g0;
  const __nv_bfloat16* z = a.z + row * a.z_stride + g0;
  float gated[kMaxPerThread];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxPerThread; ++i) {
    const int c = threadIdx.x + i * kThreads;
    gated[i] = c < a.group_size ? __bfloat162float(y[c]) * silu(__bfloat162float(z[c])) : 0.f;
    sum += gated[i] * gated[i];
  }
  const float total = block_sum<kThreads>(sum);
  float scale = 1.f;
  if (a.sum_squares) {
    if (threadIdx.x == 0) a.sum_squares[row * gridDim.y + blockIdx.y] = total;
  } else {
    scale = rsqrtf(total / a.group_size + a.eps);
  }
  __nv_bfloat16* out = a.out + row * a.width + g0;
#pragma unroll
  for (int i = 0; i < kMaxPerThread; ++i) {
    const int c = threadIdx.x + i * kThreads;
    if (c < a.group_size) out[c] = __float2bfloat16_rn(gated[i] * scale * a.weight[g0 + c]);
  }
}

}  // namespace

bool gated_rmsnorm_supported(const GatedRmsNormArgs& a) {
  return a.rows > 0 && a.rows <= 2147483647 && a.group_size > 0 && a.group_size <= kThreads * kMaxPerThread &&
         a.width % a.group_size == 0 && a.width / a.group_size <= 65535 && a.y && a.z && a.weight && a.out;
}

cudaError_t launch_gated_rmsnorm(const GatedRmsNormArgs& a, cudaStream_t stream) {
  if (!gated_rmsnorm_supported(a)) return cudaErrorInvalidValue;
  gated_rmsnorm_kernel<<<dim3(static_cast<unsigned>(a.rows), a.width / a.group_size), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
