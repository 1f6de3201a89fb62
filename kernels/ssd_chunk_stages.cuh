// Internals of the chunked SSD (kernels/ssd_chunk_scan.h): the launch plan with its workspace
// arrays, the stage launchers (one .cu file each), and device helpers they share.
// Include only from kernels/ssd_chunk_*.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/tensor_core.cuh"
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
  void* chunk_states = nullptr; // [batch, nchunks, heads, headdim, dstate]: state entering each chunk (T)
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

__device__ __forceinline__ void store_zero_16(void* smem_dst) {
  *reinterpret_cast<uint4*>(smem_dst) = make_uint4(0u, 0u, 0u, 0u);
}

// The 16-bit operand type of the tensor-core stages, T: bf16 (the FP path) or fp16 (the float-SSD
// recipes of quantized artifacts, whose int8-formatted inputs keep three more bits in fp16).
template <typename T>
struct Operand;
template <>
struct Operand<bf16> {
  using Pair = __nv_bfloat162;
  static __device__ __forceinline__ float2 to_float2(Pair pair) { return __bfloat1622float2(pair); }
  static __device__ __forceinline__ Pair from_floats(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_bf16_16816(d, a, b0, b1);
  }
};
template <>
struct Operand<__half> {
  using Pair = __half2;
  static __device__ __forceinline__ float2 to_float2(Pair pair) { return __half22float2(pair); }
  static __device__ __forceinline__ Pair from_floats(float lo, float hi) { return __floats2half2_rn(lo, hi); }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_f16_16816(d, a, b0, b1);
  }
};

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Operand<T>::mma(d, a, b0, b1);
}

// Two T at an address (4-byte aligned) as floats.
template <typename T>
__device__ __forceinline__ float2 load_x2(const T* at) {
  return Operand<T>::to_float2(*reinterpret_cast<const typename Operand<T>::Pair*>(at));
}

// Eight T in a uint4 and back (memcpy: no type punning through pointers).
template <typename T>
__device__ __forceinline__ void unpack_x8(uint4 packed, float* out) {
  const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    typename Operand<T>::Pair pair;
    memcpy(&pair, &words[i], sizeof pair);
    const float2 f = Operand<T>::to_float2(pair);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

template <typename T>
__device__ __forceinline__ uint32_t pack_x2(float lo, float hi) {
  const typename Operand<T>::Pair pair = Operand<T>::from_floats(lo, hi);
  uint32_t word;
  memcpy(&word, &pair, sizeof word);
  return word;
}

template <typename T>
__device__ __forceinline__ uint4 pack_x8(const float* values) {
  return make_uint4(pack_x2<T>(values[0], values[1]), pack_x2<T>(values[2], values[3]),
                    pack_x2<T>(values[4], values[5]), pack_x2<T>(values[6], values[7]));
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

template <typename T>
__device__ __forceinline__ uint4 scale_x8(uint4 packed, float scale) {
  float f[8];
  unpack_x8<T>(packed, f);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] *= scale;
  return pack_x8<T>(f);
}
#endif  // __CUDACC__

}  // namespace ssdq::kernels::ssd_chunk
