// SSDi8 prefill (the integer chunked SSD of quantized artifacts), per sequence b and head h of
// group g = h / (heads / groups), chunk by chunk (chunks start at multiples of `chunk`):
//   dt = clamp(softplus(dt_raw + dt_bias[h]), dt_min, dt_max),  cs[t] = Σ_{u≤t} dt[u]·A[h]
//   Xq = Q8(dt[t]·exp(cs[L-1] - cs[t])·x[t,p], s_xs[h,p]),  Bq, Cq = the int8 of B, C (group g)
//   CBq[t,s] = sat8(rne(Σ_n Cq[t,n]·Bq[s,n] · (s_C·s_B)/s_cb))                       (s ≤ t)
//   y[t,p] = float(Σ_n Cq[t,n]·S[p,n])·(s_C·s_s[h,p])·exp(cs[t])
//          + Σ_{s≤t} f16(CBq[t,s]·(s_cb·dt[s]·exp(cs[t]-cs[s])))·f16(x[s,p]) + D[h]·x[t,p]
//   S ← sat8(sat8(rne(Σ_t Xq[t,p]·Bq[t,n] · (s_xs·s_B)/s_s)) + ((Qd·S + 64) >> 7)),
//       Qd = rne(exp(cs[L-1])·128)
// with S the int8 state [headdim, dstate] entering the chunk (value S·s_s[h,p]).
// The integer parts are exact (int8 tensor-core MMAs accumulate in int32). The float parts that
// feed an integer follow the CPU's evaluation order, including the FMA gcc forms in the cumsum;
// the per-token exps that feed an integer (softplus, the LUT_state decay, Qd) are evaluated in
// double and rounded once, which glibc's expf matches in all but ~0.06 % of inputs (its log1pf, not
// correctly rounded, in ~96 %: dt can differ in the last bit), so an int8 value (Xq, the state) can
// move by one step, rarely. The float parts that reach y alone are within tolerance, not bit-equal:
// exp(cs[t]) and CB's exp(cs[t] - cs[s]) through ex2.approx (left of the diagonal as a column
// factor times a row factor, each rounded to fp16, multiplied in fp16 and then by CBq in fp16), and
// the diag sum in the tensor core's order.
// CPU reference: runtime/quantized_ssd.h `ssdi8_chunked` (its header states the specification),
// whose fp32 x holds fp16 values in this recipe: the kernel's fp16 x is the same numbers.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ssdq::kernels {

// kWhole: one block walks all chunks of a (sequence, head, slice); kSplit: chunk-local states, a
// pass over the chunks, then y (needs ≥ 2 chunks and chunk ≥ dstate/2 + 1); kAuto: the estimate
// in make_plan. Same bits either way.
enum class Ssdi8ChunkScanSchedule { kAuto, kWhole, kSplit };

