// ChunkScan: the outputs of one 64-token tile of a chunk,
//   y_t = exp(cs_t) C_t·S_in + Σ_{s<T0} CB[t,s] exp(cs_t − cs_s) dt_s x_s        (earlier tiles)
//                            + Σ_{T0≤s≤t} CB[t,s] exp(cs_t − cs_s) dt_s x_s      (the diagonal tile)
//                            + D x_t,
// cs = the chunk's cumsum of dt·A, T0 = the tile's first token. With r = cs_{T0}, the first two
// terms factor as exp(cs_t − r) · (exp(r) C_t·S_in + Σ_{s<T0} CB[t,s] · exp(r − cs_s) dt_s x_s):
// all three factors are ≤ 1 (cs decreases), and the per-element exponentials are left only for
// the diagonal tile.
#include <type_traits>

#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels::ssd_chunk {
namespace {

constexpr int kLdm = kTile + 8;  // row stride of the diagonal tile's decay-weighted CB
constexpr size_t kOperandBytes = 2;  // bf16 or fp16

struct OutputSmem {
  int ldc, ldcb, ldx;
  // Byte offsets: c_tile[64][ldc], cb_rows[64][ldcb] (the columns left of the diagonal tile, T),
  // state[headdim][ldc], x_rows[chunk][ldx], m_tile[64][kLdm], cumsum and dt [chunk] (fp32).
  size_t c_tile, cb_rows, state, x_rows, m_tile, cumsum, dt, total;
  __host__ __device__ OutputSmem(int headdim, int dstate, int chunk)
      : ldc(dstate + 8), ldcb(chunk - kTile + 8), ldx(headdim + 8) {
    c_tile = 0;
    cb_rows = c_tile + size_t(kTile) * ldc * kOperandBytes;
    state = cb_rows + size_t(kTile) * ldcb * kOperandBytes;
    x_rows = state + size_t(headdim) * ldc * kOperandBytes;
    m_tile = x_rows + size_t(chunk) * ldx * kOperandBytes;
    cumsum = m_tile + size_t(kTile) * kLdm * kOperandBytes;
    dt = cumsum + size_t(chunk) * sizeof(float);
    total = dt + size_t(chunk) * sizeof(float);
  }
};

// bf16 y of one warp's two accumulator rows (lane q of each quad holds columns j·8 + 2q, +1 of
// tile j): with four or more tiles, one quad transpose gives each lane 16 contiguous bytes.
template <int kNT>
__device__ __forceinline__ void store_bf16_y(bf16* row_lo, bf16* row_hi, const float2 (&out_lo)[kNT],
                                             const float2 (&out_hi)[kNT], bool lo_valid, bool hi_valid) {
  const int lane = threadIdx.x % 32, q = lane % 4;
  uint32_t y_lo[kNT], y_hi[kNT];
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    y_lo[j] = pack_x2<bf16>(out_lo[j].x, out_lo[j].y);
    y_hi[j] = pack_x2<bf16>(out_hi[j].x, out_hi[j].y);
  }
  if constexpr (kNT % 4 == 0) {
#pragma unroll
    for (int j = 0; j < kNT; j += 4) {
      uint32_t lo[4] = {y_lo[j], y_lo[j + 1], y_lo[j + 2], y_lo[j + 3]};
      uint32_t hi[4] = {y_hi[j], y_hi[j + 1], y_hi[j + 2], y_hi[j + 3]};
      transpose_quad(lo, lane);
      transpose_quad(hi, lane);
      if (lo_valid) *reinterpret_cast<uint4*>(row_lo + j * 8 + q * 8) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      if (hi_valid) *reinterpret_cast<uint4*>(row_hi + j * 8 + q * 8) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      if (lo_valid) *reinterpret_cast<uint32_t*>(row_lo + j * 8 + 2 * q) = y_lo[j];
      if (hi_valid) *reinterpret_cast<uint32_t*>(row_hi + j * 8 + 2 * q) = y_hi[j];
    }
  }
}

