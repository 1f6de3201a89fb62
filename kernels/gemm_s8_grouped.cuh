// Device pieces shared by the grouped integer projection's kernels (kernels/gemm_s8_grouped.h):
// the swizzled stage layout they read (the wgmma kernel's TMA writes the same 128-byte swizzle),
// the cp.async loader of the mma.sync tiles, and the conversion of a group's int32 sums to float.
#pragma once

#include <cstdint>

#include "kernels/quant_epilogue.cuh"
#include "kernels/tensor_core.cuh"

namespace ssdq::kernels::grouped_gemm {

constexpr int kBK = 128;  // k bytes of each operand a pipeline stage holds: one 128-byte row
constexpr int kChunks = kBK / 16;

// kIntegerBias's bits (quant_epilogue.cuh): an accumulator started there holds 1.5·2²³ + Σ as a float
// while |Σ| ≤ 2²², so float(Σ) is one subtraction (sm_80's I2F runs at a quarter of the FMA rate,
// and a fold converts every accumulator). Groups of ≤ 256 products of |int8| ≤ 128 stay inside.
// The mma.sync kernels use it on sm_80; on sm_90, where I2FP converts at full rate in one
// instruction, they and the wgmma kernel convert directly.
constexpr int32_t kBiasedZero = kIntegerBiasBits;
constexpr int64_t kBiasedMaxGroup = 256;

template <bool kBiased>
__device__ __forceinline__ float group_sum(int acc) {
  return kBiased ? __fsub_rn(__int_as_float(acc), kIntegerBias) : static_cast<float>(acc);
}

// Byte offset of 16-byte chunk c of row r in a tile of 128-byte rows: the chunks are XOR-swizzled
// by the row (the 128-byte swizzle of wgmma's shared-memory layouts, with 1024-byte aligned
// tiles), so the eight rows one ldmatrix phase reads lie on different banks.
__device__ __forceinline__ int swizzled(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 4); }

// The same for a tile of packed int4 weights (64-byte rows, four chunks): chunk c of row r moves to
// c ^ ((r / 2) % 4), so the eight rows of a fragment load cover all 32 banks.
__device__ __forceinline__ int swizzled_int4(int row, int chunk) {
  return row * (kBK / 2) + ((chunk ^ ((row >> 1) & 3)) << 4);
}

// Copies rows [row0, row0 + kRows) × k [k0, k0 + kBK) of a row-major int8 matrix (kInt4: packed
// int4, half the bytes) into a stage's tile with cp.async; what lies outside [0, rows) × [0, k) is
// zero-filled, so it adds nothing to the sums. Thread t copies chunk t % c of rows t / c +
// j · kThreads / c, c the chunks of a tile row.
template <int kRows, int kThreads, bool kInt4 = false>
struct TileLoader {
  static constexpr int kRowChunks = kInt4 ? kChunks / 2 : kChunks;
  static_assert(kThreads % (8 * kRowChunks) == 0 && (kRows * kRowChunks) % kThreads == 0,
                "whole rows per pass, same swizzle");
  static constexpr int kPasses = kRows * kRowChunks / kThreads, kRowStep = kThreads / kRowChunks;
  static constexpr int kRowBytes = kRowChunks * 16;

  // ld in elements (int4: ld / 2 bytes a row).
  __device__ TileLoader(const int8_t* base, int64_t ld, int64_t row0, int64_t rows) {
    const int r = threadIdx.x / kRowChunks, c = threadIdx.x % kRowChunks;
    col = c * 16 * (kInt4 ? 2 : 1);
    offset = kInt4 ? swizzled_int4(r, c) : swizzled(r, c);
    const int64_t ld_bytes = kInt4 ? ld / 2 : ld;
    stride = ld_bytes * kRowStep;
    src = base + (row0 + r) * ld_bytes + c * 16;
    fallback = base;
    valid_rows = 0;
#pragma unroll
    for (int j = 0; j < kPasses; ++j) valid_rows |= unsigned(row0 + r + j * kRowStep < rows) << j;
  }

  // kCheckK = false: the caller knows k0 + kBK ≤ k.
  template <bool kCheckK = true>
  __device__ __forceinline__ void load(uint8_t* tile, int64_t k0, int64_t k) const {
    const bool k_valid = !kCheckK || k0 + col < k;
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const bool valid = k_valid && (valid_rows >> j & 1);
      const int8_t* from = valid ? src + j * stride + (kInt4 ? k0 / 2 : k0) : fallback;
      cp_async_16_or_zero(tile + offset + j * kRowStep * kRowBytes, from, valid);
    }
  }

  const int8_t* src;
  const int8_t* fallback;
  int64_t stride;
  int offset, col;
  unsigned valid_rows;
};

}  // namespace ssdq::kernels::grouped_gemm
