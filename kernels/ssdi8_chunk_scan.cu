#include "kernels/ssdi8_chunk_scan.h"

#include <cuda_fp16.h>

#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 512;  // 16 warps: four per SM sub-partition to hide the dp4a / LDS latencies
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 16;        // CB tiles are kTile × kTile; chunk rows are padded to a multiple
constexpr int kLutStride = 20;   // floats per row of a warp's CB tile: conflict-free stores, 16-byte rows
constexpr int kMaxSlice = 64;    // headdim columns per block: at most two per lane
constexpr int kStateP = 4;       // state rows (headdim columns) per thread in ChunkState

// The row tile a warp takes in ChunkBMM/ChunkScan (a permutation of 0..15; a chunk has at most 16
// tiles). Tile T costs T + 1 tile pairs; warps w, w + 4, w + 8, w + 12 share a sub-partition
// (warp w % 4) and get tiles {k, 15 - k, 7 - k, 8 + k}, k = w % 4: 34 pairs each at 16 tiles,
// 9 each at 8 tiles. Only the assignment changes, not any value computed.
__device__ inline int tile_of_warp(int warp) {
  const int k = warp % 4, i = warp / 4;
  return i == 0 ? k : i == 1 ? 15 - k : i == 2 ? 7 - k : 8 + k;
}
static_assert(kWarps == 16 && kTile * kWarps >= 256, "one row tile per warp covers the longest chunk");

// One block per (sequence, head, slice of headdim columns), walking the chunks (kWhole), or per
// (sequence, head, slice, chunk) (kLocal, kScan; see Phase); the slices of a head share nothing
// but recompute dt, cs and CB. Shared memory, offsets in bytes (16-byte aligned):
struct Layout {
  int row_bytes;  // row of the int8 B, C and state tiles: dstate + 16 (16-byte loads at distinct banks)
  int rows;       // chunk rounded up to kTile (padding rows hold zeros)
  size_t B, C, S, Xq, x16, dt, cs, decay, lut_state, xs_scale, state_mult, off_scale, lut, decay_q7, total;
};

__host__ __device__ inline Layout make_layout(int chunk, int dstate, int slice) {
  Layout l{};
  l.row_bytes = dstate + 16;
  l.rows = (chunk + kTile - 1) / kTile * kTile;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = (at + bytes + 15) / 16 * 16;
    return here;
  };
  l.B = take(size_t(l.rows) * l.row_bytes);                          // int8 [rows][row_bytes]
  l.C = take(size_t(l.rows) * l.row_bytes);
  l.S = take(size_t(slice) * l.row_bytes);                           // int8 [slice][row_bytes]
  l.Xq = take(size_t(l.rows) * slice);                               // int32 [rows/4][slice], 4 tokens a word
  l.x16 = take(size_t(l.rows) * slice * sizeof(__half));             // [rows][slice]
  l.dt = take(sizeof(float) * l.rows);
  l.cs = take(sizeof(float) * l.rows);
  l.decay = take(sizeof(float) * l.rows);                            // exp(cs[t])
  l.lut_state = take(sizeof(float) * l.rows);                        // dt[t]·exp(cs[L-1] - cs[t])
  l.xs_scale = take(sizeof(float) * slice);
  l.state_mult = take(sizeof(float) * slice);                        // (s_xs·s_B) / s_s
  l.off_scale = take(sizeof(float) * slice);                         // s_C·s_s
  l.lut = take(sizeof(float) * kWarps * kTile * kLutStride);
  l.decay_q7 = take(sizeof(int));
  l.total = at;
  return l;
}

// glibc's expf is correctly rounded for all but ~0.06 % of inputs; the double evaluation rounded
// once matches it far more often than expf's 2-ulp device version.
__device__ inline float exp_like_cpu(float x) { return static_cast<float>(exp(static_cast<double>(x))); }

// cpu::softplus: x > 20 ? x : log1p(exp(x)) with float exp and log1p.
__device__ inline float softplus_like_cpu(float x) {
  return x > 20.f ? x : static_cast<float>(log1p(static_cast<double>(exp_like_cpu(x))));
}

// runtime/quantized_ops.h requantize_int32.
__device__ inline int requantize(int acc, float multiplier) {
  const float r = rintf(__fmul_rn(static_cast<float>(acc), multiplier));
  return static_cast<int>(fminf(fmaxf(r, -127.f), 127.f));
}

