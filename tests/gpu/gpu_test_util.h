// Helpers for GPU tests: device buffers from host vectors and back, seeded random inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "formats/dtype.h"
#include "kernels/cuda_check.h"

namespace ssdq::testing {

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    kernels::check_cuda(cudaMalloc(&ptr_, bytes()), "cudaMalloc");
    kernels::check_cuda(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {  // same size as at construction
    if (host.size() != size_) throw std::invalid_argument("DeviceBuffer::upload: size differs");
    kernels::check_cuda(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<T> to_host() const {
    std::vector<T> out(size_);
    kernels::check_cuda(cudaMemcpy(out.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }

 private:
  size_t bytes() const { return size_ * sizeof(T); }
  T* ptr_ = nullptr;
  size_t size_;
};

inline std::vector<float> random_vector(size_t count, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(count);
  for (float& v : out) v = dist(rng);
  return out;
}

// Largest |a - b| / (|b| + floor) over the elements.
inline double max_relative_error(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (std::abs(double(b[i])) + floor));
  return worst;
}

// Rounds to bf16 and back, so the CPU reference sees exactly the values the GPU reads.
inline std::vector<float> bf16_rounded(std::vector<float> values) {
  for (float& v : values) v = bf16_to_float(float_to_bf16(v));
  return values;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = float_to_bf16(values[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = bf16_to_float(values[i]);
  return out;
}

template <typename T>
inline __nv_bfloat16* as_bf16(const DeviceBuffer<T>& buffer) {
  return reinterpret_cast<__nv_bfloat16*>(buffer.get());
}

inline void require_device() {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess) << "no CUDA driver/device: GPU tests must run on a GPU machine";
  ASSERT_GT(count, 0);
}

inline int compute_capability_major() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return 0;
  return major;
}

}  // namespace ssdq::testing
