// The SSD of a quantized layer: the decay terms every SSD path shares (ChunkCumsum, LUT_state), and
// the SSDi8 integer path (SSDi8 §4.2, docs/QUANTIZATION.md, "ssdi8") for prefill and decode.
//
// SSDi8 prefill, per chunk of L tokens (chunk boundaries at multiples of the chunk size from the
// start of the call), head h of group g = h / (H/G), in this order:
//   ChunkCumsum  cs[t] = Σ_{u≤t} dt[u]·A[h]                                     (fp32)
//   ChunkState   X_scaled[t,p] = LUT_state[t]·x[t,p], LUT_state[t] = dt[t]·exp(cs[L-1] - cs[t])
//                Xq = Q8(X_scaled, s_xs[h,p]);  acc[p,n] = Σ_t Xq[t,p]·Bq[t,g,n]        (int32, exact)
//                Sloc[p,n] = sat8(rne(acc · ((s_xs[h,p]·s_B[g]) / s_s[h,p])))        (eq. 8)
//   StatePassing Qd = rne(exp(cs[L-1])·128) ∈ [0, 128]
//                S[p,n] = sat8(Sloc[p,n] + ((Qd·Sprev[p,n] + 64) >> 7))          (eq. 9, k = 7)
//   ChunkBMM     cbacc[t,s] = Σ_n Cq[t,g,n]·Bq[s,g,n] (s ≤ t, int32)
//                CBq[t,s] = sat8(rne(cbacc · ((s_C[g]·s_B[g]) / s_cb[g])))
//   ChunkScan1   off[t,p] = float(Σ_n Cq[t,g,n]·Sprev[p,n]) · (s_C[g]·s_s[h,p]) · exp(cs[t])   (int32 dot)
//   ChunkScan2   diag[t,p] = Σ_{s≤t} f16(float(CBq[t,s]) · (s_cb[g]·dt[s]·exp(cs[t]-cs[s]))) · f16(x[s,p])
//                (operands rounded to fp16, products summed in fp32 in any order)
//   y[t,p] = off[t,p] + diag[t,p] + D[h]·x[t,p]
// Sprev is the int8 state entering the chunk (the state of the previous chunk after StatePassing,
// or the call's initial state); the state leaving the last chunk is the call's final state.
// rne = round to nearest even (std::nearbyint), sat8 = clamp to [-127, 127], Q8 = quantizer.h's
// int8 quantize_value. `>> 7` is an arithmetic shift (floor), so +64 rounds halves up. The int32
// accumulators are converted to fp32 exactly (|acc| ≤ 127²·L < 2^24 for chunks up to 1040).
//
// SSDi8 decode (one token) is the recurrence of cpu::ssd_step in fp32 on the dequantized int8
// state and B, C (h = exp(dt·A)·S + dt·x·B, y = h·C + D·x with the fp32 h), after which the state
// is stored as sat8(rne(h / s_s[h,p])) (runtime/cpu_block.cc).
//
// Ablations (`--keep-float`) may leave some of B, C, X_scaled, the state and CB in floating point;
// ssdi8_chunked_simulated then runs the same steps on fake-quantized values in fp32.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/cpu_ops.h"
#include "model/quantized_model.h"

namespace ssdq {

// cs[t] = Σ_{u≤t} dt[u·dt_stride]·A, summed left to right in fp32.
void chunk_cumsum(const float* dt, int64_t dt_stride, float A, int64_t length, float* cs);

// LUT_state[t] = dt[t]·exp(cs[length-1] - cs[t]).
inline float state_lut(const float* cs, const float* dt, int64_t dt_stride, int64_t length, int64_t t) {
  return dt[t * dt_stride] * std::exp(cs[length - 1] - cs[t]);
}

// The scales the SSDi8 path reads from its layer: s_B[g] = ssd_B.scale(g·N), s_C[g] likewise,
// s_xs[h,p] = x_scaled.scale(h·P + p), s_s[h,p] = ssm_state.scale(h·P + p), s_cb[g] = cb.scale(g).
struct Ssdi8Scales {
  const ActQuant& B;
  const ActQuant& C;
  const ActQuant& x_scaled;
  const ActQuant& state;
  const ActQuant& cb;
};

// Prefill of `length` tokens. in.B / in.C hold the int8 values of B and C fake-quantized (q·s; the
// integers are re-derived exactly), in.x the fp16 x, in.dt the dt after softplus. `state` [H, P, N]
// holds the int8 state as its values q·s_s; it is read as the initial state and replaced by the
// final one. y: row t at y + t·H·P.
void ssdi8_chunked(const cpu::SsdDims& dims, const cpu::SsdInputs& in, int64_t length, int64_t chunk,
                   const Ssdi8Scales& scales, float* state, float* y);

// True when B, C, X_scaled, the state and CB are all int8: the integer path applies.
bool ssdi8_all_int8(const Ssdi8Scales& scales);

// The SSDi8 steps with any operand possibly in floating point, for ablations only (not a kernel
// specification): products in fp32 on the values as the operands' formats hold them (int8 ones
// fake-quantized q·s); X_scaled, the chunk-local state and CB are fake-quantized where int8;
// with an int8 state, StatePassing is the fixed-point step of ssdi8_chunked in units of s_s,
// otherwise S = exp(cs[L-1])·Sprev + Sloc. With every operand int8 it equals ssdi8_chunked up to
// fp32 rounding (tested).
void ssdi8_chunked_simulated(const cpu::SsdDims& dims, const cpu::SsdInputs& in, int64_t length, int64_t chunk,
                             const Ssdi8Scales& scales, float* state, float* y);

}  // namespace ssdq
