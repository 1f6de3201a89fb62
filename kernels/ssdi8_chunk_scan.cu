#include "kernels/ssdi8_chunk_scan.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/tensor_core.cuh"
#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 512;  // 16 warps: one 16-row tile of the chunk each in ChunkScan (kScan: 8 warps, two each)
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 16;      // CB tiles are kTile × kTile (the m16 of the MMAs)
constexpr int kMaxSlice = 64;  // headdim columns per block (a multiple of 16: n8 tile pairs)
// The kernel's phases (see the comment above ssdi8_chunk_scan_kernel), each its own instantiation.
enum Phase { kWhole = 0, kLocal = 1, kScan = 2 };

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
// (sequence, head, slice, chunk) (kLocal, kScan; see Phase); the slices of a head share ChunkCumsum's
// values and CBq from the workspace, nothing else. The four products run on tensor cores (mma.sync): CB = Cq·Bqᵀ,
// C·S and Xqᵀ·Bq as int8 m16n8k32 (exact), diag = W·x16 as fp16 m16n8k16 with fp32 accumulation.
// Every operand but x16 (read transposed by ldmatrix.trans) is stored with its k dimension
// contiguous; all rows are 16-byte aligned and an odd number of 16-byte units long, so ldmatrix
// reads them without bank conflicts. Shared memory, offsets in
// bytes (16-byte aligned):
struct Layout {
  int nk;          // dstate rounded up to 32 (the MMA's k), the padding bytes zero
  int row_bytes;   // nk + 16: rows of Bq, Cq [token][n] and S [p][n]
  int rows;        // chunk rounded up to 32, the padding rows zero
  int trow_bytes;  // rows + 16: rows of BqT [n][token] and XqT [p][token]
  int x16_stride;  // slice + 8 halves: rows of x16 [token][p]
  size_t B, C, BT, S, XT, x16, cbq, decay, lut_state, cs2, dt_cb, col_factor, xs_scale, inv_xs_scale, state_mult, off_scale,
      decay_q7, work_next, total;
};

// The lower-triangle 16 × 16 tile pairs (T, S ≤ T) of a chunk of `chunk` tokens.
__host__ __device__ inline int tile_pairs(int chunk) {
  const int tiles = (chunk + kTile - 1) / kTile;
  return tiles * (tiles + 1) / 2;
}

// The split launch's phases take less: kLocal needs no Cq and no S, builds XqT only after BqT is
// built (XqT takes Bq's place) and reads x16 with plain loads (rows without the ldmatrix padding):
// 110,112 B at chunk 256, dstate 128, 64 columns; kScan needs no Bq, BqT or XqT: 88,608 B. Both
// run two blocks an SM.
// cbq_shared (kWhole only, where it fits): room for a chunk's CBq words (make_plan's choice).
__host__ __device__ inline Layout make_layout(int chunk, int dstate, int slice, int phase = kWhole, bool cbq_shared = false) {
  const bool local_only = phase == kLocal, scan_only = phase == kScan;
  Layout l{};
  l.nk = (dstate + 31) / 32 * 32;
  l.row_bytes = l.nk + 16;
  l.rows = (chunk + 31) / 32 * 32;
  l.trow_bytes = l.rows + 16;
  l.x16_stride = local_only ? slice : slice + 8;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = (at + bytes + 15) / 16 * 16;
    return here;
  };
  l.B = scan_only ? 0 : take(size_t(l.rows) * l.row_bytes);
  l.C = local_only ? l.B : take(size_t(l.rows) * l.row_bytes);
  if (scan_only) l.B = l.C;
  l.BT = scan_only ? l.C : take(size_t(dstate) * l.trow_bytes);
  l.S = local_only ? l.B : take(size_t(slice) * l.row_bytes);
  const bool xt_in_b = local_only && size_t(slice) * l.trow_bytes <= size_t(l.rows) * l.row_bytes;
  l.XT = scan_only ? l.C : xt_in_b ? l.B : take(size_t(slice) * l.trow_bytes);
  l.x16 = take(size_t(l.rows) * l.x16_stride * sizeof(__half));
  if (phase == kWhole && cbq_shared) l.cbq = take(size_t(tile_pairs(chunk)) * 256);  // chunk_cbq's layout
  l.decay = take(sizeof(float) * l.rows);                            // exp(cs[t])
  l.lut_state = take(sizeof(float) * l.rows);                        // dt[t]·exp(cs[L-1] - cs[t])
  l.cs2 = take(sizeof(float) * l.rows);                              // cs[t]·log2(e)
  l.dt_cb = take(sizeof(float) * l.rows);                            // s_cb·dt[t]
  l.col_factor = take(sizeof(__half) * l.rows);                      // f16(16·s_cb·dt[s]·exp(cs[s|15] - cs[s]))
  l.xs_scale = take(sizeof(float) * slice);
  l.inv_xs_scale = take(sizeof(float) * slice);                      // __frcp_rn(s_xs)
  l.state_mult = take(sizeof(float) * slice);                        // (s_xs·s_B) / s_s
  l.off_scale = take(sizeof(float) * slice);                         // s_C·s_s
  l.decay_q7 = take(sizeof(int));
  l.work_next = take(sizeof(int));                                   // next batch of ChunkState operand items
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
// rint(clamp(r)) = clamp(rint(r)); no conversion instruction.
__device__ inline int requantize(int acc, float multiplier) {
  return small_float_to_int(fminf(fmaxf(__fmul_rn(small_int_to_float(acc), multiplier), -127.f), 127.f));
}

// runtime/quantized_ssd.cc pass_state: sat8(local + ((Qd·prev + 64) >> 7)), arithmetic shift.
__device__ inline int pass_state(int local, int decay_q7, int prev) {
  return min(max(local + ((decay_q7 * prev + 64) >> 7), -127), 127);
}

__device__ inline int pack4(int a, int b, int c, int d) {
  return static_cast<int>((unsigned(a) & 0xffu) | ((unsigned(b) & 0xffu) << 8) | ((unsigned(c) & 0xffu) << 16) |
                          (unsigned(d) << 24));
}

__device__ inline int8_t byte_of(int word, int i) { return static_cast<int8_t>(word >> (8 * i)); }

constexpr float kLog2e = 1.4426950408889634f;
__device__ inline float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ inline uint32_t pack_half2(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}
__device__ inline uint32_t pack_half2_satfinite(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ inline __half half_satfinite(float v) {
  const uint32_t pair = pack_half2_satfinite(v, 0.f);
  return __ushort_as_half(static_cast<unsigned short>(pair));
}
__device__ inline uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// Bytes 2·pair and 2·pair + 1 of a CBq word (given ^ 0x80808080) as the fp16 pair q/16 (exact): the
// biased byte b under fp16's exponent of 1024 is 1152 + q, and (1152 + q)·2⁻⁴ − 72 = q/16.
__device__ inline uint32_t int8x2_to_half2_over_16(uint32_t biased, int pair) {
  const uint32_t h = __byte_perm(biased, 0x64646464u, pair ? 0x4342 : 0x4140);
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(h), "r"(0x2C002C00u), "r"(0xD480D480u));
  return d;
}

// CBq, the requantized int8 C·Bᵀ of a chunk's lower-triangle 16 × 16 tiles (T, S ≤ T), is the same
// for every head of a group: ssdi8_chunk_bmm_kernel computes it once per (sequence, chunk, group)
// into the workspace, tile pair T·(T+1)/2 + S at 256 bytes, lane (g, q) holding its 8 values of the
// m16n8 accumulator layout of the pair's two n8 tiles — CBq[t0+g][s0+8u+2q+{0,1}] at bytes 4u + {0,1}
// and CBq[t0+g+8][…] at bytes 4u + {2,3} — as one 8-byte word.
__host__ __device__ inline int chunk_count(const Ssdi8ChunkScanArgs& a) { return (a.seqlen + a.chunk - 1) / a.chunk; }
__device__ inline const uint2* chunk_cbq(const Ssdi8ChunkScanArgs& a, int b, int chunk_index, int grp) {
  const int64_t block = (int64_t(b) * chunk_count(a) + chunk_index) * a.groups + grp;
  return reinterpret_cast<const uint2*>(a.workspace) + block * tile_pairs(a.chunk) * 32;
}

