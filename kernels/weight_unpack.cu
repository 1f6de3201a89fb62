#include "kernels/weight_unpack.h"

#include <cuda_fp16.h>

#include <algorithm>

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) weight_unpack_kernel(WeightUnpackArgs a) {
  const int64_t total = a.rows * a.cols;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads) {
    const int64_t r = i / a.cols;
    const int c = static_cast<int>(i % a.cols);
    int q;
    if (a.bits == 4) {
      const int nibble = (static_cast<const uint8_t*>(a.values)[r * (a.cols / 2) + c / 2] >> (4 * (c % 2))) & 0xF;
      q = nibble >= 8 ? nibble - 16 : nibble;
    } else {
      q = static_cast<const int8_t*>(a.values)[i];
    }
    if (a.out_type == ElementType::kS8) {
      static_cast<int8_t*>(a.out)[i] = static_cast<int8_t>(q);
    } else {
      const int groups = a.cols / a.group_size;
      const float scale = a.scales[r * groups + c / a.group_size];
      static_cast<__half*>(a.out)[i] = __float2half_rn(__fmul_rn(static_cast<float>(q), scale));
    }
  }
}

}  // namespace

bool weight_unpack_supported(const WeightUnpackArgs& a) {
  const bool types = (a.out_type == ElementType::kS8 && a.bits == 4) ||
                     (a.out_type == ElementType::kF16 && (a.bits == 4 || a.bits == 8) && a.scales &&
                      a.group_size > 0 && a.cols % a.group_size == 0);
  return types && a.rows > 0 && a.cols > 0 && (a.bits == 8 || a.cols % 2 == 0) && a.values && a.out;
}

cudaError_t launch_weight_unpack(const WeightUnpackArgs& a, cudaStream_t stream) {
  if (!weight_unpack_supported(a)) return cudaErrorInvalidValue;
  const int64_t blocks = std::min<int64_t>((a.rows * a.cols + kThreads - 1) / kThreads, 4096);
  weight_unpack_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
