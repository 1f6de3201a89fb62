// Fused residual add + RMSNorm with an fp32 residual stream (mamba_ssm residual_in_fp32):
//   residual += delta (if delta is given);  out = residual / rms(residual) * weight
// CPU reference: runtime/cpu_ops.h `cpu::rmsnorm` after the add.
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
  const float* weight = nullptr; // [dim]
  void* out = nullptr;           // [rows, dim] of out_type
  ElementType out_type = ElementType::kF32;
};

bool add_rmsnorm_supported(const AddRmsNormArgs& args);
cudaError_t launch_add_rmsnorm(const AddRmsNormArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