// ChunkCumsum's per-token values of a (sequence, chunk, head), the same for every slice of the
// head: ssdi8_chunk_tables_kernel writes them once into the workspace after the CBq words, four rows
// of R = round32(chunk) floats and one of R halves in the Layout's order — exp(cs[t]),
// dt[t]·exp(cs[L-1] − cs[t]), cs[t]·log2(e), s_cb·dt[t], then 16·s_cb·dt[t]·exp(cs[t|15] − cs[t]) in
// fp16, each zero past the chunk's end — then Qd = rint(exp(cs[L-1])·128) as an int in a 16-byte tail.
__host__ __device__ inline int table_rows(int chunk) { return (chunk + 31) / 32 * 32; }
constexpr int kTableFloatRows = 4;
// The rows' bytes (18·R, a multiple of 16 since R is of 32), as one run for the scan's copy.
__host__ __device__ inline size_t table_row_bytes(int chunk) { return (4 * kTableFloatRows + 2) * size_t(table_rows(chunk)); }
__host__ __device__ inline size_t table_bytes(int chunk) { return table_row_bytes(chunk) + 16; }
__host__ __device__ inline size_t cbq_bytes(const Ssdi8ChunkScanArgs& a) {
  return size_t(a.batch) * chunk_count(a) * a.groups * tile_pairs(a.chunk) * 256;
}
__device__ inline float* chunk_table(const Ssdi8ChunkScanArgs& a, int b, int chunk_index, int h) {
  const int64_t entry = (int64_t(b) * chunk_count(a) + chunk_index) * a.heads + h;
  return reinterpret_cast<float*>(static_cast<char*>(a.workspace) + cbq_bytes(a) + entry * table_bytes(a.chunk));
}
// rows = table_rows(chunk)
__device__ inline __half* table_col_factor(float* table, int rows) { return reinterpret_cast<__half*>(table + kTableFloatRows * rows); }
__device__ inline int* table_qd(float* table, int rows) { return reinterpret_cast<int*>(table_col_factor(table, rows) + rows); }
__device__ inline int* chunk_qd(const Ssdi8ChunkScanArgs& a, int b, int chunk_index, int h) {
  return table_qd(chunk_table(a, b, chunk_index, h), table_rows(a.chunk));
}

// ChunkCumsum: a block per (sequence blockIdx.y, chunk, run of `span` heads), blockIdx.x = chunk·runs
// + run. dt for every (token, head) of the run (a token's heads adjacent in dt_raw: coalesced when
// span > 1), the cumsum a thread per head in the CPU's sequential order, then the values a thread
// per (head, token). The span only spreads work: every value is computed by the same expressions.
constexpr int kTableThreads = 256;  // the longest chunk
constexpr int kTableMaxSpan = 16;
// Six blocks an SM (40 registers, which the 34,816 bytes of shared memory a 16-head block allow;
// 42 registers gave five): 8B-like at B = 32, 132.6 → 121.9 µs (`ncu`), 2.7b unchanged.
__global__ void __launch_bounds__(kTableThreads, 6) ssdi8_chunk_tables_kernel(Ssdi8ChunkScanArgs a, int span) {
  // dt and cs, each [t][head of the run] in rows of span + 1 floats (table_shared_bytes): the cumsum's
  // threads and the value threads both read without bank conflicts. Sized by the span, so that a
  // batch-1 prefill's blocks (span 1) stay small beside the GEMM on the other stream.
  extern __shared__ float table_smem[];
  __shared__ int qd[kTableMaxSpan];
  const int runs = (a.heads + span - 1) / span, stride = span + 1;
  float* dt = table_smem;
  float* cs = table_smem + kTableThreads * stride;
  const int b = blockIdx.y, c = blockIdx.x / runs, h0 = (blockIdx.x % runs) * span, n = min(span, a.heads - h0);
  const int start = c * a.chunk, L = min(a.chunk, a.seqlen - start), R = table_rows(a.chunk);
  const int64_t row0 = int64_t(b) * a.seqlen + start;
  {  // a thread keeps one head of the run and steps over tokens (no index division an element)
    const int per = kTableThreads / span, j = threadIdx.x % span;
    int t = threadIdx.x / span;
    if (t < per && j < n) {
      const float bias = a.dt_bias[h0 + j];
      const float* raw_at = a.dt_raw + (row0 + t) * a.dt_stride + h0 + j;
      const int64_t raw_step = int64_t(per) * a.dt_stride;
      for (; t < L; t += per, raw_at += raw_step) {
        float raw = *raw_at;
        if (a.dt_format != 0.f) raw = apply_format_code(raw, a.dt_format);
        dt[t * stride + j] = fminf(fmaxf(softplus_like_cpu(__fadd_rn(raw, bias)), a.dt_min), a.dt_max);
      }
    }
  }
  __syncthreads();
  if (const int j = threadIdx.x; j < n) {
    // The CPU's `running += dt·A` (contracted to an FMA by gcc), eight tokens a step so that the
    // loads and stores leave the chain of FMAs alone; dt past the chunk's end is not read.
    const float A = a.A[h0 + j];
    float running = 0.f;
    for (int t0 = 0; t0 < L; t0 += 8) {
      float d[8];
#pragma unroll
      for (int r = 0; r < 8; ++r) d[r] = dt[min(t0 + r, L - 1) * stride + j];
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        running = t0 + r < L ? __fmaf_rn(d[r], A, running) : running;
        d[r] = running;
      }
#pragma unroll
      for (int r = 0; r < 8; ++r)
        if (t0 + r < L) cs[(t0 + r) * stride + j] = d[r];
    }
    qd[j] = static_cast<int>(rintf(__fmul_rn(exp_like_cpu(running), 128.f)));
  }
  __syncthreads();
  {  // a thread keeps one token t and steps over the run's heads
    const int per = kTableThreads / R, t = threadIdx.x % R;  // R ≤ kTableThreads: per ≥ 1
    const int heads_per_group = a.heads / a.groups;
    const size_t head_floats = table_bytes(a.chunk) / sizeof(float);
    float* const first = chunk_table(a, b, c, h0);  // the run's heads are adjacent entries
    for (int j = threadIdx.x / R; threadIdx.x < per * R && j < n; j += per) {
      float* table = first + j * head_floats;
      if (t == 0) *table_qd(table, R) = qd[j];
      if (t >= L) {
        for (int k = 0; k < kTableFloatRows; ++k) table[k * R + t] = 0.f;
        table_col_factor(table, R)[t] = __half();
        continue;
      }
      const float dt_t = dt[t * stride + j], cs_t = cs[t * stride + j], cs_last = cs[(L - 1) * stride + j];
      const float cs2_t = __fmul_rn(cs_t, kLog2e), cs2_r = __fmul_rn(cs[min(t | 15, L - 1) * stride + j], kLog2e);
      const float dt_cb = __fmul_rn(a.cb_scales[(h0 + j) / heads_per_group], dt_t);
      table[t] = exp2_approx(cs2_t);  // reaches y alone: a float part (the others in double feed integers)
      table[R + t] = __fmul_rn(dt_t, exp_like_cpu(__fsub_rn(cs_last, cs_t)));
      table[2 * R + t] = cs2_t;
      table[3 * R + t] = dt_cb;
      // The scan's column factor left of the diagonal, relative to the 16-token tile's last token
      // (t | 15 < L there): the exponent is ≤ 0. A float part that reaches y alone (ex2.approx), in
      // fp16 ×16 (saturating).
      table_col_factor(table, R)[t] = half_satfinite(__fmul_rn(__fmul_rn(dt_cb, exp2_approx(__fsub_rn(cs2_r, cs2_t))), 16.f));
    }
  }
}

