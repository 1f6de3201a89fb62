// One Mamba-2 block on the CPU, for one sequence: the specification every backend reproduces.
// The FP32 model is the case where every point of the QuantizedModel is fp32
// (float_quantized_model), so this one function runs the float model and every artifact.
#pragma once

#include <cstdint>

#include "model/quantized_model.h"
#include "runtime/communicator.h"
#include "runtime/forward_observer.h"

namespace ssdq {

// A tensor-parallel rank's part in the block (model/tensor_parallel.h): its shard is the layer
// run with the rank's config (its heads' channels, its groups); out_proj's output is summed over
// the ranks before the residual add, and a gated-norm group split over ranks has its sum of
// squares summed over them first.
struct BlockRank {
  Communicator* comm = nullptr;
  bool norm_split = false;   // the rank's channels are part of one gated-norm group
  int64_t norm_groups = 1;   // the model's gated-norm groups (its ngroups)
  int64_t norm_group = 0;    // with norm_split: the group the rank's channels lie in
  int64_t norm_group_size = 0;  // with norm_split: the channels of a whole group
};

// Advances `residual` [T, D] through layer `q` (index `layer`). conv_state [conv_dim, K-1] holds the
// last conv.in values, ssm_state [H, P, N] the SSM state in the layer's ssm_state format; both are
// read and advanced. T == 1 is a decode step (recurrent form), T > 1 a prefill (chunked form).
//
// Order of operations (the FP block with the points of docs/QUANTIZATION.md, "Quantization points"; "in format" = apply_activation_format):
//   u = rmsnorm(r)·norm, in format in_proj_in          → zxbcdt = linear_forward(in_proj, u)
//   xBC_pre = zxbcdt[E : E+conv_dim], in format conv_in  → xBC = SiLU(causal conv + bias)
//   x, B, C = xBC parts, each in its format; dt_raw in format ssd_dt; dt = clamp(softplus(dt_raw + dt_bias))
//   y = SSD (cpu::ssd_chunked / ssd_step in fp32 for SsdMode::kFloat, ssdi8_* for kSsdi8);
//       after a kFloat SSD the state is put in the ssm_state format
//   g = gated_rmsnorm(y, z)·gated_norm (groups E/G); g ← g·H_E/√E when online_hadamard; g in format out_proj_in
//   o = linear_forward(out_proj, g) + out_bias;  r += o
// The observer, if any, sees each point's values as the next op consumes them (after its format).
// `rank`: null for the whole model; a tensor-parallel rank's part otherwise (config = its shard's).
void cpu_block_forward(const Mamba2Config& config, const QuantizedLayer& q, int64_t layer, float* residual,
                       int64_t T, float* conv_state, float* ssm_state, ForwardObserver* observer = nullptr,
                       const BlockRank* rank = nullptr);

}  // namespace ssdq
