#include "kernels/weight_unpack.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/quant_epilogue.cuh"

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
    for (int w = 0; w < 4; ++w) int4x8_to_int8(words[w], bytes[2 * w], bytes[2 * w + 1]);
    out[2 * i] = make_uint4(bytes[0], bytes[1], bytes[2], bytes[3]);
    out[2 * i + 1] = make_uint4(bytes[4], bytes[5], bytes[6], bytes[7]);
  }
}

// kF16 from int4 the same way, each 32-value piece inside one weight group: fp16(q · s) per value
// (the generic kernel's rounding), four 16-byte stores.
__global__ void __launch_bounds__(kThreads) weight_unpack_f16_pieces_kernel(WeightUnpackArgs a) {
  const int64_t pieces = a.rows * a.cols / 32;
  const int pieces_per_row = a.cols / 32, groups = a.cols / a.group_size;
  const uint4* in = static_cast<const uint4*>(a.values);
  uint4* out = static_cast<uint4*>(a.out);
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < pieces; i += int64_t(gridDim.x) * kThreads) {
    const int64_t r = i / pieces_per_row;
    const int c0 = static_cast<int>(i % pieces_per_row) * 32;
    const float scale = a.scales[r * groups + c0 / a.group_size];
    const uint4 packed = in[i];
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    uint32_t halves[16];
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int b = 0; b < 4; ++b) {  // byte b holds columns 8w + 2b (low nibble) and 8w + 2b + 1
        const int low = static_cast<int>(words[w] << (28 - 8 * b)) >> 28, high = static_cast<int>(words[w] << (24 - 8 * b)) >> 28;
        const __half2 h = __halves2half2(__float2half_rn(__fmul_rn(static_cast<float>(low), scale)),
                                         __float2half_rn(__fmul_rn(static_cast<float>(high), scale)));
        halves[4 * w + b] = *reinterpret_cast<const uint32_t*>(&h);
      }
#pragma unroll
    for (int v = 0; v < 4; ++v) out[4 * i + v] = make_uint4(halves[4 * v], halves[4 * v + 1], halves[4 * v + 2], halves[4 * v + 3]);
  }
}

bool aligned_pieces(const WeightUnpackArgs& a) {
  return a.bits == 4 && a.cols % 32 == 0 && reinterpret_cast<uintptr_t>(a.values) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
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
  if (aligned_pieces(a) && (a.out_type == ElementType::kS8 || a.group_size % 32 == 0)) {
    const int64_t blocks = std::min<int64_t>((a.rows * a.cols / 32 + kThreads - 1) / kThreads, 4096);
    if (a.out_type == ElementType::kS8) {
      weight_unpack_s8_pieces_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
    } else {
      weight_unpack_f16_pieces_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
    }
    return cudaGetLastError();
  }
  const int64_t blocks = std::min<int64_t>((a.rows * a.cols + kThreads - 1) / kThreads, 4096);
  weight_unpack_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
