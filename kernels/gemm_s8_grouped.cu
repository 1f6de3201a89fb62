#include "kernels/gemm_s8_grouped.h"

#include <cstdint>

#include "kernels/gemm_s8_grouped.cuh"
#include "kernels/gemm_s8_grouped_sm90.h"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

using namespace grouped_gemm;

template <int kWarpsM_, int kWarpsN_, int kMT_, int kNT_, int kStages_>
struct Tile {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kStages = kStages_;
  static constexpr int kMT = kMT_, kNT = kNT_;  // m16 and n8 tiles of a warp
  static constexpr int kM = kWarpsM * 16 * kMT, kN = kWarpsN * 8 * kNT, kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kStageBytes = kM * kBK + kN * kBK;  // int4 weights use half of their part
  static constexpr int kShared = kStages * kStageBytes;  // cp.async keeps kStages − 1 tiles in flight
  static_assert(kNT % 2 == 0, "B fragments are loaded for pairs of n8 tiles");
};
using LargeTile = Tile<2, 4, 4, 4, 6>;  // 128 × 128, eight warps of 64 × 32
using SmallTile = Tile<1, 4, 2, 2, 4>;  // 32 × 64, four warps of 32 × 16
using NarrowTile = Tile<2, 2, 1, 2, 4>;  // 32 × 32, four warps of 16 × 16

// kInt4W: the weights stay packed int4 in shared memory; each lane unpacks the eight k values of
// one packed word into its b0, b1 (k 8q..8q + 3 and 8q + 4..8q + 7 of a 32-wide k step, q = lane % 4)
// and loads the x bytes of the same k as a0, a2 (a1, a3 for row + 8): the MMA sums the same
// products in another order, which is exact.
template <typename T, bool kBiasedSums, bool kInt4W>
__global__ void __launch_bounds__(T::kThreads, 1) gemm_s8_grouped_kernel(GemmS8GroupedArgs a) {
  extern __shared__ __align__(128) uint8_t shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  const int64_t m0 = int64_t(blockIdx.y) * T::kM, n0 = int64_t(blockIdx.x) * T::kN;
  const int k_tiles = static_cast<int>((a.k + kBK - 1) / kBK);
  const int steps_per_group = static_cast<int>(a.group_size / 32), groups = static_cast<int>(a.k / a.group_size);

  wait_for_previous_grid();
  allow_next_grid();

  const TileLoader<T::kM, T::kThreads> x_loader(a.x, a.ldx, m0, a.m);
  const TileLoader<T::kN, T::kThreads, kInt4W> w_loader(a.w, a.ldw, n0, a.n);
  // Stages are used round-robin; the indices advance by compare-and-wrap (no division in the loop).
  int load_tile = 0, load_stage = 0;
  auto load_next = [&] {
    if (load_tile < k_tiles) {
      uint8_t* stage = shared + load_stage * T::kStageBytes;
      x_loader.load(stage, int64_t(load_tile) * kBK, a.k);
      w_loader.load(stage + T::kM * kBK, int64_t(load_tile) * kBK, a.k);
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
    ++load_tile;
    load_stage = load_stage + 1 == T::kStages ? 0 : load_stage + 1;
  };
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) load_next();

  // This lane's output columns: n8 tile t, columns 2·(lane % 4) + j.
  const int col0 = static_cast<int>(n0) + warp_n * 8 * T::kNT + 2 * (lane % 4), n = static_cast<int>(a.n);
  float scales[T::kNT][2];
  auto load_scales = [&](int g) {
#pragma unroll
    for (int t = 0; t < T::kNT; ++t)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = col0 + t * 8 + j;
        scales[t][j] = col < n ? __ldg(a.w_scales + col * groups + g) : 0.f;
      }
  };
  load_scales(0);

  constexpr int32_t kZero = kBiasedSums ? kBiasedZero : 0;
  int acc[T::kMT][T::kNT][4];
  float chain[T::kMT][T::kNT][4];
#pragma unroll
  for (int i = 0; i < T::kMT; ++i)