// The kernel's phases. kWhole walks all chunks of a (sequence, head, slice) in one block. With
// enough chunks per block it splits in three launches (after ChunkCumsum's):
//   kLocal (one block per chunk; ChunkBMM in blocks past them): Xq and ChunkState: Sloc to the scratch;
//   state_pass_kernel (per state word, sequential over chunks): the state entering each chunk to the
//       scratch, the final state to `state`;
//   kScan (one block per chunk, 256 threads): kWhole's ChunkScan for that chunk, with the state
//       entering it read back.
// Every value is computed by the same expression as in kWhole, so the results are the same bits.

// The scratch of chunk `start` (a multiple of `chunk`, not the last chunk) of sequence b, head h,
// slice [p0, p0 + slice): the block's own part of y (rows start.., columns p0.. of head h), which
// kScan overwrites with y only after reading the state back. Int word i lies at row i / slice,
// column i % slice, stored bit for bit as a float. Words [0, W): Sloc, [W, 2W): the state entering
// the chunk, with W = slice·dstate/4, the int8 [slice][dstate] row-major, four n a word: dstate/2
// rows, so a chunk needs chunk ≥ dstate/2 (the plan asks dstate/2 + 1).
__device__ inline float* scratch_word(const Ssdi8ChunkScanArgs& a, int b, int h, int p0, int slice, int start, int i) {
  return a.y + (int64_t(b) * a.seqlen + start + i / slice) * a.y_stride + int64_t(h) * a.headdim + p0 + i % slice;
}

// The last chunk may be too short for a scratch in y: its Sloc (which = 0) and the state entering it
// (which = 1) lie in the workspace after ChunkCumsum's values, [headdim][dstate] int8 per (sequence,
// head); word i of slice p0 at int i from the returned pointer.
__host__ __device__ inline size_t tables_total_bytes(const Ssdi8ChunkScanArgs& a) {
  return size_t(a.batch) * chunk_count(a) * a.heads * table_bytes(a.chunk);
}
__device__ inline int* last_chunk_words(const Ssdi8ChunkScanArgs& a, int b, int h, int p0, int which) {
  char* base = static_cast<char*>(a.workspace) + cbq_bytes(a) + tables_total_bytes(a);
  return reinterpret_cast<int*>(base + ((int64_t(b) * a.heads + h) * 2 + which) * a.headdim * a.dstate +
                                int64_t(p0) * a.dstate);
}

// ChunkBMM: the CBq words of chunk c of sequence b, group grp, into the workspace (chunk_cbq's
// layout), part `part` of `parts`: tile pairs i with i mod (16·parts) in [16·part, 16·part + 16).
// Bq and Cq rows by cp.async (zero past the chunk's end and past dstate), then a warp a tile pair at
// a time: two int8 MMAs a k step, requantized as the CPU does. kDstate as the scan kernel's.
template <int kDstate>
__device__ __forceinline__ void chunk_bmm(const Ssdi8ChunkScanArgs& a, unsigned char* smem, int c, int b, int grp,
                                          int part, int parts) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int N = kDstate ? kDstate : a.dstate, NK = (N + 31) / 32 * 32, RB = NK + 16;
  const int start = c * a.chunk, L = min(a.chunk, a.seqlen - start), rows = (L + 31) / 32 * 32;
  int8_t* Bq = reinterpret_cast<int8_t*>(smem);
  int8_t* Cq = Bq + rows * RB;
  const int64_t row0 = int64_t(b) * a.seqlen + start;
  // The scan kernel's row loading, written out again: one device function for both measured the
  // scan 7 % slower (8B-like module, four A/B pairs on one machine: 4.51–4.63 against 4.90–4.98 ms).
  {  // lanes_per_row lanes a row (piece j of [Bq | Cq] each), 32 / lanes_per_row rows a warp at a time
    const int pieces = NK / 16, vecs = N / 16, lanes_per_row = 2 * pieces, warp_rows = 32 / lanes_per_row;
    const int piece = lane % lanes_per_row, sub_row = lane / lanes_per_row;
    const bool is_c = piece >= pieces;
    const int k = is_c ? piece - pieces : piece;
    const int row_step = kWarps * warp_rows;
    int t = warp * warp_rows + sub_row;
    int8_t* dst = (is_c ? Cq : Bq) + 16 * k + t * RB;
    const int8_t* src = (is_c ? a.Cq : a.Bq) + (row0 + t) * a.bc_stride + grp * N + 16 * k;
    const int64_t src_step = int64_t(row_step) * a.bc_stride;
    if (sub_row < warp_rows)
      for (; t < rows; t += row_step, dst += row_step * RB, src += src_step) {
        if (t < L && k < vecs)
          cp_async_16(dst, src);
        else
          *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
      }
  }
  cp_async_wait_all();
  __syncthreads();
  const float cb_mult = __fdiv_rn(__fmul_rn(a.C_scales[grp], a.B_scales[grp]), a.cb_scales[grp]);
  const uint32_t Bq_s = shared_address(Bq), Cq_s = shared_address(Cq);
  uint2* out = const_cast<uint2*>(chunk_cbq(a, b, c, grp));
  const int tiles = (L + kTile - 1) / kTile, step = kWarps * parts;
  // The warp's pairs part·kWarps + warp + i·step, pair T(T+1)/2 + S walked as (T, S): no division
  // (a modulo for every pair of the chunk was most of ChunkBMM's instructions).
  for (int T = 0, S = part * kWarps + warp;; S += step) {
    while (S > T) S -= ++T;
    if (T >= tiles) break;
    const uint32_t c_rows = Cq_s + T * kTile * RB + 2 * a_lane_offset(lane, RB / 2);
    const uint32_t b_rows = Bq_s + S * kTile * RB + 2 * bt_lane_offset(lane, RB / 2);
    int cb[2][4] = {};
    for (int k = 0; k < NK; k += 32) {
      uint32_t af[4], bf[4];
      ldmatrix_x4(af, c_rows + k);
      ldmatrix_x4(bf, b_rows + k);
      mma_s8_16832(cb[0], af, bf[0], bf[1]);
      mma_s8_16832(cb[1], af, bf[2], bf[3]);
    }
    out[(T * (T + 1) / 2 + S) * 32 + lane] =
        make_uint2(pack4(requantize(cb[0][0], cb_mult), requantize(cb[0][1], cb_mult), requantize(cb[0][2], cb_mult),
                         requantize(cb[0][3], cb_mult)),
                   pack4(requantize(cb[1][0], cb_mult), requantize(cb[1][1], cb_mult), requantize(cb[1][2], cb_mult),
                         requantize(cb[1][3], cb_mult)));
  }
}

