#include "kernels/fill_random.h"

namespace ssdq::kernels {
namespace {

__device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_random_kernel(FillRandomArgs a) {
  T* out = static_cast<T*>(a.out);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.count; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(splitmix64(a.seed * 0x100000001b3ull + i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    out[i] = from_float<T>(a.center + a.spread * u);
  }
}

}  // namespace

cudaError_t launch_fill_random(const FillRandomArgs& a, cudaStream_t stream) {
  if (a.count <= 0 || !a.out) return cudaErrorInvalidValue;
  const int blocks = static_cast<int>(std::min<int64_t>((a.count + 255) / 256, 65536));
  if (a.type == ElementType::kBF16) {
    fill_random_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(a);
  } else {
    fill_random_kernel<float><<<blocks, 256, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
