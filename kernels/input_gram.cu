#include "kernels/input_gram.h"

#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "kernels/cublas_check.h"

namespace ssdq::kernels {

InputGramRunner::InputGramRunner() {
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  handle_ = handle;
}

InputGramRunner::~InputGramRunner() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

bool InputGramRunner::supported(const InputGramArgs& a) {
  return a.rows > 0 && a.rows <= INT32_MAX && a.dim > 0 && a.stride >= a.dim && a.x && a.sum;
}

// The rows of x, viewed column-major, are the columns of A [dim, rows] (leading dimension
// `stride`), so Σ_r x_r x_rᵀ = A·Aᵀ.
void InputGramRunner::run(const InputGramArgs& a, cudaStream_t stream) {
  if (!supported(a)) throw std::runtime_error("input Gram: unsupported arguments");
  auto handle = static_cast<cublasHandle_t>(handle_);
  check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
  const float one = 1.f;
  const int n = a.dim, k = static_cast<int>(a.rows);
  const int64_t lda = a.stride;
  if (a.tf32) {
    check_cublas(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, n, n, k, &one, a.x, CUDA_R_32F, lda, a.x, CUDA_R_32F, lda, &one,
                       a.sum, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
          "input Gram (TF32 GEMM)");
  } else {
    check_cublas(cublasSsyrk(handle, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, n, k, &one, a.x, lda, &one, a.sum, n),
          "input Gram (fp32 SYRK)");
  }
}

}  // namespace ssdq::kernels
