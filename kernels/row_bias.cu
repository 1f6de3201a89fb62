#include "kernels/row_bias.h"

#include <algorithm>

namespace ssdq::kernels {
namespace {

// A grid-stride loop over the flat elements; the bias row stays in L1.
__global__ void add_row_bias_kernel(float* data, int64_t total, int width, const float* __restrict__ bias) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    data[i] += bias[i % width];
}

}  // namespace

bool row_bias_supported(const RowBiasArgs& a) { return a.rows > 0 && a.width > 0 && a.data && a.bias; }

cudaError_t launch_add_row_bias(const RowBiasArgs& a, cudaStream_t stream) {
  if (!row_bias_supported(a)) return cudaErrorInvalidValue;
  const int64_t total = a.rows * a.width;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65536);
  add_row_bias_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a.data, total, a.width, a.bias);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
