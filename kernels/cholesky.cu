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

// J·H·J of a row-major (or column-major) [n, n] matrix: element (i, j) goes to (n−1−i, n−1−j),
// so the flat array reversed.
__global__ void reversed_kernel(const double* in, double* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = in[count - 1 - i];
}

// U(i, j) = L⁻¹(n−1−i, n−1−j) for j ≥ i, else 0; L⁻¹(r, c) at c·n + r. A 32 × 32 tile of U a block:
// for a fixed j the source is contiguous along i (reversed), so the tile is read along i and written
// along j through shared memory.
constexpr int kTile = 32, kTileRows = 8;
__global__ void factor_from_reversed_inverse_kernel(const double* l_inverse, float* u, int64_t n) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t i0 = int64_t{blockIdx.y} * kTile, j0 = int64_t{blockIdx.x} * kTile;
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {  // r along j, threadIdx.x along i
    const int64_t i = i0 + threadIdx.x, j = j0 + r;
    if (i < n && j < n) tile[r][threadIdx.x] = j >= i ? static_cast<float>(l_inverse[(n - 1 - j) * n + (n - 1 - i)]) : 0.f;
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kTileRows) {  // r along i, threadIdx.x along j
    const int64_t i = i0 + r, j = j0 + threadIdx.x;
    if (i < n && j < n) u[i * n + j] = tile[threadIdx.x][r];
  }
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

bool CholeskyInverse::gptq_factor(double* h, double* scratch, float* u, int64_t n, cudaStream_t stream) {
  if (n <= 0 || n > (int64_t{1} << 16) || !h || !scratch || !u) throw std::runtime_error("gptq_factor: invalid arguments");
  const int64_t count = n * n;
  reversed_kernel<<<static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 65536)), 256, 0, stream>>>(h, scratch, count);
  check_cuda(cudaGetLastError(), "gptq_factor: J·H·J");
  if (!run(scratch, h, n, stream)) return false;  // L in scratch, L⁻¹ in h
  const unsigned tiles = static_cast<unsigned>((n + kTile - 1) / kTile);
  factor_from_reversed_inverse_kernel<<<dim3(tiles, tiles), dim3(kTile, kTileRows), 0, stream>>>(h, u, n);
  check_cuda(cudaGetLastError(), "gptq_factor: U from L⁻¹");
  check_cuda(cudaStreamSynchronize(stream), "gptq_factor");
  return true;
}

}  // namespace ssdq::kernels
