#include "runtime/quantized_ssd.h"

#include <Eigen/Core>

#include <algorithm>
#include <vector>

#include "runtime/quantized_ops.h"

namespace ssdq {
namespace {

using RowMatrixI = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

static_assert((-129 >> 7) == -2, "StatePassing needs an arithmetic (flooring) right shift");

int8_t q8(float value, float scale) { return quantize_value(value, scale, QuantBits::kInt8); }

// The int8 operands are held in fp32 matrices (every entry an integer in [-127, 127]). a·bᵀ over an
// inner dimension of at most 1024 has only integer products and partial sums below 2^24, which
// fp32 represents exactly in any order; longer inner dimensions are split and summed in int32.
template <typename A, typename B>
RowMatrixI exact_product(const A& a, const B& b_transposed) {
  constexpr int64_t kExactK = 1024;
  const int64_t k = a.cols();
  RowMatrixI out = RowMatrixI::Zero(a.rows(), b_transposed.cols());
  for (int64_t k0 = 0; k0 < k; k0 += kExactK) {
    const int64_t width = std::min(kExactK, k - k0);
    const RowMatrixF block = a.middleCols(k0, width) * b_transposed.middleRows(k0, width);
    out += block.cast<int32_t>();
  }
  return out;
}

// StatePassing of one state element: sat8(local + ((Qd·prev + 64) >> 7)).
int8_t pass_state(int8_t local, int32_t decay_q7, int8_t prev) {
  const int32_t sum = local + ((decay_q7 * prev + 64) >> 7);
  return static_cast<int8_t>(std::clamp(sum, -127, 127));
}

}  // namespace

void chunk_cumsum(const float* dt, int64_t dt_stride, float A, int64_t length, float* cs) {
  float running = 0;
  for (int64_t t = 0; t < length; ++t) {
    running += dt[t * dt_stride] * A;
    cs[t] = running;
  }
}

void ssdi8_chunked(const cpu::SsdDims& d, const cpu::SsdInputs& in, int64_t length, int64_t chunk,
                   const Ssdi8Scales& sc, float* state, float* y) {
  const int64_t H = d.heads, P = d.headdim, N = d.dstate, G = d.groups, E = H * P;
  // B and C quantized once per group and reused by ChunkState, ChunkBMM and ChunkScan1.
  RowMatrixF Bq(length, G * N), Cq(length, G * N);
  for (int64_t t = 0; t < length; ++t)
    for (int64_t j = 0; j < G * N; ++j) {
      Bq(t, j) = q8(in.B[t * in.bc_stride + j], sc.B.scale(j));
      Cq(t, j) = q8(in.C[t * in.bc_stride + j], sc.C.scale(j));
    }
  std::vector<RowMatrixF> Sq(H, RowMatrixF(P, N));  // the int8 state entering the current chunk
  for (int64_t h = 0; h < H; ++h)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t n = 0; n < N; ++n) Sq[h](p, n) = q8(state[(h * P + p) * N + n], sc.state.scale(h * P + p));

  std::vector<float> cs(chunk);
  RowMatrixI cb_acc, CBq, state_acc, off_acc;
  RowMatrixF Xq, lut_cb, X16, diag;
  for (int64_t start = 0; start < length; start += chunk) {
    const int64_t L = std::min(chunk, length - start);
    for (int64_t g = 0; g < G; ++g) {
      const float s_B = sc.B.scale(g * N), s_C = sc.C.scale(g * N), s_cb = sc.cb.scale(g);
      const auto B = Bq.block(start, g * N, L, N);
      const auto C = Cq.block(start, g * N, L, N);
      // ChunkBMM: CB in int32, requantized to int8 per group.
      cb_acc = exact_product(C, B.transpose());
      CBq.resize(L, L);
      const float cb_multiplier = (s_C * s_B) / s_cb;
      for (int64_t t = 0; t < L; ++t)
        for (int64_t s = 0; s < L; ++s) CBq(t, s) = s <= t ? requantize_int32(cb_acc(t, s), cb_multiplier) : 0;

      for (int64_t h = g * d.heads_per_group(); h < (g + 1) * d.heads_per_group(); ++h) {
        const float* dt = in.dt + start * H + h;
        chunk_cumsum(dt, H, in.A[h], L, cs.data());
        // ChunkState: Q(X_scaled)·Q(B) in int32, then to the int8 state scale (eq. 7, 8).
        Xq.resize(L, P);
        X16.resize(L, P);
        for (int64_t t = 0; t < L; ++t) {
          const float lut = state_lut(cs.data(), dt, H, L, t);
          const float* x = in.x + (start + t) * in.x_stride + h * P;
          for (int64_t p = 0; p < P; ++p) {
            Xq(t, p) = q8(lut * x[p], sc.x_scaled.scale(h * P + p));
            X16(t, p) = round_to_fp16(x[p]);
          }
        }
        state_acc = exact_product(Xq.transpose(), B);  // [P, N]
        // ChunkScan1 with the state entering the chunk: int32 C·S, then scales and exp(cs).
        off_acc = exact_product(C, Sq[h].transpose());  // [L, P]
        // ChunkScan2: fp16 operands (CB with its scale folded into LUT_scan2, and x), fp32 sums.
        lut_cb.resize(L, L);
        for (int64_t t = 0; t < L; ++t)
          for (int64_t s = 0; s < L; ++s)
            lut_cb(t, s) = s <= t ? round_to_fp16(static_cast<float>(CBq(t, s)) *
                                                  (s_cb * dt[s * H] * std::exp(cs[t] - cs[s])))
                                  : 0.0f;
        diag.noalias() = lut_cb * X16;  // [L, P]
        for (int64_t t = 0; t < L; ++t) {
          float* out = y + (start + t) * E + h * P;
          const float* x = in.x + (start + t) * in.x_stride + h * P;
          const float decay_in = std::exp(cs[t]);
          for (int64_t p = 0; p < P; ++p) {
            const float off = static_cast<float>(off_acc(t, p)) * (s_C * sc.state.scale(h * P + p)) * decay_in;
            out[p] = off + diag(t, p) + in.D[h] * x[p];
          }
        }
        // StatePassing in fixed point: S ← Sloc + Q(decay)/2^7 ⊙ S (eq. 9).
        const int32_t decay_q7 = static_cast<int32_t>(std::nearbyint(std::exp(cs[L - 1]) * 128.0f));
        for (int64_t p = 0; p < P; ++p) {
          const float s_s = sc.state.scale(h * P + p);
          const float multiplier = (sc.x_scaled.scale(h * P + p) * s_B) / s_s;
          for (int64_t n = 0; n < N; ++n) {
            const int8_t local = requantize_int32(state_acc(p, n), multiplier);
            Sq[h](p, n) = pass_state(local, decay_q7, static_cast<int8_t>(Sq[h](p, n)));
          }
        }
      }
    }
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t n = 0; n < N; ++n)
        state[(h * P + p) * N + n] = dequantize_value(static_cast<int8_t>(Sq[h](p, n)), sc.state.scale(h * P + p));
}

