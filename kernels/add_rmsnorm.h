// Fused residual add + RMSNorm with an fp32 residual stream (mamba_ssm residual_in_fp32):
//   residual += delta (+ delta_bias) (if delta is given);  out = residual / rms(residual) * weight
// With out_type kS8 the output is quantized statically for the next integer GEMM (in_proj of a
// W8A8 / W4A8 layer): out = sat±127(rne(y / out_scale)), model/quantizer.h `quantize_value`.
// CPU reference: runtime/cpu_ops.h `cpu::rmsnorm` after the add (then quantize_value).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct AddRmsNormArgs {
  int64_t rows = 0;
  int dim = 0;
  float eps = 1e-5f;
  float* residual = nullptr;     // [rows, dim], updated in place
  const float* delta = nullptr;  // [rows, dim] or null
  const float* delta_bias = nullptr;  // [dim] or null: added to delta first (SSDi8's out_proj bias)
  const float* weight = nullptr; // [dim]
  void* out = nullptr;           // [rows, dim] of out_type
  ElementType out_type = ElementType::kF32;  // kF32, kBF16 or kS8
  float out_scale = 1.f;                     // kS8: the static activation scale s_x
};

bool add_rmsnorm_supported(const AddRmsNormArgs& args);
cudaError_t launch_add_rmsnorm(const AddRmsNormArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
