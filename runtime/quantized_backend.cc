#include "runtime/quantized_backend.h"

#include <algorithm>

#include "formats/error.h"
#include "runtime/cpu_ops.h"
#include "runtime/parallel.h"
#include "runtime/quantized_layer.h"

namespace ssdq {

QuantizedState::QuantizedState(const Mamba2Config& c, int64_t batch)
    : batch_(batch),
      conv_stride_(c.conv_dim() * (c.d_conv - 1)),
      ssm_stride_(c.nheads() * c.headdim * c.d_state),
      conv_(c.n_layer, std::vector<float>(batch * conv_stride_)),
      ssm_(c.n_layer, std::vector<float>(batch * ssm_stride_)) {}

void QuantizedState::reset() {
  for (auto& layer : conv_) std::fill(layer.begin(), layer.end(), 0.0f);
  for (auto& layer : ssm_) std::fill(layer.begin(), layer.end(), 0.0f);
}

QuantizedBackend::QuantizedBackend(std::shared_ptr<const QuantizedModel> model) : model_(std::move(model)) {
  validate_quantized_model(*model_, "quantized model");
  head_ = model_->head().to_float();
}

std::unique_ptr<InferenceState> QuantizedBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  return std::make_unique<QuantizedState>(config(), batch);
}

void QuantizedBackend::forward(const int32_t* tokens, int64_t length, InferenceState& state,
                               const ForwardOutputs& outputs) const {
  auto* qstate = dynamic_cast<QuantizedState*>(&state);
  if (!qstate) fail("the quantized CPU backend was given a state made by another backend");
  if (length <= 0) return;
  const int64_t batch = qstate->batch(), vocab = config().vocab_size;
  check_forward_ids(tokens, batch, length, vocab, outputs);
  auto run = [&](int64_t b) {
    forward_sequence(tokens + b * length, length, *qstate, b, outputs.for_sequence(b, length, vocab), batch == 1);
  };
  if (batch == 1) {
    run(0);
  } else {
    parallel_for(batch, run);
  }
}

void QuantizedBackend::forward_sequence(const int32_t* tokens, int64_t T, QuantizedState& state, int64_t seq,
                                        const ForwardOutputs& outputs, bool parallel_head) const {
  const QuantizedModel& m = *model_;
  const Mamba2Config& c = m.config;
  const int64_t D = c.d_model, V = c.vocab_size;
  std::vector<float> residual(T * D);
  for (int64_t t = 0; t < T; ++t) m.embedding.row_to_float(tokens[t], residual.data() + t * D);
  for (int64_t l = 0; l < c.n_layer; ++l)
    quantized_layer_forward(c, m.layers[l], l, residual.data(), T, state.conv(l, seq), state.ssm(l, seq));
  if (!outputs.any()) return;

  const int64_t first = outputs.last_position_only ? T - 1 : 0, R = T - first;
  std::vector<float> normed(R * D);
  cpu::rmsnorm(residual.data() + first * D, m.norm_f.data(), normed.data(), R, D, static_cast<float>(c.norm_eps));
  constexpr int64_t kBlock = 64;
  auto head_block = [&](int64_t block) {
    const int64_t r0 = block * kBlock, rows = std::min(kBlock, R - r0);
    std::vector<float> scratch;
    float* out = outputs.logits ? outputs.logits + r0 * V : nullptr;
    if (!out) {
      scratch.resize(rows * V);
      out = scratch.data();
    }
    cpu::matmul_wt(normed.data() + r0 * D, head_.data(), out, rows, D, V);
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
