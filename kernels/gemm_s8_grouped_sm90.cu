// The grouped integer projection (kernels/gemm_s8_grouped.h) on Hopper's warpgroup MMA. A block
// of two warpgroups computes a 128 × 128 tile (warpgroup w: rows 64w..64w + 63) with
// wgmma.m64n128k32 (s8 × s8 → s32) reading both operands from shared memory, which cp.async fills
// in the 128-byte swizzled layout (kernels/gemm_s8_grouped.cuh). A weight group's first k step
// starts its sums from zero (scale-d = 0); after its last one the warpgroup waits for its MMAs and
// folds the sums into the fp32 chain in registers, converting each with one I2FP (sm_90's int to
// float at full rate; the biased sums of the sm_80 tiles cost an add and a subtract). Within a
// group the MMAs of one k tile stay in flight while the next is issued. Groups are whole k tiles (multiples of 128), so the folds fall
// between tiles. Machine code for sm_90a only.
#include "kernels/gemm_s8_grouped_sm90.h"

#include <cstdint>

#include "kernels/gemm_s8_grouped.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

using namespace grouped_gemm;

constexpr int kThreads = 256, kM = 128, kN = 128, kStages = 6;
constexpr int kTileA = kM * kBK, kStageBytes = (kM + kN) * kBK;
// The weight scales of the group a stage's tile ends (kN floats) sit in a ring after the stages.
constexpr int kScaleRing = kStages * kN * 4;
constexpr int kShared = kStages * kStageBytes + kScaleRing + 1024;  // + room to align the stages to 1024 bytes
// Tiles are loaded this far ahead: the stage a load overwrites was last read by the MMAs of two
// tiles back, which every warpgroup has waited for by then.
constexpr int kAhead = kStages - 2;

// A shared-memory matrix descriptor for a K-major operand in the 128-byte swizzle: rows of 128
// bytes, eight-row atoms 1024 bytes apart (the stride byte offset); the leading byte offset is
// unused for this layout. Moving along k by 32 bytes adds 32 to the start address.
__device__ __forceinline__ uint64_t sw128_descriptor(uint32_t address) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// The 64 accumulators of an m64n128 int32 tile as read-write asm operands %0..%63.
#define SSDQ_WGMMA_ACCUMULATORS(d)                                                                       \
  "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), \
  "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), \
  "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), \
  "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), \
  "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), \
  "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), \
  "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), \
  "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])

