// Chunked SSD prefill (Mamba-2), per head h of group g = h / (heads / groups):
//   dt_t = clamp(softplus(dt_raw_t + dt_bias_h), dt_min, dt_max)
//   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_tᵀ,   y_t = S_t C_t + D_h x_t        (S: [headdim, dstate] fp32)
// computed chunk by chunk (ChunkCumsum, ChunkBMM, ChunkState + StatePassing, ChunkScan; SSDi8 §4.1)
// on tensor cores with bf16 operands and fp32 accumulation.
// CPU reference: runtime/cpu_ops.h `cpu::ssd_chunked`. Notes: docs/kernels/ssd_chunk_scan.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ssdq::kernels {

struct SsdChunkScanArgs {
  int batch = 0, seqlen = 0, heads = 0, headdim = 0, groups = 0, dstate = 0;
  int chunk = 256;  // chunk length L: 64, 128 or 256; seqlen need not be a multiple of it
  // Token-major bf16 inputs; token t of sequence b is row b * seqlen + t.
  const __nv_bfloat16* x = nullptr;  // x[b, t, h * headdim + p] at x + row * x_row_stride + h * headdim + p
  int64_t x_row_stride = 0;
  const __nv_bfloat16* B = nullptr;  // B[b, t, g * dstate + n] at B + row * bc_row_stride + g * dstate + n
  const __nv_bfloat16* C = nullptr;  // likewise
  int64_t bc_row_stride = 0;
  const __nv_bfloat16* dt_raw = nullptr;  // dt_raw[b, t, h] at dt_raw + row * dt_row_stride + h, before bias/softplus
  int64_t dt_row_stride = 0;
  const float* dt_bias = nullptr;  // [heads] (required; all float arrays are device pointers)
  const float* A = nullptr;        // [heads], negative
  const float* D = nullptr;        // [heads]
  float dt_min = 0.f, dt_max = __FLT_MAX__;
  float* state = nullptr;          // [batch, heads, headdim, dstate] fp32: initial state in, final state out
  __nv_bfloat16* y = nullptr;      // y[b, t, h * headdim + p], row stride heads * headdim; must not overlap x, B, C
  void* workspace = nullptr;       // ssd_chunk_scan_workspace_bytes(args) bytes, 256-byte aligned
};

// Shapes handled: headdim 32, 64 or 128; dstate a multiple of 16 up to 256; chunk 64, 128 or 256;
// heads divisible by groups; x, B, C, y 16-byte aligned with row strides a multiple of 8 elements;
// state 32-byte aligned; workspace 256-byte aligned; and the ChunkScan stage's shared memory, which
// grows with headdim, dstate and chunk, within the current device's per-block limit: sm_90's 227 KB
// holds every shape; sm_80's 163 KB every shape but headdim 128 with dstate > 144 at chunk 256
// (table in docs/kernels/ssd_chunk_scan.md).
bool ssd_chunk_scan_supported(const SsdChunkScanArgs& args);

// Bytes of scratch the launch needs (dt and its chunk cumsum, C·Bᵀ per chunk, the bf16 state
// entering each chunk); about batch · ceil(seqlen / chunk) · heads · headdim · dstate · 2 bytes.
size_t ssd_chunk_scan_workspace_bytes(const SsdChunkScanArgs& args);

// Four kernels on `stream`; no allocation, no synchronisation. Returns cudaErrorInvalidValue for
// unsupported arguments (nothing launched), else the first launch error.
cudaError_t launch_ssd_chunk_scan(const SsdChunkScanArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
