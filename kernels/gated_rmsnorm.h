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

// An artifact's gated norm on fp32 rows in two steps, for when the sums of squares of a norm group
// are not all in the row at hand: a tensor-parallel rank whose channels are part of a group spread
// over the ranks (its sums all-reduced between the steps, before out_proj's int8 scale needs the
// normalised values), or a rotation in blocks after the norm (export --tp-blocks).
//   launch_gated_sum_squares: sums[r · groups + g] = Σ (y·silu(z))² over the row's channels of
//     group g (channel c lies in group first_group + c / local_group_size); the row's other slots,
//     and sums[rows · groups … sums_count), are 0.
//   launch_gated_norm_scale: out[r, c] = y·silu(z) · rsqrt(sums[r · groups + g] / group_size + eps)
//     · weight[c], fp32; out may be y (each value is read, then written, by one thread).
// CPU reference: cpu::gated_rmsnorm over the whole group (runtime/cpu_ops.h).
struct GatedNormPartsArgs {
  int64_t rows = 0;
  int width = 0;                // the channels here (a rank's)
  const float* y = nullptr;     // [rows, width]
  const float* z = nullptr;     // row r at z + r * z_stride
  int64_t z_stride = 0;
  int groups = 1;               // norm groups of the whole layer: slots a row of sums
  int first_group = 0;
  int local_group_size = 0;     // channels of one group here (divides width)
  int group_size = 0;           // channels of a whole group
  float eps = 1e-5f;
  const float* weight = nullptr;  // [width]
  float* sums = nullptr;        // [sums_count ≥ rows · groups]
  int64_t sums_count = 0;
  float* out = nullptr;         // [rows, width]
};

bool gated_norm_parts_supported(const GatedNormPartsArgs& args);
cudaError_t launch_gated_sum_squares(const GatedNormPartsArgs& args, cudaStream_t stream);
cudaError_t launch_gated_norm_scale(const GatedNormPartsArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