// runtime/quantized_ssd.cc pass_state: sat8(local + ((Qd·prev + 64) >> 7)), arithmetic shift.
__device__ inline int pass_state(int local, int decay_q7, int prev) {
  return min(max(local + ((decay_q7 * prev + 64) >> 7), -127), 127);
}

__device__ inline int dot16(const int4& a, const int4& b, int acc) {
  acc = __dp4a(a.x, b.x, acc);
  acc = __dp4a(a.y, b.y, acc);
  acc = __dp4a(a.z, b.z, acc);
  return __dp4a(a.w, b.w, acc);
}

__device__ inline int pack4(int a, int b, int c, int d) {
  return static_cast<int>((unsigned(a) & 0xffu) | ((unsigned(b) & 0xffu) << 8) | ((unsigned(c) & 0xffu) << 16) |
                          (unsigned(d) << 24));
}

__device__ inline int8_t byte_of(int word, int i) { return static_cast<int8_t>(word >> (8 * i)); }

// The kernel's phases. kWhole walks all chunks of a (sequence, head, slice) in one block. With
// enough chunks per block it splits in three launches that need no workspace:
//   kLocal (one block per chunk but the last): dt, cs, Xq and ChunkState: Sloc and Qd to the scratch;
//   state_pass_kernel (per state word, sequential over chunks): the state entering each chunk but
//       the last to the scratch, the one entering the last chunk to `state`;
//   kScan (one block per chunk): kWhole's steps for that chunk, with the state entering it read
//       back; the block of the last chunk also runs ChunkState and StatePassing: the final state.
// Every value is computed by the same expression as in kWhole, so the results are the same bits.
enum Phase { kWhole = 0, kLocal = 1, kScan = 2 };

// The scratch of chunk `start` (a multiple of `chunk`, not the last chunk) of sequence b, head h,
// slice [p0, p0 + slice): the block's own part of y (rows start.., columns p0.. of head h), which
// kScan overwrites with y only after reading the state back. Int word i lies at row i / slice,
// column i % slice, stored bit for bit as a float. Words [0, W): Sloc, [W, 2W): the state entering
// the chunk, 2W: Qd, with W = slice·dstate/4, the int8 [slice][dstate] row-major, four n a word:
// dstate/2 + 1 rows, so a chunk needs chunk ≥ dstate/2 + 1.
__device__ inline float* scratch_word(const Ssdi8ChunkScanArgs& a, int b, int h, int p0, int slice, int start, int i) {
  return a.y + (int64_t(b) * a.seqlen + start + i / slice) * a.y_stride + int64_t(h) * a.headdim + p0 + i % slice;
}

