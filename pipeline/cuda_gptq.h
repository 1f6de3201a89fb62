// GPTQ on a GPU. The inverse factor (GptqOptions::inverse_factor): the damped Hessian's Cholesky
// and the triangular inverse in fp64 on the device (kernels/cholesky.h), the U of quant/gptq.cc's
// J·H·J = L·Lᵀ identity (U = J·L⁻¹·J) read back. The row pass (GptqOptions::row_pass): the
// weight and U uploaded, every column block quantized by kernels/gptq_rows.h, the codes and scales
// read back.
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

}  // namespace ssdq
