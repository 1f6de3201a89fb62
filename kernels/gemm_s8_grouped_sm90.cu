// The grouped integer projection (kernels/gemm_s8_grouped.h) on Hopper's warpgroup MMA. A block
// computes a 128 × 128 tile: two consumer warpgroups (warpgroup w: rows 64w..64w + 63) run
// wgmma.m64n128k32 (s8 × s8 → s32) on both operands in shared memory, and a ninth warp produces
// them: for each k tile its lane 0 waits until the stage is free (empty[s]: every consumer warp's
// MMAs on it retired), announces the stage's bytes on full[s] and requests the x and w boxes from
// the TMA (the tensor maps' 128-byte swizzle is the layout the descriptors read; rows past m or n
// arrive as zeros); for a k tile that ends a weight group its 32 lanes copy the group's 128 scales
// into slot g mod kStages of a ring, counted on scales_full[slot]. A group's first k step starts
// its sums from zero (scale-d = 0); after its last one the warpgroup waits for its MMAs and folds
// the sums into the fp32 chain in registers (one I2FP each, sm_90's int to float at full rate).
// Within a group the MMAs of one k tile stay in flight while the next is issued. Groups are whole
// k tiles (multiples of 128), so the folds fall between tiles. The finished tile goes through
// shared memory so that each warp stores whole rows, and the tiles are rastered in bands of m
// (docs/kernels/gemm.md). Machine code for sm_90a only.
#include "kernels/gemm_s8_grouped_sm90.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "kernels/bulk_copy.cuh"
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
constexpr int kProducerThreads = 32, kBlockThreads = kThreads + kProducerThreads, kConsumerWarps = kThreads / 32;
// The stages, the scale ring, the three barrier arrays, and room to align the stages to 1024 bytes.
constexpr int kShared = kStages * kStageBytes + kScaleRing + 3 * kStages * 8 + 1024;

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// m tiles a raster band: 2,048 rows. A tile row of n-fastest tiles read all of w once per 128 rows —
// the 8B-like in_proj's 76 MB 16 times from DRAM (in_proj at 2,048 rows 494 → 415 µs with bands).
constexpr int kRasterBand = 16;
__global__ void __launch_bounds__(kBlockThreads, 1)
    gemm_s8_grouped_wgmma_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                                 GemmS8GroupedArgs a) {
  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = shared_raw + ((1024 - shared_address(shared_raw) % 1024) % 1024);
  float* scale_ring = reinterpret_cast<float*>(shared + kStages * kStageBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(shared + kStages * kStageBytes + kScaleRing);
  uint64_t* empty = full + kStages;
  uint64_t* scales_full = empty + kStages;
  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  // Tile t of the 1-D grid: bands of kRasterBand m tiles, m fastest inside a band, so the blocks
  // running at once share a few weight tiles and a band of x, and w is read from DRAM once a band.
  const int m_tiles = static_cast<int>((a.m + kM - 1) / kM), n_tiles = static_cast<int>((a.n + kN - 1) / kN);
  const int t = static_cast<int>(blockIdx.x), band = t / (kRasterBand * n_tiles), in_band = t % (kRasterBand * n_tiles);
  const int band_rows = min(kRasterBand, m_tiles - band * kRasterBand);
  const int m0 = (band * kRasterBand + in_band % band_rows) * kM, n0 = in_band / band_rows * kN;
  const int k_tiles = static_cast<int>(a.k / kBK), tiles_per_group = static_cast<int>(a.group_size / kBK);
  const int groups = static_cast<int>(a.k / a.group_size);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], kConsumerWarps);
      mbarrier_init(&scales_full[s], kProducerThreads);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  wait_for_previous_grid();
  allow_next_grid();

  if (threadIdx.x >= kThreads) {  // the producer warp
    int stage = 0, tile_in_group = 0, group = 0;
    unsigned use = 0;  // how many times the stages have wrapped, mod 2
    for (int kt = 0; kt < k_tiles; ++kt) {
      if (kt >= kStages) bulk_barrier_wait(&empty[stage], use ^ 1);
      if (lane == 0) {
        uint8_t* tile = shared + stage * kStageBytes;
        bulk_barrier_expect(&full[stage], kStageBytes);
        tma_load_2d(tile, &x_map, kt * kBK, m0, &full[stage]);
        tma_load_2d(tile + kTileA, &w_map, kt * kBK, n0, &full[stage]);
      }
      if (++tile_in_group == tiles_per_group) {
        const int slot = group % kStages;
        for (int c = lane; c < kN; c += kProducerThreads) {
          const int64_t col = int64_t(n0) + c;
          cp_async_4_or_zero(scale_ring + slot * kN + c, col < a.n ? a.w_scales + col * groups + group : a.w_scales,
                             col < a.n);
        }
        cp_async_arrive(&scales_full[slot]);
        tile_in_group = 0;
        ++group;
      }
      if (++stage == kStages) {
        stage = 0;
        use ^= 1;
      }
    }
    return;
  }

  // d[4j + e] is row 16·warp + lane / 4 (+ 8 for e ≥ 2) of the warpgroup's 64 rows, column
  // 8j + 2·(lane % 4) + (e & 1) of the tile.
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
  int stage = 0, previous = kStages - 1, tile_in_group = 0, group = 0;
  unsigned use = 0;
  for (int kt = 0; kt < k_tiles; ++kt) {
    // Tile kt − 1 is still to be released unless it ended a group (released after its fold).
    const bool release_previous = tile_in_group != 0;
    bulk_barrier_wait(&full[stage], use);
    const uint64_t stage_offset = uint64_t(stage * (kStageBytes / 16));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk)
      wgmma_m64n128k32_s8(acc, a_desc0 + stage_offset + 2 * kk, b_desc0 + stage_offset + 2 * kk,
                          !(tile_in_group == 0 && kk == 0));
    wgmma_commit();
    if (++tile_in_group != tiles_per_group) {
      wgmma_wait<1>();  // tile kt − 1's MMAs are done
      if (release_previous && lane == 0) mbarrier_arrive(&empty[previous]);
    } else {
      wgmma_wait<0>();
      fence_accumulators(acc);
      if (release_previous && lane == 0) mbarrier_arrive(&empty[previous]);
      const int slot = group % kStages;
      bulk_barrier_wait(&scales_full[slot], (group / kStages) & 1);
      const float* scales = scale_ring + slot * kN + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float2 s = *reinterpret_cast<const float2*>(scales + 8 * j);
#pragma unroll
        for (int e = 4 * j; e < 4 * j + 4; ++e)
          chain[e] = __fmaf_rn(static_cast<float>(acc[e]), e & 1 ? s.y : s.x, chain[e]);
      }
      __syncwarp();
      if (lane == 0) mbarrier_arrive(&empty[stage]);  // its tile and its scales are read
      tile_in_group = 0;
      ++group;
    }
    previous = stage;
    if (++stage == kStages) {
      stage = 0;
      use ^= 1;
    }
  }
  // The last tile ended a group, so nothing is in flight; saying so keeps ptxas from placing a
  // wait of its own on the loop's back edge.
  wgmma_wait<0>();
  fence_accumulators(acc);

  // The tile goes through shared memory (the stages are free once every consumer warp is past its
  // last MMA), so that a warp stores whole rows: 512 contiguous bytes of fp32 instead of 16-byte
  // pieces of eight rows (2.7b in_proj at 2,048 rows 204 → 176 µs, docs/kernels/gemm.md).
  constexpr int kPitch = kN + 4;  // floats: row r starts 4r banks on
  float* staged = reinterpret_cast<float*>(shared);
  named_barrier_sync(1, kThreads);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 64 * warpgroup + 16 * warp + lane / 4 + 8 * r;
