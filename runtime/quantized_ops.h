// The arithmetic of the quantized runtime: activation formats, the integer GEMM and the
// projections in every weight × activation combination. The integer parts are exact and are
// what the CUDA kernels reproduce bit for bit; the float epilogues are written out in the order
// the CPU evaluates them.
#pragma once

#include "runtime/communicator.h"
#include <cstdint>

#include "model/quantized_model.h"

namespace ssdq {

// Applies a point's format in place to `rows` rows of `width` values (row r at data + r·stride):
// fp16 rounding, or int8 fake quantization x ← quantize_value(x, scale(c))·scale(c) per channel c.
// Fake-quantized values give back their integer exactly: quantize_value(q·s, s) == q.
void apply_activation_format(const ActQuant& format, float* data, int64_t rows, int64_t width, int64_t stride);

// The same for a state [channels, inner] whose element (c, n) uses format.scale(c, n).
void apply_state_format(const ActQuant& format, float* state, int64_t channels, int64_t inner);

// sat8(rne(float(acc)·multiplier)): an int32 accumulator requantized to int8 (eq. 8 of SSDi8).
inline int8_t requantize_int32(int32_t acc, float multiplier) {
  const float r = std::nearbyint(static_cast<float>(acc) * multiplier);
  return static_cast<int8_t>(r < -127.0f ? -127.0f : (r > 127.0f ? 127.0f : r));
}

// c[m, n] = Σ_k a[m·lda + k]·b[n·ldb + k] in int32 (exact: |c| ≤ 127²·k < 2^31 for k < 133,000).
void gemm_s8s8_s32(const int8_t* a, int64_t lda, const int8_t* b, int64_t ldb, int32_t* c, int64_t m, int64_t k,
                   int64_t n);

// y[rows, w.rows] = x[rows, w.cols]·Wᵀ, x already in the format `input` describes (for int8, its
// fake-quantized values q·s_x, from which q is re-derived exactly). The cases:
//   int8 x, quantized W: q_x = quantize_value(x, s_x); for each weight group g (one group for
//     per-channel weights) acc_g = Σ_{k∈g} q_x·q_w (int32, gemm_s8s8_s32);
//     y = fp32 chain over the weight groups g in increasing order, y ← fma(float(acc_g), s_w[n, g], y)
//     from y = 0 (one group: y = float(acc)·s_w[n] rounded once), then y ← y·s_x.
//   otherwise (a float input, or float weights): y = x·W'ᵀ in fp32, W' = W or dequantize(W)
//     (W4A16 is this case).
// With `across` (a tensor-parallel rank's row-parallel projection: w holds the rank's columns),
// y is summed over the ranks: an integer projection with one weight scale a row sums its int32
// accumulators before scaling (the one-rank result bit for bit); float and grouped ones sum their
// fp32 outputs (the summation order changes).
void linear_forward(const WeightMatrix& w, const ActQuant& input, const float* x, int64_t rows, float* y,
                    Communicator* across = nullptr);

}  // namespace ssdq
