// Causal depthwise conv1d + SiLU over the x|B|C channels, for prefill (any length) and decode
// (length 1), continuing from and updating a per-sequence conv state:
//   out[t, c] = silu(bias[c] + Σ_k w[c, k] · in[t - (W-1) + k, c]),  inputs before t = 0 from the state
// The state [batch, channels, W-1] (oldest first, in the input's type) ends holding the last W-1 inputs.
// Types: bf16 in → bf16 out (the FP path), fp32 in → fp32 out (the quantized backend's float
// activations), or int8 in (q, dequantized as q·in_scales[c]; the state
// then holds the int8 inputs) → int8 out (rne(out / out_scales[c]) saturated to ±127, as
// model/quantizer.h `quantize_value`) or fp16 out: the conv of a quantized artifact, whose x|B|C
// scales arrive expanded to one per channel.
// The fp32 path also takes its input as int8 codes (in_type kS8 with in_formats, no in_scales):
// the codes of conv.in's int8 format (every channel's code > 0), as in_proj's int8 epilogue writes
// them (kernels/gemm_s8_scaled.h); outputs and the fp32 state (q·code) are those of the fp32 values.
// An fp32-output conv can also write its output in parts (`parts`, e.g. the SSDi8 prefill's fp16 x
// and int8 B|C), each a range of channels with its own tensor, row stride and type.
// CPU reference: runtime/cpu_ops.h `cpu::causal_conv1d_silu` (on dequantized inputs, then the
// output format: runtime/quantized_ops.h `apply_activation_format`).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

// Channels [first_channel, the next part's first channel or `channels`) of an fp32-input conv:
// channel c of row r at out + r * stride + (c - first_channel), stored as `type`:
//   kF32 the formatted value (out_formats), kF16 the formatted value rounded to fp16 (exact for a
//   channel whose format is fp16; the chunked SSD's operands for the float-SSD recipes), kS8 the
//   int8 q of a channel whose format is int8 (code > 0, the scale; model/quantizer.h
//   quantize_value), so its value is q·code.
struct CausalConv1dOutputPart {
  void* out = nullptr;
  int first_channel = 0;
  int64_t stride = 0;  // elements, at least the part's channels
  ElementType type = ElementType::kF32;
};

struct CausalConv1dArgs {
  int batch = 0, seqlen = 0, channels = 0, width = 0;
  const void* in = nullptr;           // row (b, t) at in + (b * seqlen + t) * in_stride
  int64_t in_stride = 0;
  const float* weight = nullptr;      // [channels, width]
  const float* bias = nullptr;        // [channels]
  void* state = nullptr;              // [batch, channels, width - 1]
  void* out = nullptr;                // [batch * seqlen, channels]
  ElementType in_type = ElementType::kBF16;   // kBF16, kF32 or kS8
  ElementType out_type = ElementType::kBF16;  // kBF16 (bf16 in); kF32 (fp32 or int8-coded in); kS8 or kF16 (int8 in)
  const float* in_scales = nullptr;   // kS8 in: [channels]
  const float* out_scales = nullptr;  // kS8 out: [channels]
  // kF32 out only: each channel's activation format applied to its input as read (the state keeps the
  // formatted values, as the CPU formats conv.in before the conv) and to its output, coded one
  // float per channel (kernels/quant_epilogue.cuh apply_format_code: > 0 int8 with that scale,
  // < 0 fp16, 0 as is). Null: as is.
  const float* in_formats = nullptr;
  const float* out_formats = nullptr;
  int tile_tokens = 0;  // tokens a thread walks: 16, 32 or 64; 0 picks by the grid's size
  // fp32 in: channels whose formats are a common case (int8 conv.in, then fp16, int8 or
  // int8-formatted fp32 out) run a loop specialized for it; false sends every channel through the
  // per-element dispatch (the same bits: the tests compare the two).
  bool specialize = true;
  // kF32 out only: when part_count > 0, the output goes to these parts instead of `out`
  // (null then); parts[0].first_channel is 0 and the first channels increase.
  static constexpr int kMaxParts = 3;
  CausalConv1dOutputPart parts[kMaxParts];
  int part_count = 0;
  // A verify window that first takes in what the previous window kept (Activation Replay in the
  // window's own launch; seqlen ≤ 16, one tile): sequence b's inputs before t = 0 are the state's
  // followed by replay_steps[b] rows of replay_in (row b · replay_steps[batch] + j, in_stride
  // apart, the input's type and formats).
  const int32_t* replay_steps = nullptr;  // device [batch + 1]: the counts, then the rows a sequence
  // If set (device [batch]): sequence b takes in the kept rows of sequence replay_rows[b], after its
  // own state (SsdStateUpdateArgs::replay_rows).
  const int32_t* replay_rows = nullptr;
  const void* replay_in = nullptr;
  // false: the state ends holding the last W-1 inputs before t = 0 (after the replayed rows), not
  // the window's: the next window takes in the rows of this one that are kept.
  bool store_final = true;
};

bool causal_conv1d_supported(const CausalConv1dArgs& args);  // width 2..8
cudaError_t launch_causal_conv1d(const CausalConv1dArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
