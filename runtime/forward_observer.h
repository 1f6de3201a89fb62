// The hook through which calibration watches a forward at the quantization points of
// docs/QUANTIZATION.md ("Quantization points"). A backend calls it only when an observer is attached to the state it runs, so
// the forward without one does no extra work.
#pragma once

#include <cstdint>

#include "runtime/cpu_ops.h"

namespace ssdq {

// The activation points a forward reports, in the order a block computes them.
enum class ActivationPoint : int {
  kInProjIn,    // u, the block norm's output: [T, D]
  kConvIn,      // xBC_pre, the in_proj rows x|B|C before the conv: [T, E + 2GN]
  kSsdX,        // x after conv + SiLU: [T, H·P]
  kSsdB,        // B after conv + SiLU: [T, G·N]
  kSsdC,        // C after conv + SiLU: [T, G·N]
  kSsdDt,       // dt as in_proj gives it (before dt_bias and softplus): [T, H]
  kSsdY,        // SSD output including D·x: [T, H·P]
  kOutProjIn,   // gated-norm output (after the online Hadamard where one is used): [T, E]
  kOutProjOut,  // the block's output, added to the residual stream: [T, D]
};
inline constexpr int kActivationPointCount = 9;

inline const char* activation_point_name(ActivationPoint point) {
  switch (point) {
    case ActivationPoint::kInProjIn: return "in_proj.in";
    case ActivationPoint::kConvIn: return "conv.in";
    case ActivationPoint::kSsdX: return "ssd.x";
    case ActivationPoint::kSsdB: return "ssd.B";
    case ActivationPoint::kSsdC: return "ssd.C";
    case ActivationPoint::kSsdDt: return "ssd.dt";
    case ActivationPoint::kSsdY: return "ssd.y";
    case ActivationPoint::kOutProjIn: return "out_proj.in";
    case ActivationPoint::kOutProjOut: return "out_proj.out";
  }
  return "?";
}

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // `rows` tokens of `width` values of one point of layer `layer`; row r starts at data + r * stride.
  virtual void on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                             int64_t stride) = 0;
  // The inputs of a chunked SSD call (prefill of `length` tokens) just before it runs, and the state
  // [H, P, N] it starts from; calibration derives the SSD internals (X_scaled, states, CB) from them.
  virtual void on_ssd_inputs(int64_t layer, const cpu::SsdDims& dims, const cpu::SsdInputs& inputs, int64_t length,
                             int64_t chunk, const float* initial_state) = 0;
};

}  // namespace ssdq
