// The epilogue of a W8A8 projection after the int8 GEMM (kernels/gemm.h, kS8 → kS32):
//   out[m, n] (+)= float(acc[m, n])·s_w[n]·s_x + bias[n]
// rounded step by step exactly as runtime/quantized_ops.h `linear_forward` (per-channel weights)
// and cpu_block_forward's bias and residual adds, so it is bit-identical to the CPU.
// Weights with several groups per row (the fallback where kernels/gemm_s8_grouped.h does not
// apply: one int8 GEMM per group of k) run one call per group g in increasing order:
// chain ← fma(float(acc_g), s_w[n, g], chain) from 0, and the call of the last group stores
// chain·s_x (+ bias) — linear_forward's chain.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct ScaleInt32Args {
  int64_t m = 0, n = 0;
  const int32_t* acc = nullptr;     // [m, n], row stride ld_acc
  int64_t ld_acc = 0;
  const float* w_scales = nullptr;  // [n, groups]
  int groups = 1, group = 0;         // the weight group whose accumulators acc holds
  float* chain = nullptr;           // groups > 1: [m, n] fp32 (row stride n), carried across the calls
  float x_scale = 1.f;
  const float* bias = nullptr;      // optional [n]
  void* out = nullptr;              // [m, n], row stride ldout
  int64_t ldout = 0;
  ElementType out_type = ElementType::kF32;  // kF32, kBF16 or kF16
  bool accumulate = false;                   // out += (fp32 only)
};

bool scale_int32_supported(const ScaleInt32Args& args);
cudaError_t launch_scale_int32(const ScaleInt32Args& args, cudaStream_t stream);

}  // namespace ssdq::kernels
