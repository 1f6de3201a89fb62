#include "runtime/cpu_ops.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ssdq::cpu {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstStrided = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

}  // namespace

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void rmsnorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(row[i]) * row[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / dim + eps));
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = row[i] * scale * weight[i];
  }
}

void matmul_wt(const float* x, const float* w, float* out, int64_t rows, int64_t k, int64_t n) {
  Eigen::Map<const RowMatrix> X(x, rows, k);
  Eigen::Map<const RowMatrix> W(w, n, k);
  Eigen::Map<RowMatrix> Y(out, rows, n);
  Y.noalias() = X * W.transpose();
}

void causal_conv1d_silu(const float* in, int64_t in_stride, int64_t length, int64_t channels, int64_t width,
                        const float* weight, const float* bias, float* state, float* out) {
  const int64_t history = width - 1;
  std::vector<float> window(width);
  for (int64_t c = 0; c < channels; ++c) {
    float* st = state + c * history;
    const float* w = weight + c * width;
    // window holds the last `width` inputs of channel c: st (oldest first) then the new token.
    for (int64_t k = 0; k < history; ++k) window[k] = st[k];
    for (int64_t t = 0; t < length; ++t) {
      window[history] = in[t * in_stride + c];
      float acc = bias[c];
      for (int64_t k = 0; k < width; ++k) acc += w[k] * window[k];
      out[t * channels + c] = silu(acc);
      for (int64_t k = 0; k < history; ++k) window[k] = window[k + 1];
    }
    for (int64_t k = 0; k < history; ++k) st[k] = window[k];
  }
}

void ssd_chunked(const SsdDims& d, const SsdInputs& in, int64_t length, int64_t chunk, float* state, float* y) {
  const int64_t H = d.heads, P = d.headdim, N = d.dstate, E = H * P;
  RowMatrix cb, decay, y_head;
  std::vector<float> cumsum, weights;
  for (int64_t start = 0; start < length; start += chunk) {
    const int64_t L = std::min(chunk, length - start);
    for (int64_t g = 0; g < d.groups; ++g) {
      ConstStrided B(in.B + start * in.bc_stride + g * N, L, N, Eigen::OuterStride<>(in.bc_stride));
      ConstStrided C(in.C + start * in.bc_stride + g * N, L, N, Eigen::OuterStride<>(in.bc_stride));
      cb.noalias() = C * B.transpose();  // ChunkBMM: [L, L]
      for (int64_t h = g * d.heads_per_group(); h < (g + 1) * d.heads_per_group(); ++h) {
        // ChunkCumsum: cumulative dt·A within the chunk.
        cumsum.resize(L);
        float running = 0;
        for (int64_t t = 0; t < L; ++t) {
          running += in.dt[(start + t) * H + h] * in.A[h];
          cumsum[t] = running;
        }
        // Intra-chunk (ChunkScan, diagonal block): y_t = Σ_{s<=t} C_t·B_s exp(cs_t - cs_s) dt_s x_s.
        decay.resize(L, L);
        for (int64_t t = 0; t < L; ++t)
          for (int64_t s = 0; s < L; ++s)
            decay(t, s) = s <= t ? cb(t, s) * std::exp(cumsum[t] - cumsum[s]) * in.dt[(start + s) * H + h] : 0.0f;
        ConstStrided X(in.x + start * in.x_stride + h * P, L, P, Eigen::OuterStride<>(in.x_stride));
        Eigen::Map<RowMatrix> S(state + h * P * N, P, N);
        y_head.noalias() = decay * X;
        // Inter-chunk (ChunkScan, off-diagonal): y_t += exp(cs_t) C_t · S_prev.
        RowMatrix from_state = C * S.transpose();
        for (int64_t t = 0; t < L; ++t) y_head.row(t) += std::exp(cumsum[t]) * from_state.row(t);
        // ChunkState + StatePassing: S = exp(cs_last) S + Σ_s exp(cs_last - cs_s) dt_s x_s B_s^T.
        weights.resize(L);
        for (int64_t s = 0; s < L; ++s)
          weights[s] = std::exp(cumsum[L - 1] - cumsum[s]) * in.dt[(start + s) * H + h];
        Eigen::Map<const Eigen::VectorXf> w(weights.data(), L);
        S *= std::exp(cumsum[L - 1]);
        S.noalias() += X.transpose() * w.asDiagonal() * B;
        Strided Y(y + start * E + h * P, L, P, Eigen::OuterStride<>(E));
        Y = y_head + in.D[h] * X;
      }
    }
  }
}

void ssd_step(const SsdDims& d, const SsdInputs& in, float* state, float* y) {
  const int64_t P = d.headdim, N = d.dstate;
  for (int64_t h = 0; h < d.heads; ++h) {
    const int64_t g = h / d.heads_per_group();
    const float dt = in.dt[h];
    const float decay = std::exp(dt * in.A[h]);
    const float* B = in.B + g * N;
    const float* C = in.C + g * N;
    for (int64_t p = 0; p < P; ++p) {
      float* s = state + (h * P + p) * N;
      const float x = in.x[h * P + p];
      const float dtx = dt * x;
      float acc = 0;
      for (int64_t n = 0; n < N; ++n) {
        s[n] = decay * s[n] + dtx * B[n];
        acc += s[n] * C[n];
      }
      y[h * P + p] = acc + in.D[h] * x;
    }
  }
}

void gated_rmsnorm(const float* y, const float* z, int64_t z_stride, const float* weight, float* out, int64_t rows,
                   int64_t width, int64_t group_size, float eps) {
  std::vector<float> gated(group_size);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g0 = 0; g0 < width; g0 += group_size) {
      double sum = 0;
      for (int64_t i = 0; i < group_size; ++i) {
        gated[i] = y[r * width + g0 + i] * silu(z[r * z_stride + g0 + i]);
        sum += static_cast<double>(gated[i]) * gated[i];
      }
      const float scale = static_cast<float>(1.0 / std::sqrt(sum / group_size + eps));
      for (int64_t i = 0; i < group_size; ++i) out[r * width + g0 + i] = gated[i] * scale * weight[g0 + i];
    }
  }
}

double nll(const float* logits, int64_t vocab, int32_t target) {
  Eigen::Map<const Eigen::ArrayXf> row(logits, vocab);
  const float max = row.maxCoeff();
  const double sum = (row - max).exp().sum();
  return std::log(sum) + max - logits[target];
}

}  // namespace ssdq::cpu
