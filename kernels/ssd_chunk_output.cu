// ChunkScan: the outputs of one 64-token tile of a chunk,
//   y_t = exp(cs_t) C_t·S_in + Σ_{s<T0} CB[t,s] exp(cs_t − cs_s) dt_s x_s        (earlier tiles)
//                            + Σ_{T0≤s≤t} CB[t,s] exp(cs_t − cs_s) dt_s x_s      (the diagonal tile)
//                            + D x_t,
// cs = the chunk's cumsum of dt·A, T0 = the tile's first token. With r = cs_{T0}, the first two
// terms factor as exp(cs_t − r) · (exp(r) C_t·S_in + Σ_{s<T0} CB[t,s] · exp(r − cs_s) dt_s x_s):
// all three factors are ≤ 1 (cs decreases), and the per-element exponentials are left only for
// the diagonal tile.
#include <mma.h>

#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels::ssd_chunk {
namespace {

using namespace nvcuda;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;

constexpr int kLdm = kTile + 8;  // row stride of the diagonal tile's decay-weighted CB

struct OutputSmem {
  int ldc, ldcb, ldx;
  // Byte offsets: c_tile[64][ldc], cb_rows[64][ldcb] (the columns left of the diagonal tile, bf16),
  // states[2][headdim][ldc], x_rows[chunk][ldx],
  // m_tile[64][kLdm], scratch[warps][16 x kScratchLd] fp32, cumsum and dt [heads_per_block][chunk].
  size_t c_tile, cb_rows, states, x_rows, m_tile, scratch, cumsum, dt, total;
  __host__ __device__ OutputSmem(int headdim, int dstate, int chunk, int heads_per_block)
      : ldc(dstate + 8), ldcb(chunk - kTile + 8), ldx(headdim + 8) {
    c_tile = 0;
    cb_rows = c_tile + size_t(kTile) * ldc * sizeof(bf16);
    states = cb_rows + size_t(kTile) * ldcb * sizeof(bf16);
    x_rows = states + 2 * size_t(headdim) * ldc * sizeof(bf16);
    m_tile = x_rows + size_t(chunk) * ldx * sizeof(bf16);
    scratch = m_tile + size_t(kTile) * kLdm * sizeof(bf16);
    cumsum = scratch + size_t(kWarps) * kScratchFloats * sizeof(float);
    dt = cumsum + size_t(heads_per_block) * chunk * sizeof(float);
    total = dt + size_t(heads_per_block) * chunk * sizeof(float);
  }
};

// Block: (output tile tt of chunk c, heads_per_block heads of one group, sequence b), 8 warps.
// Loaded once and shared by the block's heads: C rows of the tile, the CB columns left of the
// diagonal tile (as a bf16 operand) and the diagonal CB tile (fp32, in registers, decay-weighted
// per head into a bf16 operand). Staged per head: the chunk state (cp.async, double-buffered) and
// x rows [0, T0 + 64) (through registers), both issued before the previous head's MMAs. Warp w
// computes rows 16·(w % 4) and headdim/32 16-column fragments of the 64 x headdim output, in two
// accumulators: the factored part above and the diagonal tile; the epilogue combines them per row.
template <int P>
__global__ void __launch_bounds__(kThreads, 1) output_kernel(const __grid_constant__ Plan p) {
  constexpr int kColFrags = P / 32;
  constexpr int kXVecsPerRow = P / 8;
  constexpr int kXLoads = kMaxChunk * kXVecsPerRow / kThreads;  // 16-byte x loads per thread, at most
  const SsdChunkScanArgs& a = p.args;
  const int L = a.chunk, N = a.dstate, H = a.heads;
  const int tiles = p.tiles_per_chunk;
  int block = blockIdx.x;
  const int tt = tiles - 1 - block % tiles;  // the longest tiles first
  block /= tiles;
  const int hb = block % p.head_blocks, c = block / p.head_blocks, b = blockIdx.y;
  const int valid = min(L, a.seqlen - c * L);
  const int T0 = tt * kTile;
  if (T0 >= valid) return;
  const int KH = p.heads_per_block, h_first = hb * KH, g = h_first / p.heads_per_group;
  const int rows = T0 + kTile;  // x rows (and CB columns) the tile reads
  const int64_t token0 = int64_t(b) * a.seqlen + int64_t(c) * L;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  extern __shared__ __align__(128) unsigned char smem[];
  const OutputSmem lay(P, N, L, p.heads_per_block);
  const int ldc = lay.ldc, ldcb = lay.ldcb, ldx = lay.ldx;
  bf16* c_tile = reinterpret_cast<bf16*>(smem + lay.c_tile);
  bf16* cb_rows = reinterpret_cast<bf16*>(smem + lay.cb_rows);
  bf16* states = reinterpret_cast<bf16*>(smem + lay.states);
  bf16* x_rows = reinterpret_cast<bf16*>(smem + lay.x_rows);
  bf16* m_tile = reinterpret_cast<bf16*>(smem + lay.m_tile);
  float* scr = reinterpret_cast<float*>(smem + lay.scratch) + warp * kScratchFloats;
  float* cumsum_all = reinterpret_cast<float*>(smem + lay.cumsum);
  float* dt_all = reinterpret_cast<float*>(smem + lay.dt);

  const int n_vecs = N / 8;
  auto copy_state = [&](int h, bf16* dst) {
    const bf16* src = p.chunk_states + ((int64_t(b) * p.nchunks + c) * H + h) * P * N;
    for (int idx = tid; idx < P * n_vecs; idx += kThreads) {
      const int row = idx / n_vecs, vec = idx % n_vecs;
      cp_async_16(dst + row * ldc + vec * 8, src + int64_t(row) * N + vec * 8);
    }
  };
  uint4 x_regs[kXLoads];
  auto load_x = [&](int h) {
#pragma unroll
    for (int v = 0; v < kXLoads; ++v) {
      const int idx = tid + v * kThreads;
      const int s = idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      x_regs[v] = (s < rows && s < valid)
                      ? __ldg(reinterpret_cast<const uint4*>(a.x + (token0 + s) * a.x_row_stride + h * P + vec * 8))
                      : make_uint4(0u, 0u, 0u, 0u);
    }
  };

  // Shared by the block's heads: C rows of the tile, CB rows, each head's cumsum and dt.
  for (int idx = tid; idx < kTile * n_vecs; idx += kThreads) {
    const int r = idx / n_vecs, vec = idx % n_vecs;
    bf16* dst = c_tile + r * ldc + vec * 8;
    if (T0 + r < valid) cp_async_16(dst, a.C + (token0 + T0 + r) * a.bc_row_stride + g * N + vec * 8);
    else store_zero_16(dst);
  }
  const float* cb_src = p.cb + ((int64_t(b) * p.nchunks + c) * a.groups + g) * L * L + int64_t(T0) * L;
  const int cb_vecs = T0 / 4;
  for (int idx = tid; idx < kTile * cb_vecs; idx += kThreads) {
    const int r = idx / cb_vecs, vec = idx % cb_vecs;
    const float4 v = __ldg(reinterpret_cast<const float4*>(cb_src + int64_t(r) * L + vec * 4));
    *reinterpret_cast<uint2*>(cb_rows + r * ldcb + vec * 4) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  }
  // The diagonal tile stays fp32, in registers: thread (t, s0) builds m[t][s0, s0 + 16) per head.
  const int diag_t = tid / 4, diag_s0 = (tid % 4) * 16;
  float cb_diag[16];
#pragma unroll
  for (int e = 0; e < 16; e += 4) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(cb_src + int64_t(diag_t) * L + T0 + diag_s0 + e));
    cb_diag[e] = v.x;
    cb_diag[e + 1] = v.y;
    cb_diag[e + 2] = v.z;
    cb_diag[e + 3] = v.w;
  }
  copy_state(h_first, states);
  cp_async_commit();
  for (int idx = tid; idx < KH * rows; idx += kThreads) {
    const int k = idx / rows, s = idx % rows;
    const int64_t src = ((int64_t(b) * H + h_first + k) * p.nchunks + c) * L + s;
    cumsum_all[k * L + s] = p.cumsum[src];
    dt_all[k * L + s] = p.dt[src];
  }
  load_x(h_first);
  cp_async_wait_all();
  __syncthreads();

  const int rf = warp % 4, cf0 = (warp / 4) * kColFrags;
  for (int k = 0; k < KH; ++k) {
    const int h = h_first + k;
    const float* cs = cumsum_all + k * L;
    const float* dts = dt_all + k * L;
    const float ref = cs[T0];

    // x rows: earlier tiles weighted by exp(ref − cs_s)·dt_s, the diagonal tile as is.
#pragma unroll
    for (int v = 0; v < kXLoads; ++v) {
      const int idx = tid + v * kThreads;
      const int s = idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      if (s < rows) {
        uint4 value = x_regs[v];
        if (s < T0) value = scale_bf16x8(value, __expf(ref - cs[s]) * dts[s]);
        *reinterpret_cast<uint4*>(x_rows + s * ldx + vec * 8) = value;
      }
    }
    // Diagonal tile: m[t][s] = CB[t][s]·exp(cs_t − cs_s)·dt_s for s ≤ t, else 0.
    {
      const float cs_t = cs[T0 + diag_t];
      float m[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const int s = diag_s0 + e;
        m[e] = s <= diag_t ? cb_diag[e] * __expf(cs_t - cs[T0 + s]) * dts[T0 + s] : 0.f;
      }
      *reinterpret_cast<uint4*>(m_tile + diag_t * kLdm + diag_s0) = pack_bf16x8(m);
      *reinterpret_cast<uint4*>(m_tile + diag_t * kLdm + diag_s0 + 8) = pack_bf16x8(m + 8);
    }
    cp_async_wait_all();  // this head's state
    __syncthreads();
    if (k + 1 < KH) {
      copy_state(h + 1, states + ((k + 1) & 1) * P * ldc);
      cp_async_commit();
      load_x(h + 1);
    }

    Accumulator factored[kColFrags], diagonal[kColFrags];
#pragma unroll
    for (int u = 0; u < kColFrags; ++u) {
      wmma::fill_fragment(factored[u], 0.f);
      wmma::fill_fragment(diagonal[u], 0.f);
    }
    // C·S_inᵀ: the state [headdim][dstate] as stored is the col-major dstate x headdim operand.
    const bf16* state = states + (k & 1) * P * ldc;
    for (int kk = 0; kk < N / 16; ++kk) {
      FragA fa;
      wmma::load_matrix_sync(fa, c_tile + rf * 16 * ldc + kk * 16, ldc);
#pragma unroll
      for (int u = 0; u < kColFrags; ++u) {
        FragBCol fb;
        wmma::load_matrix_sync(fb, state + (cf0 + u) * 16 * ldc + kk * 16, ldc);
        wmma::mma_sync(factored[u], fa, fb, factored[u]);
      }
    }
    const float state_scale = __expf(ref);
#pragma unroll
    for (int u = 0; u < kColFrags; ++u) {
#pragma unroll
      for (int e = 0; e < factored[u].num_elements; ++e) factored[u].x[e] *= state_scale;
    }
    for (int kk = 0; kk < T0 / 16; ++kk) {
      FragA fa;
      wmma::load_matrix_sync(fa, cb_rows + rf * 16 * ldcb + kk * 16, ldcb);
#pragma unroll
      for (int u = 0; u < kColFrags; ++u) {
        FragBRow fb;
        wmma::load_matrix_sync(fb, x_rows + kk * 16 * ldx + (cf0 + u) * 16, ldx);
        wmma::mma_sync(factored[u], fa, fb, factored[u]);
      }
    }
    for (int kk = 0; kk <= rf; ++kk) {  // fragments right of the diagonal are zero
      FragA fa;
      wmma::load_matrix_sync(fa, m_tile + rf * 16 * kLdm + kk * 16, kLdm);
#pragma unroll
      for (int u = 0; u < kColFrags; ++u) {
        FragBRow fb;
        wmma::load_matrix_sync(fb, x_rows + (T0 + kk * 16) * ldx + (cf0 + u) * 16, ldx);
        wmma::mma_sync(diagonal[u], fa, fb, diagonal[u]);
      }
    }

    // Epilogue: lane (r, c0) owns 8 adjacent outputs of row r of each fragment.
    const int r = lane / 2, c0 = (lane % 2) * 8;
    const int t = T0 + rf * 16 + r;
    const float row_scale = __expf(cs[t] - ref);
    const float skip = a.D[h];
#pragma unroll
    for (int u = 0; u < kColFrags; ++u) {
      const int col = (cf0 + u) * 16 + c0;
      float out[8], x[8];
      wmma::store_matrix_sync(scr, factored[u], kScratchLd, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = row_scale * scr[r * kScratchLd + c0 + e];
      __syncwarp();
      wmma::store_matrix_sync(scr, diagonal[u], kScratchLd, wmma::mem_row_major);
      __syncwarp();
      unpack_bf16x8(*reinterpret_cast<const uint4*>(x_rows + t * ldx + col), x);
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] += scr[r * kScratchLd + c0 + e] + skip * x[e];
      __syncwarp();
      if (t < valid) *reinterpret_cast<uint4*>(a.y + (token0 + t) * int64_t(H) * P + h * P + col) = pack_bf16x8(out);
    }
    __syncthreads();  // before the next head overwrites x_rows and m_tile
  }
}

template <int P>
StageLaunch stage_headdim(const Plan& p) {
  const SsdChunkScanArgs& a = p.args;
  StageLaunch stage;
  stage.name = "ChunkScan";
  stage.kernel = reinterpret_cast<const void*>(output_kernel<P>);
  stage.grid = dim3(p.nchunks * p.tiles_per_chunk * p.head_blocks, a.batch);
  stage.block = dim3(kThreads);
  stage.smem = OutputSmem(P, a.dstate, a.chunk, p.heads_per_block).total;
  return stage;
}

}  // namespace

size_t output_smem_bytes(int headdim, int dstate, int chunk, int heads_per_block) {
  return OutputSmem(headdim, dstate, chunk, heads_per_block).total;
}

StageLaunch output_stage(const Plan& p) {
  switch (p.args.headdim) {
    case 32: return stage_headdim<32>(p);
    case 64: return stage_headdim<64>(p);
    default: return stage_headdim<128>(p);  // headdim is 32, 64 or 128 (shape_supported)
  }
}

}  // namespace ssdq::kernels::ssd_chunk