template <int kPerLane>  // headdim columns per lane: ceil(slice / 32)
__global__ void __launch_bounds__(kThreads, 1) ssdi8_chunk_scan_kernel(Ssdi8ChunkScanArgs a, int slice, int phase) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Layout lay = make_layout(a.chunk, a.dstate, slice);
  const int N = a.dstate, RB = lay.row_bytes;
  int8_t* Bq = reinterpret_cast<int8_t*>(smem + lay.B);
  int8_t* Cq = reinterpret_cast<int8_t*>(smem + lay.C);
  int8_t* S = reinterpret_cast<int8_t*>(smem + lay.S);
  int* Xq = reinterpret_cast<int*>(smem + lay.Xq);
  __half* x16 = reinterpret_cast<__half*>(smem + lay.x16);
  float* dt = reinterpret_cast<float*>(smem + lay.dt);
  float* cs = reinterpret_cast<float*>(smem + lay.cs);
  float* decay = reinterpret_cast<float*>(smem + lay.decay);
  float* lut_state = reinterpret_cast<float*>(smem + lay.lut_state);
  float* xs_scale = reinterpret_cast<float*>(smem + lay.xs_scale);
  float* state_mult = reinterpret_cast<float*>(smem + lay.state_mult);
  float* off_scale = reinterpret_cast<float*>(smem + lay.off_scale);
  int* decay_q7 = reinterpret_cast<int*>(smem + lay.decay_q7);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int splits = a.headdim / slice;
  const int h = blockIdx.x / splits, p0 = (blockIdx.x % splits) * slice, b = blockIdx.y;
  const int g = h / (a.heads / a.groups);
  const int col0 = h * a.headdim + p0;  // first x / y column of the slice
  const float s_B = a.B_scales[g], s_C = a.C_scales[g], s_cb = a.cb_scales[g];
  const float cb_mult = __fdiv_rn(__fmul_rn(s_C, s_B), s_cb);
  const float A = a.A[h], Dh = a.D[h], bias = a.dt_bias[h];

  for (int p = tid; p < slice; p += kThreads) {
    const float s_xs = a.x_scaled_scales[col0 + p], s_s = a.state_scales[col0 + p];
    xs_scale[p] = s_xs;
    state_mult[p] = __fdiv_rn(__fmul_rn(s_xs, s_B), s_s);
    off_scale[p] = __fmul_rn(s_C, s_s);
  }
  // Chunks [c_begin, c_end) of the sequence; the last one ends the sequence.
  const int chunks = (a.seqlen + a.chunk - 1) / a.chunk;
  const int c_begin = phase == kWhole ? 0 : blockIdx.z, c_end = phase == kWhole ? chunks : c_begin + 1;
  const bool last_chunk = c_end == chunks;  // this block produces the final state (not in kLocal)
  const int words = slice * (N / 4);        // words of the slice's state in the scratch
  int8_t* state = a.state + ((int64_t(b) * a.heads + h) * a.headdim + p0) * N;
  const int vecs = N / 16;
  if (phase == kWhole || (phase == kScan && last_chunk)) {
    for (int i = tid; i < slice * vecs; i += kThreads) {
      const int p = i / vecs, k = i % vecs;
      *reinterpret_cast<int4*>(S + p * RB + 16 * k) = *reinterpret_cast<const int4*>(state + int64_t(p) * N + 16 * k);
    }
  } else if (phase == kScan) {  // the state entering the chunk, from the scratch this block overwrites
    for (int i = tid; i < words; i += kThreads) {
      const int p = i / (N / 4), k = i % (N / 4);
      *reinterpret_cast<int*>(S + p * RB + 4 * k) =
          __float_as_int(*scratch_word(a, b, h, p0, slice, c_begin * a.chunk, words + i));
    }
  }
  const bool scan = phase != kLocal;  // ChunkBMM, ChunkScan and y

  for (int start = c_begin * a.chunk; start < a.seqlen && start < c_end * a.chunk; start += a.chunk) {
    const int L = min(a.chunk, a.seqlen - start);
    const bool state_step = phase != kScan || last_chunk;  // ChunkState (and StatePassing)
    const int rows = (L + kTile - 1) / kTile * kTile;
    const int64_t row0 = int64_t(b) * a.seqlen + start;

    // ChunkCumsum (warp 0) while the other warps quantize B and C and round x to fp16.
    if (warp == 0) {
      for (int t = lane; t < L; t += 32) {
        const float raw = a.dt_raw[(row0 + t) * a.dt_stride + h];
        dt[t] = fminf(fmaxf(softplus_like_cpu(__fadd_rn(raw, bias)), a.dt_min), a.dt_max);
      }
      __syncwarp();
      if (lane == 0) {
        float running = 0.f;  // the CPU's `running += dt·A`, contracted to an FMA by gcc
        for (int t = 0; t < L; ++t) {
          running = __fmaf_rn(dt[t], A, running);
          cs[t] = running;
        }
        *decay_q7 = static_cast<int>(rintf(__fmul_rn(exp_like_cpu(running), 128.f)));
      }
      __syncwarp();
      const float last = cs[L - 1];
      for (int t = lane; t < L; t += 32) {
        decay[t] = exp_like_cpu(cs[t]);
        lut_state[t] = __fmul_rn(dt[t], exp_like_cpu(__fsub_rn(last, cs[t])));
      }
    } else {
      const int quads = N / 4;
      for (int i = tid - 32; i < rows * quads; i += kThreads - 32) {
        const int t = i / quads, n = 4 * (i % quads);
        int packed_b = 0, packed_c = 0;
        if (t < L) {
          const float* bt = a.B + (row0 + t) * a.bc_stride + g * N + n;
          const float* ct = a.C + (row0 + t) * a.bc_stride + g * N + n;
          packed_b = pack4(quantize_int8(bt[0], s_B), quantize_int8(bt[1], s_B), quantize_int8(bt[2], s_B),
                           quantize_int8(bt[3], s_B));
          if (scan)
            packed_c = pack4(quantize_int8(ct[0], s_C), quantize_int8(ct[1], s_C), quantize_int8(ct[2], s_C),
                             quantize_int8(ct[3], s_C));
        }
        *reinterpret_cast<int*>(Bq + t * RB + n) = packed_b;
        *reinterpret_cast<int*>(Cq + t * RB + n) = packed_c;
      }
      for (int i = tid - 32; scan && i < rows * slice; i += kThreads - 32) {
        const int t = i / slice, p = i % slice;
        x16[i] = __float2half_rn(t < L ? a.x[(row0 + t) * a.x_stride + col0 + p] : 0.f);
      }
    }
    __syncthreads();

    // ChunkState's operand: Xq[t,p] packed four tokens to a word (Xq word (t/4, p), byte t%4).
    const int quads_t = (L + 3) / 4;
    for (int i = tid; state_step && i < quads_t * slice; i += kThreads) {
      const int tq = i / slice, p = i % slice;
      int q[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int t = 4 * tq + r;
        q[r] = t < L ? quantize_int8(__fmul_rn(lut_state[t], a.x[(row0 + t) * a.x_stride + col0 + p]), xs_scale[p]) : 0;
      }
      Xq[i] = pack4(q[0], q[1], q[2], q[3]);
    }

    // ChunkBMM + ChunkScan: a warp owns a tile of kTile rows (tile_of_warp balances the triangle).
    // Lane owns columns p = lane + 32k of the slice for the diag and off sums.
    float* lut = reinterpret_cast<float*>(smem + lay.lut) + warp * kTile * kLutStride;
    const int tiles = rows / kTile;
    const int T = tile_of_warp(warp);
    if (scan && T < tiles) {
      const int t0 = T * kTile;
      float diag[kTile][kPerLane];
#pragma unroll
      for (int r = 0; r < kTile; ++r)
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) diag[r][k] = 0.f;

      for (int s0 = 0; s0 <= t0; s0 += kTile) {
        // CB of rows t0 + lane/4 + 8i, columns s0 + lane%4 + 4j.
        int acc[2][4] = {};
        const int8_t* c_rows = Cq + (t0 + lane / 4) * RB;
        const int8_t* b_rows = Bq + (s0 + lane % 4) * RB;
        for (int n = 0; n < N; n += 16) {
          int4 c[2], bv[4];
#pragma unroll
          for (int i = 0; i < 2; ++i) c[i] = *reinterpret_cast<const int4*>(c_rows + 8 * i * RB + n);
#pragma unroll
          for (int j = 0; j < 4; ++j) bv[j] = *reinterpret_cast<const int4*>(b_rows + 4 * j * RB + n);
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = dot16(c[i], bv[j], acc[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int tl = lane / 4 + 8 * i, sl = lane % 4 + 4 * j, t = t0 + tl, s = s0 + sl;
            float w = 0.f;
            if (s <= t && t < L) {
              // float(CBq)·(s_cb·dt[s]·exp(cs[t] - cs[s])), rounded to fp16
              const float factor = __fmul_rn(__fmul_rn(s_cb, dt[s]), expf(__fsub_rn(cs[t], cs[s])));
              w = __half2float(__float2half_rn(__fmul_rn(static_cast<float>(requantize(acc[i][j], cb_mult)), factor)));
            }
            lut[tl * kLutStride + sl] = w;
          }
        __syncwarp();
        // diag += lut (fp16 values) · x16; the products are exact in fp32, so an FMA is the fp32 sum.
#pragma unroll
        for (int sq = 0; sq < kTile / 4; ++sq) {
          float xv[kPerLane][4];
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) {
            const int p = lane + 32 * k;
#pragma unroll
            for (int r = 0; r < 4; ++r)
              xv[k][r] = p < slice ? __half2float(x16[(s0 + 4 * sq + r) * slice + p]) : 0.f;
          }
#pragma unroll
          for (int r = 0; r < kTile; ++r) {
            const float4 w = *reinterpret_cast<const float4*>(lut + r * kLutStride + 4 * sq);
#pragma unroll
            for (int k = 0; k < kPerLane; ++k) {
              diag[r][k] = fmaf(w.x, xv[k][0], diag[r][k]);
              diag[r][k] = fmaf(w.y, xv[k][1], diag[r][k]);
              diag[r][k] = fmaf(w.z, xv[k][2], diag[r][k]);
              diag[r][k] = fmaf(w.w, xv[k][3], diag[r][k]);
            }
          }
        }
        __syncwarp();
      }

      // ChunkScan1 (int32 C·S with the state entering the chunk) and y, eight rows at a time.
#pragma unroll
      for (int half = 0; half < kTile / 8; ++half) {
        int off[8][kPerLane] = {};
        for (int n = 0; n < N; n += 16) {
          int4 sv[kPerLane];
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) {
            const int p = lane + 32 * k;
            sv[k] = p < slice ? *reinterpret_cast<const int4*>(S + p * RB + n) : make_int4(0, 0, 0, 0);
          }
#pragma unroll
          for (int r = 0; r < 8; ++r) {
            const int4 c = *reinterpret_cast<const int4*>(Cq + (t0 + 8 * half + r) * RB + n);
#pragma unroll
            for (int k = 0; k < kPerLane; ++k) off[r][k] = dot16(c, sv[k], off[r][k]);
          }
        }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int t = t0 + 8 * half + r;
          if (t >= L) continue;
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) {
            const int p = lane + 32 * k;
            if (p >= slice) continue;
            // gcc's code for `off + diag + D·x` with off = float(acc)·(s_C·s_s)·exp(cs[t]):
            // fma(D, x, fma(float(acc)·(s_C·s_s), exp(cs[t]), diag)).
            const float xv = a.x[(row0 + t) * a.x_stride + col0 + p];
            const float scaled = __fmul_rn(static_cast<float>(off[r][k]), off_scale[p]);
            a.y[(row0 + t) * a.y_stride + col0 + p] =
                __fmaf_rn(Dh, xv, __fmaf_rn(scaled, decay[t], diag[8 * half + r][k]));
          }
        }
      }
    }
    __syncthreads();

    // ChunkState + StatePassing: thread owns 4 consecutive n × kStateP consecutive p of the state.
    // B is read four tokens × four n at a time and transposed in registers to match Xq's packing.
    const int nquads = N / 4, pgroups = (slice + kStateP - 1) / kStateP;
    const int qd = *decay_q7;
    for (int u = tid; state_step && u < nquads * pgroups; u += kThreads) {
      const int nq = u % nquads, pg = u / nquads;
      int acc[kStateP][4] = {};
      for (int tq = 0; tq < quads_t; ++tq) {
        const int8_t* bt = Bq + 4 * tq * RB + 4 * nq;
        const unsigned b0 = *reinterpret_cast<const unsigned*>(bt), b1 = *reinterpret_cast<const unsigned*>(bt + RB);
        const unsigned b2 = *reinterpret_cast<const unsigned*>(bt + 2 * RB);
        const unsigned b3 = *reinterpret_cast<const unsigned*>(bt + 3 * RB);
        const unsigned lo01 = __byte_perm(b0, b1, 0x5140), hi01 = __byte_perm(b0, b1, 0x7362);
        const unsigned lo23 = __byte_perm(b2, b3, 0x5140), hi23 = __byte_perm(b2, b3, 0x7362);
        const int col[4] = {static_cast<int>(__byte_perm(lo01, lo23, 0x5410)), static_cast<int>(__byte_perm(lo01, lo23, 0x7632)),
                            static_cast<int>(__byte_perm(hi01, hi23, 0x5410)), static_cast<int>(__byte_perm(hi01, hi23, 0x7632))};
#pragma unroll
        for (int i = 0; i < kStateP; ++i) {
          const int xq = Xq[tq * slice + min(kStateP * pg + i, slice - 1)];
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = __dp4a(xq, col[j], acc[i][j]);
        }
      }
      if (phase == kLocal) {  // Sloc to the scratch; StatePassing is state_pass_kernel's
#pragma unroll
        for (int i = 0; i < kStateP; ++i) {
          const int p = kStateP * pg + i;
          if (p >= slice) break;
          int local[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) local[j] = requantize(acc[i][j], state_mult[p]);
          *scratch_word(a, b, h, p0, slice, start, p * nquads + nq) = __int_as_float(pack4(local[0], local[1], local[2], local[3]));
        }
        if (u == 0) *scratch_word(a, b, h, p0, slice, start, 2 * words) = __int_as_float(qd);
        continue;
      }
#pragma unroll
      for (int i = 0; i < kStateP; ++i) {
        const int p = kStateP * pg + i;
        if (p >= slice) break;
        int* at = reinterpret_cast<int*>(S + p * RB + 4 * nq);
        const int prev = *at;
        int next[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) next[j] = pass_state(requantize(acc[i][j], state_mult[p]), qd, byte_of(prev, j));
        *at = pack4(next[0], next[1], next[2], next[3]);
      }
    }
    __syncthreads();
  }

  if (phase == kWhole || (phase == kScan && last_chunk)) {
    for (int i = tid; i < slice * vecs; i += kThreads) {
      const int p = i / vecs, k = i % vecs;
      *reinterpret_cast<int4*>(state + int64_t(p) * N + 16 * k) = *reinterpret_cast<const int4*>(S + p * RB + 16 * k);
    }
  }
}

