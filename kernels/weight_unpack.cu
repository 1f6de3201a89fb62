#include "kernels/weight_unpack.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

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

// kS8 from int4 where rows are whole 16-byte pieces: one thread turns 16 packed bytes into 32
// int8 values (two 16-byte stores). A byte holds columns 2j (low nibble) and 2j + 1.
__global__ void __launch_bounds__(kThreads) weight_unpack_s8_pieces_kernel(WeightUnpackArgs a) {
  const int64_t pieces = a.rows * a.cols / 32;
  const uint4* in = static_cast<const uint4*>(a.values);
  uint4* out = static_cast<uint4*>(a.out);
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < pieces; i += int64_t(gridDim.x) * kThreads) {
    const uint4 packed = in[i];
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    uint32_t bytes[8];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t low = words[w] & 0x0F0F0F0Fu, high = (words[w] >> 4) & 0x0F0F0F0Fu;
      // Interleave the nibbles back into column order, then sign-extend each byte: n ^ 8 is
      // n + 8 ∈ [0, 15] for a two's-complement nibble; + 0x78 ^ 0x80 makes it n (no carry leaves a byte).
      bytes[2 * w] = ((__byte_perm(low, high, 0x5140) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u;
      bytes[2 * w + 1] = ((__byte_perm(low, high, 0x7362) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u;
    }
    out[2 * i] = make_uint4(bytes[0], bytes[1], bytes[2], bytes[3]);
    out[2 * i + 1] = make_uint4(bytes[4], bytes[5], bytes[6], bytes[7]);
  }
}

bool pieces_apply(const WeightUnpackArgs& a) {
  return a.out_type == ElementType::kS8 && a.bits == 4 && a.cols % 32 == 0 &&
         reinterpret_cast<uintptr_t>(a.values) % 16 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
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
  if (pieces_apply(a)) {
    const int64_t blocks = std::min<int64_t>((a.rows * a.cols / 32 + kThreads - 1) / kThreads, 4096);
    weight_unpack_s8_pieces_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }
  const int64_t blocks = std::min<int64_t>((a.rows * a.cols + kThreads - 1) / kThreads, 4096);
  weight_unpack_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
