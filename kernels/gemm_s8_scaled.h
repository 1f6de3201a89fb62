// The W8A8 projection as one kernel on Hopper: a CUTLASS int8 GEMM (wgmma fed by TMA) whose
// epilogue applies kernels/scale_int32.h's scaling to the int32 products in registers,
//   out[m, n] = (float(acc[m, n])·s_w[n])·s_x + bias[n]        (accumulate: out[m, n] += …)
// rounded step by step like runtime/quantized_ops.h `linear_forward` for one weight group, so it
// is bit-identical to the CPU and the int32 products never reach memory. Machine code for sm_90a
// only: other devices, grouped (W4A8) weights and shapes TMA cannot address take kernels/gemm.h
// (kS8 → kS32) + kernels/scale_int32.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

// kPingPong: 128 × 128 tiles, ping-pong warp groups, 1 × 2 clusters; kCooperative: 256 × 128 tiles
// shared by two warp groups (no accumulate). kAuto: cooperative for long k and many tiles (measured,
// docs/kernels/gemm.md), else ping-pong.
enum class GemmS8ScaledSchedule { kAuto, kPingPong, kCooperative };

struct GemmS8ScaledArgs {
  int64_t m = 0, n = 0, k = 0;
  const int8_t* x = nullptr;        // [m, k], row stride ldx
  int64_t ldx = 0;
  const int8_t* w = nullptr;        // [n, k], row stride ldw
  int64_t ldw = 0;
  const float* w_scales = nullptr;  // [n]
  float x_scale = 1.f;
  const float* bias = nullptr;      // optional [n]
  float* out = nullptr;             // [m, n] fp32, row stride ldout
  int64_t ldout = 0;
  bool accumulate = false;          // out += (the residual add of out_proj)
  GemmS8ScaledSchedule schedule = GemmS8ScaledSchedule::kAuto;
};

// An sm_90 device, k and the row strides multiples of 16 bytes, 16-byte aligned operands.
bool gemm_s8_scaled_supported(const GemmS8ScaledArgs& args);
cudaError_t launch_gemm_s8_scaled(const GemmS8ScaledArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
