#include "pipeline/cuda_gptq.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "formats/error.h"
#include "kernels/cholesky.h"
#include "runtime/cuda_resources.h"

namespace ssdq {

std::function<bool(const std::vector<double>&, int64_t, std::vector<float>&)> cuda_gptq_inverse_factor(int device) {
  // One solver (its cuBLAS handle and host block) for every call; calls are serialised.
  auto solver = std::make_shared<kernels::CholeskyInverse>();
  auto lock = std::make_shared<std::mutex>();
  return [device, solver, lock](const std::vector<double>& h, int64_t n, std::vector<float>& u) {
    const std::lock_guard<std::mutex> guard(*lock);
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    // J·H·J (the reversal of rows and columns; symmetric, so its layout is either order).
    std::vector<double> reversed(n * n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) reversed[i * n + j] = h[(n - 1 - i) * n + (n - 1 - j)];
    DeviceBlock a(n * n * 8, "the GPTQ Hessian", nullptr), inverse(n * n * 8, "the GPTQ inverse factor", nullptr);
    cuda_ok(cudaMemcpy(a.at<void>(0), reversed.data(), n * n * 8, cudaMemcpyHostToDevice), "upload the Hessian");
    if (!solver->run(a.at<double>(0), inverse.at<double>(0), n, nullptr)) return false;
    std::vector<double> l_inverse(n * n);  // column-major: L⁻¹(r, c) at c · n + r
    cuda_ok(cudaMemcpy(l_inverse.data(), inverse.at<void>(0), n * n * 8, cudaMemcpyDeviceToHost), "read the factor");
    // U = V⁻¹ = J·L⁻¹·J: U(i, j) = L⁻¹(n − 1 − i, n − 1 − j), upper triangular.
    u.assign(n * n, 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i; j < n; ++j) u[i * n + j] = static_cast<float>(l_inverse[(n - 1 - j) * n + (n - 1 - i)]);
    return true;
  };
}

}  // namespace ssdq
