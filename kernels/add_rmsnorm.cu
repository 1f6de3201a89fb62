#include "kernels/add_rmsnorm.h"

#include <type_traits>

#include "kernels/block_reduce.cuh"
#include "kernels/quant_epilogue.cuh"

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

// One block per row; the row is added and squared in one pass, then normalised.
template <typename Out>
__global__ void add_rmsnorm_kernel(AddRmsNormArgs a) {
  const int64_t row = blockIdx.x;
  float* r = a.residual + row * a.dim;
  const float* d = a.delta ? a.delta + row * a.dim : nullptr;
  float sum = 0.f;
  for (int i = threadIdx.x; i < a.dim; i += kThreads) {
    float v = r[i];
    if (d) {
      v = __fadd_rn(v, a.delta_bias ? __fadd_rn(d[i], a.delta_bias[i]) : d[i]);
      r[i] = v;
    }
    sum += v * v;
  }
  const float scale = rsqrtf(block_sum<kThreads>(sum) / a.dim + a.eps);
  for (int i = threadIdx.x; i < a.dim; i += kThreads) store<Out>(a.out, row * a.dim + i, r[i] * scale * a.weight[i], a.out_scale);
}

}  // namespace

bool add_rmsnorm_supported(const AddRmsNormArgs& a) {
  const bool types = a.out_type == ElementType::kF32 || a.out_type == ElementType::kBF16 ||
                     (a.out_type == ElementType::kS8 && a.out_scale > 0.f);
  return types && a.rows > 0 && a.rows <= 2147483647 && a.dim > 0 && a.residual && a.weight && a.out;
}

cudaError_t launch_add_rmsnorm(const AddRmsNormArgs& a, cudaStream_t stream) {
  if (!add_rmsnorm_supported(a)) return cudaErrorInvalidValue;
  if (a.out_type == ElementType::kS8) {
    add_rmsnorm_kernel<Int8Out><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  } else if (a.out_type == ElementType::kBF16) {
    add_rmsnorm_kernel<__nv_bfloat16><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  } else {
    add_rmsnorm_kernel<float><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