// kSlice: headdim columns per block (16, 32 or 64). kDstate: dstate known at compile time (the
// official Mamba-2 models' 128: the MMA loops over it unroll), or 0 for any. kPhase: see Phase;
// kLocal and kScan have their own shared memory layouts and run two blocks an SM; kLocal's blocks
// past the chunks' run ChunkBMM in `bmm_parts` parts (they fill the launch's last wave), and kScan's
// 8 warps take two row tiles each (T and 15 - T: 17 tile pairs each at 16 tiles).
constexpr int block_threads(int phase) { return phase == kScan ? kThreads / 2 : kThreads; }
template <int kSlice, int kDstate, int kPhase>
__global__ void __launch_bounds__(block_threads(kPhase), kPhase == kWhole ? 1 : 2)
    ssdi8_chunk_scan_kernel(Ssdi8ChunkScanArgs a, int bmm_parts, bool cbq_shared) {
  constexpr int kN8 = kSlice / 8;  // n8 tiles of the slice's columns
  constexpr int kBlockThreads = block_threads(kPhase), kBlockWarps = kBlockThreads / 32, phase = kPhase;
  extern __shared__ __align__(16) unsigned char smem[];
  if constexpr (kPhase == kLocal) {
    const int chunks = chunk_count(a);
    if (int(blockIdx.z) >= chunks) {
      int item = ((blockIdx.z - chunks) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
      const int part = item % bmm_parts;
      item /= bmm_parts;
      const int grp = item % a.groups;
      item /= a.groups;
      const int b = item % a.batch, c = item / a.batch;
      if (c < chunks) chunk_bmm<kDstate>(a, smem, c, b, grp, part, bmm_parts);
      return;
    }
  }
  cbq_shared = cbq_shared && kPhase == kWhole;
  const Layout lay = make_layout(a.chunk, a.dstate, kSlice, kPhase, cbq_shared);
  const int N = kDstate ? kDstate : a.dstate;
  const int NK = kDstate ? (kDstate + 31) / 32 * 32 : lay.nk, RB = NK + 16;
  const int TRB = lay.trow_bytes, XS = lay.x16_stride;
  int8_t* Bq = reinterpret_cast<int8_t*>(smem + lay.B);
  int8_t* Cq = reinterpret_cast<int8_t*>(smem + lay.C);
  int8_t* BT = reinterpret_cast<int8_t*>(smem + lay.BT);
  int8_t* S = reinterpret_cast<int8_t*>(smem + lay.S);
  int8_t* XT = reinterpret_cast<int8_t*>(smem + lay.XT);
  __half* x16 = reinterpret_cast<__half*>(smem + lay.x16);
  // kWhole copies each chunk's CBq words into shared memory with its other rows where they fit (a
  // W tile pair then waits for shared memory rather than L2: module −3 %); kScan's two blocks an SM
  // leave no room and read L2.
  uint2* cbq_rows = reinterpret_cast<uint2*>(smem + lay.cbq);
  float* decay = reinterpret_cast<float*>(smem + lay.decay);
  float* lut_state = reinterpret_cast<float*>(smem + lay.lut_state);
  float* cs2 = reinterpret_cast<float*>(smem + lay.cs2);
  float* dt_cb = reinterpret_cast<float*>(smem + lay.dt_cb);
  const __half* col_factor = reinterpret_cast<const __half*>(smem + lay.col_factor);
  float* xs_scale = reinterpret_cast<float*>(smem + lay.xs_scale);
  float* inv_xs_scale = reinterpret_cast<float*>(smem + lay.inv_xs_scale);
  float* state_mult = reinterpret_cast<float*>(smem + lay.state_mult);
  float* off_scale = reinterpret_cast<float*>(smem + lay.off_scale);
  int* decay_q7 = reinterpret_cast<int*>(smem + lay.decay_q7);
  int* work_next = reinterpret_cast<int*>(smem + lay.work_next);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int splits = a.headdim / kSlice;
  const int h = blockIdx.x / splits, p0 = (blockIdx.x % splits) * kSlice, b = blockIdx.y;
  const int grp = h / (a.heads / a.groups);
  const int col0 = h * a.headdim + p0;  // first x / y column of the slice
  const float s_B = a.B_scales[grp], s_C = a.C_scales[grp];
  const float Dh = a.D[h];

  for (int p = tid; p < kSlice; p += kBlockThreads) {
    const float s_xs = a.x_scaled_scales[col0 + p], s_s = a.state_scales[col0 + p];
    xs_scale[p] = s_xs;
    inv_xs_scale[p] = __frcp_rn(s_xs);
    state_mult[p] = __fdiv_rn(__fmul_rn(s_xs, s_B), s_s);
    off_scale[p] = __fmul_rn(s_C, s_s);
  }
  // Chunks [c_begin, c_end) of the sequence; the last one ends the sequence.
  const int chunks = chunk_count(a);
  const int c_begin = phase == kWhole ? 0 : blockIdx.z, c_end = phase == kWhole ? chunks : c_begin + 1;
  const bool last_chunk = c_end == chunks;  // kLocal / kScan: the last chunk's scratch is in the workspace
  const int nquads = N / 4, words = kSlice * nquads;  // words of the slice's state in the scratch
  int8_t* state = a.state + ((int64_t(b) * a.heads + h) * a.headdim + p0) * N;
  // The state's padding bytes (n ≥ N) stay zero: the C·S product reads them.
  if (kPhase != kLocal && NK > N) {
    const int pad_words = max((NK - N) / 4, 1);  // ≥ 1: the branch is dead when NK == N
    for (int i = tid; i < kSlice * pad_words; i += kBlockThreads)
      *reinterpret_cast<int*>(S + (i / pad_words) * RB + N + 4 * (i % pad_words)) = 0;
  }
  if (phase == kWhole) {
    const int vecs = N / 16;
    for (int i = tid; i < kSlice * vecs; i += kBlockThreads) {
      const int p = i / vecs, k = i % vecs;
      *reinterpret_cast<int4*>(S + p * RB + 16 * k) = *reinterpret_cast<const int4*>(state + int64_t(p) * N + 16 * k);
    }
  } else if (phase == kScan) {  // the state entering the chunk, from the scratch this block overwrites
    const int* entering = last_chunk_words(a, b, h, p0, 1);
    for (int i = tid; i < words; i += kBlockThreads) {
      const int p = i / nquads, k = i % nquads;
      *reinterpret_cast<int*>(S + p * RB + 4 * k) =
          last_chunk ? entering[i] : __float_as_int(*scratch_word(a, b, h, p0, kSlice, c_begin * a.chunk, words + i));
    }
  }
  const bool scan = phase != kLocal;  // ChunkScan and y
  // Vector access where the pointers and strides allow it (a slice's first column is a multiple of 16).
  const bool x_vec8 = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.x_stride % 8 == 0;
  const bool y_vec2 = reinterpret_cast<uintptr_t>(a.y) % 8 == 0 && a.y_stride % 2 == 0;
  const uint32_t Cq_s = shared_address(Cq), BT_s = shared_address(BT);
  const uint32_t S_s = shared_address(S), XT_s = shared_address(XT), x16_s = shared_address(x16);

  // The copies of chunk c into shared memory, two cp.async groups: (1) the Bq and Cq rows (kLocal
  // Bq alone, kScan Cq alone), ChunkCumsum's values of this (chunk, head), computed by
  // ssdi8_chunk_tables_kernel, and (cbq_shared) the chunk's CBq words; (2) the chunk's fp16 x rows.
  // Rows past the chunk's end (and bytes past dstate) are zero. Addresses step row by row (no
  // per-row 64-bit products).
  auto load_chunk = [&](int c) {
    const int start = c * a.chunk, L = min(a.chunk, a.seqlen - start), rows = (L + 31) / 32 * 32;
    const int64_t row0 = int64_t(b) * a.seqlen + start;
    {  // a warp a row, lane j the 16-byte piece j of [Bq | Cq] (NK/16 ≤ 16 pieces each)
      const int pieces = NK / 16;
      const bool is_c = lane >= pieces;
      const int k = is_c ? lane - pieces : lane;
      const bool active = lane < 2 * pieces && (is_c ? kPhase != kLocal : kPhase != kScan);
      const bool copy = NK == N || k < N / 16;
      int8_t* dst = (is_c ? Cq : Bq) + 16 * k + warp * RB;
      const int8_t* src = (is_c ? a.Cq : a.Bq) + (row0 + warp) * a.bc_stride + grp * N + 16 * k;
      const int64_t src_step = int64_t(kBlockWarps) * a.bc_stride;
      int t = warp;
      if (active) {
        for (; t < L; t += kBlockWarps, dst += kBlockWarps * RB, src += src_step) {
          if (copy)
            cp_async_16(dst, src);
          else
            *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
        }
        for (; t < rows; t += kBlockWarps, dst += kBlockWarps * RB) *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
      }
    }
    {
      const float* table = chunk_table(a, b, c, h);
      for (int i = tid; i < table_row_bytes(a.chunk) / 16; i += kBlockThreads) cp_async_16(decay + 4 * i, table + 4 * i);
      if (cbq_shared) {  // the pairs of this chunk's L tokens, 16 pieces of 16 bytes each
        const uint2* words = chunk_cbq(a, b, c, grp);
        for (int i = tid; i < tile_pairs(L) * 16; i += kBlockThreads) cp_async_16(cbq_rows + 2 * i, words + 2 * i);
      }
      if (tid == 0) cp_async_4_or_zero(decay_q7, chunk_qd(a, b, c, h), true);
      if (tid == 0) *work_next = 0;
    }
    cp_async_commit();
    {  // a thread keeps one 8-column piece and steps over rows
      constexpr int kVecs = kSlice / 8, kRowStep = kBlockThreads / kVecs;
      const int p = 8 * (tid % kVecs);
      int t = tid / kVecs;
      __half* dst = x16 + t * XS + p;
      const __half* src = a.x + (row0 + t) * a.x_stride + col0 + p;
      const int64_t src_step = kRowStep * a.x_stride;
      if (x_vec8) {
        for (; t < L; t += kRowStep, dst += kRowStep * XS, src += src_step) cp_async_16(dst, src);
      } else {
        for (; t < L; t += kRowStep, dst += kRowStep * XS, src += src_step)
#pragma unroll
          for (int k = 0; k < 8; ++k) dst[k] = src[k];
      }
      for (; t < rows; t += kRowStep, dst += kRowStep * XS) *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
    }
    cp_async_commit();
  };

  // kWhole loads chunk c + 1 while chunk c's ChunkState runs (Bq, Cq, x16, CBq and the values are
  // dead by then); the barrier at the top of the next chunk orders both.
  load_chunk(c_begin);
  for (int c = c_begin; c < c_end; ++c) {
    const int start = c * a.chunk, L = min(a.chunk, a.seqlen - start);
    constexpr bool state_step = kPhase != kScan;  // ChunkState (and StatePassing)
    const int rows = (L + 31) / 32 * 32;  // padded to the int8 MMA's k
    const int64_t row0 = int64_t(b) * a.seqlen + start;
    cp_async_wait_pending<1>();  // Bq, Cq and the ChunkCumsum values
    __syncthreads();
    // BqT[n][t], ChunkState's B operand with the token dimension contiguous, transposed from Bq four
    // tokens × four n a lane, a batch 8 token quads × 4 n quads (Bq reads 4-way, BqT writes 2-way
    // bank conflicts).
    const int n_quad_groups = N / 16, bt_batches = rows / 32 * n_quad_groups;
    auto build_bt = [&](int batch) {
      const int group = batch / n_quad_groups, nq_group = batch - group * n_quad_groups;
      const int tq = 8 * group + lane % 8, nq = 4 * nq_group + lane / 8;
      const int8_t* bt = Bq + 4 * tq * RB + 4 * nq;
      const unsigned b0 = *reinterpret_cast<const unsigned*>(bt), b1 = *reinterpret_cast<const unsigned*>(bt + RB);
      const unsigned b2 = *reinterpret_cast<const unsigned*>(bt + 2 * RB);
      const unsigned b3 = *reinterpret_cast<const unsigned*>(bt + 3 * RB);
      const unsigned lo01 = __byte_perm(b0, b1, 0x5140), hi01 = __byte_perm(b0, b1, 0x7362);
      const unsigned lo23 = __byte_perm(b2, b3, 0x5140), hi23 = __byte_perm(b2, b3, 0x7362);
      int8_t* out = BT + 4 * nq * TRB + 4 * tq;
      *reinterpret_cast<unsigned*>(out) = __byte_perm(lo01, lo23, 0x5410);
      *reinterpret_cast<unsigned*>(out + TRB) = __byte_perm(lo01, lo23, 0x7632);
      *reinterpret_cast<unsigned*>(out + 2 * TRB) = __byte_perm(hi01, hi23, 0x5410);
      *reinterpret_cast<unsigned*>(out + 3 * TRB) = __byte_perm(hi01, hi23, 0x7632);
    };

    if (state_step)
      for (int batch = warp; batch < bt_batches; batch += kBlockWarps) build_bt(batch);
    cp_async_wait_all();
    __syncthreads();

    // ChunkState's A operand with the token dimension contiguous, built by the warps that finish
    // their ChunkScan tile first (below), 32 items a batch, a lane an item: XqT[p][t] =
    // Q8(lut_state[t]·x[t,p]) from x16, a lane quantizing 16 tokens of one column p into one 16-byte
    // row piece (the rare values a division must settle in one branch for all 16).
    const int xq_batches = rows / 16 * kSlice / 32;
    auto build_xq = [&](int batch) {
      const int i = 32 * batch + lane, t16 = 16 * (i / kSlice), p = i % kSlice;
      // kLocal (64 registers for two blocks an SM) takes the 16 tokens in two halves.
      constexpr int kPart = kPhase == kLocal ? 8 : 16;
      const float inv = inv_xs_scale[p];
#pragma unroll
      for (int t_part = t16; t_part < t16 + 16; t_part += kPart) {
        float v[kPart];
#pragma unroll
        for (int r4 = 0; r4 < kPart; r4 += 4) {
          const float4 lut = *reinterpret_cast<const float4*>(lut_state + t_part + r4);
          const float l[4] = {lut.x, lut.y, lut.z, lut.w};
#pragma unroll
          for (int r = 0; r < 4; ++r) v[r4 + r] = __fmul_rn(l[r], __half2float(x16[(t_part + r4 + r) * XS + p]));
        }
        uint32_t word[kPart / 4];
        quantize_int8_words(v, xs_scale[p], inv, word);
        int8_t* out = XT + p * TRB + t_part;
        if constexpr (kPart == 16)
          *reinterpret_cast<uint4*>(out) = make_uint4(word[0], word[1], word[2], word[3]);
        else
          *reinterpret_cast<uint2*>(out) = make_uint2(word[0], word[1]);
      }
    };

    // ChunkScan: a warp owns a tile of kTile rows t0.. (tile_of_warp balances the triangle; kScan's
    // warps take two) and all kSlice columns; lane (g, q) holds rows t0 + g, t0 + g + 8 and columns
    // 8j + 2q, +1 of every n8 tile j.
    const int tiles = (L + kTile - 1) / kTile;
    constexpr int kTilesPerWarp = kPhase == kScan ? 2 : 1;
#pragma unroll 1
    for (int tile_pass = 0; tile_pass < kTilesPerWarp; ++tile_pass) {
      const int T = kPhase == kScan ? (tile_pass == 0 ? warp : 15 - warp) : tile_of_warp(warp);
      if (!scan || T >= tiles) continue;
      const int t0 = T * kTile;
      // Per-lane ldmatrix addresses (tensor_core.cuh offsets count 16-bit elements: 2 bytes each).
      const uint32_t c_rows = Cq_s + t0 * RB + 2 * a_lane_offset(lane, RB / 2);
      float yacc[kN8][4];
      {  // ChunkScan1: int32 C·S with the state entering the chunk, scaled: float(acc)·(s_C·s_s)·exp(cs[t])
        int acc[kN8][4] = {};
        const uint32_t s_rows = S_s + 2 * bt_lane_offset(lane, RB / 2);
        for (int k = 0; k < NK; k += 32) {
          uint32_t af[4];
          ldmatrix_x4(af, c_rows + k);
#pragma unroll
          for (int j = 0; j < kN8; j += 2) {
            uint32_t bf[4];
            ldmatrix_x4(bf, s_rows + 8 * j * RB + k);
            mma_s8_16832(acc[j], af, bf[0], bf[1]);
            mma_s8_16832(acc[j + 1], af, bf[2], bf[3]);
          }
        }
        const float decay_t[2] = {t0 + g < L ? decay[t0 + g] : 0.f, t0 + g + 8 < L ? decay[t0 + g + 8] : 0.f};
#pragma unroll
        for (int j = 0; j < kN8; ++j) {
          const float2 scale = *reinterpret_cast<const float2*>(off_scale + 8 * j + 2 * q);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            yacc[j][e] = __fmul_rn(__fmul_rn(small_int_to_float(acc[j][e]), e & 1 ? scale.y : scale.x), decay_t[e / 2]);
        }
      }
      // Rows past the chunk's end (never stored) take the last row's cs2, so that their W factors'
      // exponents stay ≤ 0 too: no Inf (and no Inf · 0) in the fp16 products.
      const float cs2_t0 = cs2[min(t0 + g, L - 1)], cs2_t1 = cs2[min(t0 + g + 8, L - 1)];
      const uint32_t x_rows = x16_s + 2 * b_lane_offset(lane, XS);
      // This row tile's CBq words (pairs T·(T+1)/2 + S), each loaded one pair ahead.
      const int cbq_first = (T * (T + 1) / 2) * 32 + lane;
      const uint2* cbq_global = chunk_cbq(a, b, c, grp) + cbq_first;
      const uint2* cbq_local = cbq_rows + cbq_first;
      auto load_cbq = [&](int pair) { return cbq_shared ? cbq_local[32 * pair] : __ldg(cbq_global + 32 * pair); };
      uint2 cbq_next = load_cbq(0);
      // One 16 × 16 tile pair (s0 < t0), or the diagonal one (s0 == t0: only s ≤ t kept), apart so
      // that the others carry no mask. W = f16(float(CBq)·(s_cb·dt[s]·2^(cs2[t] - cs2[s]))) for s ≤ t,
      // else 0 (rows t ≥ L are not stored), in the accumulator layout of the two n8 tiles, which is the
      // A fragment of the m16n8k16 below. W is a float part of the specification (within tolerance):
      // exp through ex2.approx, and left of the diagonal as the product of ChunkCumsum's column factor
      // 16·s_cb·dt[s]·exp(cs[r] - cs[s]) (fp16, saturating) and the row factor 2^(cs2[t] - cs2[r]),
      // r = s0 + 15 (both exponents ≤ 0: two exps a lane instead of eight) rounded to fp16, multiplied
      // in fp16 and then by CBq/16 (exact) in fp16: three roundings more than the diagonal's form, two
      // fp16 multiplies a value pair (after the once-a-pair row conversion) where an fp32 product
      // took two multiplies, a conversion and the fp16 multiply. The ×16 keeps the column factor
      // normal down to s_cb·dt·exp(…) = 3.8e-6 and finite up to 4094 (beyond that it saturates,
      // where f16(W) for large CBq overflows in the specification itself); a row factor below 2⁻¹⁴
      // (its tokens decayed by more than that) loses relative precision as an fp16 subnormal and is
      // 0 below 2⁻²⁵, an absolute error under 2⁻²⁵ of the column factor's W.
      auto tile_pair = [&](int s0, auto diagonal_tag) {
        constexpr bool diagonal = decltype(diagonal_tag)::value;
        const uint2 word = cbq_next;  // CBq of rows t0.. and columns s0..
        if (!diagonal) cbq_next = load_cbq(s0 / kTile + 1);
        uint32_t w[4];
        if constexpr (diagonal) {
          float cb[2][4];
          int8x4_to_float(word.x, cb[0]);
          int8x4_to_float(word.y, cb[1]);
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int s = s0 + 8 * u + 2 * q;
            const float2 cs2_s = *reinterpret_cast<const float2*>(cs2 + s), dtcb_s = *reinterpret_cast<const float2*>(dt_cb + s);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const float ct = half ? cs2_t1 : cs2_t0;
              const int t = t0 + g + 8 * half;
              const float v0 = __fmul_rn(cb[u][2 * half], __fmul_rn(dtcb_s.x, exp2_approx(ct - cs2_s.x)));
              const float v1 = __fmul_rn(cb[u][2 * half + 1], __fmul_rn(dtcb_s.y, exp2_approx(ct - cs2_s.y)));
              w[2 * u + half] = pack_half2(s <= t ? v0 : 0.f, s + 1 <= t ? v1 : 0.f);
            }
          }
        } else {
          const float r = cs2[s0 + kTile - 1];
          const float row0 = exp2_approx(cs2_t0 - r), row1 = exp2_approx(cs2_t1 - r);
          const uint32_t row[2] = {pack_half2(row0, row0), pack_half2(row1, row1)};
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const uint32_t col = *reinterpret_cast<const uint32_t*>(col_factor + s0 + 8 * u + 2 * q);
            const uint32_t biased = (u ? word.y : word.x) ^ 0x80808080u;
#pragma unroll
            for (int half = 0; half < 2; ++half)
              w[2 * u + half] = hmul2_bits(int8x2_to_half2_over_16(biased, half), hmul2_bits(col, row[half]));
          }
        }
        // diag += W · x16[s0.., :] (fp16 products, exact in fp32; fp32 accumulation).
#pragma unroll
        for (int j = 0; j < kN8; j += 2) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, x_rows + (s0 * XS + 8 * j) * 2);
          mma_f16_16816(yacc[j], w, bf[0], bf[1]);
          mma_f16_16816(yacc[j + 1], w, bf[2], bf[3]);
        }
      };
