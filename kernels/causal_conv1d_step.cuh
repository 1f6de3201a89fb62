// The pieces of the causal conv1d (kernels/causal_conv1d.h) that other kernels share: a channel's
// activation format, one output of the window, and one decode step of an fp32-input channel
// (ssd_conv_step.cu runs it in front of the SSD state update), whole in one thread or spread over a
// warp. Same bits as the conv kernel.
#pragma once

#include "kernels/causal_conv1d.h"
#include "kernels/element_type.h"
#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {

// A channel's activation format (apply_format_code) with the reciprocal of its int8 scale.
struct ChannelFormat {
  float code = 0.f, inv_code = 0.f;
  __device__ explicit ChannelFormat(float format_code) : code(format_code) {
    if (code > 0.f) inv_code = __frcp_rn(code);
  }
  __device__ ChannelFormat(const float* codes, int c) : ChannelFormat(codes ? codes[c] : 0.f) {}
  __device__ float apply(float v) const { return apply_format_code_fast(v, code, inv_code); }
};

// silu(bias + Σ_k w[k]·window[k]), summed in the CPU's order.
template <int W>
__device__ inline float conv_silu(const float (&w)[W], const float (&window)[W], float bias) {
  float acc = bias;
#pragma unroll
  for (int k = 0; k < W; ++k) acc = __fmaf_rn(w[k], window[k], acc);
  return silu(acc);
}

// Channel c of sequence b at seqlen 1, fp32 path: its conv state (W-1 values) and its new input.
template <int W>
__device__ inline float* conv_state_at(const CausalConv1dArgs& a, int c, int b) {
  return static_cast<float*>(a.state) + (static_cast<int64_t>(b) * a.channels + c) * (W - 1);
}
__device__ inline float conv_step_input(const CausalConv1dArgs& a, int c, int b) {
  return static_cast<const float*>(a.in)[static_cast<int64_t>(b) * a.in_stride + c];
}

// One decode step (seqlen 1) of fp32-input channel c of sequence b. The loads are only issued (a
// kernel can issue others before it uses them), in two parts: load_state() what the step before
// this one left (the conv state) and the constants, which a kernel may issue before it waits for
// the previous grid, and load_input() the new input, which that grid writes. output() is the
// formatted output; store_state() then writes the channel's next conv state (the window's last W-1
// formatted inputs).
template <int W>
struct ConvStepChannel {
  float* state = nullptr;
  float w[W], window[W], bias = 0.f, raw = 0.f, in_code = 0.f, out_code = 0.f;

  __device__ void load_state(const CausalConv1dArgs& a, int c, int b) {
    state = conv_state_at<W>(a, c, b);
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = a.weight[c * W + k];
#pragma unroll
    for (int k = 0; k < W - 1; ++k) window[k] = state[k];
    bias = a.bias[c];
    if (a.in_formats) in_code = a.in_formats[c];
    if (a.out_formats) out_code = a.out_formats[c];
  }
  __device__ void load_input(const CausalConv1dArgs& a, int c, int b) { raw = conv_step_input(a, c, b); }
  __device__ float output() {
    window[W - 1] = ChannelFormat(in_code).apply(raw);
    return ChannelFormat(out_code).apply(conv_silu<W>(w, window, bias));
  }
  __device__ void store_state() const {
#pragma unroll
    for (int k = 0; k < W - 1; ++k) state[k] = window[k + 1];
  }
};

// The same decode step of one channel spread over a warp's lanes 0..W-1: lane k loads w[k] and the
// window's input k (the state's, or for k = W-1 the new one), a few registers a lane where a
// ConvStepChannel takes ~14; load_state() and load_input() split as there. output() gives every
// lane the formatted output; store_state() writes the next conv state from lanes 1..W-1.
template <int W>
struct ConvStepLanes {
  float* state = nullptr;
  float w = 0.f, value = 0.f, bias = 0.f, in_code = 0.f, out_code = 0.f;

  __device__ void load_state(const CausalConv1dArgs& a, int c, int b, int lane) {
    state = conv_state_at<W>(a, c, b);
    if (lane < W) w = a.weight[c * W + lane];
    if (lane < W - 1) value = state[lane];
    if (lane == W - 1 && a.in_formats) in_code = a.in_formats[c];
    if (lane == 0) {
      bias = a.bias[c];
      if (a.out_formats) out_code = a.out_formats[c];
    }
  }
  __device__ void load_input(const CausalConv1dArgs& a, int c, int b, int lane) {
    if (lane == W - 1) value = conv_step_input(a, c, b);
  }
  __device__ float output(int lane) {
    if (lane == W - 1) value = ChannelFormat(in_code).apply(value);
    float weights[W], window[W];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      weights[k] = __shfl_sync(0xffffffffu, w, k);
      window[k] = __shfl_sync(0xffffffffu, value, k);
    }
    return ChannelFormat(__shfl_sync(0xffffffffu, out_code, 0))
        .apply(conv_silu<W>(weights, window, __shfl_sync(0xffffffffu, bias, 0)));
  }
  __device__ void store_state(int lane) const {
    if (lane >= 1 && lane < W) state[lane - 1] = value;
  }
};

}  // namespace ssdq::kernels