// d (+)= A · Bᵀ for one k step: A 64 × 32 and B 128 × 32 int8 in shared memory; accumulate = 0
// ignores d's old contents.
__device__ __forceinline__ void wgmma_m64n128k32_s8(int (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
      : SSDQ_WGMMA_ACCUMULATORS(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

// Keeps the compiler from moving reads or writes of the accumulators across the wgmma waits.
__device__ __forceinline__ void fence_accumulators(int (&d)[64]) {
  asm volatile("" : SSDQ_WGMMA_ACCUMULATORS(d)::"memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Makes this thread's shared-memory writes (cp.async's) visible to the async proxy wgmma reads through.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__global__ void __launch_bounds__(kThreads, 1) gemm_s8_grouped_wgmma_kernel(GemmS8GroupedArgs a) {
  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = shared_raw + ((1024 - shared_address(shared_raw) % 1024) % 1024);
  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int64_t m0 = int64_t(blockIdx.y) * kM, n0 = int64_t(blockIdx.x) * kN;
  const int k_tiles = static_cast<int>(a.k / kBK), tiles_per_group = static_cast<int>(a.group_size / kBK);
  const int groups = static_cast<int>(a.k / a.group_size);

  wait_for_previous_grid();
  allow_next_grid();

  StreamingTileLoader<kM, kThreads> x_loader(a.x, a.ldx, m0, a.m);
  StreamingTileLoader<kN, kThreads> w_loader(a.w, a.ldw, n0, a.n);
  // Stages are used round-robin; the indices advance by compare-and-wrap (no division in the loop).
  float* scale_ring = reinterpret_cast<float*>(shared + kStages * kStageBytes);
  int load_tile = 0, load_stage = 0, load_tile_in_group = 0, load_group = 0;
  auto load_next = [&] {
    if (load_tile < k_tiles) {
      uint8_t* stage = shared + load_stage * kStageBytes;
      x_loader.load_next(stage);
      w_loader.load_next(stage + kTileA);
      if (++load_tile_in_group == tiles_per_group) {  // this tile ends a group: bring its scales
        if (threadIdx.x < kN) {
          const int64_t col = n0 + threadIdx.x;
          cp_async_4_or_zero(scale_ring + load_stage * kN + threadIdx.x,
                             col < a.n ? a.w_scales + col * groups + load_group : a.w_scales, col < a.n);
        }
        load_tile_in_group = 0;
        ++load_group;
      }
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
    ++load_tile;
    load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;
  };
#pragma unroll
  for (int s = 0; s < kAhead; ++s) load_next();

  // d[4j + e] is row 16·warp + lane / 4 (+ 8 for e ≥ 2) of the warpgroup's 64 rows, column
  // 8j + 2·(lane % 4) + (e & 1) of the tile.
  const int col0 = static_cast<int>(n0) + 2 * (lane % 4), n = static_cast<int>(a.n);
  int acc[64];
  float chain[64];
#pragma unroll
  for (int e = 0; e < 64; ++e) {
    acc[e] = 0;
    chain[e] = 0.f;
  }

  // Descriptors of stage 0 (this warpgroup's 64 rows of x, the tile's 128 rows of w); a stage is
  // kStageBytes / 16 further in the address field, a 32-byte k step 2.
  const uint64_t a_desc0 = sw128_descriptor(shared_address(shared) + warpgroup * 64 * kBK);
  const uint64_t b_desc0 = sw128_descriptor(shared_address(shared) + kTileA);
  int stage = 0, tile_in_group = 0;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait_pending<kAhead - 1>();
    fence_proxy_async_shared();
    __syncthreads();  // tile kt is in every thread's view; the stage the next load overwrites is free
    const uint64_t stage_offset = uint64_t(stage * (kStageBytes / 16));
    const float* scales = scale_ring + stage * kN + 2 * (lane % 4);
    stage = stage + 1 == kStages ? 0 : stage + 1;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk)
      wgmma_m64n128k32_s8(acc, a_desc0 + stage_offset + 2 * kk, b_desc0 + stage_offset + 2 * kk,
                          !(tile_in_group == 0 && kk == 0));
    wgmma_commit();
    load_next();  // while the MMAs run
    if (++tile_in_group != tiles_per_group) {
      wgmma_wait<1>();  // tile kt − 1's MMAs are done: its stage can be refilled
      continue;
    }
    tile_in_group = 0;
    wgmma_wait<0>();
    fence_accumulators(acc);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 s = *reinterpret_cast<const float2*>(scales + 8 * j);
#pragma unroll
      for (int e = 4 * j; e < 4 * j + 4; ++e)
        chain[e] = __fmaf_rn(static_cast<float>(acc[e]), e & 1 ? s.y : s.x, chain[e]);
    }
  }
  // The last tile ended a group, so nothing is in flight; saying so keeps ptxas from placing a
  // wait of its own on the loop's back edge.
  wgmma_wait<0>();
  fence_accumulators(acc);
  cp_async_wait_pending<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = m0 + 64 * warpgroup + 16 * warp + lane / 4 + 8 * r;
    if (row >= a.m) continue;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = col0 + 8 * j + c;
        if (col < n)
          store_projection(a.out, a.out_type, row * a.ldout + col, __fmul_rn(chain[4 * j + 2 * r + c], a.x_scale), a.bias,
                           col, a.accumulate);
      }
  }
}

}  // namespace

bool gemm_s8_grouped_wgmma_supported(const GemmS8GroupedArgs& a) { return a.k % kBK == 0 && a.group_size % kBK == 0; }

cudaError_t launch_gemm_s8_grouped_wgmma(const GemmS8GroupedArgs& a, cudaStream_t stream) {
  if (!gemm_s8_grouped_wgmma_supported(a)) return cudaErrorInvalidValue;
  auto* kernel = gemm_s8_grouped_wgmma_kernel;
  if (const cudaError_t status = allow_dynamic_shared(kernel, kShared); status != cudaSuccess) return status;
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>((a.n + kN - 1) / kN), static_cast<unsigned>((a.m + kM - 1) / kM));
  shape.block = dim3(kThreads);
  shape.shared = kShared;
  return launch_kernel(kernel, shape, stream, a);
}

#undef SSDQ_WGMMA_ACCUMULATORS

}  // namespace ssdq::kernels