#pragma unroll
    for (int t = 0; t < T::kNT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][t][e] = kZero;
        chain[i][t][e] = 0.f;
      }

  int step = 0, group = 0, stage_index = 0;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait_pending<T::kStages - 2>();
    __syncthreads();  // stage kt is in; everyone is done with the stage the next load overwrites
    load_next();
    const uint8_t* stage = shared + stage_index * T::kStageBytes;
    stage_index = stage_index + 1 == T::kStages ? 0 : stage_index + 1;
    const uint32_t a_base = shared_address(stage), b_base = shared_address(stage + T::kM * kBK);
    const int steps = static_cast<int>(min(int64_t(kBK / 32), (a.k - int64_t(kt) * kBK) / 32));
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk) {
      if (kk >= steps) break;
      uint32_t af[T::kMT][4], bf[T::kNT][2];
      if constexpr (kInt4W) {
        const int q = lane % 4, g = lane / 4;
#pragma unroll
        for (int i = 0; i < T::kMT; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = warp_m * 16 * T::kMT + i * 16 + g + 8 * h;
            const uint2 bytes = *reinterpret_cast<const uint2*>(stage + swizzled(row, kk * 2 + q / 2) + 8 * (q % 2));
            af[i][h] = bytes.x;
            af[i][h + 2] = bytes.y;
          }
#pragma unroll
        for (int t = 0; t < T::kNT; ++t) {
          const int row = warp_n * 8 * T::kNT + t * 8 + g;
          int4x8_to_int8(*reinterpret_cast<const uint32_t*>(stage + T::kM * kBK + swizzled_int4(row, kk) + 4 * q), bf[t][0],
                         bf[t][1]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < T::kMT; ++i)
          ldmatrix_x4(af[i], a_base + swizzled(warp_m * 16 * T::kMT + i * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
        for (int p = 0; p < T::kNT / 2; ++p) {
          uint32_t r[4];
          ldmatrix_x4(r, b_base + swizzled(warp_n * 8 * T::kNT + p * 16 + (lane & 7) + (lane >> 4) * 8,
                                           kk * 2 + ((lane >> 3) & 1)));
          bf[2 * p][0] = r[0];
          bf[2 * p][1] = r[1];
          bf[2 * p + 1][0] = r[2];
          bf[2 * p + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int i = 0; i < T::kMT; ++i)
#pragma unroll
        for (int t = 0; t < T::kNT; ++t) mma_s8_16832(acc[i][t], af[i], bf[t][0], bf[t][1]);
      if (++step == steps_per_group) {  // the group is complete: fold its sums into the chain
#pragma unroll
        for (int i = 0; i < T::kMT; ++i)
#pragma unroll
          for (int t = 0; t < T::kNT; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              chain[i][t][e] = __fmaf_rn(group_sum<kBiasedSums>(acc[i][t][e]), scales[t][e & 1], chain[i][t][e]);
              acc[i][t][e] = kZero;
            }
        step = 0;
        if (++group < groups) load_scales(group);
      }
    }
  }
  cp_async_wait_pending<0>();

#pragma unroll
  for (int i = 0; i < T::kMT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = m0 + warp_m * 16 * T::kMT + i * 16 + lane / 4 + 8 * h;
      if (row >= a.m) continue;
#pragma unroll
      for (int t = 0; t < T::kNT; ++t)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int col = col0 + t * 8 + j;
          if (col < n)
            store_projection(a.out, a.out_type, row * a.ldout + col, __fmul_rn(chain[i][t][2 * h + j], a.x_scale), a.bias,
                             col, a.accumulate);
        }
    }
}

bool is_sm90();  // below

template <typename T>
cudaError_t launch_tile(const GemmS8GroupedArgs& a, cudaStream_t stream) {
  // Biased sums save sm_80 its quarter-rate I2F; sm_90 converts with a full-rate I2FP, which costs
  // one instruction where the bias costs two (2.7b W4A8, 32 rows, packed 32 × 64: in_proj 18.8 →
  // 17.8 µs, out_proj 28.0 → 26.6 µs on an H100).
  const bool biased = a.sums == GemmS8GroupedSums::kBiased ||
                      (a.sums == GemmS8GroupedSums::kAuto && a.group_size <= kBiasedMaxGroup && !is_sm90());
  auto* kernel = a.w_bits == 4 ? (biased ? gemm_s8_grouped_kernel<T, true, true> : gemm_s8_grouped_kernel<T, false, true>)
                               : (biased ? gemm_s8_grouped_kernel<T, true, false> : gemm_s8_grouped_kernel<T, false, false>);
  if (const cudaError_t status = allow_dynamic_shared(kernel, T::kShared); status != cudaSuccess) return status;
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>((a.n + T::kN - 1) / T::kN), static_cast<unsigned>((a.m + T::kM - 1) / T::kM));
  shape.block = dim3(T::kThreads);
  shape.shared = T::kShared;
  return launch_kernel(kernel, shape, stream, a);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// wgmma machine code is built for sm_90a, which runs on compute capability 9.0 alone.
bool is_sm90() {
  return current_device_attribute(cudaDevAttrComputeCapabilityMajor) == 9 &&
         current_device_attribute(cudaDevAttrComputeCapabilityMinor) == 0;
}

}  // namespace

bool gemm_s8_grouped_supported(const GemmS8GroupedArgs& a) {
  const bool float_out = a.out_type == ElementType::kF32 || a.out_type == ElementType::kBF16 || a.out_type == ElementType::kF16;
  const bool shape = a.m > 0 && a.m <= 65535LL * 32 && a.n > 0 && a.k > 0 && a.k % 32 == 0 && a.group_size > 0 &&
                     a.group_size % 32 == 0 && a.k % a.group_size == 0 &&
                     a.n * (a.k / a.group_size) < (int64_t(1) << 31);  // scale offsets in int
  const bool strides = a.ldx >= a.k && a.ldw >= a.k && a.ldx % 16 == 0 && a.ldw % (a.w_bits == 4 ? 32 : 16) == 0 &&
                       a.ldout >= a.n;
  const bool bits = a.w_bits == 8 || (a.w_bits == 4 && a.tile != GemmS8GroupedTile::kWgmma);
  const bool sums = a.sums != GemmS8GroupedSums::kBiased ||
                    (a.group_size <= kBiasedMaxGroup && a.tile != GemmS8GroupedTile::kWgmma);
  const bool operands = a.x && a.w && a.w_scales && a.out && aligned16(a.x) && aligned16(a.w);
  const int major = current_device_attribute(cudaDevAttrComputeCapabilityMajor);
  const bool device = a.tile == GemmS8GroupedTile::kWgmma ? is_sm90() && gemm_s8_grouped_wgmma_supported(a) : major >= 8;
  return float_out && shape && strides && bits && sums && operands && (!a.accumulate || a.out_type == ElementType::kF32) &&
         device;
}

cudaError_t launch_gemm_s8_grouped(const GemmS8GroupedArgs& a, cudaStream_t stream) {
  if (!gemm_s8_grouped_supported(a)) return cudaErrorInvalidValue;
  GemmS8GroupedTile tile = a.tile;
  if (tile == GemmS8GroupedTile::kAuto) {
    const bool wgmma = a.w_bits == 8 && a.sums != GemmS8GroupedSums::kBiased && is_sm90() &&
                       gemm_s8_grouped_wgmma_supported(a);
    tile = a.m <= 64 ? GemmS8GroupedTile::kSmall : wgmma ? GemmS8GroupedTile::kWgmma : GemmS8GroupedTile::kLarge;
    // Narrow tiles where 32 × 64 ones would leave half the SMs idle (2.7b W4A8 at 8–32 rows: out_proj
    // 40 blocks; TPOT −6 to −9 %, docs/kernels/gemm.md).
    const int64_t small_blocks = (a.n + SmallTile::kN - 1) / SmallTile::kN * ((a.m + SmallTile::kM - 1) / SmallTile::kM);
    if (tile == GemmS8GroupedTile::kSmall && 2 * small_blocks <= current_device_attribute(cudaDevAttrMultiProcessorCount))
      tile = GemmS8GroupedTile::kNarrow;
  }
  if (tile == GemmS8GroupedTile::kWgmma) return launch_gemm_s8_grouped_wgmma(a, stream);
  if (tile == GemmS8GroupedTile::kNarrow) return launch_tile<NarrowTile>(a, stream);
  return tile == GemmS8GroupedTile::kLarge ? launch_tile<LargeTile>(a, stream) : launch_tile<SmallTile>(a, stream);
}

}  // namespace ssdq::kernels