bool ssdi8_all_int8(const Ssdi8Scales& sc) {
  return sc.B.is_int8() && sc.C.is_int8() && sc.x_scaled.is_int8() && sc.state.is_int8() && sc.cb.is_int8();
}

void ssdi8_chunked_simulated(const cpu::SsdDims& d, const cpu::SsdInputs& in, int64_t length, int64_t chunk,
                             const Ssdi8Scales& sc, float* state, float* y) {
  const int64_t H = d.heads, P = d.headdim, N = d.dstate, G = d.groups, E = H * P;
  auto fake_quant = [](float value, float scale) { return dequantize_value(q8(value, scale), scale); };
  using ConstStrided = Eigen::Map<const RowMatrixF, 0, Eigen::OuterStride<>>;
  std::vector<float> cs(chunk);
  RowMatrixF cb, Xs, X16, lut_cb, diag, off, S_local;
  for (int64_t start = 0; start < length; start += chunk) {
    const int64_t L = std::min(chunk, length - start);
    for (int64_t g = 0; g < G; ++g) {
      ConstStrided B(in.B + start * in.bc_stride + g * N, L, N, Eigen::OuterStride<>(in.bc_stride));
      ConstStrided C(in.C + start * in.bc_stride + g * N, L, N, Eigen::OuterStride<>(in.bc_stride));
      cb.noalias() = C * B.transpose();
      if (sc.cb.is_int8())
        for (int64_t i = 0; i < L * L; ++i) cb.data()[i] = fake_quant(cb.data()[i], sc.cb.scale(g));
      for (int64_t h = g * d.heads_per_group(); h < (g + 1) * d.heads_per_group(); ++h) {
        const float* dt = in.dt + start * H + h;
        chunk_cumsum(dt, H, in.A[h], L, cs.data());
        Xs.resize(L, P);
        X16.resize(L, P);
        for (int64_t t = 0; t < L; ++t) {
          const float lut = state_lut(cs.data(), dt, H, L, t);
          const float* x = in.x + (start + t) * in.x_stride + h * P;
          for (int64_t p = 0; p < P; ++p) {
            const float scaled = lut * x[p];
            Xs(t, p) = sc.x_scaled.is_int8() ? fake_quant(scaled, sc.x_scaled.scale(h * P + p)) : scaled;
            X16(t, p) = round_to_fp16(x[p]);
          }
        }
        S_local.noalias() = Xs.transpose() * B;  // [P, N]
        Eigen::Map<RowMatrixF> S(state + h * P * N, P, N);
        off.noalias() = C * S.transpose();  // [L, P], with the state entering the chunk
        lut_cb.resize(L, L);
        for (int64_t t = 0; t < L; ++t)
          for (int64_t s = 0; s < L; ++s)
            lut_cb(t, s) = s <= t ? round_to_fp16(cb(t, s) * (dt[s * H] * std::exp(cs[t] - cs[s]))) : 0.0f;
        diag.noalias() = lut_cb * X16;
        for (int64_t t = 0; t < L; ++t) {
          const float decay_in = std::exp(cs[t]);
          const float* x = in.x + (start + t) * in.x_stride + h * P;
          for (int64_t p = 0; p < P; ++p)
            y[(start + t) * E + h * P + p] = off(t, p) * decay_in + diag(t, p) + in.D[h] * x[p];
        }
        if (sc.state.is_int8()) {
          const int32_t decay_q7 = static_cast<int32_t>(std::nearbyint(std::exp(cs[L - 1]) * 128.0f));
          for (int64_t p = 0; p < P; ++p) {
            const float s_s = sc.state.scale(h * P + p);
            for (int64_t n = 0; n < N; ++n)
              S(p, n) = dequantize_value(pass_state(q8(S_local(p, n), s_s), decay_q7, q8(S(p, n), s_s)), s_s);
          }
        } else {
          S = std::exp(cs[L - 1]) * S + S_local;
        }
      }
    }
  }
}

}  // namespace ssdq
