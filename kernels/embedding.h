// Embedding gather into the fp32 residual stream: out[i] = float(table[tokens[i]]).
// Token ids are validated on the host before upload; the kernel clamps nothing.
// CPU reference: the row copy in runtime/cpu_backend.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct EmbeddingArgs {
  int64_t rows = 0;
  int dim = 0;
  const int32_t* tokens = nullptr;       // [rows]
  const __nv_bfloat16* table = nullptr;  // [vocab, dim]
  float* out = nullptr;                  // [rows, dim]
};

bool embedding_supported(const EmbeddingArgs& args);
cudaError_t launch_embedding(const EmbeddingArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
