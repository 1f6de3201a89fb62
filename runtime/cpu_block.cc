#include "runtime/cpu_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/hadamard.h"
#include "runtime/cpu_ops.h"
#include "runtime/quantized_ops.h"
#include "runtime/quantized_ssd.h"

namespace ssdq {
namespace {

// cpu::gated_rmsnorm for a rank holding `width` channels of one group of rank.norm_group_size:
// each row's sum of squares (in double, as there) summed over the ranks before the scale.
void gated_rmsnorm_across_ranks(const BlockRank& rank, const float* y, const float* z, int64_t z_stride,
                                const float* weight, float* out, int64_t rows, int64_t width, float eps) {
  std::vector<double> sums(rows * rank.norm_groups, 0.0);
  std::vector<float> gated(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) {
      const float v = y[r * width + i] * cpu::silu(z[r * z_stride + i]);
      gated[r * width + i] = v;
      sum += static_cast<double>(v) * v;
    }
    sums[r * rank.norm_groups + rank.norm_group] = sum;
  }
  rank.comm->all_reduce_sum(sums.data(), static_cast<int64_t>(sums.size()));
  for (int64_t r = 0; r < rows; ++r) {
    const double sum = sums[r * rank.norm_groups + rank.norm_group];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / rank.norm_group_size + eps));
    for (int64_t i = 0; i < width; ++i) out[r * width + i] = gated[r * width + i] * scale * weight[i];
  }
}

}  // namespace

void cpu_block_forward(const Mamba2Config& c, const QuantizedLayer& q, int64_t layer, float* residual,
                       int64_t T, float* conv_state, float* ssm_state, ForwardObserver* observer,
                       const BlockRank* rank) {
  const int64_t D = c.d_model, E = c.d_inner(), H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state;
  const int64_t conv_dim = c.conv_dim(), in_dim = c.d_in_proj();
  const float eps = static_cast<float>(c.norm_eps);
  auto observe = [&](ActivationPoint point, const float* data, int64_t width, int64_t stride) {
    if (observer) observer->on_activation(layer, point, data, T, width, stride);
  };
  auto in_format = [&](const ActQuant& format, ActivationPoint point, float* data, int64_t width, int64_t stride) {
    apply_activation_format(format, data, T, width, stride);
    observe(point, data, width, stride);
  };

  std::vector<float> u(T * D), zxbcdt(T * in_dim), xbc(T * conv_dim), dt(T * H), y(T * E), gated(T * E), out(T * D);
  cpu::rmsnorm(residual, q.norm.data(), u.data(), T, D, eps);
  in_format(q.in_proj_in, ActivationPoint::kInProjIn, u.data(), D, D);
  linear_forward(q.in_proj, q.in_proj_in, u.data(), T, zxbcdt.data());

  float* xbc_pre = zxbcdt.data() + E;
  float* dt_raw = zxbcdt.data() + E + conv_dim;
  in_format(q.conv_in, ActivationPoint::kConvIn, xbc_pre, conv_dim, in_dim);
  cpu::causal_conv1d_silu(xbc_pre, in_dim, T, conv_dim, c.d_conv, q.conv_weight.data(), q.conv_bias.data(), conv_state,
                          xbc.data());
  in_format(q.ssd_x, ActivationPoint::kSsdX, xbc.data(), E, conv_dim);
  in_format(q.ssd_B, ActivationPoint::kSsdB, xbc.data() + E, G * N, conv_dim);
  in_format(q.ssd_C, ActivationPoint::kSsdC, xbc.data() + E + G * N, G * N, conv_dim);
  in_format(q.ssd_dt, ActivationPoint::kSsdDt, dt_raw, H, in_dim);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float value = cpu::softplus(dt_raw[t * in_dim + h] + q.dt_bias[h]);
      dt[t * H + h] = static_cast<float>(std::clamp<double>(value, c.dt_min, c.dt_max));
    }

  const cpu::SsdDims dims{H, P, G, N};
  const cpu::SsdInputs in{xbc.data(), conv_dim, xbc.data() + E, xbc.data() + E + G * N, conv_dim,
                          dt.data(), q.A.data(), q.D.data()};
  if (T == 1) {
    cpu::ssd_step(dims, in, ssm_state, y.data());  // decode: the recurrence, for every SSD mode
  } else {
    if (observer) observer->on_ssd_inputs(layer, dims, in, T, c.chunk_size, ssm_state);
    const Ssdi8Scales scales{q.ssd_B, q.ssd_C, q.x_scaled, q.ssm_state, q.cb};
    if (q.ssd_mode == SsdMode::kFloat) {
      cpu::ssd_chunked(dims, in, T, c.chunk_size, ssm_state, y.data());
    } else if (ssdi8_all_int8(scales)) {
      ssdi8_chunked(dims, in, T, c.chunk_size, scales, ssm_state, y.data());
    } else {
      ssdi8_chunked_simulated(dims, in, T, c.chunk_size, scales, ssm_state, y.data());
    }
  }
  apply_state_format(q.ssm_state, ssm_state, H * P, N);
  observe(ActivationPoint::kSsdY, y.data(), E, E);

  if (rank && rank->norm_split) {
    gated_rmsnorm_across_ranks(*rank, y.data(), zxbcdt.data(), in_dim, q.gated_norm.data(), gated.data(), T, E, eps);
  } else {
    cpu::gated_rmsnorm(y.data(), zxbcdt.data(), in_dim, q.gated_norm.data(), gated.data(), T, E, E / G, eps);
  }
  // I_B ⊗ H_{E/B}: each block of a row rotated alone, i.e. T·B rows of E/B.
  if (q.online_hadamard)
    apply_hadamard_rows(gated.data(), T * q.hadamard_blocks, E / q.hadamard_blocks, /*normalized=*/true);
  in_format(q.out_proj_in, ActivationPoint::kOutProjIn, gated.data(), E, E);
  // A rank's out_proj is summed over the ranks inside linear_forward (W8A8: its int32 products),
  // then the bias is added once, as one rank adds it.
  linear_forward(q.out_proj, q.out_proj_in, gated.data(), T, out.data(), rank ? rank->comm : nullptr);
  if (!q.out_bias.empty())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D; ++i) out[t * D + i] += q.out_bias[i];
  observe(ActivationPoint::kOutProjOut, out.data(), D, D);
  for (int64_t i = 0; i < T * D; ++i) residual[i] += out[i];
}

}  // namespace ssdq
