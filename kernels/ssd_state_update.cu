#include "kernels/ssd_state_update.h"

#include "kernels/ssd_state_update.cuh"

#include <type_traits>

namespace ssdq::kernels {
namespace {

// One block per (head, sequence, slice of headdim rows) (state_update_grid); a warp owns rows and
// keeps each row's dstate values in registers (dstate/32 per lane) across all `steps` tokens; y is
// a warp reduction. kBeforeWait: the warp's first state row is loaded, and its later rows fetched
// into L2, before waiting for the previous grid (the state is not its output) — for grids sized to
// fit the GPU at once, where the step waits on latency. A grid of many waves (batch 32, 128) is
// bandwidth-bound, and the early row's registers (48 → 54 at an int8 state, dstate 128) cost it a
// block an SM: 2.7b W8A8 TPOT at batch 128 21.65 → 25.70 ms with it.
constexpr int kLongStepsAhead = 4;

// Lane `part` (0, 1, …) of the warp fetches the part-th 128-byte line of [p, p + bytes) into L1.
__device__ inline void prefetch_l1(const void* p, long long bytes, int part) {
  if (part < 0 || part * 128LL >= bytes) return;
  asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const char*>(p) + part * 128LL));
}

// kRows: rows a warp steps together (rows p and p + kStateUpdateWarps of its slice), their chains
// interleaved and a token's B, C and dt loaded once for both: where one row a warp would take the
// GPU in two waves (launch_rows). Each row's arithmetic is the same either way, so are its bits.
template <typename T, typename S, int kPerLane, bool kBeforeWait, int kRows = 1>
__global__ void __launch_bounds__(kStateUpdateWarps * 32, kRows > 1 ? 3 : 1) ssd_state_update_kernel(SsdStateUpdateArgs a) {
  const StateSlice slice(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* x_base = static_cast<const T*>(a.x) + slice.head * a.headdim;
  const T* b_base = static_cast<const T*>(a.B) + slice.group * a.dstate;
  const T* c_base = static_cast<const T*>(a.C) + slice.group * a.dstate;
  const T* dt_base = static_cast<const T*>(a.dt) + slice.head;
  T* y_base = static_cast<T*>(a.y) + slice.head * a.headdim;
  const HeadConstants head(a, slice.head);
  const int first = slice.row_begin + warp;
  // Row r of the warp's current group of kRows rows: p + r · kStateUpdateWarps, if within the slice.
  const auto live = [&](int p, int r) { return p + r * kStateUpdateWarps < slice.row_end; };
  StateRow<S, kPerLane> row[kRows];
  if (kBeforeWait && first < slice.row_end) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (live(first, r)) row[r].load(a, slice, first + r * kStateUpdateWarps, lane);
    prefetch_later_state_rows<S>(a, slice, first, lane);
  }
  wait_for_previous_grid();
  allow_next_grid();
  const int steps = a.seq_steps ? a.seq_steps[slice.seq] : a.steps;
  if (steps <= 0) return;
  // One token's inputs of the warp's rows: raw dt, x of each row and this lane's B and C values.
  struct TokenInputs {
    float dt_raw, x[kRows], b[kPerLane], c[kPerLane];
  };
  auto fetch = [&](int j, int p, TokenInputs& in) {
    const int64_t token = static_cast<int64_t>(slice.seq) * a.steps + j;
    in.dt_raw = to_float(dt_base[token * a.dt_stride]);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      in.x[r] = live(p, r) ? to_float(x_base[token * a.x_stride + p + r * kStateUpdateWarps]) : 0.f;
    const T* b = b_base + token * a.bc_stride;
    const T* c = c_base + token * a.bc_stride;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      in.b[i] = to_float(b[lane + 32 * i]);
      in.c[i] = to_float(c[lane + 32 * i]);
    }
  };
  // The previous window's kept tokens this sequence replays first (SsdStateUpdateArgs::replay_steps).
  const int replayed = a.replay_steps ? a.replay_steps[slice.seq] : 0;
  const int replay_seq = a.replay_rows ? a.replay_rows[slice.seq] : slice.seq;
  const int64_t replay_row0 = a.replay_steps ? static_cast<int64_t>(replay_seq) * a.replay_steps[a.batch] : 0;
  for (int p = first; p < slice.row_end; p += kRows * kStateUpdateWarps) {
    if (!kBeforeWait || p != first) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (live(p, r)) row[r].load(a, slice, p + r * kStateUpdateWarps, lane);
    }
    TokenInputs now, next;
