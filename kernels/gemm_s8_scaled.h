// The W8A8 projection as one kernel on Hopper: a CUTLASS int8 GEMM (wgmma fed by TMA) whose
// epilogue applies kernels/scale_int32.h's scaling to the int32 products in registers,
//   v[m, n] = (float(acc[m, n])·s_w[n])·s_x + bias[n]        (accumulate: out[m, n] += v)
// rounded step by step like runtime/quantized_ops.h `linear_forward` for one weight group, so it
// is bit-identical to the CPU and the int32 products never reach memory. out holds v in fp32, or
// (kS8) the int8 code of v in the activation format that follows the projection,
//   q[m, n] = sat±127(rne(v[m, n] / out_scales[n]))             (model/quantizer.h quantize_value)
// so a consumer that formats v first (in_proj's x|B|C before the conv) reads a quarter of the bytes. Machine code for sm_90a
// only: other devices, grouped (W4A8) weights and shapes TMA cannot address take kernels/gemm.h
// (kS8 → kS32) + kernels/scale_int32.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

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
  void* out = nullptr;              // [m, n] of out_type, row stride ldout (elements)
  int64_t ldout = 0;
  ElementType out_type = ElementType::kF32;  // kF32, or kS8 (ping-pong, no accumulate)
  const float* out_scales = nullptr;         // kS8: [n], the int8 scale of each output column
  bool accumulate = false;          // out += (the residual add of out_proj)
  GemmS8ScaledSchedule schedule = GemmS8ScaledSchedule::kAuto;
};

// An sm_90 device, k and the row strides multiples of 16 bytes, 16-byte aligned operands (kS8
// out: n and ldout multiples of 16).
bool gemm_s8_scaled_supported(const GemmS8ScaledArgs& args);
cudaError_t launch_gemm_s8_scaled(const GemmS8ScaledArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