// StatePassing across the chunks (all but the last) of sequence blockIdx.z, head blockIdx.y: a
// thread owns one state word (four n of one p), reads Sloc and Qd of each chunk from the scratch
// kLocal wrote and stores the state entering each chunk there; the state entering the last chunk
// goes to `state`, where kScan's block of the last chunk reads it.
constexpr int kPassThreads = 256;
__global__ void __launch_bounds__(kPassThreads) state_pass_kernel(Ssdi8ChunkScanArgs a, int slice) {
  const int N4 = a.dstate / 4, b = blockIdx.z, h = blockIdx.y;
  const int idx = blockIdx.x * kPassThreads + threadIdx.x;
  if (idx >= a.headdim * N4) return;
  const int p = idx / N4, nq = idx % N4, p0 = p / slice * slice;
  const int i = (p - p0) * N4 + nq, words = slice * N4;
  int* at = reinterpret_cast<int*>(a.state + ((int64_t(b) * a.heads + h) * a.headdim + p) * a.dstate) + nq;
  int S = *at;
  for (int start = 0; start + a.chunk < a.seqlen; start += a.chunk) {
    *scratch_word(a, b, h, p0, slice, start, words + i) = __int_as_float(S);
    const int local = __float_as_int(*scratch_word(a, b, h, p0, slice, start, i));
    const int qd = __float_as_int(*scratch_word(a, b, h, p0, slice, start, 2 * words));
    S = pack4(pass_state(byte_of(local, 0), qd, byte_of(S, 0)), pass_state(byte_of(local, 1), qd, byte_of(S, 1)),
              pass_state(byte_of(local, 2), qd, byte_of(S, 2)), pass_state(byte_of(local, 3), qd, byte_of(S, 3)));
  }
  *at = S;
}

