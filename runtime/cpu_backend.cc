#include "runtime/cpu_backend.h"

#include <algorithm>
#include <cstring>

#include "formats/error.h"
#include "runtime/cpu_ops.h"
#include "runtime/parallel.h"

namespace ssdq {

CpuState::CpuState(const Mamba2Config& c, int64_t batch)
    : batch_(batch),
      conv_stride_(c.conv_dim() * (c.d_conv - 1)),
      ssm_stride_(c.nheads() * c.headdim * c.d_state),
      conv_(c.n_layer, std::vector<float>(batch * conv_stride_)),
      ssm_(c.n_layer, std::vector<float>(batch * ssm_stride_)) {}

void CpuState::reset() {
  for (auto& layer : conv_) std::fill(layer.begin(), layer.end(), 0.0f);
  for (auto& layer : ssm_) std::fill(layer.begin(), layer.end(), 0.0f);
}

CpuBackend::CpuBackend(std::shared_ptr<const ModelWeights> weights) : weights_(std::move(weights)) {}

std::unique_ptr<InferenceState> CpuBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  return std::make_unique<CpuState>(config(), batch);
}

void CpuBackend::forward(const int32_t* tokens, int64_t length, InferenceState& state,
                         const ForwardOutputs& outputs) const {
  auto* cpu_state = dynamic_cast<CpuState*>(&state);
  if (!cpu_state) fail("the CPU backend was given a state made by another backend");
  if (length <= 0) return;
  const int64_t batch = cpu_state->batch(), vocab = config().vocab_size;
  check_forward_ids(tokens, batch, length, vocab, outputs);
  auto run = [&](int64_t b) {
    forward_sequence(tokens + b * length, length, *cpu_state, b, outputs.for_sequence(b, length, vocab), batch == 1);
  };
  if (batch == 1) {
    run(0);
  } else {
    parallel_for(batch, run);
  }
}

void CpuBackend::forward_sequence(const int32_t* tokens, int64_t T, CpuState& state, int64_t seq,
                                  const ForwardOutputs& outputs, bool parallel_head) const {
  const ModelWeights& w = *weights_;
  const Mamba2Config& c = w.config;
  const int64_t D = c.d_model, E = c.d_inner(), H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state;
  const int64_t conv_dim = c.conv_dim(), in_dim = c.d_in_proj();
  const float eps = static_cast<float>(c.norm_eps);

  std::vector<float> residual(T * D), normed(T * D), zxbcdt(T * in_dim), xbc(T * conv_dim), dt(T * H), y(T * E),
      gated(T * E), block_out(T * D);
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(&residual[t * D], &w.embedding[static_cast<int64_t>(tokens[t]) * D], D * sizeof(float));

  const cpu::SsdDims dims{H, P, G, N};
  ForwardObserver* const observer = state.observer();
  auto observe = [&](int64_t l, ActivationPoint point, const float* data, int64_t width, int64_t stride) {
    if (observer) observer->on_activation(l, point, data, T, width, stride);
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& layer = w.layers[l];
    cpu::rmsnorm(residual.data(), layer.norm.data(), normed.data(), T, D, eps);
    observe(l, ActivationPoint::kInProjIn, normed.data(), D, D);
    cpu::matmul_wt(normed.data(), layer.in_proj.data(), zxbcdt.data(), T, D, in_dim);
    observe(l, ActivationPoint::kConvIn, zxbcdt.data() + E, conv_dim, in_dim);
    cpu::causal_conv1d_silu(zxbcdt.data() + E, in_dim, T, conv_dim, c.d_conv, layer.conv_weight.data(),
                            layer.conv_bias.data(), state.conv(l, seq), xbc.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float value = cpu::softplus(zxbcdt[t * in_dim + E + conv_dim + h] + layer.dt_bias[h]);
        dt[t * H + h] = static_cast<float>(std::clamp<double>(value, c.dt_min, c.dt_max));
      }
    observe(l, ActivationPoint::kSsdX, xbc.data(), E, conv_dim);
    observe(l, ActivationPoint::kSsdB, xbc.data() + E, G * N, conv_dim);
    observe(l, ActivationPoint::kSsdC, xbc.data() + E + G * N, G * N, conv_dim);
    observe(l, ActivationPoint::kSsdDt, zxbcdt.data() + E + conv_dim, H, in_dim);
    const cpu::SsdInputs in{xbc.data(), conv_dim, xbc.data() + E, xbc.data() + E + G * N, conv_dim,
                            dt.data(), layer.A.data(), layer.D.data()};
    if (T == 1) {
      cpu::ssd_step(dims, in, state.ssm(l, seq), y.data());
    } else {
      if (observer) observer->on_ssd_inputs(l, dims, in, T, c.chunk_size, state.ssm(l, seq));
      cpu::ssd_chunked(dims, in, T, c.chunk_size, state.ssm(l, seq), y.data());
    }
    observe(l, ActivationPoint::kSsdY, y.data(), E, E);
    cpu::gated_rmsnorm(y.data(), zxbcdt.data(), in_dim, layer.gated_norm.data(), gated.data(), T, E, E / G, eps);
    observe(l, ActivationPoint::kOutProjIn, gated.data(), E, E);
    cpu::matmul_wt(gated.data(), layer.out_proj.data(), block_out.data(), T, E, D);
    observe(l, ActivationPoint::kOutProjOut, block_out.data(), D, D);
    for (int64_t i = 0; i < T * D; ++i) residual[i] += block_out[i];
  }
  if (!outputs.any()) return;
  // The final norm and lm_head only for the positions asked for, in row blocks so that full
  // logits are never held for a long sequence.
  const int64_t first = outputs.last_position_only ? T - 1 : 0, R = T - first;
  const float* hidden = residual.data() + first * D;
  cpu::rmsnorm(hidden, w.norm_f.data(), normed.data(), R, D, eps);
  const int64_t V = c.vocab_size;
  constexpr int64_t kBlock = 256;  // Eigen's GEMM runs ~40 % faster on 256 rows than on 64
  const std::vector<float>& head = w.head();
  auto head_block = [&](int64_t block) {
    const int64_t r0 = block * kBlock, rows = std::min(kBlock, R - r0);
    thread_local std::vector<float> scratch;  // reused: a fresh 50 MB block per call costs page faults
    float* out = outputs.logits ? outputs.logits + r0 * V : nullptr;
    if (!out) {
      if (scratch.size() < static_cast<size_t>(rows * V)) scratch.resize(rows * V);
      out = scratch.data();
    }
    cpu::matmul_wt(normed.data() + r0 * D, head.data(), out, rows, D, V);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = out + r * V;
      if (outputs.nll) outputs.nll[r0 + r] = cpu::nll(row, V, outputs.targets[r0 + r]);
      if (outputs.argmax) outputs.argmax[r0 + r] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  };
  const int64_t blocks = (R + kBlock - 1) / kBlock;
  if (parallel_head) {
    parallel_for(blocks, head_block);
  } else {
    for (int64_t b = 0; b < blocks; ++b) head_block(b);
  }
}

}  // namespace ssdq
