// ChunkBMM: CB = C · Bᵀ over dstate for each chunk and group, the 64x64 tiles on and below the
// diagonal (the causal part ChunkScan reads), fp32 into the workspace.
#include <mma.h>

#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels::ssd_chunk {
namespace {

using namespace nvcuda;

// One block per (tile pair, chunk) x group x sequence. C rows of tile i and B rows of tile j are
// copied whole into shared memory (rows past the sequence end as zeros); warp w computes output
// rows 16·(w % 4) and two 16-column fragments.
template <typename T>
__global__ void __launch_bounds__(kThreads, 2) bmm_kernel(const __grid_constant__ Plan p) {
  const SsdChunkScanArgs& a = p.args;
  const int tiles = p.tiles_per_chunk;
  const int pairs = tiles * (tiles + 1) / 2;
  const int pair = blockIdx.x % pairs, c = blockIdx.x / pairs, g = blockIdx.y, b = blockIdx.z;
  int ti = 0;
  while ((ti + 1) * (ti + 2) / 2 <= pair) ++ti;
  const int tj = pair - ti * (ti + 1) / 2;
  const int L = a.chunk, N = a.dstate;
  const int valid = min(L, a.seqlen - c * L);
  if (ti * kTile >= valid) return;  // rows no ChunkScan block reads
  const int64_t token0 = int64_t(b) * a.seqlen + int64_t(c) * L;

  extern __shared__ __align__(128) unsigned char smem[];
  const int ld = N + 8;
  T* c_tile = reinterpret_cast<T*>(smem);
  T* b_tile = c_tile + kTile * ld;
  const T* C = static_cast<const T*>(a.C);
  const T* B = static_cast<const T*>(a.B);

  const int vecs = N / 8;
  for (int idx = threadIdx.x; idx < kTile * vecs; idx += kThreads) {
    const int r = idx / vecs, q = idx % vecs;
    const int t = ti * kTile + r, s = tj * kTile + r;
    T* c_dst = c_tile + r * ld + q * 8;
    T* b_dst = b_tile + r * ld + q * 8;
    if (t < valid) cp_async_16(c_dst, C + (token0 + t) * a.bc_row_stride + g * N + q * 8);
    else store_zero_16(c_dst);
    if (s < valid) cp_async_16(b_dst, B + (token0 + s) * a.bc_row_stride + g * N + q * 8);
    else store_zero_16(b_dst);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  const int warp = threadIdx.x / 32;
  const int rf = warp % 4, cf0 = (warp / 4) * 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.f);
  wmma::fill_fragment(acc[1], 0.f);
  for (int kk = 0; kk < N / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, c_tile + rf * 16 * ld + kk * 16, ld);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      // Bᵀ as a col-major K x N operand is B's rows as stored.
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, b_tile + (cf0 + u) * 16 * ld + kk * 16, ld);
      wmma::mma_sync(acc[u], fa, fb, acc[u]);
    }
  }

  float* out = p.cb + ((int64_t(b) * p.nchunks + c) * a.groups + g) * L * L + int64_t(ti * kTile + rf * 16) * L +
               tj * kTile;
#pragma unroll
  for (int u = 0; u < 2; ++u) wmma::store_matrix_sync(out + (cf0 + u) * 16, acc[u], L, wmma::mem_row_major);
}

}  // namespace

size_t bmm_smem_bytes(int dstate) { return 2 * size_t(kTile) * (dstate + 8) * 2; }  // two 16-bit tiles

StageLaunch bmm_stage(const Plan& p) {
  const SsdChunkScanArgs& a = p.args;
  const int pairs = p.tiles_per_chunk * (p.tiles_per_chunk + 1) / 2;
  StageLaunch stage;
  stage.name = "ChunkBMM";
  stage.kernel = a.operand_type == ElementType::kF16 ? reinterpret_cast<const void*>(bmm_kernel<__half>)
                                                    : reinterpret_cast<const void*>(bmm_kernel<bf16>);
  stage.grid = dim3(p.nchunks * pairs, a.groups, a.batch);
  stage.block = dim3(kThreads);
  stage.smem = bmm_smem_bytes(a.dstate);
  return stage;
}

}  // namespace ssdq::kernels::ssd_chunk