#pragma unroll
    for (int r = 0; r < kRows; ++r) row[r].dequantize();
    if (replayed > 0) {
      // Token j + 1's inputs are loaded while token j steps, as in the window's loop below.
      const T* rx = static_cast<const T*>(a.replay_x) + slice.head * a.headdim + p;
      const T* rb = static_cast<const T*>(a.replay_B) + slice.group * a.dstate + lane;
      const T* rdt = static_cast<const T*>(a.replay_dt) + slice.head;
      struct ReplayInputs {
        float dt_raw, x[kRows], b[kPerLane];
      };
      auto fetch_replay = [&](int j, ReplayInputs& in) {
        const int64_t token = replay_row0 + j;
        in.dt_raw = to_float(rdt[token * a.dt_stride]);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          in.x[r] = live(p, r) ? to_float(rx[token * a.x_stride + r * kStateUpdateWarps]) : 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) in.b[i] = to_float(rb[token * a.bc_stride + 32 * i]);
      };
      ReplayInputs cur, ahead;
      fetch_replay(0, cur);
      for (int j = 0; j < replayed; ++j) {
        if (j + 1 < replayed) fetch_replay(j + 1, ahead);
        const float dt = head.dt(a, cur.dt_raw);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (j > 0) row[r].round_as_stored(a);
          row[r].advance_state(head, dt, cur.x[r], [&](int i) { return cur.b[i]; });
        }
        if (j + 1 < replayed) cur = ahead;
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (live(p, r)) row[r].store(a, lane);
        row[r].round_as_stored(a);
      }
    }
    // Latency-bound grids (kBeforeWait) load token j + 1's inputs while token j steps, so that the
    // tokens of a verify window do not each wait for a round trip to memory; a grid of many waves
    // keeps the registers. The values, and so the bits, are the same either way.
    if (kBeforeWait) fetch(0, p, now);
    for (int j = 0; j < steps; ++j) {
      if (a.round_every_step && j > 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) row[r].round_as_stored(a);
      }
      const int64_t token = static_cast<int64_t>(slice.seq) * a.steps + j;
      if (steps >= kStateUpdateLongSteps && j + kLongStepsAhead < steps) {
        // A long recurrence's step would otherwise wait on its token's loads: a token
        // kLongStepsAhead later is brought into L1 now (no registers held for it).
        const int64_t ahead = token + kLongStepsAhead;
        prefetch_l1(b_base + ahead * a.bc_stride, a.dstate * sizeof(T), lane);
        prefetch_l1(c_base + ahead * a.bc_stride, a.dstate * sizeof(T), lane - 8);
        if (lane == 16) prefetch_l1(x_base + ahead * a.x_stride + p, sizeof(T), 0);
        if (lane == 17) prefetch_l1(dt_base + ahead * a.dt_stride, sizeof(T), 0);
      }
      if (!kBeforeWait) {
        fetch(j, p, now);
      } else if (j + 1 < steps) {
        fetch(j + 1, p, next);
      }
      const float dt = head.dt(a, now.dt_raw);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float y =
            row[r].advance(head, dt, now.x[r], [&](int i) { return now.b[i]; }, [&](int i) { return now.c[i]; });
        if (lane == 0 && live(p, r)) y_base[token * a.y_stride + p + r * kStateUpdateWarps] = from_float<T>(y);
      }
      if (kBeforeWait && j + 1 < steps) now = next;
    }
    if (a.store_final) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (live(p, r)) row[r].store(a, lane);
    }
  }
}

