#include "pipeline/ssd_internals.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/quantized_ssd.h"

namespace ssdq {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstStrided = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

}  // namespace

void observe_ssd_internals(const cpu::SsdDims& d, const cpu::SsdInputs& in, int64_t length, int64_t chunk,
                           const float* initial_state, ChannelStats& x_scaled, ChannelStats& state, ChannelStats& cb) {
  const int64_t H = d.heads, P = d.headdim, N = d.dstate, G = d.groups, E = H * P;
  std::vector<float> passed(initial_state, initial_state + H * P * N);
  std::vector<float> local(H * P * N), scaled, cumsum(chunk), cb_max(G);
  RowMatrix cb_chunk, state_local;
  for (int64_t start = 0; start < length; start += chunk) {
    const int64_t L = std::min(chunk, length - start);
    scaled.assign(L * E, 0.0f);
    for (int64_t g = 0; g < G; ++g) {
      ConstStrided B(in.B + start * in.bc_stride + g * N, L, N, Eigen::OuterStride<>(in.bc_stride));
      ConstStrided C(in.C + start * in.bc_stride + g * N, L, N, Eigen::OuterStride<>(in.bc_stride));
      cb_chunk.noalias() = C * B.transpose();
      float largest = 0;
      for (int64_t t = 0; t < L; ++t)
        for (int64_t s = 0; s <= t; ++s) largest = std::max(largest, std::fabs(cb_chunk(t, s)));
      cb_max[g] = largest;
      for (int64_t h = g * d.heads_per_group(); h < (g + 1) * d.heads_per_group(); ++h) {
        const float* dt = in.dt + start * H + h;
        chunk_cumsum(dt, H, in.A[h], L, cumsum.data());
        for (int64_t t = 0; t < L; ++t) {
          const float lut = state_lut(cumsum.data(), dt, H, L, t);
          const float* x = in.x + (start + t) * in.x_stride + h * P;
          for (int64_t p = 0; p < P; ++p) scaled[t * E + h * P + p] = lut * x[p];
        }
        Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>> X(scaled.data() + h * P, L, P, Eigen::OuterStride<>(E));
        Eigen::Map<RowMatrix> S_local(local.data() + h * P * N, P, N);
        S_local.noalias() = X.transpose() * B;
        Eigen::Map<RowMatrix> S(passed.data() + h * P * N, P, N);
        S = std::exp(cumsum[L - 1]) * S + S_local;
      }
    }
    x_scaled.add_rows(scaled.data(), L, E, "ssd.x_scaled");
    state.add_rows(local.data(), 1, H * P * N, "ssd.state (chunk-local)");
    state.add_rows(passed.data(), 1, H * P * N, "ssd.state (after StatePassing)");
    cb.add_rows(cb_max.data(), 1, G, "ssd.cb");
  }
}

}  // namespace ssdq