struct Ssdi8ChunkScanArgs {
  int batch = 0, seqlen = 0, heads = 0, headdim = 0, groups = 0, dstate = 0;
  int chunk = 256;                      // chunk length L; seqlen need not be a multiple
  // Token-major inputs, token t of sequence b at row b * seqlen + t, as the conv writes them
  // (kernels/causal_conv1d.h output parts): x in fp16 (SSDi8 keeps ssd.x in fp16), B and C as the
  // int8 q of their groups' scales (value q·s_B[g], q·s_C[g]).
  const __half* x = nullptr; int64_t x_stride = 0;    // x[row * x_stride + h*headdim + p]
  const int8_t* Bq = nullptr; const int8_t* Cq = nullptr; int64_t bc_stride = 0;  // Bq[row*bc_stride + g*dstate + n]
  const float* dt_raw = nullptr; int64_t dt_stride = 0;  // before bias/softplus: dt = clamp(softplus(dt_raw + dt_bias[h]), dt_min, dt_max)
  const float* dt_bias = nullptr; float dt_min = 0.f, dt_max = 3.4e38f;
  float dt_format = 0.f;  // the dt point's format applied to dt_raw first, as one code
                          // (quant_epilogue.cuh apply_format_code); 0: as is
  const float* A = nullptr; const float* D = nullptr;   // [heads]
  const float* B_scales = nullptr;        // [groups]  s_B[g]
  const float* C_scales = nullptr;        // [groups]  s_C[g]
  const float* x_scaled_scales = nullptr; // [heads * headdim]  s_xs[h,p]
  const float* state_scales = nullptr;    // [heads * headdim]  s_s[h,p]
  const float* cb_scales = nullptr;       // [groups]  s_cb[g]
  int8_t* state = nullptr;                // [batch, heads, headdim, dstate] the int8 state q (value q·s_s[h,p]): initial in, final out
  float* y = nullptr; int64_t y_stride = 0;  // y[row * y_stride + h*headdim + p]; must not overlap the inputs
  // ssdi8_chunk_scan_workspace_bytes of scratch, 16-byte aligned: ChunkCumsum's per-token values,
  // the requantized C·Bᵀ of every (sequence, chunk, group) computed once for all the group's heads,
  // and the split launch's last-chunk states.
  void* workspace = nullptr;
  Ssdi8ChunkScanSchedule schedule = Ssdi8ChunkScanSchedule::kAuto;
  // The workspace already holds ChunkCumsum's values for these dt (launch_ssdi8_chunk_tables, e.g. on
  // another stream as soon as dt was written): launch_ssdi8_chunk_scan skips that launch.
  bool tables_ready = false;
  // Heads a ChunkCumsum block takes (1..16; same values for any); 0: chosen by the launch.
  int table_heads_per_block = 0;
};

// Shapes handled: dstate a multiple of 16 up to 256; headdim a multiple of 16 up to 128; chunk
// 1..256; heads divisible by groups; batch ≤ 65535; every pointer set; state, Bq and Cq 16-byte
// aligned with bc_stride a multiple of 16; row strides at least a row; and the shared memory
// within the current device's per-block limit:
// (2·R + c)·(K + 16) + (dstate + c)·(R + 16) + 2·R·(c + 8) + 18·R + 16·c + 32 bytes, R = chunk and
// K = dstate each rounded up to 32, for the c = 64, 32 or 16 headdim columns a block takes
// (177,696 B at chunk 256, dstate 128, c = 64; dstate 256 needs chunk ≤ 224). Where 256·T(T+1)/2
// bytes more fit (T = ceil(chunk / 16); 212,512 B in all at chunk 256, dstate 128, c = 64), the
// kernel that walks whole sequences keeps each chunk's C·Bᵀ words in shared memory too.
bool ssdi8_chunk_scan_supported(const Ssdi8ChunkScanArgs& args);

// batch · (chunks · (groups · T(T+1)/2 · 256 + heads · (18·R + 16)) + 2 · heads · headdim · dstate)
// bytes, T = ceil(chunk / 16), R = chunk rounded up to 32: the requantized C·Bᵀ of every (sequence,
// chunk, group), ChunkCumsum's per-token values of every (sequence, chunk, head) and two int8 states
// a (sequence, head) for the split launch's last chunk. Reads batch, seqlen, heads, headdim, groups,
// dstate and chunk.
size_t ssdi8_chunk_scan_workspace_bytes(const Ssdi8ChunkScanArgs& args);

// Three launches on `stream` (ChunkCumsum's per-token values and ChunkBMM into the workspace, then
// the chunked scan), or four when too few (sequence, head) pairs to fill the GPU and chunk ≥
// dstate/2 + 1 (the chunks then run in parallel: chunk-local states with ChunkBMM in the same
// launch, a pass over the chunks, then y; same results bit for bit). No allocation: y serves as
// scratch between the launches, so it must not be read or written by others until the launches
// complete. cudaErrorInvalidValue for unsupported arguments.
cudaError_t launch_ssdi8_chunk_scan(const Ssdi8ChunkScanArgs& args, cudaStream_t stream);

// ChunkCumsum alone (dt, the sequential cumsum, the per-token exps into the workspace), for a caller
// that runs it on another stream as soon as dt is written: it reads dt_raw, dt_bias, dt_min /
// dt_max, dt_format, A and cb_scales, but takes the same arguments as launch_ssdi8_chunk_scan and
// refuses what that refuses (cudaErrorInvalidValue).
cudaError_t launch_ssdi8_chunk_tables(const Ssdi8ChunkScanArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