// kPerLane consecutive int8 state values (n = kPerLane·lane + i), one load or store a row a lane.
template <int kPerLane>
struct PackedStateBytes;
template <>
struct PackedStateBytes<2> {
  using Word = uint16_t;
};
template <>
struct PackedStateBytes<4> {
  using Word = uint32_t;
};
template <>
struct PackedStateBytes<8> {
  using Word = uint2;
};
template <int kPerLane>
union StateBytes {
  typename PackedStateBytes<kPerLane>::Word word;
  int8_t q[kPerLane];
  uint32_t u32[(kPerLane + 3) / 4];
};

// The bytes of values held as kIntegerBias + q (quant_epilogue.cuh), value i in byte i.
template <int kPerLane>
__device__ inline StateBytes<kPerLane> pack_biased_bytes(const float (&biased)[kPerLane]) {
  StateBytes<kPerLane> out;
  if constexpr (kPerLane == 2) {
    out.word = static_cast<uint16_t>(__byte_perm(__float_as_uint(biased[0]), __float_as_uint(biased[1]), 0x0040));
  } else {
    pack_biased_int8_words(biased, out.u32);
  }
  return out;
}

constexpr int kStateRowsAhead = 8;  // rows a warp loads before it steps the first of them

// Sums each of 8 values over the warp (a transposed butterfly: 9 shuffles, not 40); row r's sum
// ends in lanes 4r … 4r + 3.
__device__ inline float warp_sum_8_rows(float (&v)[8], int lane) {
#pragma unroll
  for (int offset = 16, half = 4; offset >= 4; offset >>= 1, half >>= 1) {
    const bool upper = lane & offset;
#pragma unroll
    for (int k = 0; k < half; ++k) {
      const float keep = upper ? v[k + half] : v[k], send = upper ? v[k] : v[k + half];
      v[k] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, offset));
    }
  }
  // Lane bits 4, 3, 2 picked the row's bits 2, 1, 0: lane 4r + j holds part of row r.
  float sum = v[0];
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
  return __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
}

