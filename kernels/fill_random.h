// Deterministic pseudo-random fill on the device (a counter-based hash), for synthetic models
// whose weights are too large to generate on the host: value = center + spread · u, u ∈ [-1, 1)
// (kS8: rounded to the nearest integer within ±127). Types kF32, kBF16, kF16, kS8.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct FillRandomArgs {
  int64_t count = 0;
  uint64_t seed = 0;
  float center = 0.f, spread = 1.f;
  ElementType type = ElementType::kF32;
  void* out = nullptr;
};

cudaError_t launch_fill_random(const FillRandomArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