#pragma unroll 2
      for (int s0 = 0; s0 < t0; s0 += kTile) tile_pair(s0, std::false_type{});
      tile_pair(t0, std::true_type{});
      // y = D·x + (C·S term + diag), the CPU's fma(D, x, ·): columns 2q, 2q + 1 of each n8 tile,
      // x from x16, y as one float2 where y allows it.
      const int t_lo = t0 + g, t_hi = t0 + g + 8;
      const __half* x_lo = x16 + t_lo * XS + 2 * q;
      const __half* x_hi = x16 + t_hi * XS + 2 * q;
      float* y_lo = a.y + (row0 + t_lo) * a.y_stride + col0 + 2 * q;
      float* y_hi = a.y + (row0 + t_hi) * a.y_stride + col0 + 2 * q;
      auto output = [&](int j, int half) {
        const float2 xv = __half22float2(*reinterpret_cast<const __half2*>((half ? x_hi : x_lo) + 8 * j));
        return make_float2(__fmaf_rn(Dh, xv.x, yacc[j][2 * half]), __fmaf_rn(Dh, xv.y, yacc[j][2 * half + 1]));
      };
      if (y_vec2) {
#pragma unroll
        for (int j = 0; j < kN8; ++j) {
          if (t_lo < L) *reinterpret_cast<float2*>(y_lo + 8 * j) = output(j, 0);
          if (t_hi < L) *reinterpret_cast<float2*>(y_hi + 8 * j) = output(j, 1);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kN8; ++j)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            if ((half ? t_hi : t_lo) >= L) continue;
            const float2 out = output(j, half);
            float* dst = (half ? y_hi : y_lo) + 8 * j;
            dst[0] = out.x;
            dst[1] = out.y;
          }
      }
    }

    // Warps take batches of 32 operand items from a shared counter until none are left: those with
    // short (or no) ChunkScan tiles do the most, filling the time the long tiles take.
    if (state_step) {
      for (;;) {
        int batch = 0;
        if (lane == 0) batch = atomicAdd(work_next, 1);
        batch = __shfl_sync(0xffffffffu, batch, 0);
        if (batch >= xq_batches) break;
        build_xq(batch);
      }
    }
    const int qd = *decay_q7;
    __syncthreads();
    if (kPhase == kWhole && c + 1 < c_end) load_chunk(c + 1);

    // ChunkState + StatePassing: Σ_t XqT[p][t]·BqT[n][t] as int8 MMAs, a warp per 16 p × 16 n
    // unit, two units at once (four independent accumulators); lane (g, q) holds p = pm + g (+8)
    // and n = n0 + 8u + 2q, +1 of each.
    constexpr int m_units = kSlice / 16;
    // A warp's two units are kBlockWarps apart: the same p rows (one XqT fragment a k step for both).
    static_assert(kBlockWarps % m_units == 0, "a warp's two ChunkState units share their p rows");
    const int units = m_units * (N / 16);
    for (int first = warp; state_step && first < units; first += 2 * kBlockWarps) {
      const int count = first + kBlockWarps < units ? 2 : 1;
      const uint32_t x_rows = XT_s + 16 * (first % m_units) * TRB + 2 * a_lane_offset(lane, TRB / 2);
      uint32_t b_rows[2];
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const int unit = v < count ? first + v * kBlockWarps : first;
        b_rows[v] = BT_s + 16 * (unit / m_units) * TRB + 2 * bt_lane_offset(lane, TRB / 2);
      }
      int acc[2][2][4] = {};
      for (int k = 0; k < rows; k += 32) {
        uint32_t af[4];
        ldmatrix_x4(af, x_rows + k);
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          uint32_t bf[4];
          ldmatrix_x4(bf, b_rows[v] + k);
          mma_s8_16832(acc[v][0], af, bf[0], bf[1]);
          mma_s8_16832(acc[v][1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        if (v >= count) break;
        const int unit = first + v * kBlockWarps;
        const int pm = 16 * (unit % m_units), n0 = 16 * (unit / m_units);
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int p = pm + g + 8 * half, n = n0 + 8 * u + 2 * q;
            const int lo = requantize(acc[v][u][2 * half], state_mult[p]);
            const int hi = requantize(acc[v][u][2 * half + 1], state_mult[p]);
            if (phase == kLocal) {  // Sloc to the scratch (two bytes of word p·N/4 + n/4); StatePassing is state_pass_kernel's
              const int i = p * nquads + n / 4;
              int16_t* word = reinterpret_cast<int16_t*>(last_chunk ? last_chunk_words(a, b, h, p0, 0) + i
                                                                    : reinterpret_cast<int*>(scratch_word(a, b, h, p0, kSlice, start, i)));
              word[(n % 4) / 2] = static_cast<int16_t>((unsigned(lo) & 0xffu) | ((unsigned(hi) & 0xffu) << 8));
            } else {
              int16_t* at = reinterpret_cast<int16_t*>(S + p * RB + n);
              const int prev = *at;
              const int next_lo = pass_state(lo, qd, byte_of(prev, 0)), next_hi = pass_state(hi, qd, byte_of(prev, 1));
              *at = static_cast<int16_t>((unsigned(next_lo) & 0xffu) | ((unsigned(next_hi) & 0xffu) << 8));
            }
          }
      }
    }
  }

  if (phase == kWhole) {
    __syncthreads();
    const int vecs = N / 16;
    for (int i = tid; i < kSlice * vecs; i += kBlockThreads) {
      const int p = i / vecs, k = i % vecs;
      *reinterpret_cast<int4*>(state + int64_t(p) * N + 16 * k) = *reinterpret_cast<const int4*>(S + p * RB + 16 * k);
    }
  }
}

