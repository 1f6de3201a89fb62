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

// One block per (row, local group): Σ (y·silu(z))² over the group's channels here.
__global__ void __launch_bounds__(kThreads) gated_sum_squares_kernel(GatedNormPartsArgs a) {
  const int64_t row = blockIdx.x;
  const int c0 = blockIdx.y * a.local_group_size;
  const float* y = a.y + row * a.width + c0;
  const float* z = a.z + row * a.z_stride + c0;
  float sum = 0.f;
  for (int c = threadIdx.x; c < a.local_group_size; c += kThreads) {
    const float g = y[c] * silu(z[c]);
    sum += g * g;
  }
  const float total = block_sum<kThreads>(sum);
  if (threadIdx.x == 0) a.sums[row * a.groups + a.first_group + blockIdx.y] = total;
  // The row's slots of other ranks' groups are 0, as is the pad after the last row: no memset
  // launch before (a decode step's launches are its latency).
  if (blockIdx.y == 0) {
    const int local = a.width / a.local_group_size;
    for (int g = threadIdx.x; g < a.groups; g += kThreads)
      if (g < a.first_group || g >= a.first_group + local) a.sums[row * a.groups + g] = 0.f;
    if (row == a.rows - 1)
      for (int64_t i = a.rows * a.groups + threadIdx.x; i < a.sums_count; i += kThreads) a.sums[i] = 0.f;
  }
}

__global__ void __launch_bounds__(kThreads) gated_norm_scale_kernel(GatedNormPartsArgs a) {
  const int64_t row = blockIdx.x;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= a.width) return;
  const float total = a.sums[row * a.groups + a.first_group + c / a.local_group_size];
  const float scale = rsqrtf(total / a.group_size + a.eps);
  const float g = a.y[row * a.width + c] * silu(a.z[row * a.z_stride + c]);
  a.out[row * a.width + c] = g * scale * a.weight[c];
}

}  // namespace

bool gated_norm_parts_supported(const GatedNormPartsArgs& a) {
  return a.rows > 0 && a.rows <= 2147483647 && a.width > 0 && a.width <= 65535 * kThreads && a.local_group_size > 0 && a.width % a.local_group_size == 0 &&
         a.group_size >= a.local_group_size && a.groups > 0 && a.first_group >= 0 &&
         a.first_group + a.width / a.local_group_size <= a.groups && a.sums_count >= a.rows * a.groups && a.y &&
         a.z && a.weight && a.sums && a.out;
}

cudaError_t launch_gated_sum_squares(const GatedNormPartsArgs& a, cudaStream_t stream) {
  if (!gated_norm_parts_supported(a)) return cudaErrorInvalidValue;
  gated_sum_squares_kernel<<<dim3(static_cast<unsigned>(a.rows), a.width / a.local_group_size), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_gated_norm_scale(const GatedNormPartsArgs& a, cudaStream_t stream) {
  if (!gated_norm_parts_supported(a)) return cudaErrorInvalidValue;
  gated_norm_scale_kernel<<<dim3(static_cast<unsigned>(a.rows), (a.width + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

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