bool shape_supported(const Ssdi8ChunkScanArgs& a) {
  if (a.batch < 1 || a.batch > 65535 || a.seqlen < 1 || a.heads < 1 || a.groups < 1) return false;
  if (a.heads % a.groups != 0) return false;
  if (a.headdim < 1 || a.headdim > 2 * kMaxSlice || (a.headdim > kMaxSlice && a.headdim % 2 != 0)) return false;
  if (a.dstate < 16 || a.dstate > 256 || a.dstate % 16 != 0) return false;
  if (a.chunk < 1 || a.chunk > 256) return false;
  if (int64_t(a.heads) * 2 * a.headdim > INT32_MAX || int64_t(a.batch) * a.seqlen > INT32_MAX) return false;
  return true;
}

bool pointers_supported(const Ssdi8ChunkScanArgs& a) {
  if (!a.x || !a.B || !a.C || !a.dt_raw || !a.dt_bias || !a.A || !a.D || !a.B_scales || !a.C_scales ||
      !a.x_scaled_scales || !a.state_scales || !a.cb_scales || !a.state || !a.y)
    return false;
  if (reinterpret_cast<uintptr_t>(a.state) % 16 != 0) return false;
  const int64_t row = int64_t(a.heads) * a.headdim;
  return a.x_stride >= row && a.y_stride >= row && a.bc_stride >= int64_t(a.groups) * a.dstate &&
         a.dt_stride >= a.heads;
}