#pragma unroll
    for (int j = 0; j < 16; ++j)
      *reinterpret_cast<float2*>(staged + row * kPitch + 8 * j + 2 * (lane % 4)) =
          make_float2(__fmul_rn(chain[4 * j + 2 * r], a.x_scale), __fmul_rn(chain[4 * j + 2 * r + 1], a.x_scale));
  }
  named_barrier_sync(1, kThreads);
  const int n = static_cast<int>(a.n), c = 4 * lane, col = n0 + c;
  const bool vector = a.ldout % 4 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0 &&
                      (!a.bias || reinterpret_cast<uintptr_t>(a.bias) % 16 == 0);
  for (int r = static_cast<int>(threadIdx.x) / 32; r < kM && m0 + r < a.m; r += kConsumerWarps) {
    const int64_t row = int64_t(m0) + r;
    const float4 y = *reinterpret_cast<const float4*>(staged + r * kPitch + c);
    float v[4] = {y.x, y.y, y.z, y.w};
    if (vector && col + 3 < n) {
      store_projection_vector(a.out, a.out_type, row * a.ldout + col, v, a.bias, col, a.accumulate);
    } else {
      for (int e = 0; e < 4 && col + e < n; ++e)
        store_projection(a.out, a.out_type, row * a.ldout + col + e, v[e], a.bias, col + e, a.accumulate);
    }
  }
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda);
// null where the driver does not offer it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A row-major int8 matrix [rows, cols] (row stride ld bytes) read in boxes of kBK columns × 128
// rows, 128-byte swizzled, zeros past its edges.
bool encode_int8_tile_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, int64_t ld) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  const cuuint32_t box[2] = {kBK, 128}, element_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The blocks of the 1-D grid: one a tile.
int64_t tile_count(const GemmS8GroupedArgs& a) { return (a.m + kM - 1) / kM * ((a.n + kN - 1) / kN); }

}  // namespace

bool gemm_s8_grouped_wgmma_supported(const GemmS8GroupedArgs& a) {
  return a.k % kBK == 0 && a.group_size % kBK == 0 && tile_count(a) < (int64_t(1) << 31) &&
         tensor_map_encoder() != nullptr;
}

cudaError_t launch_gemm_s8_grouped_wgmma(const GemmS8GroupedArgs& a, cudaStream_t stream) {
  if (!gemm_s8_grouped_wgmma_supported(a)) return cudaErrorInvalidValue;
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(tile_count(a)));
  CUtensorMap x_map, w_map;
  if (!encode_int8_tile_map(&x_map, a.x, a.m, a.k, a.ldx) || !encode_int8_tile_map(&w_map, a.w, a.n, a.k, a.ldw))
    return cudaErrorInvalidValue;
  auto* kernel = gemm_s8_grouped_wgmma_kernel;
  if (const cudaError_t status = allow_dynamic_shared(kernel, kShared); status != cudaSuccess) return status;
  shape.block = dim3(kBlockThreads);
  shape.shared = kShared;
  return launch_kernel(kernel, shape, stream, x_map, w_map, a);
}

#undef SSDQ_WGMMA_ACCUMULATORS

}  // namespace ssdq::kernels
