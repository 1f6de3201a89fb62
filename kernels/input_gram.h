// GPTQ's input Gram matrix on the device: sum += Σ_r x_r x_rᵀ over rows of fp32 values, through
// cuBLAS — SYRK in strict fp32 (the lower triangle), or with `tf32` a GEMM on the tensor cores in
// TF32 (the whole matrix, about 4x faster than SYRK on sm_90 for export's widths, inputs rounded
// to 10 mantissa bits). The sum is column-major [dim, dim], the layout of calib/input_gram.h's
// InputGram (its CPU reference, which sums in fp64); successive calls accumulate into it in fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct InputGramArgs {
  int64_t rows = 0;
  int dim = 0;
  const float* x = nullptr;  // row r at x + r * stride
  int64_t stride = 0;
  float* sum = nullptr;      // [dim, dim] column-major; the lower triangle is accumulated
  bool tf32 = false;
};

class InputGramRunner {
 public:
  InputGramRunner();
  ~InputGramRunner();
  InputGramRunner(const InputGramRunner&) = delete;
  InputGramRunner& operator=(const InputGramRunner&) = delete;
  static bool supported(const InputGramArgs& args);
  // Throws std::runtime_error with cuBLAS's status when a call fails.
  void run(const InputGramArgs& args, cudaStream_t stream);

 private:
  void* handle_ = nullptr;
};

}  // namespace ssdq::kernels
