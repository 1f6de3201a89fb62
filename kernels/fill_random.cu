#include "kernels/fill_random.h"

#include <cstdint>
#include <type_traits>

namespace ssdq::kernels {
namespace {

__device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__device__ inline T convert(float v) {
  if constexpr (std::is_same_v<T, int8_t>) {
    return static_cast<int8_t>(fminf(fmaxf(rintf(v), -127.f), 127.f));
  } else {
    return from_float<T>(v);
  }
}

template <typename T>
__global__ void fill_random_kernel(FillRandomArgs a) {
  T* out = static_cast<T*>(a.out);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.count; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(splitmix64(a.seed * 0x100000001b3ull + i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    out[i] = convert<T>(a.center + a.spread * u);
  }
}

}  // namespace

cudaError_t launch_fill_random(const FillRandomArgs& a, cudaStream_t stream) {
  if (a.count <= 0 || !a.out) return cudaErrorInvalidValue;
  const int blocks = static_cast<int>(std::min<int64_t>((a.count + 255) / 256, 65536));
  switch (a.type) {
    case ElementType::kBF16: fill_random_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(a); break;
    case ElementType::kF16: fill_random_kernel<__half><<<blocks, 256, 0, stream>>>(a); break;
    case ElementType::kS8: fill_random_kernel<int8_t><<<blocks, 256, 0, stream>>>(a); break;
    case ElementType::kF32: fill_random_kernel<float><<<blocks, 256, 0, stream>>>(a); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