struct Plan {
  int slice = 0;        // headdim columns per block
  int chunks = 1;       // chunks per sequence
  bool split = false;   // kLocal, state_pass_kernel, kScan rather than kWhole
  size_t smem = 0;
};

// Splits the work by chunk (three launches) when blocks per (sequence, head) leave the GPU short of
// blocks (batch ≤ 2 or so at 80 heads on 132 SMs) and the scratch fits in a chunk. Then splits
// headdim into the fewest slices of at most kMaxSlice columns, halves them (down to 32 columns)
// while all blocks still fit in one wave of one block per SM, and (down to 8) while the shared
// memory does not fit.
bool make_plan(const Ssdi8ChunkScanArgs& a, Plan* plan) {
  if (!shape_supported(a) || !pointers_supported(a)) return false;
  int device = 0, sms = 0, max_smem = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return false;
  auto can_halve = [&a](int splits, int min_slice) {
    return a.headdim % (2 * splits) == 0 && a.headdim / (2 * splits) >= min_slice;
  };
  auto smem_of = [&a](int splits) { return make_layout(a.chunk, a.dstate, a.headdim / splits).total; };
  int splits = a.headdim > kMaxSlice ? 2 : 1;
  plan->chunks = (a.seqlen + a.chunk - 1) / a.chunk;
  {
    // In units of a quarter chunk per SM: kWhole takes ceil(blocks / SMs) waves of all chunks; the
    // split takes the blocks' chunks spread evenly, kLocal's (about a quarter of a chunk's work
    // each) and half a chunk for the pass and the launches.
    const int64_t blocks = int64_t(a.batch) * a.heads * splits, nc = plan->chunks;
    const int64_t whole = 4 * ((blocks + sms - 1) / sms) * nc * sms, split = 4 * blocks * nc + blocks * (nc - 1) + 2 * sms;
    plan->split = nc >= 2 && nc <= 65535 && a.heads <= 65535 && a.chunk >= a.dstate / 2 + 1 && split < whole;
  }
  const int64_t per_slice = int64_t(a.batch) * a.heads * (plan->split ? plan->chunks : 1);
  while (can_halve(splits, 32) && per_slice * 2 * splits <= sms) splits *= 2;
  while (smem_of(splits) > static_cast<size_t>(max_smem) && can_halve(splits, 8)) splits *= 2;
  plan->slice = a.headdim / splits;
  plan->smem = smem_of(splits);
  return plan->smem <= static_cast<size_t>(max_smem);
}