// One token (steps = 1), int8 state, grids of many waves (large batches). There the row-a-warp
// kernel above is bound by instructions (a byte a lane, the IEEE division per value, a full
// shuffle reduction per row): 16–27 % of the copy bandwidth at batch 32–128, no faster than the
// fp32 state with four times the bytes. Here a lane owns kPerLane consecutive n of a row (one load
// and one store), the block's B and C (one head of one sequence), dt and the decay are loaded and
// computed once, a warp issues the loads of kStateRowsAhead rows before stepping any, the state is
// stepped in its scales' units so that rounding back is an add, and the rows' y are reduced
// together (docs/kernels/ssd_state_update.md, "The int8 state at large batches").
template <typename T, int kPerLane, bool kPerN, int kMinBlocks>
__global__ void __launch_bounds__(kStateUpdateWarps * 32, kMinBlocks) ssd_state_update_s8_rows_kernel(SsdStateUpdateArgs a) {
  static_assert(kStateRowsAhead == 8, "warp_sum_8_rows");
  using Word = typename PackedStateBytes<kPerLane>::Word;
  const StateSlice slice(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n0 = kPerLane * lane;
  const HeadConstants head(a, slice.head);
  const int64_t token = slice.seq;
  const int first_channel = slice.head * a.headdim;
  Word* words = static_cast<Word*>(a.state) + (static_cast<int64_t>(slice.seq) * a.heads * a.headdim + first_channel) * 32 + lane;
  const T* x = static_cast<const T*>(a.x) + token * a.x_stride + first_channel;
  T* y = static_cast<T*>(a.y) + token * a.y_stride + first_channel;
  wait_for_previous_grid();
  allow_next_grid();
  const T* b = static_cast<const T*>(a.B) + token * a.bc_stride + slice.group * a.dstate + n0;
  const T* c = static_cast<const T*>(a.C) + token * a.bc_stride + slice.group * a.dstate + n0;
  float bv[kPerLane], cv[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    bv[i] = to_float(b[i]);
    cv[i] = to_float(c[i]);
  }
  const float dt = head.dt(a, to_float(static_cast<const T*>(a.dt)[token * a.dt_stride + slice.head]));
  const float decay = __expf(__fmul_rn(dt, head.A));
  const auto scale_row = [&](int p) { return state_scale_row(a, first_channel + p); };
  for (int base = slice.row_begin + warp; base < slice.row_end; base += kStateRowsAhead * kStateUpdateWarps) {
    // The chunk's state rows, one word a lane each; x and the channel scale (and its reciprocal) of
    // row r in lane r.
    StateBytes<kPerLane> q[kStateRowsAhead];
#pragma unroll
    for (int r = 0; r < kStateRowsAhead; ++r) {
      const int p = base + r * kStateUpdateWarps;
      if (p < slice.row_end) q[r].word = words[p * 32];
    }
    float lane_x = 0.f, lane_scale = 0.f, lane_inverse = 0.f;
    if (const int p = base + lane * kStateUpdateWarps; lane < kStateRowsAhead && p < slice.row_end) {
      lane_x = to_float(x[p]);
      if constexpr (!kPerN) {
        lane_scale = scale_row(p)[0];
        lane_inverse = __frcp_rn(lane_scale);
      }
    }
    float acc[kStateRowsAhead];
#pragma unroll
    for (int r = 0; r < kStateRowsAhead; ++r) {
      const int p = base + r * kStateUpdateWarps;
      acc[r] = 0.f;
      if (p >= slice.row_end) continue;
      const float dtx = __fmul_rn(dt, __shfl_sync(0xffffffffu, lane_x, r));
      // The step in the scale's units, r = exp(dt·A)·q + dt·x·B / scale, and r rounded. r is within a
      // few ulp of the CPU's s / scale, so the new state is the CPU's rne(s / scale) but where that
      // lies within ~1e-5 of a half-integer (one step, ~1e-4 of the values at most).
      const auto round_units = [](float units) {
        units = units == units ? fminf(fmaxf(units, -127.f), 127.f) : 0.f;  // saturate; NaN → 0
        return __fadd_rn(units, kIntegerBias);
      };
      float biased[kPerLane];
      if constexpr (kPerN) {
        // One scale a value (Quamba2): y sums r·(scale·C) value by value.
        const float* row_scales = scale_row(p) + n0;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const float scale = row_scales[i];
          const float units = __fmaf_rn(decay, static_cast<float>(q[r].q[i]), __fdividef(__fmul_rn(dtx, bv[i]), scale));
          acc[r] = __fmaf_rn(units, __fmul_rn(scale, cv[i]), acc[r]);
          biased[i] = round_units(units);
        }
      } else {
        // One scale a row (SSDi8): y = scale · Σ r·C, the scale applied after the reduction.
        const float dtx_units = __fmul_rn(dtx, __shfl_sync(0xffffffffu, lane_inverse, r));
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const float units = __fmaf_rn(decay, static_cast<float>(q[r].q[i]), __fmul_rn(dtx_units, bv[i]));
          acc[r] = __fmaf_rn(units, cv[i], acc[r]);
          biased[i] = round_units(units);
        }
      }
      words[p * 32] = pack_biased_bytes<kPerLane>(biased).word;
    }
    const float sum = warp_sum_8_rows(acc, lane), x_of_sum = __shfl_sync(0xffffffffu, lane_x, lane / 4);
    const float scale_of_sum = kPerN ? 1.f : __shfl_sync(0xffffffffu, lane_scale, lane / 4);
    const int p = base + (lane / 4) * kStateUpdateWarps;
    if (lane % 4 == 0 && p < slice.row_end)
      y[p] = from_float<T>(__fmaf_rn(head.skip, x_of_sum, kPerN ? sum : __fmul_rn(scale_of_sum, sum)));
  }
}

