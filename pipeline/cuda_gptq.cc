#include "pipeline/cuda_gptq.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "formats/error.h"
#include "kernels/cholesky.h"
#include "kernels/gptq_rows.h"
#include "quant/gptq.h"
#include "runtime/cuda_resources.h"
#include "runtime/parallel.h"

namespace ssdq {

std::function<bool(const std::vector<double>&, int64_t, std::vector<float>&)> cuda_gptq_inverse_factor(int device) {
  // One solver (its cuBLAS handle and host block) for every call; calls are serialised.
  auto solver = std::make_shared<kernels::CholeskyInverse>();
  auto lock = std::make_shared<std::mutex>();
  return [device, solver, lock](const std::vector<double>& h, int64_t n, std::vector<float>& u) {
    const std::lock_guard<std::mutex> guard(*lock);
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    // J·H·J (the reversal of rows and columns; symmetric, so its layout is either order).
    const std::vector<double> reversed = reversed_matrix(h, n, parallel_for);
    DeviceBlock a(n * n * 8, "the GPTQ Hessian", nullptr), inverse(n * n * 8, "the GPTQ inverse factor", nullptr);
    cuda_ok(cudaMemcpy(a.at<void>(0), reversed.data(), n * n * 8, cudaMemcpyHostToDevice), "upload the Hessian");
    if (!solver->run(a.at<double>(0), inverse.at<double>(0), n, nullptr)) return false;
    std::vector<double> l_inverse(n * n);
    cuda_ok(cudaMemcpy(l_inverse.data(), inverse.at<void>(0), n * n * 8, cudaMemcpyDeviceToHost), "read the factor");
    u = factor_from_reversed_inverse(l_inverse, n, parallel_for);
    return true;
  };
}

std::function<void(const GptqRowPassJob&)> cuda_gptq_row_pass(int device) {
  auto pass = std::make_shared<kernels::GptqRowPass>();
  auto lock = std::make_shared<std::mutex>();
  return [device, pass, lock](const GptqRowPassJob& job) {
    const std::lock_guard<std::mutex> guard(*lock);
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    const size_t weight_bytes = job.rows * job.cols * sizeof(float), u_bytes = job.cols * job.cols * sizeof(float),
                 scale_bytes = job.rows * job.groups * sizeof(float);
    DeviceBlock weight(weight_bytes, "the GPTQ weight", nullptr), u(u_bytes, "the GPTQ inverse factor", nullptr),
        groups(job.cols * sizeof(int32_t), "the GPTQ column groups", nullptr),
        scales(scale_bytes, "the GPTQ scales", nullptr), values(job.rows * job.cols, "the GPTQ codes", nullptr),
        errors(job.rows * job.block_size * sizeof(float), "the GPTQ block errors", nullptr);
    cuda_ok(cudaMemcpy(weight.at<void>(0), job.weight, weight_bytes, cudaMemcpyHostToDevice), "upload the GPTQ weight");
    cuda_ok(cudaMemcpy(u.at<void>(0), job.u, u_bytes, cudaMemcpyHostToDevice), "upload the GPTQ factor");
    cuda_ok(cudaMemcpy(groups.at<void>(0), job.column_group, job.cols * sizeof(int32_t), cudaMemcpyHostToDevice),
            "upload the GPTQ column groups");
    cuda_ok(cudaMemcpy(scales.at<void>(0), job.scales, scale_bytes, cudaMemcpyHostToDevice), "upload the GPTQ scales");
    kernels::GptqRowsArgs a;
    a.weight = weight.at<float>(0);
    a.u = u.at<float>(0);
    a.rows = job.rows;
    a.cols = job.cols;
    a.block_size = static_cast<int>(job.block_size);
    a.group_size = static_cast<int>(job.group_size);
    a.groups = static_cast<int>(job.groups);
    a.qmin = quant_min(job.bits);
    a.qmax = quant_max(job.bits);
    a.dynamic_scales = job.dynamic_scales;
    a.column_group = groups.at<int32_t>(0);
    a.scales = scales.at<float>(0);
    a.values = values.at<int8_t>(0);
    a.errors = errors.at<float>(0);
    pass->run(a, nullptr);
    cuda_ok(cudaMemcpy(job.values, values.at<void>(0), job.rows * job.cols, cudaMemcpyDeviceToHost), "read the GPTQ codes");
    cuda_ok(cudaMemcpy(job.scales, scales.at<void>(0), scale_bytes, cudaMemcpyDeviceToHost), "read the GPTQ scales");
  };
}

}  // namespace ssdq
