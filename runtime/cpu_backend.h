// The CPU backend: the specification of the runtime. One executor for the FP32 model (a
// QuantizedModel whose every point is fp32) and for every artifact: integer GEMMs, the formats
// at each point, the SSDi8 integer SSD, int8 decode states, as cpu_block.h orders them. The
// CUDA engine reproduces it.
#pragma once

#include <memory>
#include <vector>

#include "model/model_weights.h"
#include "model/quantized_model.h"
#include "runtime/backend.h"
#include "runtime/forward_observer.h"

namespace ssdq {

class CpuState : public InferenceState {
 public:
  CpuState(const Mamba2Config& config, int64_t batch);
  int64_t batch() const override { return batch_; }
  void reset() override;
  std::vector<StateTensor> tensors() const override;

  // Layer l, sequence b: conv state [conv_dim, d_conv - 1] (conv.in values), SSM state [H, P, N]
  // in the layer's ssm_state format (int8 states as their values q·s).
  float* conv(int64_t layer, int64_t seq) { return conv_[layer].data() + seq * conv_stride_; }
  float* ssm(int64_t layer, int64_t seq) { return ssm_[layer].data() + seq * ssm_stride_; }
  // Calibration: when set, forward reports every activation point of this state's sequences to
  // it (from the thread running each sequence, so a batch > 1 calls it concurrently).
  void set_observer(ForwardObserver* observer) { observer_ = observer; }
  ForwardObserver* observer() const { return observer_; }

 protected:
  void copy_bytes(void* dst, const void* src, size_t bytes) const override;
  void zero_bytes(void* dst, size_t bytes) const override;

 private:
  int64_t batch_, conv_stride_, ssm_stride_;
  mutable std::vector<std::vector<float>> conv_, ssm_;
  ForwardObserver* observer_ = nullptr;
};

class CpuBackend : public Backend {
 public:
  // Validates the model (validate_quantized_model); a quantized lm_head is dequantized once (it
  // is weight-only quantized; logits are computed in fp32).
  explicit CpuBackend(std::shared_ptr<const QuantizedModel> model);
  // The FP32 model: its all-fp32 QuantizedModel (float_quantized_model).
  explicit CpuBackend(const ModelWeights& weights);
  explicit CpuBackend(ModelWeights&& weights);  // the same, the model's tensors moved in
  explicit CpuBackend(const std::shared_ptr<const ModelWeights>& weights) : CpuBackend(*weights) {}

  std::string name() const override { return "cpu"; }
  const Mamba2Config& config() const override { return model_->config; }
  const QuantizedModel& model() const { return *model_; }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override;
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override;
  std::string device_name() const override;
  MemoryReport memory() const override;
  size_t state_bytes_per_sequence() const override;
  std::string describe_plan(int64_t batch, int64_t length) const override;

 private:
  // Runs one sequence; `parallel_head` spreads the lm_head over the cores (batch of one).
  void forward_sequence(const int32_t* tokens, int64_t length, CpuState& state, int64_t seq,
                        const ForwardOutputs& outputs, bool parallel_head) const;
  std::shared_ptr<const QuantizedModel> model_;
  std::vector<float> dequantized_head_;  // [V, D] fp32, only when the stored head is quantized
  const float* head_ = nullptr;          // [V, D] fp32: the stored dense head or dequantized_head_
};

// Bytes of one sequence's CpuState for `config` (every layer's conv and SSM state in fp32).
size_t cpu_state_bytes_per_sequence(const Mamba2Config& config);

// The final norm and lm_head over the `T` residual rows of one sequence, for the positions
// `outputs` asks for, in row blocks so that full logits are never held for a long sequence. The
// head is `slices`: one [vocab, d_model] matrix, or n slices of vocab / n rows each (a
// vocab-parallel head, each slice's logits gathered into their columns). `parallel`: row blocks
// over the cores.
void cpu_head_forward(const Mamba2Config& config, const float* norm_f, const std::vector<const float*>& slices,
                      const float* residual, int64_t T, const ForwardOutputs& outputs, bool parallel);

}  // namespace ssdq
