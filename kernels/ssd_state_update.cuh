// The pieces of the decode state update (kernels/ssd_state_update.h) that its kernels share: the
// block's slice of a head's rows, one row's state held in registers, and the step that advances it.
// ssd_state_update.cu reads x, B and C from global memory; ssd_conv_step.cu from the conv outputs
// it keeps in shared memory. The arithmetic is the same, so both give the same bits.
#pragma once

#include <algorithm>
#include <type_traits>

#include "kernels/element_type.h"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"
#include "kernels/ssd_state_update.h"

namespace ssdq::kernels {

constexpr int kStateUpdateWarps = 8;
constexpr int kStateUpdateMaxPerLane = 8;  // dstate up to 256

// Small batches split each head's rows over several blocks, up to one row a warp, while the
// blocks fit the GPU at once (`per_sm` blocks of 256 threads an SM): the per-row chain of dependent
// loads, not bandwidth, is what a decode step waits for. Long recurrences (a prefill over
// thousands of tokens: the fp32 engine's, shapes the chunked scans do not take) that this kernel
// takes run a row a warp, so that each row's chain of steps runs beside the others rather than
// after them in its warp; those whose grid fills the GPU go to the kernel stepping 8 rows a warp
// (ssd_state_update.cu, takes_long_kernel). The grid is (heads, batch, splits).
inline constexpr int kStateUpdateLongSteps = 64;
inline dim3 state_update_grid(const SsdStateUpdateArgs& a, int per_sm) {
  const int blocks = a.heads * a.batch;
  const int resident = std::max(1, per_sm) * std::max(1, current_device_attribute(cudaDevAttrMultiProcessorCount));
  const int most = std::max(1, a.headdim / kStateUpdateWarps);
  const int splits = a.steps >= kStateUpdateLongSteps ? most : std::max(1, std::min(resident / blocks, most));
  return dim3(a.heads, a.batch, splits);
}

// The block's head, sequence and rows [row_begin, row_end) of the head.
struct StateSlice {
  int head, seq, row_begin, row_end, group;
  __device__ explicit StateSlice(const SsdStateUpdateArgs& a) : head(blockIdx.x), seq(blockIdx.y) {
    const int rows_per_block = (a.headdim + gridDim.z - 1) / gridDim.z;
    row_begin = blockIdx.z * rows_per_block;
    row_end = min(a.headdim, row_begin + rows_per_block);
    group = head / (a.heads / a.groups);
  }
};

// A head's per-token constants: dt's bias, A and D (loaded before the wait for the previous grid).
struct HeadConstants {
  float A, skip, bias;
  __device__ HeadConstants(const SsdStateUpdateArgs& a, int head)
      : A(a.A[head]), skip(a.D[head]), bias(a.dt_bias ? a.dt_bias[head] : 0.f) {}
  // dt of one token from the raw value: the point's format, then softplus and the clamp.
  __device__ float dt(const SsdStateUpdateArgs& a, float raw) const {
    if (a.dt_format != 0.f) raw = apply_format_code(raw, a.dt_format);
    if (a.dt_bias) raw = fminf(fmaxf(softplus(raw + bias), a.dt_min), a.dt_max);
    return raw;
  }
};

// The int8 state's scales of channel c = h·P + p: state_scale_inner values (one, or one per n).
__device__ inline const float* state_scale_row(const SsdStateUpdateArgs& a, int channel) {
  return a.state_scales +
         static_cast<int64_t>(a.state_scale_index ? a.state_scale_index[channel] : channel) * a.state_scale_inner;
}

// A state value as the kernels step it (fp32) from its stored form, and back: int8 codes times
// their scale (quantize_int8 rounds back), fp32 values as they are (fp16-rounded with
// state_fp16_values). `scale` is unused for fp32.
__device__ inline float dequantize_state_code(float stored, float) { return stored; }
__device__ inline float dequantize_state_code(int8_t stored, float scale) {
  return __fmul_rn(static_cast<float>(stored), scale);
}
template <typename S>
__device__ inline S stored_state_value(const SsdStateUpdateArgs& a, float value, float scale) {
  if constexpr (std::is_same_v<S, int8_t>) {
    return quantize_int8(value, scale);
  } else {
    return a.state_fp16_values ? round_to_fp16(value) : value;
  }
}
// The scale of state value (channel, n) of an int8 state: one a channel (inner 1) or one a value;
// 0 (unused) for an fp32 state.
template <typename S>
__device__ inline float state_scale(const SsdStateUpdateArgs& a, int channel, int n) {
  if constexpr (std::is_same_v<S, int8_t>) {
    const float* scales = state_scale_row(a, channel);
    return a.state_scale_inner == 1 ? scales[0] : scales[n];
  } else {
    return 0.f;
  }
}

// Fetches into L2 the state rows a warp takes after its first (rows first + kStateUpdateWarps, …
// of the block's slice), one 128-byte line a lane: issued before the kernel waits for the previous
// grid, they are then L2 hits instead of round trips to memory one after the other.
template <typename S>
__device__ inline void prefetch_later_state_rows(const SsdStateUpdateArgs& a, const StateSlice& slice, int first,
                                                 int lane) {
  const S* head_rows = static_cast<const S*>(a.state) + (static_cast<int64_t>(slice.seq) * a.heads + slice.head) *
                                                            a.headdim * a.dstate;
  for (int p = first + kStateUpdateWarps; p < slice.row_end; p += kStateUpdateWarps)
    prefetch_l2(head_rows + static_cast<int64_t>(p) * a.dstate, a.dstate * static_cast<long long>(sizeof(S)), lane);
}

// Row p of a head's state, dstate / 32 values a lane (n = lane + 32 i), in fp32 registers: an int8
// state is dequantized and rounded back on store (one scale row per channel, read once, and once
// per element only when it varies along n). load() only issues the loads; dequantize() waits for
// them, so a kernel can issue other loads in between.
template <typename S, int kPerLane>
struct StateRow {
  S* row = nullptr;
  S stored[kPerLane];
  float s[kPerLane], scale[kPerLane];

