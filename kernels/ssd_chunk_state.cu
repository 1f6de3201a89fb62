// ChunkState + StatePassing, fused: per (sequence, head, slice of headdim rows) the state is carried
// in tensor-core accumulators through the chunks in order,
//   S ← exp(cumsum_last) S + Σ_s (exp(cumsum_last − cumsum_s) dt_s x_s) B_sᵀ,
// writing the state that enters each chunk (bf16, for ChunkScan) and the final state (fp32).
#include <mma.h>

#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels::ssd_chunk {
namespace {

using namespace nvcuda;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int kRows>
struct StateSmem {
  static constexpr int kLdx = kRows + 8;
  int ldb;
  size_t x_tiles, b_tiles, scratch, total;  // byte offsets: x_tiles[2][64][kLdx], b_tiles[2][64][ldb]
  __host__ __device__ explicit StateSmem(int dstate) : ldb(dstate + 8) {
    x_tiles = 0;
    b_tiles = x_tiles + 2 * size_t(kTile) * kLdx * sizeof(bf16);
    scratch = b_tiles + 2 * size_t(kTile) * ldb * sizeof(bf16);
    total = scratch + size_t(kWarps) * kScratchFloats * sizeof(float);
  }
};

// Block (slice of kRows headdim rows, head, sequence). The state slice [kRows, dstate] lives in
// accumulators: warp w holds row fragment w % (kRows/16) and every 8th fragment after. The tokens
// stream in 64-token tiles, double-buffered: B rows by cp.async, x rows through registers (scaled
// by exp(cumsum_last − cumsum_s)·dt_s on the way into shared memory); one barrier per tile.
template <int kRows>
__global__ void __launch_bounds__(kThreads, 2) state_kernel(const __grid_constant__ Plan p) {
  constexpr int kRowFrags = kRows / 16;
  constexpr int kMaxFrags = kRowFrags * (256 / 16) / kWarps;  // per warp, at dstate 256
  constexpr int kLdx = StateSmem<kRows>::kLdx;
  constexpr int kXVecsPerRow = kRows / 8;
  constexpr int kXLoads = kTile * kXVecsPerRow / kThreads;  // 16-byte x loads per thread per tile
  static_assert(kXLoads * kThreads == kTile * kXVecsPerRow, "x tile must split evenly over the block");
  const SsdChunkScanArgs& a = p.args;
  const int p0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
  const int g = h / p.heads_per_group;
  const int L = a.chunk, N = a.dstate, P = a.headdim, H = a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  extern __shared__ __align__(128) unsigned char smem[];
  const StateSmem<kRows> lay(N);
  const int ldb = lay.ldb;
  bf16* x_tiles = reinterpret_cast<bf16*>(smem + lay.x_tiles);
  bf16* b_tiles = reinterpret_cast<bf16*>(smem + lay.b_tiles);
  float* scr = reinterpret_cast<float*>(smem + lay.scratch) + warp * kScratchFloats;

  const int frags = kRowFrags * (N / 16);
  const int rf = warp % kRowFrags;
  Accumulator acc[kMaxFrags];
  float* state = a.state + (int64_t(b) * H + h) * P * N + int64_t(p0) * N;
#pragma unroll
  for (int u = 0; u < kMaxFrags; ++u) {
    const int f = warp + kWarps * u;
    if (f < frags) wmma::load_matrix_sync(acc[u], state + rf * 16 * N + (f / kRowFrags) * 16, N, wmma::mem_row_major);
  }

  const int tiles_per_chunk = p.tiles_per_chunk;
  const int last_valid = a.seqlen - (p.nchunks - 1) * L;
  const int total_tiles = (p.nchunks - 1) * tiles_per_chunk + (last_valid + kTile - 1) / kTile;
  const int64_t seq_token0 = int64_t(b) * a.seqlen;
  const int64_t head_chunks = (int64_t(b) * H + h) * p.nchunks;  // row of (b, h, chunk 0) in dt/cumsum

  uint4 x_regs[kXLoads];
  auto load_x = [&](int q) {
    const int c = q / tiles_per_chunk, j = q % tiles_per_chunk;
    const int valid = min(L, a.seqlen - c * L);
#pragma unroll
    for (int v = 0; v < kXLoads; ++v) {
      const int idx = tid + v * kThreads;
      const int s = j * kTile + idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      const bf16* src = a.x + (seq_token0 + int64_t(c) * L + s) * a.x_row_stride + h * P + p0 + vec * 8;
      x_regs[v] = s < valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  auto store_x = [&](int q, bf16* x_tile) {
    const int c = q / tiles_per_chunk, j = q % tiles_per_chunk;
    const float* cumsum = p.cumsum + (head_chunks + c) * L;
    const float* dt = p.dt + (head_chunks + c) * L;
    const float last = cumsum[L - 1];
#pragma unroll
    for (int v = 0; v < kXLoads; ++v) {
      const int idx = tid + v * kThreads;
      const int r = idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      const int s = j * kTile + r;
      const float weight = __expf(last - cumsum[s]) * dt[s];
      *reinterpret_cast<uint4*>(x_tile + r * kLdx + vec * 8) = scale_bf16x8(x_regs[v], weight);
    }
  };
  auto load_b = [&](int q, bf16* b_tile) {
    const int c = q / tiles_per_chunk, j = q % tiles_per_chunk;
    const int valid = min(L, a.seqlen - c * L);
    const int vecs = N / 8;
    for (int idx = tid; idx < kTile * vecs; idx += kThreads) {
      const int r = idx / vecs, vec = idx % vecs;
      const int s = j * kTile + r;
      bf16* dst = b_tile + r * ldb + vec * 8;
      if (s < valid) cp_async_16(dst, a.B + (seq_token0 + int64_t(c) * L + s) * a.bc_row_stride + g * N + vec * 8);
      else store_zero_16(dst);
    }
    cp_async_commit();
  };

  load_x(0);
  load_b(0, b_tiles);
  const int r = lane / 2, c0 = (lane % 2) * 8;
  for (int q = 0; q < total_tiles; ++q) {
    const int buf = q & 1;
    const int c = q / tiles_per_chunk, j = q % tiles_per_chunk;
    if (j == 0) {
      // The state entering chunk c, for ChunkScan; then its decay over the chunk.
      bf16* out = p.chunk_states + ((int64_t(b) * p.nchunks + c) * H + h) * P * N + int64_t(p0 + rf * 16 + r) * N;
      const float decay = __expf(p.cumsum[(head_chunks + c) * L + L - 1]);
#pragma unroll
      for (int u = 0; u < kMaxFrags; ++u) {
        const int f = warp + kWarps * u;
        if (f < frags) {
          wmma::store_matrix_sync(scr, acc[u], kScratchLd, wmma::mem_row_major);
          __syncwarp();
          *reinterpret_cast<uint4*>(out + (f / kRowFrags) * 16 + c0) = pack_bf16x8(scr + r * kScratchLd + c0);
          __syncwarp();
#pragma unroll
          for (int e = 0; e < acc[u].num_elements; ++e) acc[u].x[e] *= decay;
        }
      }
    }
    bf16* x_tile = x_tiles + buf * kTile * kLdx;
    bf16* b_tile = b_tiles + buf * kTile * ldb;
    store_x(q, x_tile);
    cp_async_wait_all();
    __syncthreads();
    if (q + 1 < total_tiles) {
      load_x(q + 1);
      load_b(q + 1, b_tiles + (buf ^ 1) * kTile * ldb);
    }
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      // (x_tile)ᵀ: the stored [token][row] tile read as a col-major [row][token] operand.
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> fa;
      wmma::load_matrix_sync(fa, x_tile + kk * 16 * kLdx + rf * 16, kLdx);
#pragma unroll
      for (int u = 0; u < kMaxFrags; ++u) {
        const int f = warp + kWarps * u;
        if (f < frags) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
          wmma::load_matrix_sync(fb, b_tile + kk * 16 * ldb + (f / kRowFrags) * 16, ldb);
          wmma::mma_sync(acc[u], fa, fb, acc[u]);
        }
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kMaxFrags; ++u) {
    const int f = warp + kWarps * u;
    if (f < frags) wmma::store_matrix_sync(state + rf * 16 * N + (f / kRowFrags) * 16, acc[u], N, wmma::mem_row_major);
  }
}

template <int kRows>
StageLaunch stage_rows(const Plan& p) {
  const SsdChunkScanArgs& a = p.args;
  StageLaunch stage;
  stage.name = kRows == 64 ? "ChunkState(64 rows)" : "ChunkState(32 rows)";
  stage.kernel = reinterpret_cast<const void*>(state_kernel<kRows>);
  stage.grid = dim3(a.headdim / kRows, a.heads, a.batch);
  stage.block = dim3(kThreads);
  stage.smem = StateSmem<kRows>(a.dstate).total;
  return stage;
}

}  // namespace

size_t state_smem_bytes(int state_rows, int dstate) {
  return state_rows == 64 ? StateSmem<64>(dstate).total : StateSmem<32>(dstate).total;
}

StageLaunch state_stage(const Plan& p) { return p.state_rows == 64 ? stage_rows<64>(p) : stage_rows<32>(p); }

}  // namespace ssdq::kernels::ssd_chunk
