#include "kernels/embedding.h"

#include <cuda_fp16.h>

namespace ssdq::kernels {
namespace {

__global__ void embedding_kernel(EmbeddingArgs a) {
  const int64_t row = blockIdx.x, token = a.tokens[row];
  float* dst = a.out + row * a.dim;
  switch (a.table_type) {
    case EmbeddingArgs::Table::kF32: {
      const float* src = static_cast<const float*>(a.table) + token * a.dim;
      for (int i = threadIdx.x; i < a.dim; i += blockDim.x) dst[i] = src[i];
      break;
    }
    case EmbeddingArgs::Table::kF16: {
      const __half* src = static_cast<const __half*>(a.table) + token * a.dim;
      for (int i = threadIdx.x; i < a.dim; i += blockDim.x) dst[i] = __half2float(src[i]);
      break;
    }
    case EmbeddingArgs::Table::kBf16: {
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(a.table) + token * a.dim;
      for (int i = threadIdx.x; i < a.dim; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
      break;
    }
    case EmbeddingArgs::Table::kInt8Rows: {
      const int8_t* src = static_cast<const int8_t*>(a.table) + token * a.dim;
      const float scale = a.row_scales[token];
      for (int i = threadIdx.x; i < a.dim; i += blockDim.x) dst[i] = __fmul_rn(static_cast<float>(src[i]), scale);
      break;
    }
    case EmbeddingArgs::Table::kInt4Rows: {
      const uint8_t* src = static_cast<const uint8_t*>(a.table) + token * (a.dim / 2);
      const float scale = a.row_scales[token];
      for (int i = threadIdx.x; i < a.dim; i += blockDim.x) {
        const int nibble = (src[i / 2] >> (4 * (i % 2))) & 0xF;
        dst[i] = __fmul_rn(static_cast<float>(nibble >= 8 ? nibble - 16 : nibble), scale);
      }
      break;
    }
  }
}

}  // namespace

bool embedding_supported(const EmbeddingArgs& a) {
  const bool table = a.table_type == EmbeddingArgs::Table::kBf16 || a.table_type == EmbeddingArgs::Table::kF32 ||
                     a.table_type == EmbeddingArgs::Table::kF16 ||
                     (a.row_scales && (a.table_type == EmbeddingArgs::Table::kInt8Rows || a.dim % 2 == 0));
  return table && a.rows > 0 && a.rows <= 2147483647 && a.dim > 0 && a.tokens && a.table && a.out;
}

cudaError_t launch_embedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (!embedding_supported(a)) return cudaErrorInvalidValue;
  embedding_kernel<<<static_cast<unsigned>(a.rows), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
