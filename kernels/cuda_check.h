// Error handling for CUDA API calls made by kernel launchers and the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ssdq::kernels {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace ssdq::kernels
