#include "kernels/embedding.h"

namespace ssdq::kernels {
namespace {

__global__ void embedding_kernel(EmbeddingArgs a) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* src = a.table + static_cast<int64_t>(a.tokens[row]) * a.dim;
  float* dst = a.out + row * a.dim;
  for (int i = threadIdx.x; i < a.dim; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
}

}  // namespace

bool embedding_supported(const EmbeddingArgs& a) {
  return a.rows > 0 && a.rows <= 2147483647 && a.dim > 0 && a.tokens && a.table && a.out;
}

cudaError_t launch_embedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (!embedding_supported(a)) return cudaErrorInvalidValue;
  embedding_kernel<<<static_cast<unsigned>(a.rows), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
