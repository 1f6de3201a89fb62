// GPTQ's row pass on the device (quant/gptq.cc's quantize_rows is the CPU reference): for each
// block of at most kGptqRowsMaxBlock columns, a thread per row quantizes the row's values of the
// block in order, each error feeding the row's later columns of the block through U's diagonal
// block (held in shared memory), and records the block's errors; then one cuBLAS SGEMM (fp32
// math, never TF32) applies the block's errors to every later column at once (the lazy update,
// W[:, i2:] −= E · U[i1:i2, i2:]). Rows never meet inside a block. The per-row arithmetic is the
// host's in the same order, each product and difference rounded on its own (no fused
// multiply-adds; the host's compiler may fuse some); the lazy update's sums are ordered as cuBLAS
// orders them. So codes equal the host's but for near-ties (tests/gpu/cuda_export_test).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

inline constexpr int kGptqRowsMaxBlock = 128;

struct GptqRowsArgs {
  float* weight = nullptr;  // [rows, cols] row-major, columns in processing order; overwritten
  const float* u = nullptr;  // [cols, cols] row-major, upper triangular (H⁻¹ = UᵀU)
  int64_t rows = 0, cols = 0;
  int block_size = 128;  // columns per lazy batch
  int group_size = 0;    // columns per scale group (cols: one per row)
  int groups = 1;        // scale groups per row
  int qmin = -8, qmax = 7;
  // Dynamic group scales: each group's scales from the row's current values at the group's first
  // column (needs block_size % group_size == 0 and the natural column order); otherwise `scales`
  // holds every scale on entry.
  bool dynamic_scales = false;
  const int32_t* column_group = nullptr;  // [cols]: the scale group of the k-th processed column
  float* scales = nullptr;                // [rows, groups]
  int8_t* values = nullptr;               // [rows, cols]: codes, in processing order
  float* errors = nullptr;                // [rows, block_size] workspace
};

// Why the arguments cannot run ("" when they can): shapes, block and group sizes.
const char* gptq_rows_unsupported(const GptqRowsArgs& args);

class GptqRowPass {
 public:
  GptqRowPass();
  ~GptqRowPass();
  GptqRowPass(const GptqRowPass&) = delete;
  GptqRowPass& operator=(const GptqRowPass&) = delete;
  // Every block of columns in order on `stream` (asynchronous). Throws std::runtime_error for
  // unsupported arguments or a failed CUDA or cuBLAS call.
  void run(const GptqRowsArgs& args, cudaStream_t stream);

 private:
  void* handle_ = nullptr;
};

}  // namespace ssdq::kernels
