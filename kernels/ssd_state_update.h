// One decode step of the SSD recurrence for a batch of sequences (fp32 state):
//   h = exp(dt·A) h + dt · x Bᵀ,   y = h C + D x          (per head; head h reads group h / (H/G))
// CPU reference: runtime/cpu_ops.h `cpu::ssd_step`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct SsdStateUpdateArgs {
  int batch = 0, heads = 0, headdim = 0, groups = 0, dstate = 0;
  const float* x = nullptr;   // [batch, heads * headdim], row stride x_stride
  int64_t x_stride = 0;
  const float* B = nullptr;   // [batch, groups * dstate], row stride bc_stride
  const float* C = nullptr;
  int64_t bc_stride = 0;
  const float* dt = nullptr;  // [batch, heads], after softplus
  const float* A = nullptr;   // [heads]
  const float* D = nullptr;   // [heads]
  float* state = nullptr;     // [batch, heads, headdim, dstate], updated in place
  float* y = nullptr;         // [batch, heads * headdim]
};

// Shapes the kernel handles: dstate a multiple of 32 up to 256, heads divisible by groups.
bool ssd_state_update_supported(const SsdStateUpdateArgs& args);
cudaError_t launch_ssd_state_update(const SsdStateUpdateArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
