// Grouped gated RMSNorm before out_proj (mamba_ssm, norm_before_gate = false):
//   g = y · silu(z);  out = g / rms_group(g) · weight,   groups of `group_size` channels.
// CPU reference: runtime/cpu_ops.h `cpu::gated_rmsnorm`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct GatedRmsNormArgs {
  int64_t rows = 0;
  int width = 0, group_size = 0;
  float eps = 1e-5f;
  const __nv_bfloat16* y = nullptr;  // [rows, width]
  const __nv_bfloat16* z = nullptr;  // row r at z + r * z_stride
  int64_t z_stride = 0;
  const float* weight = nullptr;     // [width]
  __nv_bfloat16* out = nullptr;      // [rows, width]
  // Tensor parallelism's folded norm (kernels/tp_all_reduce.h): when set, out = g · weight left
  // unnormalised and sum_squares[row · groups + group] = Σ g² over the group's channels here; the
  // all-reduce after out_proj applies the scale of the sums across the ranks.
  float* sum_squares = nullptr;
};

bool gated_rmsnorm_supported(const GatedRmsNormArgs& args);
cudaError_t launch_gated_rmsnorm(const GatedRmsNormArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
