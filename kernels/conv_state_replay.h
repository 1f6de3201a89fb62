// The conv state after a sequence's first n tokens of a verify window, rebuilt from the state
// before the window and the window's kept conv inputs (Activation Replay, runtime/decode_session.h):
//   state_after[k] = (state_before ++ in[0..n))[n + k],  k < W - 1
// — what causal_conv1d leaves after those n tokens, without recomputing the outputs. fp32 inputs
// take their channel's format code first, as causal_conv1d stores them (kernels/causal_conv1d.h).
// CPU reference: the last W-1 inputs that runtime/cpu_ops.h `cpu::causal_conv1d_silu` keeps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct ConvStateReplayArgs {
  int batch = 0, channels = 0, width = 0;
  int steps = 0;                        // the window's tokens a sequence: row (b, t) is b * steps + t
  const int32_t* seq_steps = nullptr;   // device [batch]: n of each sequence (0..steps; 0 leaves it)
  const void* in = nullptr;             // row (b, t) at in + (b * steps + t) * in_stride
  int64_t in_stride = 0;
  ElementType type = ElementType::kBF16;  // of the inputs and the state: kBF16 or kF32
  const float* in_formats = nullptr;    // kF32: conv.in's format code per channel, or null (as is)
  void* state = nullptr;                // [batch, channels, width - 1], oldest first
};

bool conv_state_replay_supported(const ConvStateReplayArgs& args);  // width 2..8
cudaError_t launch_conv_state_replay(const ConvStateReplayArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
