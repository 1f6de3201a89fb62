#include "runtime/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "formats/error.h"
#include "runtime/cpu_block.h"
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

std::vector<StateTensor> CpuState::tensors() const {
  std::vector<StateTensor> out;
  for (size_t l = 0; l < conv_.size(); ++l) {
    out.push_back({conv_[l].data(), static_cast<size_t>(conv_stride_) * sizeof(float)});
    out.push_back({ssm_[l].data(), static_cast<size_t>(ssm_stride_) * sizeof(float)});
  }
  return out;
}

void CpuState::copy_bytes(void* dst, const void* src, size_t bytes) const { std::memcpy(dst, src, bytes); }
void CpuState::zero_bytes(void* dst, size_t bytes) const { std::memset(dst, 0, bytes); }

CpuBackend::CpuBackend(std::shared_ptr<const QuantizedModel> model) : model_(std::move(model)) {
  validate_quantized_model(*model_, "quantized model");
  const WeightMatrix& head = model_->head();
  if (head.is_quantized()) {
    dequantized_head_ = head.to_float();
    head_ = dequantized_head_.data();
  } else {
    head_ = head.dense.data();
  }
}

CpuBackend::CpuBackend(const ModelWeights& weights)
    : CpuBackend(std::make_shared<const QuantizedModel>(float_quantized_model(weights, parallel_for))) {}

CpuBackend::CpuBackend(ModelWeights&& weights)
    : CpuBackend(std::make_shared<const QuantizedModel>(float_quantized_model(std::move(weights)))) {}

std::unique_ptr<InferenceState> CpuBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  return std::make_unique<CpuState>(config(), batch);
}

std::string CpuBackend::device_name() const { return fmt::format("CPU ({} threads)", thread_count()); }

MemoryReport CpuBackend::memory() const {
  MemoryReport report;
  const QuantizedModel& m = *model_;
  auto matrix_bytes = [](const WeightMatrix& w) {
    return w.is_quantized() ? w.quantized.values.size() + w.quantized.scales.size() * sizeof(float)
                            : w.dense.size() * sizeof(float);
  };
  report.weight_bytes = matrix_bytes(m.embedding) + matrix_bytes(m.lm_head) + dequantized_head_.size() * sizeof(float);
  for (const QuantizedLayer& q : m.layers) report.weight_bytes += matrix_bytes(q.in_proj) + matrix_bytes(q.out_proj);
  return report;
}

size_t cpu_state_bytes_per_sequence(const Mamba2Config& c) {
  return static_cast<size_t>(c.n_layer) * (c.conv_dim() * (c.d_conv - 1) + c.nheads() * c.headdim * c.d_state) *
         sizeof(float);
}

size_t CpuBackend::state_bytes_per_sequence() const { return cpu_state_bytes_per_sequence(config()); }

namespace {

std::string describe_linear(const WeightMatrix& w, const ActQuant& input) {
  if (w.is_quantized() && input.is_int8())
    return fmt::format("int8 x int{} GEMM in int32{}", w.quantized.bits == QuantBits::kInt4 ? 4 : 8,
                       w.quantized.groups_per_row() > 1 ? ", fp32 chain over the weight groups" : "");
  return w.is_quantized() ? fmt::format("fp32 GEMM on int{} weights dequantized", w.quantized.bits == QuantBits::kInt4 ? 4 : 8)
                          : "fp32 GEMM";
}

std::string describe_layer(const QuantizedLayer& q, int64_t length) {
  const char* ssd = length == 1                          ? "ssd_step (the recurrence)"
                    : q.ssd_mode == SsdMode::kFloat      ? "ssd_chunked (fp32)"
                                                         : "ssdi8_chunked (integer SSD)";
  return fmt::format("  in_proj     {}\n  ssd         {}{}\n  out_proj    {}{}\n", describe_linear(q.in_proj, q.in_proj_in),
                     ssd, q.ssm_state.is_int8() ? ", int8 state" : "", describe_linear(q.out_proj, q.out_proj_in),
                     q.online_hadamard ? ", online Hadamard before it" : "");
}

}  // namespace