// StatePassing across the chunks of sequence blockIdx.z, head blockIdx.y: a thread owns one state
// word (four n of one p), reads each chunk's Sloc (kLocal's) and Qd (ChunkCumsum's), stores the
// state entering each chunk where kScan reads it back, and the final state to `state`.
constexpr int kPassThreads = 256;
__global__ void __launch_bounds__(kPassThreads, 3) state_pass_kernel(Ssdi8ChunkScanArgs a, int slice) {
  const int N4 = a.dstate / 4, b = blockIdx.z, h = blockIdx.y;
  const int idx = blockIdx.x * kPassThreads + threadIdx.x;
  if (idx >= a.headdim * N4) return;
  const int p = idx / N4, nq = idx % N4, p0 = p / slice * slice;
  const int i = (p - p0) * N4 + nq, words = slice * N4;
  int* at = reinterpret_cast<int*>(a.state + ((int64_t(b) * a.heads + h) * a.headdim + p) * a.dstate) + nq;
  int S = *at;
  // The words of chunk 0; chunk c's lie c·chunk rows further (the last chunk's in the workspace).
  // Sloc and Qd of kAhead chunks are loaded before the chain of passes uses them.
  const float* local_word = scratch_word(a, b, h, p0, slice, 0, i);
  float* entering_word = scratch_word(a, b, h, p0, slice, 0, words + i);
  const int* last_local = last_chunk_words(a, b, h, p0, 0) + i;
  int* last_entering = last_chunk_words(a, b, h, p0, 1) + i;
  const int* qd_word = chunk_qd(a, b, 0, h);
  const int64_t step = int64_t(a.chunk) * a.y_stride, qd_step = int64_t(a.heads) * table_bytes(a.chunk) / 4;
  constexpr int kAhead = 8;
  const int chunks = chunk_count(a);
  for (int c0 = 0; c0 < chunks; c0 += kAhead) {
    int local[kAhead], qd[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j)
      if (c0 + j < chunks) {
        const int c = c0 + j;
        local[j] = c + 1 < chunks ? __float_as_int(local_word[c * step]) : *last_local;
        qd[j] = qd_word[c * qd_step];
      }
#pragma unroll
    for (int j = 0; j < kAhead; ++j)
      if (c0 + j < chunks) {
        const int c = c0 + j;
        if (c + 1 < chunks)
          entering_word[c * step] = __int_as_float(S);
        else
          *last_entering = S;
        S = pack4(pass_state(byte_of(local[j], 0), qd[j], byte_of(S, 0)),
                  pass_state(byte_of(local[j], 1), qd[j], byte_of(S, 1)),
                  pass_state(byte_of(local[j], 2), qd[j], byte_of(S, 2)),
                  pass_state(byte_of(local[j], 3), qd[j], byte_of(S, 3)));
      }
  }
  *at = S;
}