// A long recurrence (a prefill of thousands of tokens: the fp32 engine's calibration and export
// passes) over a grid that fills the GPU many times: a warp owns kLongRows consecutive rows of a
// head and steps them together, so a token's B, C and dt are loaded once for the warp's rows rather
// than once a row, the rows' dependent chains interleave, and their y are reduced together
// (warp_sum_8_rows: 9 shuffles for 8 rows, not 40). The next token's inputs are loaded into
// registers before the current one is stepped. The arithmetic is StateRow::advance's and the
// butterfly pairs lanes in the same order as its reduction, so y and the state are bit for bit
// those of the row-a-warp kernel. The state (fp32, or int8 codes with their scales: Quamba2's and
// SSDi8's) is dequantized once at the start and rounded (if at all) once at the end, as there.
constexpr int kLongRows = 8;

template <typename T, typename S, int kPerLane>
__global__ void __launch_bounds__(kStateUpdateWarps * 32) ssd_state_update_long_kernel(SsdStateUpdateArgs a) {
  static_assert(kLongRows == 8, "warp_sum_8_rows");
  const StateSlice slice(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first = slice.row_begin + warp * kLongRows;
  if (first >= slice.row_end) return;
  const HeadConstants head(a, slice.head);
  wait_for_previous_grid();
  allow_next_grid();
  const int steps = a.seq_steps ? a.seq_steps[slice.seq] : a.steps;
  if (steps <= 0) return;
  const int rows = min(kLongRows, slice.row_end - first);
  S* state = static_cast<S*>(a.state) + ((static_cast<int64_t>(slice.seq) * a.heads + slice.head) * a.headdim + first) * a.dstate;
  // The scales are read again at the end rather than held: eight rows of them would take 32 registers.
  const int first_channel = slice.head * a.headdim + first;
  float s[kLongRows][kPerLane];
#pragma unroll
  for (int r = 0; r < kLongRows; ++r)
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int n = lane + 32 * i;
      s[r][i] = r < rows ? dequantize_state_code(state[int64_t(r) * a.dstate + n], state_scale<S>(a, first_channel + r, n))
                         : 0.f;
    }

  const int64_t token0 = static_cast<int64_t>(slice.seq) * a.steps;
  const T* x_base = static_cast<const T*>(a.x) + slice.head * a.headdim + first;
  const T* b_base = static_cast<const T*>(a.B) + slice.group * a.dstate + lane;
  const T* c_base = static_cast<const T*>(a.C) + slice.group * a.dstate + lane;
  const T* dt_base = static_cast<const T*>(a.dt) + slice.head;
  T* y_base = static_cast<T*>(a.y) + slice.head * a.headdim + first;
  // Token j's inputs: x of row `lane` (lanes < rows), B and C at n = lane + 32 i, the raw dt.
  float next_x = 0.f, next_b[kPerLane], next_c[kPerLane], next_dt;
  const auto load = [&](int64_t token) {
    next_x = lane < rows ? to_float(x_base[token * a.x_stride + lane]) : 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      next_b[i] = to_float(b_base[token * a.bc_stride + 32 * i]);
      next_c[i] = to_float(c_base[token * a.bc_stride + 32 * i]);
    }
    next_dt = to_float(dt_base[token * a.dt_stride]);
  };
  load(token0);
  for (int j = 0; j < steps; ++j) {
    const int64_t token = token0 + j;
    const float lane_x = next_x, dt = head.dt(a, next_dt);
    float b[kPerLane], c[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      b[i] = next_b[i];
      c[i] = next_c[i];
    }
    if (j + 1 < steps) load(token + 1);
    const float decay = __expf(__fmul_rn(dt, head.A));
    float acc[kLongRows];
#pragma unroll
    for (int r = 0; r < kLongRows; ++r) {
      const float dtx = __fmul_rn(dt, __shfl_sync(0xffffffffu, lane_x, r));
      acc[r] = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        s[r][i] = __fmaf_rn(decay, s[r][i], __fmul_rn(dtx, b[i]));
        acc[r] = __fmaf_rn(s[r][i], c[i], acc[r]);
      }
    }
    const float sum = warp_sum_8_rows(acc, lane), x_of_sum = __shfl_sync(0xffffffffu, lane_x, lane / 4);
    if (lane % 4 == 0 && lane / 4 < rows) y_base[token * a.y_stride + lane / 4] = from_float<T>(__fmaf_rn(head.skip, x_of_sum, sum));
  }
