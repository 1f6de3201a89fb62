// Internals of the chunked SSD (kernels/ssd_chunk_scan.h): the launch plan with its workspace
// arrays, the stage launchers (one .cu file each), and device helpers they share.
// Include only from kernels/ssd_chunk_*.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/ssd_chunk_scan.h"

namespace ssdq::kernels::ssd_chunk {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;       // every stage works in 64-token sub-tiles of a chunk
constexpr int kMaxChunk = 256;
constexpr int kThreads = 256;   // 8 warps per block in every stage
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadsPerBlock = 8;  // heads of one group sharing a ChunkScan block

struct Plan {
  SsdChunkScanArgs args;
  int nchunks = 0;          // ceil(seqlen / chunk)
  int tiles_per_chunk = 0;  // chunk / 64
  int heads_per_group = 0;
  int state_rows = 32;      // state rows (h·headdim + p) per ChunkState block: 32, 64 or 128 (state_rows_valid)
  int heads_per_block = 1;  // heads per ChunkScan block: 1, 2, 4 or 8 (divides heads_per_group)
  int head_blocks = 0;      // heads / heads_per_block
  // Workspace arrays. Positions past the end of a sequence hold dt = 0 and the cumsum carried on,
  // so every chunk has `chunk` entries and cumsum[chunk - 1] is the whole chunk's dt·A sum.
  float* dt = nullptr;          // [batch, heads, nchunks, chunk]
  float* cumsum = nullptr;      // [batch, heads, nchunks, chunk]: inclusive cumsum of dt·A in the chunk
  float* cb = nullptr;          // [batch, nchunks, groups, chunk, chunk]: C·Bᵀ, tiles on/below the diagonal
  bf16* chunk_states = nullptr; // [batch, nchunks, heads, headdim, dstate]: state entering each chunk
};

struct WorkspaceLayout {
  size_t dt = 0, cumsum = 0, cb = 0, chunk_states = 0, total = 0;  // byte offsets, total size
};
WorkspaceLayout workspace_layout(const SsdChunkScanArgs& args);

// The plan launch_ssd_chunk_scan runs for `args` on the current device (heads per ChunkScan block,
// ChunkState rows, workspace pointers); false when the arguments are unsupported. A caller may
// lower heads_per_block (to a divisor of heads_per_group, updating head_blocks) or set state_rows
// (any value state_rows_valid accepts) before launching the stages itself.
bool make_plan(const SsdChunkScanArgs& args, Plan* plan);
// ChunkState row slices: 32, 64 or 128 rows that are a part of one head or whole heads of one
// group; 128 only with dstate ≤ 128.
bool state_rows_valid(const SsdChunkScanArgs& args, int rows);

// Dynamic shared memory of the stages that need more than the default.
size_t bmm_smem_bytes(int dstate);
size_t state_smem_bytes(int state_rows, int dstate);
size_t output_smem_bytes(int headdim, int dstate, int chunk);

// One stage's kernel (`__global__ void(const Plan)`) and its launch configuration.
struct StageLaunch {
  const char* name = "";
  const void* kernel = nullptr;
  dim3 grid, block;
  size_t smem = 0;  // dynamic shared memory, bytes
};
StageLaunch cumsum_stage(const Plan& plan);  // ChunkCumsum
StageLaunch bmm_stage(const Plan& plan);     // ChunkBMM
StageLaunch state_stage(const Plan& plan);   // ChunkState + StatePassing
StageLaunch output_stage(const Plan& plan);  // ChunkScan
// Raises the kernel's dynamic shared memory limit to stage.smem, then launches it with `plan`.
cudaError_t launch_stage(const StageLaunch& stage, const Plan& plan, cudaStream_t stream);

#ifdef __CUDACC__
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Tensor-core fragments of mma.sync.m16n8k16 (bf16 in, fp32 accumulate), lane = 4·g + q:
//   A (16x16, 4 words): a0 = (row g, k 2q..2q+1), a1 = (g+8, 2q), a2 = (g, 2q+8), a3 = (g+8, 2q+8)
//   B (16x8, 2 words):  b0 = (k 2q..2q+1, col g), b1 = (k 2q+8.., col g)
//   C (16x8, 4 floats): c0, c1 = (row g, cols 2q, 2q+1), c2, c3 = (row g+8, same cols)
// ldmatrix.x4 loads four 8x8 bf16 matrices whose row addresses come from lanes 8j..8j+7 (16 bytes
// each, 32-bit shared addresses); without .trans lane l receives row l/4, elements 2(l%4), +1 of
// matrix j in word j, with .trans the transposed matrix.
__device__ __forceinline__ uint32_t shared_address(const void* smem_ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Offset (elements) of the row each lane addresses in ldmatrix_x4 for one 16x16 operand block at
// the origin of a row-major shared tile with row stride ld (rows of 16 bytes at 16-byte multiples).
// A, no .trans, tile [m][k]: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
__device__ __forceinline__ int a_lane_offset(int lane, int ld) { return (lane & 15) * ld + (lane >> 4) * 8; }
// A, .trans, tile [k][m] (the operand's transpose as stored): same four matrices.
__device__ __forceinline__ int at_lane_offset(int lane, int ld) {
  return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}
// B, .trans, tile [k][n]: words (b0, b1) of n tile 0, then (b0, b1) of n tile 1.
__device__ __forceinline__ int b_lane_offset(int lane, int ld) {
  return ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
}
// B, no .trans, tile [n][k] (k contiguous): words (b0, b1) of n tile 0, then of n tile 1.
__device__ __forceinline__ int bt_lane_offset(int lane, int ld) {
  return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}

__device__ __forceinline__ void store_zero_16(void* smem_dst) {
  *reinterpret_cast<uint4*>(smem_dst) = make_uint4(0u, 0u, 0u, 0u);
}

// Eight bf16 in a uint4 and back (memcpy: no type punning through pointers).
__device__ __forceinline__ void unpack_bf16x8(uint4 packed, float* out) {
  const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __nv_bfloat162 pair;
    memcpy(&pair, &words[i], sizeof pair);
    const float2 f = __bfloat1622float2(pair);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  uint32_t word;
  memcpy(&word, &pair, sizeof word);
  return word;
}

__device__ __forceinline__ uint4 pack_bf16x8(const float* values) {
  return make_uint4(pack_bf16x2(values[0], values[1]), pack_bf16x2(values[2], values[3]),
                    pack_bf16x2(values[4], values[5]), pack_bf16x2(values[6], values[7]));
}

// Lane q of each group of four holds words v[j] = (row, 8-column tile j, columns 2q, 2q+1) of a
// 4-tile accumulator row; afterwards v[i] = columns 8q + 2i, +1: 16 contiguous bytes per lane.
__device__ __forceinline__ void transpose_quad(uint32_t (&v)[4], int lane) {
  const bool hi2 = lane & 2, hi1 = lane & 1;
  uint32_t send0 = hi2 ? v[0] : v[2], send1 = hi2 ? v[1] : v[3];
  uint32_t got0 = __shfl_xor_sync(0xffffffffu, send0, 2), got1 = __shfl_xor_sync(0xffffffffu, send1, 2);
  if (hi2) {
    v[0] = got0;
    v[1] = got1;
  } else {
    v[2] = got0;
    v[3] = got1;
  }
  send0 = hi1 ? v[0] : v[1];
  send1 = hi1 ? v[2] : v[3];
  got0 = __shfl_xor_sync(0xffffffffu, send0, 1);
  got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
  if (hi1) {
    v[0] = got0;
    v[2] = got1;
  } else {
    v[1] = got0;
    v[3] = got1;
  }
}

__device__ __forceinline__ uint4 scale_bf16x8(uint4 packed, float scale) {
  float f[8];
  unpack_bf16x8(packed, f);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] *= scale;
  return pack_bf16x8(f);
}
#endif  // __CUDACC__

}  // namespace ssdq::kernels::ssd_chunk
