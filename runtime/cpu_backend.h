// The FP32 CPU reference backend: the model graph of QUANT.md §1 built from cpu_ops.
#pragma once

#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/forward_observer.h"
#include "runtime/model_weights.h"

namespace ssdq {

class CpuState : public InferenceState {
 public:
  CpuState(const Mamba2Config& config, int64_t batch);
  int64_t batch() const override { return batch_; }
  void reset() override;

  // Layer l, sequence b: conv state [conv_dim, d_conv - 1], SSM state [H, P, N].
  float* conv(int64_t layer, int64_t seq) { return conv_[layer].data() + seq * conv_stride_; }
  float* ssm(int64_t layer, int64_t seq) { return ssm_[layer].data() + seq * ssm_stride_; }
  // Calibration: when set, forward reports every activation point of this state's sequences to it
  // (from the thread running each sequence, so a batch > 1 calls it concurrently).
  void set_observer(ForwardObserver* observer) { observer_ = observer; }
  ForwardObserver* observer() const { return observer_; }

 private:
  int64_t batch_, conv_stride_, ssm_stride_;
  std::vector<std::vector<float>> conv_, ssm_;
  ForwardObserver* observer_ = nullptr;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<const ModelWeights> weights);
  std::string name() const override { return "cpu"; }
  const Mamba2Config& config() const override { return weights_->config; }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override;
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override;

 private:
  // Runs one sequence; `parallel_head` spreads the lm_head over the cores (batch of one).
  void forward_sequence(const int32_t* tokens, int64_t length, CpuState& state, int64_t seq,
                        const ForwardOutputs& outputs, bool parallel_head) const;
  std::shared_ptr<const ModelWeights> weights_;
};

}  // namespace ssdq
