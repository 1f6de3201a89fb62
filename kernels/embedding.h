// Embedding gather into the fp32 residual stream: out[i] = float(table[tokens[i]]).
// The table is bf16, fp16 or fp32 (a quantized artifact's float table, fp16 when its values are
// fp16-exact), or quantized per row (head-to-toe artifacts, --quantize-embedding): int8, or
// int4 packed two per byte (model/quantizer.h pack_int4 of the row-major table), each value
// dequantized as q·row_scales[token] — exactly model/quantized_model.h WeightMatrix::row_to_float.
// Token ids are validated on the host before upload; the kernel clamps nothing.
// CPU reference: the row copy in runtime/cpu_backend.cc (quantized: row_to_float).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct EmbeddingArgs {
  int64_t rows = 0;
  int dim = 0;
  const int32_t* tokens = nullptr;       // [rows]
  const void* table = nullptr;           // [vocab, dim] bf16 / fp16 / fp32 / int8, or [vocab, dim / 2] bytes for int4
  float* out = nullptr;                  // [rows, dim]
  enum class Table { kBf16, kF16, kF32, kInt8Rows, kInt4Rows } table_type = Table::kBf16;
  const float* row_scales = nullptr;     // quantized tables: [vocab]
};

bool embedding_supported(const EmbeddingArgs& args);
cudaError_t launch_embedding(const EmbeddingArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
