// GPTQ's inverse factor on the device: a symmetric positive definite A [n, n] (double, device,
// column-major) is factored A = L·Lᵀ by the blocked right-looking algorithm — each diagonal block
// of kCholeskyBlock columns factored on the host (its own small Cholesky), the panel below it
// solved (cuBLAS dtrsm) and the trailing matrix updated (dsyrk) —, then L⁻¹ by one dtrsm against
// the identity. fp64 throughout, as the CPU's Eigen LLT and triangular solve it replaces
// (quant/gptq.cc, its CPU reference); O(n³) that takes seconds on one host thread for export's
// widths and milliseconds here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace ssdq::kernels {

inline constexpr int kCholeskyBlock = 128;

class CholeskyInverse {
 public:
  CholeskyInverse();
  ~CholeskyInverse();
  CholeskyInverse(const CholeskyInverse&) = delete;
  CholeskyInverse& operator=(const CholeskyInverse&) = delete;
  // a: A on entry, its lower triangle L on return (the upper triangle is left as it was);
  // inverse: [n, n] column-major, L⁻¹ in its lower triangle and zeros above on return. Both device
  // memory. Returns false, leaving both undefined, when a diagonal block is not positive definite.
  // Throws std::runtime_error when a CUDA or cuBLAS call fails. Synchronizes `stream`.
  bool run(double* a, double* inverse, int64_t n, cudaStream_t stream);
  // GPTQ's U (quant/gptq.h: U = J·L⁻¹·J where J·H·J = L·Lᵀ, J the reversal) of a symmetric positive
  // definite h [n, n] on the device: u [n, n] row-major fp32, upper triangular, zeros below — the
  // values quant/gptq.h's reversed_matrix and factor_from_reversed_inverse give around run(), bit
  // for bit. h and scratch ([n, n] doubles) are overwritten. Returns false as run() does.
  // Synchronizes `stream`.
  bool gptq_factor(double* h, double* scratch, float* u, int64_t n, cudaStream_t stream);

 private:
  void* handle_ = nullptr;
  std::vector<double> block_;  // a diagonal block on the host
};

}  // namespace ssdq::kernels
