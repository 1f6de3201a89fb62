// The CPU backend of a QuantizedModel (an .ssdq artifact): integer GEMMs, quantize/dequantize at
// each point as the model's formats say, the SSDi8 integer SSD, int8 decode states. It is the
// reference the CUDA kernels reproduce; see quantized_layer.h for the order of operations.
#pragma once

#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/quantized_model.h"

namespace ssdq {

class QuantizedState : public InferenceState {
 public:
  QuantizedState(const Mamba2Config& config, int64_t batch);
  int64_t batch() const override { return batch_; }
  void reset() override;

  // Layer l, sequence b: conv state [conv_dim, d_conv - 1] (conv.in values), SSM state [H, P, N] in the
  // layer's ssm_state format (int8 states as their values q·s).
  float* conv(int64_t layer, int64_t seq) { return conv_[layer].data() + seq * conv_stride_; }
  float* ssm(int64_t layer, int64_t seq) { return ssm_[layer].data() + seq * ssm_stride_; }

 private:
  int64_t batch_, conv_stride_, ssm_stride_;
  std::vector<std::vector<float>> conv_, ssm_;
};

class QuantizedBackend : public Backend {
 public:
  // Validates the model (validate_quantized_model) and prepares the lm_head: a quantized head is
  // dequantized once (it is weight-only quantized; logits are computed in fp32).
  explicit QuantizedBackend(std::shared_ptr<const QuantizedModel> model);
  std::string name() const override { return "cpu"; }
  const Mamba2Config& config() const override { return model_->config; }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override;
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override;

 private:
  void forward_sequence(const int32_t* tokens, int64_t length, QuantizedState& state, int64_t seq,
                        const ForwardOutputs& outputs, bool parallel_head) const;
  std::shared_ptr<const QuantizedModel> model_;
  std::vector<float> head_;  // [V, D] fp32
};

}  // namespace ssdq
