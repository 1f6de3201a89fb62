// Decode steps of the SSD recurrence with the state held on chip (SSD-spec Algorithm 1 of the
// speculative-decoding paper: `steps` tokens per sequence advance the state in one launch):
//   dt = clamp(softplus(dt_raw + dt_bias)) (or dt as given),
//   h = exp(dt·A) h + dt · x Bᵀ,   y = h C + D x          (head h reads group h / (H/G))
// CPU reference: runtime/cpu_ops.h `cpu::ssd_step`, applied once per token.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct SsdStateUpdateArgs {
  int batch = 0, heads = 0, headdim = 0, groups = 0, dstate = 0;
  int steps = 1;                          // tokens per sequence; token j of sequence b is row b * steps + j
  ElementType io_type = ElementType::kF32;  // type of x, B, C, dt and y
  const void* x = nullptr;                // row: [heads * headdim]
  int64_t x_stride = 0;
  const void* B = nullptr;                // row: [groups * dstate]
  const void* C = nullptr;
  int64_t bc_stride = 0;
  const void* dt = nullptr;               // row: [heads]
  int64_t dt_stride = 0;
  const float* dt_bias = nullptr;         // if set: dt = clamp(softplus(dt + dt_bias), dt_min, dt_max)
  float dt_min = 0.f, dt_max = __FLT_MAX__;
  const float* A = nullptr;               // [heads]
  const float* D = nullptr;               // [heads]
  float* state = nullptr;                 // [batch, heads, headdim, dstate] fp32, updated in place
  void* y = nullptr;                      // row: [heads * headdim]
  int64_t y_stride = 0;
};

// Shapes handled: dstate a multiple of 32 up to 256, heads divisible by groups, steps ≥ 1.
bool ssd_state_update_supported(const SsdStateUpdateArgs& args);
cudaError_t launch_ssd_state_update(const SsdStateUpdateArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
