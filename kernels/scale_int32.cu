#include "kernels/scale_int32.h"

#include <algorithm>

#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) scale_int32_kernel(ScaleInt32Args a) {
  const int64_t row = blockIdx.y;
  for (int64_t col = blockIdx.x * int64_t(kThreads) + threadIdx.x; col < a.n; col += int64_t(gridDim.x) * kThreads) {
    const int32_t acc = a.acc[row * a.ld_acc + col];
    if (a.groups == 1) {
      store_projection(a.out, a.out_type, row * a.ldout + col, scale_per_channel(acc, a.w_scales[col], a.x_scale),
                       a.bias, col, a.accumulate);
      continue;
    }
    float* chain = a.chain + row * a.n + col;
    const float y = __fmaf_rn(static_cast<float>(acc), a.w_scales[col * a.groups + a.group], a.group == 0 ? 0.f : *chain);
    if (a.group + 1 < a.groups) {
      *chain = y;
    } else {
      store_projection(a.out, a.out_type, row * a.ldout + col, __fmul_rn(y, a.x_scale), a.bias, col, a.accumulate);
    }
  }
}

}  // namespace

bool scale_int32_supported(const ScaleInt32Args& a) {
  const bool float_out = a.out_type == ElementType::kF32 || a.out_type == ElementType::kBF16 || a.out_type == ElementType::kF16;
  const bool grouping = a.groups == 1 || (a.groups > 1 && a.group >= 0 && a.group < a.groups && a.chain);
  return float_out && grouping && a.m > 0 && a.m <= 65535 && a.n > 0 && a.acc && a.ld_acc >= a.n && a.w_scales && a.out &&
         a.ldout >= a.n && (!a.accumulate || a.out_type == ElementType::kF32);
}

cudaError_t launch_scale_int32(const ScaleInt32Args& a, cudaStream_t stream) {
  if (!scale_int32_supported(a)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((a.n + kThreads - 1) / kThreads, 64)), static_cast<unsigned>(a.m));
  scale_int32_kernel<<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