  __device__ void load(const SsdStateUpdateArgs& a, const StateSlice& slice, int p, int lane) {
    row = static_cast<S*>(a.state) +
          ((static_cast<int64_t>(slice.seq) * a.heads + slice.head) * a.headdim + p) * a.dstate;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) stored[i] = row[lane + 32 * i];
    if constexpr (std::is_same_v<S, int8_t>) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) scale[i] = state_scale<S>(a, slice.head * a.headdim + p, lane + 32 * i);
    }
  }

  __device__ void dequantize() {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) s[i] = dequantize_state_code(stored[i], scale[i]);
  }

  // One token: h ← exp(dt·A) h + dt·x·B, returns y = h·C + D·x (every lane holds it). b(i) and c(i)
  // give B and C at n = lane + 32 i.
  template <typename GetB, typename GetC>
  __device__ float advance(const HeadConstants& head, float dt, float x, GetB b, GetC c) {
    advance_state(head, dt, x, b);
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc = __fmaf_rn(s[i], c(i), acc);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, offset));
    return __fmaf_rn(head.skip, x, acc);
  }

  // The state part of advance() alone (a replayed token, whose y is not needed).
  template <typename GetB>
  __device__ void advance_state(const HeadConstants& head, float dt, float x, GetB b) {
    // Explicit roundings: left to contraction, the compiler may fuse differently in different
    // kernels (or in a loop's peeled first trip), and the kernels must agree bit for bit.
    const float decay = __expf(__fmul_rn(dt, head.A));
    const float dtx = __fmul_rn(dt, x);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) s[i] = __fmaf_rn(decay, s[i], __fmul_rn(dtx, b(i)));
  }

  // The state as store() then load() would leave it (int8 codes or fp16 values, dequantized):
  // the rounding between the tokens of a launch with round_every_step.
  __device__ void round_as_stored(const SsdStateUpdateArgs& a) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if constexpr (std::is_same_v<S, int8_t>) {
        s[i] = __fmul_rn(static_cast<float>(quantize_int8(s[i], scale[i])), scale[i]);
      } else if (a.state_fp16_values) {
        s[i] = round_to_fp16(s[i]);
      }
    }
  }

  // a.state_fp16_values is read here from the kernel's parameters rather than kept in a register:
  // the fused conv + state update runs at 48 registers (five blocks an SM) and spills already.
  __device__ void store(const SsdStateUpdateArgs& a, int lane) const {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) row[lane + 32 * i] = stored_state_value<S>(a, s[i], scale[i]);
  }
};

}  // namespace ssdq::kernels