template <int kPerLane>
cudaError_t launch_with(const Ssdi8ChunkScanArgs& a, const Plan& plan, cudaStream_t stream) {
  const cudaError_t status = cudaFuncSetAttribute(ssdi8_chunk_scan_kernel<kPerLane>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem));
  if (status != cudaSuccess) return status;
  const int blocks_x = a.heads * (a.headdim / plan.slice);
  if (!plan.split) {
    ssdi8_chunk_scan_kernel<kPerLane><<<dim3(blocks_x, a.batch), kThreads, plan.smem, stream>>>(a, plan.slice, kWhole);
    return cudaGetLastError();
  }
  ssdi8_chunk_scan_kernel<kPerLane>
      <<<dim3(blocks_x, a.batch, plan.chunks - 1), kThreads, plan.smem, stream>>>(a, plan.slice, kLocal);
  const int pass_blocks = (a.headdim * (a.dstate / 4) + kPassThreads - 1) / kPassThreads;
  state_pass_kernel<<<dim3(pass_blocks, a.heads, a.batch), kPassThreads, 0, stream>>>(a, plan.slice);
  ssdi8_chunk_scan_kernel<kPerLane>
      <<<dim3(blocks_x, a.batch, plan.chunks), kThreads, plan.smem, stream>>>(a, plan.slice, kScan);
  return cudaGetLastError();
}

}  // namespace

bool ssdi8_chunk_scan_supported(const Ssdi8ChunkScanArgs& a) {
  Plan plan;
  return make_plan(a, &plan);
}

cudaError_t launch_ssdi8_chunk_scan(const Ssdi8ChunkScanArgs& a, cudaStream_t stream) {
  Plan plan;
  if (!make_plan(a, &plan)) return cudaErrorInvalidValue;
  return plan.slice > 32 ? launch_with<2>(a, plan, stream) : launch_with<1>(a, plan, stream);
}

}  // namespace ssdq::kernels
