// Error handling for cuBLAS calls made by the launchers that use it (gemm, input_gram, cholesky).
#pragma once

#include <cublas_api.h>

#include <stdexcept>
#include <string>

namespace ssdq::kernels {

inline void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(status));
}

}  // namespace ssdq::kernels
