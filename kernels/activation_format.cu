#include "kernels/activation_format.h"

#include <algorithm>

#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) activation_format_kernel(ActivationFormatArgs a) {
  for (int64_t row = blockIdx.y; row < a.rows; row += gridDim.y)
  for (int c = blockIdx.x * kThreads + threadIdx.x; c < a.width; c += gridDim.x * kThreads) {
    float* x = a.data + row * a.stride;
    float v = x[c];
    switch (a.format) {
      case ActivationFormatArgs::Format::kFloat16:
        v = round_to_fp16(v);
        break;
      case ActivationFormatArgs::Format::kInt8: {
        const float scale = a.scales[a.index ? a.index[c] : 0];
        const int8_t q = quantize_int8(v, scale);
        v = __fmul_rn(static_cast<float>(q), scale);
        if (a.q_out) a.q_out[row * a.q_stride + c] = q;
        break;
      }
      case ActivationFormatArgs::Format::kFloat32:
        break;
    }
    x[c] = v;
    if (a.h_out) a.h_out[row * a.h_stride + c] = __float2half_rn(v);
  }
}

}  // namespace

bool activation_format_supported(const ActivationFormatArgs& a) {
  const bool int8 = a.format == ActivationFormatArgs::Format::kInt8;
  return a.rows > 0 && a.width > 0 && a.data && a.stride >= a.width && (!int8 || a.scales) &&
         (!a.q_out || (int8 && a.q_stride >= a.width)) && (!a.h_out || a.h_stride >= a.width);
}

cudaError_t launch_activation_format(const ActivationFormatArgs& a, cudaStream_t stream) {
  if (!activation_format_supported(a)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(std::min((a.width + kThreads - 1) / kThreads, 64)), static_cast<unsigned>(std::min<int64_t>(a.rows, 65535)));
  activation_format_kernel<<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
