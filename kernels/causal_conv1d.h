// Causal depthwise conv1d + SiLU over the x|B|C channels, for prefill (any length) and decode
// (length 1), continuing from and updating a per-sequence conv state:
//   out[t, c] = silu(bias[c] + Σ_k w[c, k] · in[t - (W-1) + k, c]),  inputs before t = 0 from the state
// The state [batch, channels, W-1] (bf16, oldest first) ends holding the last W-1 inputs.
// CPU reference: runtime/cpu_ops.h `cpu::causal_conv1d_silu`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct CausalConv1dArgs {
  int batch = 0, seqlen = 0, channels = 0, width = 0;
  const __nv_bfloat16* in = nullptr;  // row (b, t) at in + (b * seqlen + t) * in_stride
  int64_t in_stride = 0;
  const float* weight = nullptr;      // [channels, width]
  const float* bias = nullptr;        // [channels]
  __nv_bfloat16* state = nullptr;     // [batch, channels, width - 1]
  __nv_bfloat16* out = nullptr;       // [batch * seqlen, channels]
};

bool causal_conv1d_supported(const CausalConv1dArgs& args);  // width 2..8
cudaError_t launch_causal_conv1d(const CausalConv1dArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