std::string CpuBackend::describe_plan(int64_t batch, int64_t length) const {
  if (batch <= 0 || length <= 0) fail("plan: batch and length must be positive, got {} x {}", batch, length);
  const std::vector<QuantizedLayer>& layers = model_->layers;
  std::string text = fmt::format("plan for batch {} x {} token{}, CPU specification (cpu_block_forward, sequences over {} threads)\n",
                                 batch, length, length == 1 ? "" : "s", thread_count());
  for (size_t l = 0; l < layers.size();) {
    const std::string this_layer = describe_layer(layers[l], length);
    size_t last = l;
    while (last + 1 < layers.size() && describe_layer(layers[last + 1], length) == this_layer) ++last;
    text += (last == l ? fmt::format("layer {}\n", l) : fmt::format("layers {}-{}\n", l, last)) + this_layer;
    l = last + 1;
  }
  return text;
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
  const QuantizedModel& m = *model_;
  const Mamba2Config& c = m.config;
  const int64_t D = c.d_model;
  std::vector<float> residual(T * D);
  for (int64_t t = 0; t < T; ++t) m.embedding.row_to_float(tokens[t], residual.data() + t * D);
  for (int64_t l = 0; l < c.n_layer; ++l)
    cpu_block_forward(c, m.layers[l], l, residual.data(), T, state.conv(l, seq), state.ssm(l, seq), state.observer());
  cpu_head_forward(c, m.norm_f.data(), {head_}, residual.data(), T, outputs, parallel_head);
}

void cpu_head_forward(const Mamba2Config& c, const float* norm_f, const std::vector<const float*>& slices,
                      const float* residual, int64_t T, const ForwardOutputs& outputs, bool parallel) {
  if (!outputs.any()) return;
  const int64_t D = c.d_model, V = c.vocab_size, S = static_cast<int64_t>(slices.size()), Vs = V / S;
  // The final norm and lm_head only for the positions asked for, in row blocks so that full
  // logits are never held for a long sequence.
  const int64_t first = outputs.last_position_only ? T - 1 : 0, R = T - first;
  std::vector<float> normed(R * D);
  cpu::rmsnorm(residual + first * D, norm_f, normed.data(), R, D, static_cast<float>(c.norm_eps));
  constexpr int64_t kBlock = 256;  // Eigen's GEMM runs ~40 % faster on 256 rows than on 64
  auto head_block = [&](int64_t block) {
    const int64_t r0 = block * kBlock, rows = std::min(kBlock, R - r0);
    // Reused: a fresh 50 MB block per call costs page faults.
    thread_local std::vector<float> scratch, slice_out;
    float* out = outputs.logits ? outputs.logits + r0 * V : nullptr;
    if (!out) {
      if (scratch.size() < static_cast<size_t>(rows * V)) scratch.resize(rows * V);
      out = scratch.data();
    }
    if (S == 1) {
      cpu::matmul_wt(normed.data() + r0 * D, slices[0], out, rows, D, V);
    } else {  // a vocab-parallel head: each slice's logits gathered into their columns
      if (slice_out.size() < static_cast<size_t>(rows * Vs)) slice_out.resize(rows * Vs);
      for (int64_t s = 0; s < S; ++s) {
        cpu::matmul_wt(normed.data() + r0 * D, slices[s], slice_out.data(), rows, D, Vs);
        for (int64_t r = 0; r < rows; ++r) std::copy_n(slice_out.data() + r * Vs, Vs, out + r * V + s * Vs);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = out + r * V;
      if (outputs.nll) outputs.nll[r0 + r] = cpu::nll(row, V, outputs.targets[r0 + r]);
      if (outputs.argmax) outputs.argmax[r0 + r] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  };
  const int64_t blocks = (R + kBlock - 1) / kBlock;
  if (parallel) {
    parallel_for(blocks, head_block);
  } else {
    for (int64_t b = 0; b < blocks; ++b) head_block(b);
  }
}

}  // namespace ssdq
