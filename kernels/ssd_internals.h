// SSDi8's internals for calibration (SSDi8 §4.2), from the inputs of a chunked SSD over whole
// sequences, with the definitions of runtime/quantized_ssd.h. Per sequence b, chunk k of
// L ≤ chunk tokens, head h of group g:
//   dt_t = clamp(softplus(dt_raw_t + dt_bias_h), dt_min, dt_max),  cs_t = Σ_{s≤t} dt_s·A_h (in order)
//   x_scaled[t, h·P + p] = dt_t · exp(cs_{L-1} − cs_t) · x[t, h·P + p]             (a row per token)
//   S_local[h, p, n] = Σ_t x_scaled[t, h·P + p] · B[t, g·N + n]
//   S_passed = exp(cs_{L-1}) · S_passed + S_local   (from the initial state, or zeros)
//   cb[k, g] = max_{s ≤ t} |C_t · B_s|                                              (a row per chunk)
// Outputs: x_scaled rows; state_absmax[h·P·N + p·N + n] raised to the largest |S_local| and
// |S_passed| seen (two state rows per chunk, as calibration counts them); cb rows.
// CPU reference: pipeline/ssd_internals.h `observe_ssd_internals`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ssdq::kernels {

struct SsdInternalsArgs {
  int batch = 0, seqlen = 0, chunk = 256, heads = 0, headdim = 0, groups = 0, dstate = 0;
  // Token t of sequence b is row b · seqlen + t of each input (fp32, device pointers).
  const float* x = nullptr;  // [row, heads · headdim] at x + row · x_stride
  int64_t x_stride = 0;
  const float* B = nullptr;  // [row, groups · dstate] at B + row · bc_stride
  const float* C = nullptr;
  int64_t bc_stride = 0;
  const float* dt_raw = nullptr;  // [row, heads] at dt_raw + row · dt_stride, before bias and softplus
  int64_t dt_stride = 0;
  const float* dt_bias = nullptr;  // [heads]
  const float* A = nullptr;        // [heads]
  float dt_min = 0.f, dt_max = __FLT_MAX__;
  const float* initial_state = nullptr;  // [batch, heads, headdim, dstate], or null for zeros
  float* x_scaled = nullptr;        // [batch · seqlen, heads · headdim]
  float* state_absmax = nullptr;    // [heads · headdim · dstate], running maxima
  float* cb = nullptr;              // [batch · chunks per sequence, groups], overwritten
  void* workspace = nullptr;        // ssd_internals_workspace_bytes(args), 256-byte aligned: every
                                    // chunk's S_local and decay (batch · chunks · H · (P·N + 1) floats)
};

inline int ssd_internals_chunks(const SsdInternalsArgs& a) { return (a.seqlen + a.chunk - 1) / a.chunk; }

// headdim ≤ 128 and dstate ≤ 256, each a multiple of 8; heads divisible by groups; chunk ≥ 1.
bool ssd_internals_supported(const SsdInternalsArgs& args);
size_t ssd_internals_workspace_bytes(const SsdInternalsArgs& args);
cudaError_t launch_ssd_internals(const SsdInternalsArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
