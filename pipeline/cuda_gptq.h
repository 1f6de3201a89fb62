// GPTQ's inverse factor on a GPU (GptqOptions::inverse_factor): the damped Hessian's Cholesky and
// the triangular inverse in fp64 on the device (kernels/cholesky.h), the U of quant/gptq.cc's
// J·H·J = L·Lᵀ identity (U = J·L⁻¹·J) read back for the host's row pass.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace ssdq {

// The factor on CUDA device `device` (selected by the caller's thread before use).
std::function<bool(const std::vector<double>& h, int64_t cols, std::vector<float>& u)> cuda_gptq_inverse_factor(
    int device);

}  // namespace ssdq
