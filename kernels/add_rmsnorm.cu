#include "kernels/add_rmsnorm.h"

#include "kernels/block_reduce.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;

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
      v += d[i];
      r[i] = v;
    }
    sum += v * v;
  }
  const float scale = rsqrtf(block_sum<kThreads>(sum) / a.dim + a.eps);
  Out* out = static_cast<Out*>(a.out) + row * a.dim;
  for (int i = threadIdx.x; i < a.dim; i += kThreads) out[i] = from_float<Out>(r[i] * scale * a.weight[i]);
}

}  // namespace

bool add_rmsnorm_supported(const AddRmsNormArgs& a) {
  return a.rows > 0 && a.rows <= 2147483647 && a.dim > 0 && a.residual && a.weight && a.out;
}

cudaError_t launch_add_rmsnorm(const AddRmsNormArgs& a, cudaStream_t stream) {
  if (!add_rmsnorm_supported(a)) return cudaErrorInvalidValue;
  if (a.out_type == ElementType::kBF16) {
    add_rmsnorm_kernel<__nv_bfloat16><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  } else {
    add_rmsnorm_kernel<float><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