#pragma unroll
  for (int r = 0; r < kLongRows; ++r)
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int n = lane + 32 * i;
      if (r < rows) state[int64_t(r) * a.dstate + n] = stored_state_value<S>(a, s[r][i], state_scale<S>(a, first_channel + r, n));
    }
}

// The long kernel takes a launch of many tokens whose grid of one block per 64 rows of a head
// fills the GPU at least twice; fewer blocks (a batch-1 prefill) keep more warps busy one row each.
inline bool takes_long_kernel(const SsdStateUpdateArgs& a) {
  if (a.round_every_step || a.steps < kStateUpdateLongSteps) return false;
  const int64_t rows_per_block = int64_t(kStateUpdateWarps) * kLongRows;
  const int64_t blocks = int64_t(a.heads) * a.batch * ((a.headdim + rows_per_block - 1) / rows_per_block);
  return blocks >= 2 * int64_t(current_device_attribute(cudaDevAttrMultiProcessorCount));
}

template <typename T, typename S>
cudaError_t launch_long(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  const int rows_per_block = kStateUpdateWarps * kLongRows;
  const LaunchShape shape{dim3(a.heads, a.batch, (a.headdim + rows_per_block - 1) / rows_per_block),
                          dim3(kStateUpdateWarps * 32)};
  switch (a.dstate) {
    case 64: return launch_kernel(ssd_state_update_long_kernel<T, S, 2>, shape, stream, a);
    case 128: return launch_kernel(ssd_state_update_long_kernel<T, S, 4>, shape, stream, a);
    case 256: return launch_kernel(ssd_state_update_long_kernel<T, S, 8>, shape, stream, a);
    default: return cudaErrorInvalidValue;
  }
}

// Four blocks an SM (64 registers) at dstate ≤ 128 — five spill and measured no faster —, three at 256.
template <typename T, bool kPerN>
cudaError_t launch_s8_rows(const SsdStateUpdateArgs& a, const LaunchShape& shape, cudaStream_t stream) {
  switch (a.dstate) {
    case 64: return launch_kernel(ssd_state_update_s8_rows_kernel<T, 2, kPerN, 4>, shape, stream, a);
    case 128: return launch_kernel(ssd_state_update_s8_rows_kernel<T, 4, kPerN, 4>, shape, stream, a);
    case 256: return launch_kernel(ssd_state_update_s8_rows_kernel<T, 8, kPerN, 3>, shape, stream, a);
    default: return cudaErrorInvalidValue;
  }
}

// A grid sized to fit the GPU at once (8 blocks an SM) at the registers the kernel takes (78–86:
// 3 blocks an SM) may not: batch 1 of 2.7b is 640 blocks of a row a warp, two waves each stepping
// every token. There two rows a warp, in half the blocks, take one (dstate 64 and 128, the official
// shapes; others keep a row a warp).
template <typename T, typename S, int kPerLane, bool kBeforeWait>
cudaError_t launch_rows(const SsdStateUpdateArgs& a, LaunchShape shape, cudaStream_t stream) {
  if constexpr (kBeforeWait && (kPerLane == 2 || kPerLane == 4)) {
    int per_sm = 0;
    const int64_t blocks = int64_t(shape.grid.x) * shape.grid.y * shape.grid.z;
    if (a.headdim >= 2 * kStateUpdateWarps && shape.grid.z >= 2 &&
        resident_blocks_per_sm<ssd_state_update_kernel<T, S, kPerLane, true, 1>>(kStateUpdateWarps * 32, 0, &per_sm) ==
            cudaSuccess &&
        blocks > int64_t(per_sm) * current_device_attribute(cudaDevAttrMultiProcessorCount)) {
      shape.grid.z = (shape.grid.z + 1) / 2;
      return launch_kernel(ssd_state_update_kernel<T, S, kPerLane, true, 2>, shape, stream, a);
    }
  }
  return launch_kernel(ssd_state_update_kernel<T, S, kPerLane, kBeforeWait>, shape, stream, a);
}

