#include "pipeline/cuda_gptq.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "formats/error.h"
#include "kernels/cholesky.h"
#include "quant/gptq.h"
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
    const std::vector<double> reversed = reversed_matrix(h, n);
    DeviceBlock a(n * n * 8, "the GPTQ Hessian", nullptr), inverse(n * n * 8, "the GPTQ inverse factor", nullptr);
    cuda_ok(cudaMemcpy(a.at<void>(0), reversed.data(), n * n * 8, cudaMemcpyHostToDevice), "upload the Hessian");
    if (!solver->run(a.at<double>(0), inverse.at<double>(0), n, nullptr)) return false;
    std::vector<double> l_inverse(n * n);
    cuda_ok(cudaMemcpy(l_inverse.data(), inverse.at<void>(0), n * n * 8, cudaMemcpyDeviceToHost), "read the factor");
    u = factor_from_reversed_inverse(l_inverse, n);
    return true;
  };
}

}  // namespace ssdq
