// CPU reference implementations of every op of the FP Mamba-2 block (runtime/cpu_block.h orders them), in fp32.
// The CPU backend is built from these, and every CUDA kernel is tested against them.
#pragma once

#include <cmath>
#include <cstdint>

namespace ssdq::cpu {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// PyTorch's softplus (threshold 20: above it, the identity).
float softplus(float x);

// out[r] = x[r] / rms(x[r]) * weight, over rows of `dim` values.
void rmsnorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps);

// out[rows, n] = x[rows, k] · w[n, k]^T (w row-major as stored in checkpoints).
void matmul_wt(const float* x, const float* w, float* out, int64_t rows, int64_t k, int64_t n);

// Causal depthwise conv over `length` steps of `channels` channels, then SiLU.
// in: row t at in + t * in_stride; weight [channels, width]; state [channels, width - 1] holds the
// previous inputs (oldest first) and is advanced to hold the last width - 1 inputs.
void causal_conv1d_silu(const float* in, int64_t in_stride, int64_t length, int64_t channels, int64_t width,
                        const float* weight, const float* bias, float* state, float* out);

struct SsdDims {
  int64_t heads, headdim, groups, dstate;
  int64_t heads_per_group() const { return heads / groups; }
};

// Inputs of the SSD for `length` tokens: row t of x at x + t * x_stride ([H, P]), of B and C at
// B/C + t * bc_stride ([G, N]), dt [length, H] already through softplus, A [H], D [H].
struct SsdInputs {
  const float* x;
  int64_t x_stride;
  const float* B;
  const float* C;
  int64_t bc_stride;
  const float* dt;
  const float* A;
  const float* D;
};

// Chunked SSD (ChunkCumsum, ChunkBMM, ChunkState, StatePassing, ChunkScan) from `state`
// [H, P, N], which is advanced to the final state. y: row t at y + t * H * P.
void ssd_chunked(const SsdDims& dims, const SsdInputs& in, int64_t length, int64_t chunk, float* state, float* y);

// The recurrence h = exp(dt A) h + dt x B^T, y = h C + D x for one token.
void ssd_step(const SsdDims& dims, const SsdInputs& in, float* state, float* y);

// Gated RMSNorm (norm_before_gate = false): out = rmsnorm_group(y * silu(z)) * weight, groups of
// `group_size` channels. Rows of `width` values; z row r at z + r * z_stride.
void gated_rmsnorm(const float* y, const float* z, int64_t z_stride, const float* weight, float* out, int64_t rows,
                   int64_t width, int64_t group_size, float eps);

// -log softmax(logits)[target], accumulated in double.
double nll(const float* logits, int64_t vocab, int32_t target);

}  // namespace ssdq::cpu
