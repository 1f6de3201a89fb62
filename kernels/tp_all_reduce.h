// Tensor parallelism's sum of the ranks' row-parallel partial outputs (out_proj's) into the fp32
// residual, every rank receiving the same bits:
//   residual[r, c] += scale_r · Σ_q partial_q[r, c]  (+ bias[c])     q = 0, 1, … in rank order
//   (or residual[r, c] = … with `assign`: an artifact's gated-norm sums, kernels/gated_rmsnorm.h)
//   scale_r = rsqrt(Σ_q sumsq_q[r] / norm_width + eps) with a folded gated norm, else 1.
// A folded gated norm (every rank's channels in one norm group, the official checkpoints' one group
// split over the ranks): each rank multiplies out_proj by its gated values unnormalised and sends
// their per-row sum of squares after its partial rows ([rows, width] then [rows]), so the norm's
// cross-rank sum rides in the same all-reduce (out_proj is linear; the row's scale factors out).
//
// launch_peer_all_reduce: one-shot over peer access (NVLink): each rank's partial buffer is read by
// every rank directly, after a barrier of flags in device memory (no multicast objects). Graph
// capturable; the flags' generation lives in device memory. Ranks alternate between two partial
// buffers (parity) so that a rank may overwrite one only after every peer passed the next barrier,
// which follows (in its stream) the peer's reads of it.
// launch_tp_residual_add: the epilogue alone, after NCCL summed the partials in place.
// CPU reference: tp_all_reduce_reference below (the same order of operations).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace ssdq::kernels {

constexpr int kMaxTpRanks = 8;
constexpr int kTpReduceMaxBlocks = 128;

struct TpReduceArgs {
  int ranks = 1, rank = 0;
  int64_t rows = 0, width = 0;
  // Rank q's partial rows [rows, width] (row stride width), followed by [rows] sums of squares when
  // the norm is folded. launch_tp_residual_add reads partials[rank] only (already summed).
  const float* partials[kMaxTpRanks] = {};
  float* residual = nullptr;     // [rows, width]
  bool assign = false;           // residual = the sum (+ bias) instead of residual += it
  const float* bias = nullptr;   // [width] or null, added after the scale
  bool folded_norm = false;
  float norm_width = 0.f, eps = 1e-5f;
  // The barrier (peer all-reduce only): rank q's flags [kTpReduceMaxBlocks][kMaxTpRanks], written
  // by its peers; this rank's counters [kTpReduceMaxBlocks] (one generation per block).
  unsigned* flags[kMaxTpRanks] = {};
  unsigned* counters = nullptr;
};

// Device bytes of one rank's barrier: flags then counters.
constexpr size_t tp_barrier_bytes() { return sizeof(unsigned) * kTpReduceMaxBlocks * (kMaxTpRanks + 1); }

bool peer_all_reduce_supported(const TpReduceArgs& args);
cudaError_t launch_peer_all_reduce(const TpReduceArgs& args, cudaStream_t stream);
bool tp_residual_add_supported(const TpReduceArgs& args);
cudaError_t launch_tp_residual_add(const TpReduceArgs& args, cudaStream_t stream);

// The reduction on host pointers: partials[q] as above, residual updated in place.
inline void tp_all_reduce_reference(const TpReduceArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    float scale = 1.f;
    if (a.folded_norm) {
      float ss = 0.f;
      for (int q = 0; q < a.ranks; ++q) ss += a.partials[q][a.rows * a.width + r];
      scale = 1.f / std::sqrt(ss / a.norm_width + a.eps);
    }
    for (int64_t c = 0; c < a.width; ++c) {
      float sum = 0.f;
      for (int q = 0; q < a.ranks; ++q) sum += a.partials[q][r * a.width + c];
      float v = a.folded_norm ? sum * scale : sum;
      if (a.bias) v += a.bias[c];
      float& out = a.residual[r * a.width + c];
      out = a.assign ? v : out + v;
    }
  }
}

}  // namespace ssdq::kernels