template <typename T, typename S, bool kBeforeWait>
cudaError_t launch_state_update(const SsdStateUpdateArgs& a, const LaunchShape& shape, cudaStream_t stream) {
  switch (a.dstate / 32) {
    case 1: return launch_rows<T, S, 1, kBeforeWait>(a, shape, stream);
    case 2: return launch_rows<T, S, 2, kBeforeWait>(a, shape, stream);
    case 3: return launch_rows<T, S, 3, kBeforeWait>(a, shape, stream);
    case 4: return launch_rows<T, S, 4, kBeforeWait>(a, shape, stream);
    case 5: return launch_rows<T, S, 5, kBeforeWait>(a, shape, stream);
    case 6: return launch_rows<T, S, 6, kBeforeWait>(a, shape, stream);
    case 7: return launch_rows<T, S, 7, kBeforeWait>(a, shape, stream);
    case 8: return launch_rows<T, S, 8, kBeforeWait>(a, shape, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, typename S>
cudaError_t launch_typed(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  if (takes_long_kernel(a) && (a.dstate == 64 || a.dstate == 128 || a.dstate == 256)) return launch_long<T, S>(a, stream);
  // Sized for 8 blocks an SM, the most that 256 threads allow; at the kernel's registers fewer fit,
  // and launch_rows then steps two rows a warp where one would take a second wave.
  const LaunchShape shape{state_update_grid(a, 8), dim3(kStateUpdateWarps * 32)};
  // The early loads for the grids sized to fit the GPU at once (small batches; state_update_grid),
  // not for the many waves of a large batch.
  const int64_t blocks = int64_t(shape.grid.x) * shape.grid.y * shape.grid.z;
  const bool fits = blocks <= 8 * int64_t(current_device_attribute(cudaDevAttrMultiProcessorCount));
  if (fits) return launch_state_update<T, S, true>(a, shape, stream);
  if constexpr (std::is_same_v<S, int8_t>) {
    if (a.steps == 1 && !a.seq_steps && !a.replay_steps && a.store_final && (a.dstate == 64 || a.dstate == 128 || a.dstate == 256) &&
        reinterpret_cast<uintptr_t>(a.state) % 8 == 0)
      return a.state_scale_inner == 1 ? launch_s8_rows<T, false>(a, shape, stream) : launch_s8_rows<T, true>(a, shape, stream);
  }
  return launch_state_update<T, S, false>(a, shape, stream);
}

}  // namespace

bool ssd_state_update_supported(const SsdStateUpdateArgs& a) {
  return a.batch > 0 && a.batch <= 65535 && a.heads > 0 && a.groups > 0 && a.heads % a.groups == 0 &&
         a.headdim > 0 && a.dstate > 0 && a.dstate % 32 == 0 && a.dstate / 32 <= kStateUpdateMaxPerLane && a.steps >= 1 &&
         a.x && a.B && a.C && a.dt && a.A && a.D && a.state && a.y &&
         (!a.state_fp16_values || a.state_type == ElementType::kF32) &&
         (!a.replay_steps || (a.round_every_step && !a.seq_steps && a.replay_x && a.replay_B && a.replay_dt)) &&
         (a.store_final || a.round_every_step) &&
         (a.state_type == ElementType::kF32 ||
          (a.state_type == ElementType::kS8 && a.state_scales &&
           (a.state_scale_inner == 1 || a.state_scale_inner == a.dstate)));
}

cudaError_t launch_ssd_state_update(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  if (!ssd_state_update_supported(a)) return cudaErrorInvalidValue;
  if (a.state_type == ElementType::kS8)
    return a.io_type == ElementType::kBF16 ? launch_typed<__nv_bfloat16, int8_t>(a, stream)
                                           : launch_typed<float, int8_t>(a, stream);
  return a.io_type == ElementType::kBF16 ? launch_typed<__nv_bfloat16, float>(a, stream)
                                         : launch_typed<float, float>(a, stream);
}

}  // namespace ssdq::kernels
