// Chunked SSD prefill (Mamba-2), per head h of group g = h / (heads / groups):
//   dt_t = clamp(softplus(dt_raw_t + dt_bias_h), dt_min, dt_max)
//   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_tᵀ,   y_t = S_t C_t + D_h x_t        (S: [headdim, dstate] fp32)
// computed chunk by chunk (ChunkCumsum, ChunkBMM, ChunkState + StatePassing, ChunkScan; SSDi8 §4.1)
// on tensor cores with 16-bit operands and fp32 accumulation.
// The FP path: bf16 x, B, C, dt_raw and y, an fp32 state. The quantized backend's float-SSD recipes
// (rtn, had, quamba2; Quamba2's "int8 inputs, fp16 math"): fp16 x, B, C as the conv writes them
// (formatted, then rounded), their fp32 dt_raw with its format applied first (as the recurrence
// kernel does), fp32 y, and an fp32 or int8 state (q·scale, dequantized as the first chunk starts,
// stored as sat±127(rne(S / scale)) after the last: the CPU rounds the state once per call).
// CPU reference: runtime/cpu_ops.h `cpu::ssd_chunked`. Notes: docs/kernels/ssd_chunk_scan.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct SsdChunkScanArgs {
  int batch = 0, seqlen = 0, heads = 0, headdim = 0, groups = 0, dstate = 0;
  int chunk = 256;  // chunk length L: 64, 128 or 256; seqlen need not be a multiple of it
  // Token-major inputs of operand_type; token t of sequence b is row b * seqlen + t.
  ElementType operand_type = ElementType::kBF16;  // x, B, C and the tensor-core math: kBF16 or kF16
  const void* x = nullptr;  // x[b, t, h * headdim + p] at x + row * x_row_stride + h * headdim + p
  int64_t x_row_stride = 0;
  const void* B = nullptr;  // B[b, t, g * dstate + n] at B + row * bc_row_stride + g * dstate + n
  const void* C = nullptr;  // likewise
  int64_t bc_row_stride = 0;
  const void* dt_raw = nullptr;  // dt_raw[b, t, h] at dt_raw + row * dt_row_stride + h, before bias/softplus
  int64_t dt_row_stride = 0;
  ElementType dt_type = ElementType::kBF16;  // of dt_raw: kBF16 or kF32
  float dt_format = 0.f;  // dt_raw's activation format, applied first (quant_epilogue.cuh apply_format_code)
  const float* dt_bias = nullptr;  // [heads] (required; all float arrays are device pointers)
  const float* A = nullptr;        // [heads], negative
  const float* D = nullptr;        // [heads]
  float dt_min = 0.f, dt_max = __FLT_MAX__;
  void* state = nullptr;  // [batch, heads, headdim, dstate]: initial state in, final state out
  ElementType state_type = ElementType::kF32;  // kF32, or kS8: element (c = h·headdim + p, n) is q·scale(c, n),
  const float* state_scales = nullptr;         // scale(c, n) = state_scales[index(c) · state_scale_inner + n]
  const int32_t* state_scale_index = nullptr;  // index(c): this [heads · headdim] array, or c when null
  int state_scale_inner = 1;                   // 1 or dstate
  void* y = nullptr;  // y[b, t, h * headdim + p], row stride heads * headdim; must not overlap x, B, C
  ElementType y_type = ElementType::kBF16;  // kBF16 with bf16 operands, kF32 with fp16 ones
  void* workspace = nullptr;       // ssd_chunk_scan_workspace_bytes(args) bytes, 256-byte aligned
};

// Shapes handled: headdim 32, 64 or 128; dstate a multiple of 16 up to 256; chunk 64, 128 or 256;
// heads divisible by groups; x, B, C, y 16-byte aligned with row strides a multiple of 8 elements;
// state 32-byte aligned (kF32); workspace 256-byte aligned; and the ChunkScan stage's shared memory, which
// grows with headdim, dstate and chunk, within the current device's per-block limit: sm_90's 227 KB
// holds every shape; sm_80's 163 KB every shape but headdim 128 with dstate > 144 at chunk 256
// (table in docs/kernels/ssd_chunk_scan.md).
bool ssd_chunk_scan_supported(const SsdChunkScanArgs& args);

// Bytes of scratch the launch needs (dt and its chunk cumsum, C·Bᵀ per chunk, the 16-bit state
// entering each chunk); about batch · ceil(seqlen / chunk) · heads · headdim · dstate · 2 bytes.
size_t ssd_chunk_scan_workspace_bytes(const SsdChunkScanArgs& args);

// Four kernels on `stream`; no allocation, no synchronisation. Returns cudaErrorInvalidValue for
// unsupported arguments (nothing launched), else the first launch error.
cudaError_t launch_ssd_chunk_scan(const SsdChunkScanArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
