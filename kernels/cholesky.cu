#include "kernels/cholesky.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cublas_check.h"
#include "kernels/cuda_check.h"

namespace ssdq::kernels {
namespace {

// In place, column-major b [m, m] with leading dimension m: its lower triangle becomes L.
bool host_cholesky(double* b, int m) {
  for (int j = 0; j < m; ++j) {
    double d = b[j * m + j];
    for (int k = 0; k < j; ++k) d -= b[k * m + j] * b[k * m + j];
    if (!(d > 0) || !std::isfinite(d)) return false;
    d = std::sqrt(d);
    b[j * m + j] = d;
    for (int i = j + 1; i < m; ++i) {
      double v = b[j * m + i];
      for (int k = 0; k < j; ++k) v -= b[k * m + i] * b[k * m + j];
      b[j * m + i] = v / d;
    }
  }
  return true;
}

__global__ void identity_kernel(double* out, int64_t n) {
  const int64_t total = n * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = (i / n == i % n) ? 1.0 : 0.0;
}

}  // namespace

CholeskyInverse::CholeskyInverse() {
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  handle_ = handle;
}

CholeskyInverse::~CholeskyInverse() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

bool CholeskyInverse::run(double* a, double* inverse, int64_t n64, cudaStream_t stream) {
  if (n64 <= 0 || n64 > (int64_t{1} << 16) || !a || !inverse) throw std::runtime_error("cholesky: invalid arguments");
  auto handle = static_cast<cublasHandle_t>(handle_);
  check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
  const int n = static_cast<int>(n64);
  const double one = 1.0, minus_one = -1.0;
  for (int k = 0; k < n; k += kCholeskyBlock) {
    const int m = std::min(kCholeskyBlock, n - k), rest = n - k - m;
    double* diagonal = a + static_cast<int64_t>(k) * n + k;
    block_.resize(static_cast<size_t>(m) * m);
    check_cuda(cudaMemcpy2DAsync(block_.data(), m * sizeof(double), diagonal, n * sizeof(double), m * sizeof(double), m,
                            cudaMemcpyDeviceToHost, stream),
          "cholesky: read a diagonal block");
    check_cuda(cudaStreamSynchronize(stream), "cholesky");
    if (!host_cholesky(block_.data(), m)) return false;
    check_cuda(cudaMemcpy2DAsync(diagonal, n * sizeof(double), block_.data(), m * sizeof(double), m * sizeof(double), m,
                            cudaMemcpyHostToDevice, stream),
          "cholesky: write a diagonal block");
    if (rest == 0) break;
    // The panel below: P ← P · L_kk⁻ᵀ; the trailing matrix: A22 ← A22 − P·Pᵀ (lower triangle).
    double* panel = diagonal + m;
    check_cublas(cublasDtrsm(handle, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, rest, m, &one,
                      diagonal, n, panel, n),
          "cholesky: panel solve");
    double* trailing = a + static_cast<int64_t>(k + m) * n + k + m;
    check_cublas(cublasDsyrk(handle, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, rest, m, &minus_one, panel, n, &one, trailing, n),
          "cholesky: trailing update");
  }
  identity_kernel<<<static_cast<unsigned>(std::min<int64_t>((n64 * n64 + 255) / 256, 65536)), 256, 0, stream>>>(inverse, n64);
  check_cuda(cudaGetLastError(), "cholesky: identity");
  check_cublas(cublasDtrsm(handle, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, n, &one, a, n,
                    inverse, n),
        "cholesky: inverse");
  check_cuda(cudaStreamSynchronize(stream), "cholesky");
  return true;
}

}  // namespace ssdq::kernels