// ChunkBMM of every (chunk, sequence, group, part): blockIdx (x, y, z / parts, z % parts).
template <int kDstate>
__global__ void __launch_bounds__(kThreads) ssdi8_chunk_bmm_kernel(Ssdi8ChunkScanArgs a, int parts) {
  extern __shared__ __align__(16) unsigned char smem[];
  chunk_bmm<kDstate>(a, smem, blockIdx.x, blockIdx.y, blockIdx.z / parts, blockIdx.z % parts, parts);
}

bool shape_supported(const Ssdi8ChunkScanArgs& a) {
  if (a.batch < 1 || a.batch > 65535 || a.seqlen < 1 || a.heads < 1 || a.groups < 1) return false;
  if (a.heads % a.groups != 0) return false;
  if (a.headdim < 16 || a.headdim > 2 * kMaxSlice || a.headdim % 16 != 0) return false;
  if (a.dstate < 16 || a.dstate > 256 || a.dstate % 16 != 0) return false;
  if (a.chunk < 1 || a.chunk > 256) return false;
  if (a.table_heads_per_block < 0 || a.table_heads_per_block > kTableMaxSpan) return false;
  if (int64_t(a.heads) * 2 * a.headdim > INT32_MAX || int64_t(a.batch) * a.seqlen >= INT32_MAX) return false;
  return true;
}

bool pointers_supported(const Ssdi8ChunkScanArgs& a) {
  if (!a.x || !a.Bq || !a.Cq || !a.dt_raw || !a.dt_bias || !a.A || !a.D || !a.B_scales || !a.C_scales ||
      !a.x_scaled_scales || !a.state_scales || !a.cb_scales || !a.state || !a.y || !a.workspace)
    return false;
  if (reinterpret_cast<uintptr_t>(a.state) % 16 != 0 || reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0 || reinterpret_cast<uintptr_t>(a.Bq) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.Cq) % 16 != 0 || a.bc_stride % 16 != 0)
    return false;
  const int64_t row = int64_t(a.heads) * a.headdim;
  return a.x_stride >= row && a.y_stride >= row && a.bc_stride >= int64_t(a.groups) * a.dstate &&
         a.dt_stride >= a.heads;
}

struct Plan {
  int slice = 0;        // headdim columns per block
  int chunks = 1;       // chunks per sequence
  bool split = false;   // kLocal, state_pass_kernel, kScan rather than kWhole
  size_t smem = 0;       // kWhole's, or kScan's in the split
  size_t bmm_smem = 0;  // ChunkBMM's Bq and Cq rows
  size_t local_smem = 0;  // the kLocal launch's: its layout, or ChunkBMM's where larger
  int bmm_parts = 1;    // blocks a (sequence, chunk, group)'s ChunkBMM is split over
  int bmm_z = 0;        // grid z slices of the kLocal launch that run ChunkBMM
  int table_span = 1;   // heads a ChunkCumsum block
  bool cbq_shared = false;  // kWhole keeps each chunk's CBq words in shared memory
};

size_t bmm_shared_bytes(const Ssdi8ChunkScanArgs& a) {
  return 2 * size_t((a.chunk + 31) / 32 * 32) * ((a.dstate + 31) / 32 * 32 + 16);
}

