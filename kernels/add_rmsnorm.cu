#include "kernels/add_rmsnorm.h"

#include <type_traits>

#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"
#include "kernels/rmsnorm_row.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;

struct Int8Out {};

template <typename Out>
__device__ inline void store(void* out, int64_t i, float y, float scale) {
  if constexpr (std::is_same_v<Out, Int8Out>) {
    static_cast<int8_t*>(out)[i] = quantize_int8(y, scale);
  } else {
    static_cast<Out*>(out)[i] = from_float<Out>(y);
  }
}

// One block per row: the add (each thread updates the elements it will square), then the
// norm in rmsnorm_row's order (shared with the quantized GEMV's prologue), then the scaling.
template <typename Out>
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
  const float scale = rmsnorm_row_scale<kThreads>(r, a.dim, a.eps);
  for (int i = threadIdx.x; i < a.dim; i += kThreads)
    store<Out>(a.out, row * a.dim + i, rmsnorm_value(r[i], scale, a.weight[i]), a.out_scale);
}

}  // namespace

bool add_rmsnorm_supported(const AddRmsNormArgs& a) {
  const bool types = a.out_type == ElementType::kF32 || a.out_type == ElementType::kBF16 ||
                     (a.out_type == ElementType::kS8 && a.out_scale > 0.f);
  return types && a.rows > 0 && a.rows <= 2147483647 && a.dim > 0 && a.residual && a.weight && a.out;
}

cudaError_t launch_add_rmsnorm(const AddRmsNormArgs& a, cudaStream_t stream) {
  if (!add_rmsnorm_supported(a)) return cudaErrorInvalidValue;
  const auto kernel = a.out_type == ElementType::kS8     ? add_rmsnorm_kernel<Int8Out>
                      : a.out_type == ElementType::kBF16 ? add_rmsnorm_kernel<__nv_bfloat16>
                                                         : add_rmsnorm_kernel<float>;
  return launch_kernel(kernel, LaunchShape{dim3(static_cast<unsigned>(a.rows)), dim3(kThreads)}, stream, a);
}

}  // namespace ssdq::kernels
