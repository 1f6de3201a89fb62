#include "kernels/add_rmsnorm.h"

#include <type_traits>

#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"
#include "kernels/rmsnorm_row.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;

template <typename Out>
__device__ inline void store(Out* out, int i, float y, float scale, float inv_scale) {
  if constexpr (std::is_same_v<Out, int8_t>) {
    out[i] = quantize_int8_fast(y, scale, inv_scale);
  } else {
    out[i] = from_float<Out>(y);
  }
}

// Rows of up to kKeptMax·256 elements keep theirs in registers between the sum and the scaling.
constexpr int kKeptMax = 16;
static_assert(kThreads == 256, "rmsnorm_row_scale_kept's lanes are the block's threads");

// One block per row: the add (each thread updates the elements it will square), then the
// norm in rmsnorm_row's order (shared with the quantized GEMV's prologue), then the scaling.
// Out: float, bf16 or int8 (quantized with a.out_scale).
template <typename Out, bool kKept>
__global__ void __launch_bounds__(kThreads) add_rmsnorm_kernel(AddRmsNormArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t row = blockIdx.x;
  float* r = a.residual + row * a.dim;
  if (a.delta) {
    const float* d = a.delta + row * a.dim;
    for (int i = threadIdx.x; i < a.dim; i += kThreads)
      r[i] = __fadd_rn(r[i], a.delta_bias ? __fadd_rn(d[i], a.delta_bias[i]) : d[i]);
  }
  Out* out = static_cast<Out*>(a.out) + row * a.dim;
  const float inv_scale = std::is_same_v<Out, int8_t> ? __frcp_rn(a.out_scale) : 0.f;
  if constexpr (kKept) {
    float v[kKeptMax];
    const float scale = rmsnorm_row_scale_kept(r, a.dim, a.eps, v);
#pragma unroll
    for (int k = 0; k < kKeptMax; ++k) {
      const int i = threadIdx.x + kThreads * k;
      if (i < a.dim) store(out, i, rmsnorm_value(v[k], scale, a.weight[i]), a.out_scale, inv_scale);
    }
  } else {
    const float scale = rmsnorm_row_scale<kThreads>(r, a.dim, a.eps);
    for (int i = threadIdx.x; i < a.dim; i += kThreads)
      store(out, i, rmsnorm_value(r[i], scale, a.weight[i]), a.out_scale, inv_scale);
  }
}

template <typename Out>
cudaError_t launch_out(const AddRmsNormArgs& a, cudaStream_t stream) {
  const auto kernel = a.dim <= kKeptMax * kThreads ? add_rmsnorm_kernel<Out, true> : add_rmsnorm_kernel<Out, false>;
  return launch_kernel(kernel, LaunchShape{dim3(static_cast<unsigned>(a.rows)), dim3(kThreads)}, stream, a);
}

}  // namespace

bool add_rmsnorm_supported(const AddRmsNormArgs& a) {
  const bool types = a.out_type == ElementType::kF32 || a.out_type == ElementType::kBF16 ||
                     (a.out_type == ElementType::kS8 && a.out_scale > 0.f);
  return types && a.rows > 0 && a.rows <= 2147483647 && a.dim > 0 && a.residual && a.weight && a.out;
}

cudaError_t launch_add_rmsnorm(const AddRmsNormArgs& a, cudaStream_t stream) {
  if (!add_rmsnorm_supported(a)) return cudaErrorInvalidValue;
  if (a.out_type == ElementType::kS8) return launch_out<int8_t>(a, stream);
  return a.out_type == ElementType::kBF16 ? launch_out<__nv_bfloat16>(a, stream) : launch_out<float>(a, stream);
}

}  // namespace ssdq::kernels
