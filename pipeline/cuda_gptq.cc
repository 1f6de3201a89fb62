#include "pipeline/cuda_gptq.h"

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "formats/error.h"
#include "kernels/cholesky.h"
#include "kernels/gptq_rows.h"
#include "quant/gptq.h"
#include "runtime/cuda_resources.h"
#include "runtime/parallel.h"

namespace ssdq {
namespace {

// One device's solvers and buffers, shared by every call (calls are serialised). The buffers are
// kept between projections and grown when a larger one comes, so a layer's GPTQ allocates nothing
// after the first layers.
struct DeviceGptq {
  explicit DeviceGptq(int device) : device(device) {}

  int device;
  std::mutex lock;
  kernels::CholeskyInverse solver;
  kernels::GptqRowPass pass;
  DeviceBlock hessian, scratch, u, weight, groups, scales, values, errors;

  size_t buffer_bytes() const {
    size_t bytes = 0;
    for (const DeviceBlock* b : {&hessian, &scratch, &u, &weight, &groups, &scales, &values, &errors}) bytes += b->bytes();
    return bytes;
  }

  template <typename T>
  T* reserve(DeviceBlock& block, size_t bytes, const char* what) {
    if (block.bytes() < bytes) {
      block = DeviceBlock();  // freed before the larger one is asked for
      block = DeviceBlock(bytes, what, nullptr);
    }
    return block.at<T>(0);
  }

  // The job's row pass with U already on the device: the weight, column groups and scales
  // uploaded, the codes and scales read back.
  void row_pass(const GptqRowPassJob& job, const float* device_u) {
    const size_t weight_bytes = job.rows * job.cols * sizeof(float), scale_bytes = job.rows * job.groups * sizeof(float);
    kernels::GptqRowsArgs a;
    a.weight = reserve<float>(weight, weight_bytes, "the GPTQ weight");
    a.u = device_u;
    a.rows = job.rows;
    a.cols = job.cols;
    a.block_size = static_cast<int>(job.block_size);
    a.group_size = static_cast<int>(job.group_size);
    a.groups = static_cast<int>(job.groups);
    a.qmin = quant_min(job.bits);
    a.qmax = quant_max(job.bits);
    a.dynamic_scales = job.dynamic_scales;
    int32_t* column_group = reserve<int32_t>(groups, job.cols * sizeof(int32_t), "the GPTQ column groups");
    a.column_group = column_group;
    a.scales = reserve<float>(scales, scale_bytes, "the GPTQ scales");
    a.values = reserve<int8_t>(values, job.rows * job.cols, "the GPTQ codes");
    a.errors = reserve<float>(errors, job.rows * job.block_size * sizeof(float), "the GPTQ block errors");
    cuda_ok(cudaMemcpy(a.weight, job.weight, weight_bytes, cudaMemcpyHostToDevice), "upload the GPTQ weight");
    cuda_ok(cudaMemcpy(column_group, job.column_group, job.cols * sizeof(int32_t), cudaMemcpyHostToDevice),
            "upload the GPTQ column groups");
    cuda_ok(cudaMemcpy(a.scales, job.scales, scale_bytes, cudaMemcpyHostToDevice), "upload the GPTQ scales");
    pass.run(a, nullptr);
    cuda_ok(cudaMemcpy(job.values, a.values, job.rows * job.cols, cudaMemcpyDeviceToHost), "read the GPTQ codes");
    cuda_ok(cudaMemcpy(job.scales, a.scales, scale_bytes, cudaMemcpyDeviceToHost), "read the GPTQ scales");
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::function<bool(const std::vector<double>&, int64_t, std::vector<float>&)> cuda_gptq_inverse_factor(int device) {
  auto gpu = std::make_shared<DeviceGptq>(device);
  return [gpu](const std::vector<double>& h, int64_t n, std::vector<float>& u) {
    const std::lock_guard<std::mutex> guard(gpu->lock);
    cuda_ok(cudaSetDevice(gpu->device), "cudaSetDevice");
    // J·H·J (the reversal of rows and columns; symmetric, so its layout is either order).
    const std::vector<double> reversed = reversed_matrix(h, n, parallel_for);
    double* a = gpu->reserve<double>(gpu->hessian, n * n * 8, "the GPTQ Hessian");
    double* inverse = gpu->reserve<double>(gpu->scratch, n * n * 8, "the GPTQ inverse factor");
    cuda_ok(cudaMemcpy(a, reversed.data(), n * n * 8, cudaMemcpyHostToDevice), "upload the Hessian");
    if (!gpu->solver.run(a, inverse, n, nullptr)) return false;
    std::vector<double> l_inverse(n * n);
    cuda_ok(cudaMemcpy(l_inverse.data(), inverse, n * n * 8, cudaMemcpyDeviceToHost), "read the factor");
    u = factor_from_reversed_inverse(l_inverse, n, parallel_for);
    return true;
  };
}

std::function<void(const GptqRowPassJob&)> cuda_gptq_row_pass(int device) {
  auto gpu = std::make_shared<DeviceGptq>(device);
  return [gpu](const GptqRowPassJob& job) {
    const std::lock_guard<std::mutex> guard(gpu->lock);
    cuda_ok(cudaSetDevice(gpu->device), "cudaSetDevice");
    float* u = gpu->reserve<float>(gpu->u, job.cols * job.cols * sizeof(float), "the GPTQ inverse factor");
    cuda_ok(cudaMemcpy(u, job.u, job.cols * job.cols * sizeof(float), cudaMemcpyHostToDevice), "upload the GPTQ factor");
    gpu->row_pass(job, u);
  };
}

std::function<bool(const std::vector<double>&, const GptqRowPassJob&)> cuda_gptq_factored_row_pass(
    int device, std::function<void(const GptqDeviceCall& call)> on_call) {
  auto gpu = std::make_shared<DeviceGptq>(device);
  return [gpu, on_call](const std::vector<double>& h, const GptqRowPassJob& job) {
    const std::lock_guard<std::mutex> guard(gpu->lock);
    cuda_ok(cudaSetDevice(gpu->device), "cudaSetDevice");
    const int64_t n = job.cols;
    if (static_cast<int64_t>(h.size()) != n * n) fail("internal: a GPTQ Hessian of {} values for {} columns", h.size(), n);
    const auto start = std::chrono::steady_clock::now();
    double* hessian = gpu->reserve<double>(gpu->hessian, n * n * 8, "the GPTQ Hessian");
    double* scratch = gpu->reserve<double>(gpu->scratch, n * n * 8, "the GPTQ inverse factor");
    float* u = gpu->reserve<float>(gpu->u, n * n * sizeof(float), "the GPTQ U");
    cuda_ok(cudaMemcpy(hessian, h.data(), n * n * 8, cudaMemcpyHostToDevice), "upload the Hessian");
    if (!gpu->solver.gptq_factor(hessian, scratch, u, n, nullptr)) return false;
    GptqDeviceCall call;
    call.factor_seconds = seconds_since(start);
    const auto rows_start = std::chrono::steady_clock::now();
    gpu->row_pass(job, u);
    call.row_pass_seconds = seconds_since(rows_start);
    call.buffer_bytes = gpu->buffer_bytes();
    if (on_call) on_call(call);
    return true;
  };
}

}  // namespace ssdq
