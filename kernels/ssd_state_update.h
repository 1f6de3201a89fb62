// Decode steps of the SSD recurrence with the state held on chip (SSD-spec Algorithm 1 of the
// speculative-decoding paper: `steps` tokens per sequence advance the state in one launch):
//   dt = clamp(softplus(dt_raw + dt_bias)) (or dt as given),
//   h = exp(dt·A) h + dt · x Bᵀ,   y = h C + D x          (head h reads group h / (H/G))
// The state is fp32, or int8 (quantized artifacts' decode state): element (c = h·P + p, n) is
// q·scale(c, n) with scale(c, n) = state_scales[index(c)·inner + n] (model/quantized_model.h
// ActQuant: per (h, p) for SSDi8, per (head cluster, channel cluster, n) for Quamba2); the
// kernel dequantizes it in registers, runs the steps in fp32 and stores sat±127(rne(s / scale))
// at the end of the launch — after every token when steps = 1, as the CPU rounds the state after
// each forward call — or after every token of the launch with round_every_step (a speculative
// verify window: its steps then give the bits of single steps). One token of a large batch is stepped in the scales' units instead
// (exp(dt·A)·q + dt·x·B / scale, rounded): the same integers but where s / scale lies within ~1e-5
// of a half-integer, one step away, as __expf already allows.
// CPU reference: runtime/cpu_ops.h `cpu::ssd_step`, applied once per token (int8: on the
// dequantized state, then runtime/quantized_ops.h `apply_state_format`).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct SsdStateUpdateArgs {
  int batch = 0, heads = 0, headdim = 0, groups = 0, dstate = 0;
  int steps = 1;                          // tokens per sequence; token j of sequence b is row b * steps + j
  // If set: sequence b advances only seq_steps[b] ≤ steps tokens (its first ones; 0 leaves its state
  // and y untouched): the replay of a verify window's accepted tokens (runtime/decode_session.h).
  const int32_t* seq_steps = nullptr;
  // The state rounded to its stored type (int8 codes, or fp16 values) after every token rather
  // than at the end of the launch: what `steps` single-token launches store.
  bool round_every_step = false;
  ElementType io_type = ElementType::kF32;  // type of x, B, C, dt and y
  const void* x = nullptr;                // row: [heads * headdim]
  int64_t x_stride = 0;
  const void* B = nullptr;                // row: [groups * dstate]
  const void* C = nullptr;
  int64_t bc_stride = 0;
  const void* dt = nullptr;               // row: [heads]
  int64_t dt_stride = 0;
  float dt_format = 0.f;                  // the dt point's format applied first (quant_epilogue.cuh
                                          // apply_format_code: > 0 int8 scale, < 0 fp16, 0 none)
  const float* dt_bias = nullptr;         // if set: dt = clamp(softplus(dt + dt_bias), dt_min, dt_max)
  float dt_min = 0.f, dt_max = __FLT_MAX__;
  const float* A = nullptr;               // [heads]
  const float* D = nullptr;               // [heads]
  // [batch, heads, headdim, dstate], updated in place. Read before the kernel waits for the previous
  // grid (kernels/programmatic_launch.cuh): the launch just before this one must not write it.
  void* state = nullptr;
  ElementType state_type = ElementType::kF32;  // kF32 or kS8
  const float* state_scales = nullptr;    // kS8: [scale rows, state_scale_inner]
  const int32_t* state_scale_index = nullptr;  // kS8: [heads * headdim] scale row of each channel, or null (row c)
  int state_scale_inner = 1;              // 1 (one scale a channel) or dstate (one per (channel, n))
  // kF32: each state value stored rounded to the nearest fp16 value (the state's fp16 format,
  // runtime/quantized_ops.h apply_state_format), at the end of the launch like an int8 state.
  bool state_fp16_values = false;
  void* y = nullptr;                      // row: [heads * headdim]
  int64_t y_stride = 0;
  // A verify window that first replays what the previous window kept (Activation Replay in the
  // window's own launch, round_every_step only): sequence b first steps replay_steps[b] tokens of
  // replay_x, replay_B and replay_dt (row b · replay_steps[batch] + j, with x_stride, bc_stride and
  // dt_stride; no y), stores the state after them as that many single steps would, then steps its
  // own `steps` tokens writing y.
  const int32_t* replay_steps = nullptr;  // device [batch + 1]: the counts, then the rows a sequence
  // If set (device [batch]): sequence b replays the kept rows of sequence replay_rows[b] instead of
  // its own (several drafts of one sequence all taking the accepted draft's tokens); the two must
  // have held the same state before that window, since b steps them from its own.
  const int32_t* replay_rows = nullptr;
  const void* replay_x = nullptr;
  const void* replay_B = nullptr;
  const void* replay_dt = nullptr;
  // false: the state after the launch's own tokens is not stored (it stays where the replay left
  // it; the next window replays the tokens of this one that are kept).
  bool store_final = true;
};

// Shapes handled: dstate a multiple of 32 up to 256, heads divisible by groups, steps ≥ 1.
bool ssd_state_update_supported(const SsdStateUpdateArgs& args);
cudaError_t launch_ssd_state_update(const SsdStateUpdateArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
