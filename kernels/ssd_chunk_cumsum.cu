// ChunkCumsum: dt = clamp(softplus(dt_raw + dt_bias), dt_min, dt_max) and its running sum of dt·A
// inside each chunk, fp32, into the workspace.
#include "kernels/element_type.h"
#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels::ssd_chunk {
namespace {

constexpr int kHeadsPerBlock = 32;

// One block per (chunk, 32 heads, sequence). The chunk's dt values are read token-major (one
// token's 32 heads are adjacent), then one warp per head scans them: each lane sums chunk/32
// consecutive tokens and a warp scan adds the lanes before it.
__global__ void __launch_bounds__(kThreads) cumsum_kernel(const __grid_constant__ Plan p) {
  const SsdChunkScanArgs& a = p.args;
  const int c = blockIdx.x, h0 = blockIdx.y * kHeadsPerBlock, b = blockIdx.z;
  const int L = a.chunk;
  const int valid = min(L, a.seqlen - c * L);
  const int64_t token0 = int64_t(b) * a.seqlen + int64_t(c) * L;
  __shared__ float dt_tile[kMaxChunk][kHeadsPerBlock + 1];
  for (int idx = threadIdx.x; idx < L * kHeadsPerBlock; idx += kThreads) {
    const int t = idx / kHeadsPerBlock, j = idx % kHeadsPerBlock, h = h0 + j;
    float dt = 0.f;
    if (t < valid && h < a.heads) {
      const float raw = __bfloat162float(a.dt_raw[(token0 + t) * a.dt_row_stride + h]);
      dt = fminf(fmaxf(softplus(raw + a.dt_bias[h]), a.dt_min), a.dt_max);
    }
    dt_tile[t][j] = dt;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = L / 32;  // 2, 4 or 8
  for (int j = warp; j < kHeadsPerBlock; j += kWarps) {
    const int h = h0 + j;
    if (h >= a.heads) break;
    const float A = a.A[h];
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
    const int64_t row = ((int64_t(b) * a.heads + h) * p.nchunks + c) * L;
#pragma unroll
    for (int k = 0; k < kMaxChunk / 32; ++k) {
      if (k < per_lane) {
        const int t = lane * per_lane + k;
        p.dt[row + t] = dt_tile[t][j];
        p.cumsum[row + t] = carried + running[k];
      }
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