// Block: (output tile tt of chunk c, heads_per_block heads of one group, sequence b), 8 warps.
// Loaded once and shared by the block's heads: C rows of the tile, the CB columns left of the
// diagonal tile (as a T operand) and the diagonal CB tile (fp32, in registers, decay-weighted
// per head into a T operand). Per head, by cp.async: the chunk state, x rows [0, T0 + 64) (the
// rows left of the diagonal tile then weighted in place), cumsum and dt. Warp w computes rows
// 16·(w % 4) and columns [(w / 4)·P/2, +P/2) of the 64 x headdim output with mma.sync, in two
// accumulators: the factored part above and the diagonal tile; the epilogue combines them per row
// in registers and stores 16 bytes of y per lane. Shared memory is ≤ 113 KB at headdim 64,
// dstate 128, chunk 256, so two blocks share an SM and overlap each other's loads.
template <int P, typename T, typename Y>
__global__ void __launch_bounds__(kThreads, P <= 64 ? 2 : 1) output_kernel(const __grid_constant__ Plan p) {
  constexpr int kWarpCols = P / 2;
  constexpr int kNT = kWarpCols / 8;  // 8-column accumulator tiles per warp: 2, 4 or 8
  constexpr int kXVecsPerRow = P / 8;
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
  const OutputSmem lay(P, N, L);
  const int ldc = lay.ldc, ldcb = lay.ldcb, ldx = lay.ldx;
  T* c_tile = reinterpret_cast<T*>(smem + lay.c_tile);
  T* cb_rows = reinterpret_cast<T*>(smem + lay.cb_rows);
  T* state = reinterpret_cast<T*>(smem + lay.state);
  T* x_rows = reinterpret_cast<T*>(smem + lay.x_rows);
  T* m_tile = reinterpret_cast<T*>(smem + lay.m_tile);
  const T* x = static_cast<const T*>(a.x);
  const T* C = static_cast<const T*>(a.C);
  float* cs = reinterpret_cast<float*>(smem + lay.cumsum);
  float* dts = reinterpret_cast<float*>(smem + lay.dt);

  const int n_vecs = N / 8;
  // One head's operands, by cp.async (x rows past the sequence end as zeros).
  auto issue_head_loads = [&](int h) {
    const T* src = static_cast<const T*>(p.chunk_states) + ((int64_t(b) * p.nchunks + c) * H + h) * P * N;
    for (int idx = tid; idx < P * n_vecs; idx += kThreads) {
      const int row = idx / n_vecs, vec = idx % n_vecs;
      cp_async_16(state + row * ldc + vec * 8, src + int64_t(row) * N + vec * 8);
    }
    for (int idx = tid; idx < rows * kXVecsPerRow; idx += kThreads) {
      const int s = idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      T* dst = x_rows + s * ldx + vec * 8;
      if (s < valid) cp_async_16(dst, x + (token0 + s) * a.x_row_stride + h * P + vec * 8);
      else store_zero_16(dst);
    }
    const int64_t row0 = ((int64_t(b) * H + h) * p.nchunks + c) * L;
    for (int idx = tid; idx < rows / 2; idx += kThreads) {  // rows/4 vectors of cumsum, then of dt
      const int vec = idx % (rows / 4);
      if (idx < rows / 4) cp_async_16(cs + vec * 4, p.cumsum + row0 + vec * 4);
      else cp_async_16(dts + vec * 4, p.dt + row0 + vec * 4);
    }
    cp_async_commit();
  };

  // Shared by the block's heads: C rows of the tile, CB rows left of the diagonal tile.
  for (int idx = tid; idx < kTile * n_vecs; idx += kThreads) {
    const int r = idx / n_vecs, vec = idx % n_vecs;
    T* dst = c_tile + r * ldc + vec * 8;
    if (T0 + r < valid) cp_async_16(dst, C + (token0 + T0 + r) * a.bc_row_stride + g * N + vec * 8);
    else store_zero_16(dst);
  }
  issue_head_loads(h_first);
  const float* cb_src = p.cb + ((int64_t(b) * p.nchunks + c) * a.groups + g) * L * L + int64_t(T0) * L;
  const int cb_vecs = T0 / 4;
  for (int idx = tid; idx < kTile * cb_vecs; idx += kThreads) {
    const int r = idx / cb_vecs, vec = idx % cb_vecs;
    const float4 v = __ldg(reinterpret_cast<const float4*>(cb_src + int64_t(r) * L + vec * 4));
    *reinterpret_cast<uint2*>(cb_rows + r * ldcb + vec * 4) = make_uint2(pack_x2<T>(v.x, v.y), pack_x2<T>(v.z, v.w));
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

  const int rf = warp % 4, col0 = (warp / 4) * kWarpCols;
  const int g8 = lane / 4, q = lane % 4;
  // Per-lane ldmatrix addresses of the warp's operand blocks at k = 0.
  const uint32_t a_c = shared_address(c_tile + rf * 16 * ldc + a_lane_offset(lane, ldc));
  const uint32_t b_state = shared_address(state + col0 * ldc + bt_lane_offset(lane, ldc));
  const uint32_t a_cb = shared_address(cb_rows + rf * 16 * ldcb + a_lane_offset(lane, ldcb));
  const uint32_t a_m = shared_address(m_tile + rf * 16 * kLdm + a_lane_offset(lane, kLdm));
  const uint32_t b_x = shared_address(x_rows + col0 + b_lane_offset(lane, ldx));
  const int t_lo = T0 + rf * 16 + g8, t_hi = t_lo + 8;  // the two rows of this lane's accumulators

  for (int k = 0; k < KH; ++k) {
    const int h = h_first + k;
    cp_async_wait_all();
    __syncthreads();  // this head's state, x, cumsum and dt have landed
    const float ref = cs[T0];
    // x rows left of the diagonal tile, weighted by exp(ref − cs_s)·dt_s in place.
    for (int idx = tid; idx < T0 * kXVecsPerRow; idx += kThreads) {
      const int s = idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      uint4* v = reinterpret_cast<uint4*>(x_rows + s * ldx + vec * 8);
      *v = scale_x8<T>(*v, __expf(ref - cs[s]) * dts[s]);
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
      *reinterpret_cast<uint4*>(m_tile + diag_t * kLdm + diag_s0) = pack_x8<T>(m);
      *reinterpret_cast<uint4*>(m_tile + diag_t * kLdm + diag_s0 + 8) = pack_x8<T>(m + 8);
    }
    __syncthreads();

    float factored[kNT][4], diagonal[kNT][4];
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) factored[j][e] = diagonal[j][e] = 0.f;
    }
    // C·S_inᵀ: the state [headdim][dstate] as stored is the [n][k] B operand.
    for (int kk = 0; kk < N / 16; ++kk) {
      uint32_t fa[4];
      ldmatrix_x4(fa, a_c + kk * 32);
#pragma unroll
      for (int j = 0; j < kNT; j += 2) {
        uint32_t fb[4];
        ldmatrix_x4(fb, b_state + (j * 8 * ldc) * 2 + kk * 32);
        mma_16816<T>(factored[j], fa, fb[0], fb[1]);
        mma_16816<T>(factored[j + 1], fa, fb[2], fb[3]);
      }
    }
    const float state_scale = __expf(ref);
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) factored[j][e] *= state_scale;
    }
    // CB (left of the diagonal tile) · weighted x rows [0, T0).
    for (int kk = 0; kk < T0 / 16; ++kk) {
      uint32_t fa[4];
      ldmatrix_x4(fa, a_cb + kk * 32);
#pragma unroll
      for (int j = 0; j < kNT; j += 2) {
        uint32_t fb[4];
        ldmatrix_x4_trans(fb, b_x + (kk * 16 * ldx + j * 8) * 2);
        mma_16816<T>(factored[j], fa, fb[0], fb[1]);
        mma_16816<T>(factored[j + 1], fa, fb[2], fb[3]);
      }
    }
    // The diagonal tile; its 16-column blocks right of the warp's rows are zero.
    for (int kk = 0; kk <= rf; ++kk) {
      uint32_t fa[4];
      ldmatrix_x4(fa, a_m + kk * 32);
#pragma unroll
      for (int j = 0; j < kNT; j += 2) {
        uint32_t fb[4];
        ldmatrix_x4_trans(fb, b_x + ((T0 + kk * 16) * ldx + j * 8) * 2);
        mma_16816<T>(diagonal[j], fa, fb[0], fb[1]);
        mma_16816<T>(diagonal[j + 1], fa, fb[2], fb[3]);
      }
    }

    // Epilogue: y = exp(cs_t − ref)·factored + diagonal + D·x, fp32 pairs or packed to bf16 pairs.
    const float scale_lo = __expf(cs[t_lo] - ref), scale_hi = __expf(cs[t_hi] - ref);
    const float skip = a.D[h];
    float2 out_lo[kNT], out_hi[kNT];
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      const int col = col0 + j * 8 + 2 * q;
      const float2 x_lo = load_x2(x_rows + t_lo * ldx + col);
      const float2 x_hi = load_x2(x_rows + t_hi * ldx + col);
      out_lo[j] = make_float2(scale_lo * factored[j][0] + diagonal[j][0] + skip * x_lo.x,
                              scale_lo * factored[j][1] + diagonal[j][1] + skip * x_lo.y);
      out_hi[j] = make_float2(scale_hi * factored[j][2] + diagonal[j][2] + skip * x_hi.x,
                              scale_hi * factored[j][3] + diagonal[j][3] + skip * x_hi.y);
    }
    const int64_t y_lo_at = (token0 + t_lo) * int64_t(H) * P + h * P + col0;
    const int64_t y_hi_at = (token0 + t_hi) * int64_t(H) * P + h * P + col0;
    if constexpr (std::is_same_v<Y, float>) {  // 4 lanes write 32 contiguous bytes of a row per tile
      float* y = static_cast<float*>(a.y);
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        if (t_lo < valid) *reinterpret_cast<float2*>(y + y_lo_at + j * 8 + 2 * q) = out_lo[j];
        if (t_hi < valid) *reinterpret_cast<float2*>(y + y_hi_at + j * 8 + 2 * q) = out_hi[j];
      }
    } else {
      store_bf16_y<kNT>(static_cast<bf16*>(a.y) + y_lo_at, static_cast<bf16*>(a.y) + y_hi_at, out_lo, out_hi, t_lo < valid,
                        t_hi < valid);
    }
    __syncthreads();  // every read of this head's operands is done
    if (k + 1 < KH) issue_head_loads(h + 1);
  }
}

template <int P>
StageLaunch stage_headdim(const Plan& p) {
  const SsdChunkScanArgs& a = p.args;
  StageLaunch stage;
  stage.name = "ChunkScan";
  // The operand and y types of ssd_chunk_scan_supported: bf16 and bf16, or fp16 and fp32.
  stage.kernel = a.operand_type == ElementType::kF16 ? reinterpret_cast<const void*>(output_kernel<P, __half, float>)
                                                    : reinterpret_cast<const void*>(output_kernel<P, bf16, bf16>);
  stage.grid = dim3(p.nchunks * p.tiles_per_chunk * p.head_blocks, a.batch);
  stage.block = dim3(kThreads);
  stage.smem = OutputSmem(P, a.dstate, a.chunk).total;
  return stage;
}

}  // namespace

size_t output_smem_bytes(int headdim, int dstate, int chunk) { return OutputSmem(headdim, dstate, chunk).total; }

StageLaunch output_stage(const Plan& p) {
  switch (p.args.headdim) {
    case 32: return stage_headdim<32>(p);
    case 64: return stage_headdim<64>(p);
    default: return stage_headdim<128>(p);  // headdim is 32, 64 or 128 (shape_supported)
  }
}

}  // namespace ssdq::kernels::ssd_chunk
