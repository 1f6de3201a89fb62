// ChunkState + StatePassing, fused: per (sequence, slice of state rows) the state is carried in
// tensor-core accumulators through the chunks in order,
//   S ← exp(cumsum_last) S + Σ_s (exp(cumsum_last − cumsum_s) dt_s x_s) B_sᵀ,
// writing the state that enters each chunk (in the operand type, for ChunkScan) and the final
// state (fp32, or int8 with its scales: dequantized as read, quantized once after the last chunk).
#include "kernels/quant_epilogue.cuh"
#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels::ssd_chunk {
namespace {

template <int kRows>
struct StateSmem {
  static constexpr int kLdx = kRows + 8;
  int ldb;
  size_t x_tiles, b_tiles, total;  // byte offsets: x_tiles[2][64][kLdx], b_tiles[2][64][ldb]
  __host__ __device__ explicit StateSmem(int dstate) : ldb(dstate + 8) {
    x_tiles = 0;
    b_tiles = x_tiles + 2 * size_t(kTile) * kLdx * 2;  // 16-bit elements
    total = b_tiles + 2 * size_t(kTile) * ldb * 2;
  }
};

// Block (slice of kRows state rows, sequence). State rows are numbered h·headdim + p, like x's
// columns, so a slice is kRows/headdim whole heads of one group (sharing every B tile) or a part of
// one head. The slice [kRows, dstate] lives in mma.sync accumulators: 8 warps as kRowWarps x
// kColWarps, each 16·kMT rows x kWarpCols columns of a dstate padded to kNMax (column blocks past
// dstate are skipped). The tokens stream in 64-token tiles, double-buffered: B rows by cp.async,
// x columns through registers (scaled by exp(cumsum_last − cumsum_s)·dt_s on the way into shared
// memory); one barrier per tile.
template <typename T, int kRows, int kNMax>
__global__ void __launch_bounds__(kThreads, 2) state_kernel(const __grid_constant__ Plan p) {
  constexpr int kRowWarps = kRows >= 64 ? 4 : 2;
  constexpr int kColWarps = kWarps / kRowWarps;
  constexpr int kMT = kRows / kRowWarps / 16;  // 16-row accumulator tiles per warp: 1 or 2
  constexpr int kWarpCols = kNMax / kColWarps;
  constexpr int kNT = kWarpCols / 8;           // 8-column accumulator tiles per warp
  constexpr int kLdx = StateSmem<kRows>::kLdx;
  constexpr int kXVecsPerRow = kRows / 8;
  constexpr int kXLoads = kTile * kXVecsPerRow / kThreads;  // 16-byte x loads per thread per tile
  static_assert(kXLoads * kThreads == kTile * kXVecsPerRow, "x tile must split evenly over the block");
  static_assert(kNT % 2 == 0 && kMT >= 1, "warp tile must hold whole 16x16 blocks");
  const SsdChunkScanArgs& a = p.args;
  const int L = a.chunk, N = a.dstate, P = a.headdim, H = a.heads;
  const int f0 = blockIdx.x * kRows, b = blockIdx.y;  // first state row h·P + p of the slice
  const int g = (f0 / P) / p.heads_per_group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g8 = lane / 4, q = lane % 4;

  extern __shared__ __align__(128) unsigned char smem[];
  const StateSmem<kRows> lay(N);
  const int ldb = lay.ldb;
  T* x_tiles = reinterpret_cast<T*>(smem + lay.x_tiles);
  T* b_tiles = reinterpret_cast<T*>(smem + lay.b_tiles);
  const T* x = static_cast<const T*>(a.x);
  const T* B = static_cast<const T*>(a.B);

  const int row0 = (warp % kRowWarps) * kMT * 16, col0 = (warp / kRowWarps) * kWarpCols;
  // acc[i][j]: rows row0 + 16i + g8 (+8), columns col0 + 8j + 2q (+1).
  float acc[kMT][kNT][4];
  const int64_t state0 = (int64_t(b) * H * P + f0) * N;
  const bool int8_state = a.state_type == ElementType::kS8;
  // An int8 state's scales of state row r (h·P + p of the slice), at columns col and col + 1.
  auto scales_at = [&](int r, int col) {
    const int channel = f0 + r;
    const float* row = a.state_scales +
                       int64_t(a.state_scale_index ? a.state_scale_index[channel] : channel) * a.state_scale_inner;
    return a.state_scale_inner == 1 ? make_float2(row[0], row[0]) : make_float2(row[col], row[col + 1]);
  };
  auto load_state = [&](int r, int col) {
    if (!int8_state) return *reinterpret_cast<const float2*>(static_cast<const float*>(a.state) + state0 + int64_t(r) * N + col);
    const char2 qv = *reinterpret_cast<const char2*>(static_cast<const int8_t*>(a.state) + state0 + int64_t(r) * N + col);
    const float2 scale = scales_at(r, col);
    return make_float2(__fmul_rn(float(qv.x), scale.x), __fmul_rn(float(qv.y), scale.y));
  };
  auto store_state = [&](int r, int col, float lo, float hi) {
    if (!int8_state) {
      *reinterpret_cast<float2*>(static_cast<float*>(a.state) + state0 + int64_t(r) * N + col) = make_float2(lo, hi);
      return;
    }
    const float2 scale = scales_at(r, col);
    *reinterpret_cast<char2*>(static_cast<int8_t*>(a.state) + state0 + int64_t(r) * N + col) =
        make_char2(quantize_int8(lo, scale.x), quantize_int8(hi, scale.y));
  };
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      const int r = row0 + 16 * i + g8, col = col0 + 8 * j + 2 * q;
      float2 lo = make_float2(0.f, 0.f), hi = lo;
      if (col0 + 16 * (j / 2) < N) {
        lo = load_state(r, col);
        hi = load_state(r + 8, col);
      }
      acc[i][j][0] = lo.x;
      acc[i][j][1] = lo.y;
      acc[i][j][2] = hi.x;
      acc[i][j][3] = hi.y;
    }
  }

  const int tiles_per_chunk = p.tiles_per_chunk;
  const int last_valid = a.seqlen - (p.nchunks - 1) * L;
  const int total_tiles = (p.nchunks - 1) * tiles_per_chunk + (last_valid + kTile - 1) / kTile;
  const int64_t seq_token0 = int64_t(b) * a.seqlen;

  uint4 x_regs[kXLoads];
  auto load_x = [&](int tile) {
    const int c = tile / tiles_per_chunk, j = tile % tiles_per_chunk;
    const int valid = min(L, a.seqlen - c * L);
#pragma unroll
    for (int v = 0; v < kXLoads; ++v) {
      const int idx = tid + v * kThreads;
      const int s = j * kTile + idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      const T* src = x + (seq_token0 + int64_t(c) * L + s) * a.x_row_stride + f0 + vec * 8;
      x_regs[v] = s < valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  auto store_x = [&](int tile, T* x_tile) {
    const int c = tile / tiles_per_chunk, j = tile % tiles_per_chunk;
#pragma unroll
    for (int v = 0; v < kXLoads; ++v) {
      const int idx = tid + v * kThreads;
      const int r = idx / kXVecsPerRow, vec = idx % kXVecsPerRow;
      const int h = (f0 + vec * 8) / P;
      const int64_t row = ((int64_t(b) * H + h) * p.nchunks + c) * L;
      const int s = j * kTile + r;
      const float weight = __expf(p.cumsum[row + L - 1] - p.cumsum[row + s]) * p.dt[row + s];
      *reinterpret_cast<uint4*>(x_tile + r * kLdx + vec * 8) = scale_x8<T>(x_regs[v], weight);
    }
  };
  auto load_b = [&](int tile, T* b_tile) {
    const int c = tile / tiles_per_chunk, j = tile % tiles_per_chunk;
    const int valid = min(L, a.seqlen - c * L);
    const int vecs = N / 8;
    for (int idx = tid; idx < kTile * vecs; idx += kThreads) {
      const int r = idx / vecs, vec = idx % vecs;
      const int s = j * kTile + r;
      T* dst = b_tile + r * ldb + vec * 8;
      if (s < valid) cp_async_16(dst, B + (seq_token0 + int64_t(c) * L + s) * a.bc_row_stride + g * N + vec * 8);
      else store_zero_16(dst);
    }
    cp_async_commit();
  };

  // Per-lane ldmatrix addresses at k = 0 of buffer 0: xᵀ as the A operand, B rows as [k][n].
  const uint32_t a_x = shared_address(x_tiles + row0 + at_lane_offset(lane, kLdx));
  const uint32_t b_b = shared_address(b_tiles + col0 + b_lane_offset(lane, ldb));
  const uint32_t x_buf_bytes = kTile * kLdx * sizeof(T), b_buf_bytes = kTile * ldb * sizeof(T);

  load_x(0);
  load_b(0, b_tiles);
  for (int tile = 0; tile < total_tiles; ++tile) {
    const int buf = tile & 1;
    const int c = tile / tiles_per_chunk;
    if (tile % tiles_per_chunk == 0) {
      // The state entering chunk c, for ChunkScan; then its decay over the chunk (per head).
      T* out = static_cast<T*>(p.chunk_states) + ((int64_t(b) * p.nchunks + c) * H * P + f0) * N;
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        const int r = row0 + 16 * i + g8;
        const int h = (f0 + r) / P;  // rows r and r + 8 belong to one head (P ≥ 32)
        const float decay = __expf(p.cumsum[((int64_t(b) * H + h) * p.nchunks + c) * L + L - 1]);
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          const int col = col0 + 8 * j + 2 * q;
          if (col0 + 16 * (j / 2) < N) {
            *reinterpret_cast<uint32_t*>(out + int64_t(r) * N + col) = pack_x2<T>(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<uint32_t*>(out + int64_t(r + 8) * N + col) = pack_x2<T>(acc[i][j][2], acc[i][j][3]);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] *= decay;
        }
      }
    }
    store_x(tile, x_tiles + buf * kTile * kLdx);
    cp_async_wait_all();
    __syncthreads();
    if (tile + 1 < total_tiles) {
      load_x(tile + 1);
      load_b(tile + 1, b_tiles + (buf ^ 1) * kTile * ldb);
    }
    const uint32_t a_tile = a_x + buf * x_buf_bytes, b_tile = b_b + buf * b_buf_bytes;
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t fa[kMT][4];
#pragma unroll
      for (int i = 0; i < kMT; ++i) ldmatrix_x4_trans(fa[i], a_tile + (kk * 16 * kLdx + 16 * i) * 2);
#pragma unroll
      for (int j = 0; j < kNT; j += 2) {
        if (col0 + 8 * j < N) {
          uint32_t fb[4];
          ldmatrix_x4_trans(fb, b_tile + (kk * 16 * ldb + 8 * j) * 2);
#pragma unroll
          for (int i = 0; i < kMT; ++i) {
            mma_16816<T>(acc[i][j], fa[i], fb[0], fb[1]);
            mma_16816<T>(acc[i][j + 1], fa[i], fb[2], fb[3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      const int r = row0 + 16 * i + g8, col = col0 + 8 * j + 2 * q;
      if (col0 + 16 * (j / 2) < N) {
        store_state(r, col, acc[i][j][0], acc[i][j][1]);
        store_state(r + 8, col, acc[i][j][2], acc[i][j][3]);
      }
    }
  }
}

template <int kRows, int kNMax>
StageLaunch stage_for(const Plan& p) {
  const SsdChunkScanArgs& a = p.args;
  StageLaunch stage;
  stage.name = kRows == 128 ? "ChunkState(128 rows)" : kRows == 64 ? "ChunkState(64 rows)" : "ChunkState(32 rows)";
  stage.kernel = p.args.operand_type == ElementType::kF16 ? reinterpret_cast<const void*>(state_kernel<__half, kRows, kNMax>)
                                                         : reinterpret_cast<const void*>(state_kernel<bf16, kRows, kNMax>);
  stage.grid = dim3(a.heads * a.headdim / kRows, a.batch);
  stage.block = dim3(kThreads);
  stage.smem = StateSmem<kRows>(a.dstate).total;
  return stage;
}

template <int kRows>
StageLaunch stage_rows(const Plan& p) {
  if (p.args.dstate <= 64) return stage_for<kRows, 64>(p);
  if constexpr (kRows == 128) {
    return stage_for<kRows, 128>(p);  // state_rows_valid: 128 rows only with dstate ≤ 128
  } else {
    if (p.args.dstate <= 128) return stage_for<kRows, 128>(p);
    return stage_for<kRows, 256>(p);
  }
}

}  // namespace

bool state_rows_valid(const SsdChunkScanArgs& a, int rows) {
  if (rows != 32 && rows != 64 && rows != 128) return false;
  if (rows == 128 && a.dstate > 128) return false;  // 64 accumulator floats per thread at most
  if (rows <= a.headdim) return a.headdim % rows == 0;
  return (a.heads / a.groups) % (rows / a.headdim) == 0;  // whole heads of one group
}

size_t state_smem_bytes(int state_rows, int dstate) {
  switch (state_rows) {
    case 128: return StateSmem<128>(dstate).total;
    case 64: return StateSmem<64>(dstate).total;
    default: return StateSmem<32>(dstate).total;
  }
}

StageLaunch state_stage(const Plan& p) {
  switch (p.state_rows) {
    case 128: return stage_rows<128>(p);
    case 64: return stage_rows<64>(p);
    default: return stage_rows<32>(p);
  }
}

}  // namespace ssdq::kernels::ssd_chunk