// Splits the work by chunk (three launches) when blocks per (sequence, head) leave the GPU short of
// blocks (batch ≤ 2 or so at 80 heads on 132 SMs) and the scratch fits in a chunk. Then takes the
// widest slice of 64, 32 or 16 columns that divides headdim, halves it (down to 32 columns) while
// all blocks still fit in one wave of one block per SM, and (down to 16) while the shared memory
// does not fit.
bool make_plan(const Ssdi8ChunkScanArgs& a, Plan* plan) {
  if (!shape_supported(a) || !pointers_supported(a)) return false;
  int device = 0, sms = 0, max_smem = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return false;
  int slice = kMaxSlice;
  while (a.headdim % slice != 0) slice /= 2;
  const int64_t splits = a.headdim / slice;
  plan->chunks = chunk_count(a);
  if (int64_t(plan->chunks) * a.heads > INT32_MAX) return false;  // ChunkCumsum's grid
  {
    // In units of a quarter chunk per SM: kWhole takes ceil(blocks / SMs) waves of all chunks; the
    // split takes the blocks' chunks spread evenly, kLocal's (about a quarter of a chunk's work
    // each) and half a chunk for the pass and the launches.
    const int64_t blocks = int64_t(a.batch) * a.heads * splits, nc = plan->chunks;
    const int64_t whole = 4 * ((blocks + sms - 1) / sms) * nc * sms, split = 4 * blocks * nc + blocks * nc + 2 * sms;
    const bool can_split = nc >= 2 && nc <= 65535 && a.heads <= 65535 && a.chunk >= a.dstate / 2 + 1;
    switch (a.schedule) {
      case Ssdi8ChunkScanSchedule::kWhole: plan->split = false; break;
      case Ssdi8ChunkScanSchedule::kSplit:
        if (!can_split) return false;
        plan->split = true;
        break;
      case Ssdi8ChunkScanSchedule::kAuto: plan->split = can_split && split < whole; break;
    }
  }
  const int64_t per_slice = int64_t(a.batch) * a.heads * (plan->split ? plan->chunks : 1);
  while (slice > 32 && per_slice * 2 * (a.headdim / slice) <= sms) slice /= 2;
  while (make_layout(a.chunk, a.dstate, slice).total > static_cast<size_t>(max_smem) && slice > 16) slice /= 2;
  plan->slice = slice;
  plan->cbq_shared = !plan->split && make_layout(a.chunk, a.dstate, slice, kWhole, true).total <= static_cast<size_t>(max_smem);
  plan->smem = make_layout(a.chunk, a.dstate, slice, plan->split ? kScan : kWhole, plan->cbq_shared).total;
  plan->bmm_smem = bmm_shared_bytes(a);
  // ChunkCumsum: the most heads a block (one cumsum thread each, dt read in runs of them) that still
  // gives four blocks an SM; one head a block otherwise (a batch-1 prefill: its blocks are few).
  plan->table_span = a.table_heads_per_block;
  for (int span = kTableMaxSpan; plan->table_span == 0 && span >= 1; span /= 2)
    if (span == 1 || int64_t(a.batch) * plan->chunks * ((a.heads + span - 1) / span) >= 4 * int64_t(sms))
      plan->table_span = span;
  plan->local_smem = std::max(make_layout(a.chunk, a.dstate, slice, kLocal).total, plan->bmm_smem);
  // ChunkBMM in parts while its blocks would leave most SMs idle (at most 4: each part loads all rows).
  const int64_t bmm_blocks = int64_t(plan->chunks) * a.batch * a.groups;
  plan->bmm_parts = static_cast<int>(std::clamp<int64_t>(sms / bmm_blocks, 1, 4));
  if (plan->split) {
    const int64_t per_z = int64_t(a.heads) * (a.headdim / slice) * a.batch;
    plan->bmm_z = static_cast<int>((bmm_blocks * plan->bmm_parts + per_z - 1) / per_z);
    if (plan->chunks + int64_t(plan->bmm_z) > 65535) return false;
  }
  return plan->smem <= static_cast<size_t>(max_smem) && plan->local_smem <= static_cast<size_t>(max_smem);
}

void launch_tables(const Ssdi8ChunkScanArgs& a, const Plan& plan, cudaStream_t stream) {
  const int runs = (a.heads + plan.table_span - 1) / plan.table_span;
  const size_t table_shared_bytes = 2 * sizeof(float) * kTableThreads * (plan.table_span + 1);  // ≤ 34,816
  ssdi8_chunk_tables_kernel<<<dim3(plan.chunks * runs, a.batch), kTableThreads, table_shared_bytes, stream>>>(
      a, plan.table_span);
}

template <class Kernel>
cudaError_t allow_shared(Kernel kernel, size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

template <int kSlice, int kDstate>
cudaError_t launch_with(const Ssdi8ChunkScanArgs& a, const Plan& plan, cudaStream_t stream) {
  const int blocks_x = a.heads * (a.headdim / kSlice);
  if (!a.tables_ready) launch_tables(a, plan, stream);
  if (!plan.split) {
    const auto whole = ssdi8_chunk_scan_kernel<kSlice, kDstate, kWhole>;
    if (const cudaError_t status = allow_shared(whole, plan.smem); status != cudaSuccess) return status;
    if (const cudaError_t status = allow_shared(ssdi8_chunk_bmm_kernel<kDstate>, plan.bmm_smem); status != cudaSuccess)
      return status;
    ssdi8_chunk_bmm_kernel<kDstate><<<dim3(plan.chunks, a.batch, a.groups * plan.bmm_parts), kThreads, plan.bmm_smem, stream>>>(
        a, plan.bmm_parts);
    whole<<<dim3(blocks_x, a.batch), block_threads(kWhole), plan.smem, stream>>>(a, 1, plan.cbq_shared);
    return cudaGetLastError();
  }
  const auto local = ssdi8_chunk_scan_kernel<kSlice, kDstate, kLocal>;
  const auto scan = ssdi8_chunk_scan_kernel<kSlice, kDstate, kScan>;
  if (const cudaError_t status = allow_shared(local, plan.local_smem); status != cudaSuccess) return status;
  if (const cudaError_t status = allow_shared(scan, plan.smem); status != cudaSuccess) return status;
  local<<<dim3(blocks_x, a.batch, plan.chunks + plan.bmm_z), block_threads(kLocal), plan.local_smem, stream>>>(
      a, plan.bmm_parts, false);
  const int pass_blocks = (a.headdim * (a.dstate / 4) + kPassThreads - 1) / kPassThreads;
  state_pass_kernel<<<dim3(pass_blocks, a.heads, a.batch), kPassThreads, 0, stream>>>(a, kSlice);
  scan<<<dim3(blocks_x, a.batch, plan.chunks), block_threads(kScan), plan.smem, stream>>>(a, 1, false);
  return cudaGetLastError();
}

}  // namespace

size_t ssdi8_chunk_scan_workspace_bytes(const Ssdi8ChunkScanArgs& a) {
  if (a.batch < 1 || a.seqlen < 1 || a.groups < 1 || a.heads < 1 || a.chunk < 1 || a.headdim < 1 || a.dstate < 1)
    return 0;
  return cbq_bytes(a) + tables_total_bytes(a) + size_t(a.batch) * a.heads * 2 * a.headdim * a.dstate;
}

bool ssdi8_chunk_scan_supported(const Ssdi8ChunkScanArgs& a) {
  Plan plan;
  return make_plan(a, &plan);
}

cudaError_t launch_ssdi8_chunk_scan(const Ssdi8ChunkScanArgs& a, cudaStream_t stream) {
  Plan plan;
  if (!make_plan(a, &plan)) return cudaErrorInvalidValue;
  switch (plan.slice) {
    // dstate 128 (every official Mamba-2 model) at 64 columns a block gets its own unrolled kernel.
    case 64: return a.dstate == 128 ? launch_with<64, 128>(a, plan, stream) : launch_with<64, 0>(a, plan, stream);
    case 32: return launch_with<32, 0>(a, plan, stream);
    default: return launch_with<16, 0>(a, plan, stream);
  }
}

cudaError_t launch_ssdi8_chunk_tables(const Ssdi8ChunkScanArgs& a, cudaStream_t stream) {
  Plan plan;
  if (!make_plan(a, &plan)) return cudaErrorInvalidValue;
  launch_tables(a, plan, stream);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
