// ChunkCumsum: dt = clamp(softplus(dt_raw + dt_bias), dt_min, dt_max) and its running sum of dt·A
// inside each chunk, fp32, into the workspace (dt_raw bf16, or fp32 with its format applied first).
#include "kernels/element_type.h"
#include "kernels/quant_epilogue.cuh"
#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels::ssd_chunk {
namespace {

constexpr int kHeadsPerBlock = 16;

// One block per (chunk, 16 heads, sequence); thread t owns token t of the chunk when reading dt_raw
// (16 independent loads) and when writing dt and cumsum (coalesced rows of the workspace). In
// between, shared memory turns tokens into heads: one warp per head scans it, each lane summing
// chunk/32 consecutive tokens and a warp scan adding the lanes before.
__global__ void __launch_bounds__(kThreads) cumsum_kernel(const __grid_constant__ Plan p) {
  const SsdChunkScanArgs& a = p.args;
  const int c = blockIdx.x, h0 = blockIdx.y * kHeadsPerBlock, b = blockIdx.z;
  const int L = a.chunk;
  const int valid = min(L, a.seqlen - c * L);
  const int heads = min(kHeadsPerBlock, a.heads - h0);
  const int64_t token0 = int64_t(b) * a.seqlen + int64_t(c) * L;
  __shared__ float dt_tile[kMaxChunk][kHeadsPerBlock + 1];
  __shared__ float cs_tile[kMaxChunk][kHeadsPerBlock + 1];
  const int tid = threadIdx.x;
  if (tid < L) {
    float raw[kHeadsPerBlock];
#pragma unroll
    for (int j = 0; j < kHeadsPerBlock; ++j) {
      raw[j] = 0.f;
      if (tid < valid && j < heads) {
        const int64_t at = (token0 + tid) * a.dt_row_stride + h0 + j;
        raw[j] = a.dt_type == ElementType::kF32 ? static_cast<const float*>(a.dt_raw)[at]
                                                : __bfloat162float(static_cast<const bf16*>(a.dt_raw)[at]);
      }
    }
#pragma unroll
    for (int j = 0; j < kHeadsPerBlock; ++j) {
      float dt = 0.f;
      if (tid < valid && j < heads) {
        const float formatted = a.dt_format != 0.f ? apply_format_code(raw[j], a.dt_format) : raw[j];
        dt = fminf(fmaxf(softplus(formatted + a.dt_bias[h0 + j]), a.dt_min), a.dt_max);
      }
      dt_tile[tid][j] = dt;
    }
  }
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32;
  const int per_lane = L / 32;  // 2, 4 or 8
  for (int j = warp; j < heads; j += kWarps) {
    const float A = a.A[h0 + j];
    float running[kMaxChunk / 32];
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxChunk / 32; ++k) {
      if (k < per_lane) sum += dt_tile[lane * per_lane + k][j] * A;
      running[k] = sum;
    }
    float scan = sum;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const float before = __shfl_up_sync(0xffffffffu, scan, offset);
      if (lane >= offset) scan += before;
    }
    // The lanes before this one: the inclusive scan of the previous lane.
    const float previous = __shfl_up_sync(0xffffffffu, scan, 1);
    const float carried = lane == 0 ? 0.f : previous;
#pragma unroll
    for (int k = 0; k < kMaxChunk / 32; ++k) {
      if (k < per_lane) cs_tile[lane * per_lane + k][j] = carried + running[k];
    }
  }
  __syncthreads();
  if (tid < L) {
    for (int j = 0; j < heads; ++j) {
      const int64_t row = ((int64_t(b) * a.heads + h0 + j) * p.nchunks + c) * L;
      p.dt[row + tid] = dt_tile[tid][j];
      p.cumsum[row + tid] = cs_tile[tid][j];
    }
  }
}

}  // namespace

StageLaunch cumsum_stage(const Plan& p) {
  const SsdChunkScanArgs& a = p.args;
  StageLaunch stage;
  stage.name = "ChunkCumsum";
  stage.kernel = reinterpret_cast<const void*>(cumsum_kernel);
  stage.grid = dim3(p.nchunks, (a.heads + kHeadsPerBlock - 1) / kHeadsPerBlock, a.batch);
  stage.block = dim3(kThreads);
  return stage;
}

}  // namespace ssdq::kernels::ssd_chunk
