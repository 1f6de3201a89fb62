// GPTQ on a GPU. The inverse factor (GptqOptions::inverse_factor): the damped Hessian's Cholesky
// and the triangular inverse in fp64 on the device (kernels/cholesky.h), the U of quant/gptq.cc's
// J·H·J = L·Lᵀ identity (U = J·L⁻¹·J) read back. The row pass (GptqOptions::row_pass): the
// weight and U uploaded, every column block quantized by kernels/gptq_rows.h, the codes and scales
// read back. Both together (GptqOptions::factored_row_pass, what `export --device cuda` uses): the
// Hessian uploaded as it is, reversed and factored and U made on the device, where the row pass
// takes it — the same U and codes as the two apart, without U and L⁻¹ crossing PCIe or the host
// reversing them. Each keeps its device buffers between calls (grown to the largest projection).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "quant/gptq.h"

namespace ssdq {

// The factor on CUDA device `device` (selected by the caller's thread before use).
std::function<bool(const std::vector<double>& h, int64_t cols, std::vector<float>& u)> cuda_gptq_inverse_factor(
    int device);

// The row pass on CUDA device `device`.
std::function<void(const GptqRowPassJob& job)> cuda_gptq_row_pass(int device);

// What one call of the device's GPTQ took: seconds in the factor (the Hessian's upload included)
// and in the row pass (its transfers included), and the device memory its kept buffers hold.
struct GptqDeviceCall {
  double factor_seconds = 0, row_pass_seconds = 0;
  size_t buffer_bytes = 0;
};

// The factor and the row pass on CUDA device `device`; on_call (if set) hears of each call.
std::function<bool(const std::vector<double>& h, const GptqRowPassJob& job)> cuda_gptq_factored_row_pass(
    int device, std::function<void(const GptqDeviceCall& call)> on_call = {});

}  // namespace ssdq
