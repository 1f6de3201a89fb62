// The activation points of a Mamba-2 block (docs/QUANTIZATION.md, "Quantization points"): where a
// quantized model gives activations a format, where calibration records statistics, and what a
// forward reports to an observer (runtime/forward_observer.h).
#pragma once

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

}  // namespace ssdq
