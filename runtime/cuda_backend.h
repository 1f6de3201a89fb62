// The CUDA engine: one runner for the FP model and for every quantized artifact.
//
// The FP model (a checkpoint, or random weights made on the device) runs in bf16: bf16 weights
// and activations with fp32 accumulation, an fp32 residual stream and fp32 SSM state, a bf16 conv
// state (it holds bf16 inputs exactly). An artifact (a QuantizedModel) runs the CPU specification
// (cpu_block.h) step by step: activations between ops are fp32 holding the values their point's
// format gives them (fake-quantized int8, fp16-rounded); integer projections multiply the int8
// values with the CPU's exact scaling chain; the SSDi8 SSD runs the integer chunked kernel; int8
// decode states are stored as int8. Float parts (exp, norms, fp16 GEMMs, the fp16 lm_head) differ
// from the CPU in the last bits; tests/gpu/quantized_cuda_backend_test.cc bounds the difference.
//
// Both are the same layer (enqueue_layer's steps), planned once per (batch, length) into a
// ForwardPlan (runtime/cuda_plan.h); decode steps are captured into a CUDA graph per state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model_weights.h"
#include "model/quantized_model.h"
#include "runtime/backend.h"

namespace ssdq {

class CudaState;
class DeviceCommunicator;
class DeviceObserver;
}  // namespace ssdq
struct CUstream_st;  // cudaStream_t's type
namespace ssdq {

struct CudaBackendOptions {
  int device = 0;
  bool use_graphs = true;  // capture decode steps (length 1), verify windows and replays into CUDA graphs
  // Tensor parallelism (runtime/cuda_tensor_parallel.h): the engine runs one rank's shard (its
  // config's d_inner_shard), out_proj's partial rows summed into the residual through
  // `communicator`. folded_norm_width: the gated norm group's channels over all ranks when the
  // norm's sums of squares ride in that all-reduce (kernels/tp_all_reduce.h); 0: the norm is local.
  DeviceCommunicator* communicator = nullptr;
  int64_t folded_norm_width = 0;
  // A vocab-parallel lm_head: this rank holds `head_rows` rows of it (its slice of the vocabulary,
  // uploaded as an untied head), its logits gathered across the ranks; 0: the whole head.
  int64_t head_rows = 0;
  // An artifact on a tensor-parallel rank whose channels lie in gated-norm groups that span ranks:
  // the norm's sums of squares are all-reduced before the rows are normalised, since out_proj's int8
  // input scale needs the normalised values (kernels/gated_rmsnorm.h, GatedNormPartsArgs).
  // norm_groups: the layer's groups (0: the rank's groups are whole and the norm is local);
  // norm_first_group: the group of the rank's first channel; norm_group_size: a whole group's channels.
  int64_t norm_groups = 0, norm_first_group = 0, norm_group_size = 0;
  // An artifact's float weights kept in fp32 and multiplied in fp32 (cuBLASLt, no TF32), and its
  // float SSDs run by the fp32 recurrence at every length: the CPU specification's arithmetic in
  // another summation order. Calibration runs the FP32 model this way (pipeline/cuda_calibrate.h).
  bool fp32_float_math = false;
  // With fp32_float_math: the fp32 GEMMs on the tensor cores in TF32 (kernels/gemm.h), ~8x faster,
  // their outputs within ~1e-3 of fp32 (calibrate --gemm tf32).
  bool tf32_gemms = false;
  // Watches every forward at the quantization points (runtime/cuda_observer.h); needs
  // fp32_float_math and an artifact without an out_proj bias.
  DeviceObserver* observer = nullptr;
  // Decode steps give each row the logits it would get alone, bit for bit: the FP model's
  // projections and head up to 16 rows by the bf16 GEMV (one order of sums whatever the rows; a
  // verify window of up to 16 rows then gives a step's bits, exact_window) and an artifact's norms
  // up to 4 rows in its GEMV's prologue, as at one row. Without it, 2–16 rows take cuBLASLt,
  // faster on large models (docs/kernels/gemm.md) but rounding by the row count. `generate` sets it,
  // so a prompt's text does not depend on its batch or on --drafts' rows (docs/GENERATION.md).
  bool rows_alone = false;
  // A verify window takes in the previous window's accepted tokens inside its own launches
  // (replays_in_window: no copy of the state, no replay launches). false: the state is copied
  // before each window and a partial acceptance replayed apart (`bench --replay-apart`, to compare).
  bool replay_in_window = true;
};

class CudaBackend : public Backend {
 public:
  // The FP model: `weights` uploaded in bf16 where the kernels read bf16.
  CudaBackend(const ModelWeights& weights, const CudaBackendOptions& options);
  // The FP model with random weights generated on the device (synthetic benchmarks of models
  // whose weights are not at hand), with the value ranges of random_weights().
  CudaBackend(const Mamba2Config& config, uint64_t seed, const CudaBackendOptions& options);
  // An artifact: validates the model (validate_quantized_model), checks that every layer has a
  // CUDA path, and uploads the weights in their stored widths.
  CudaBackend(std::shared_ptr<const QuantizedModel> model, const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const Mamba2Config& config() const override;
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override;
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override;

  // Makes the workspace large enough for forwards of batch × length tokens now, so that later
  // calls up to that size allocate nothing.
  void reserve(int64_t batch, int64_t length) const override;
  MemoryReport memory() const override;
  size_t state_bytes_per_sequence() const override;
  bool on_device() const override { return true; }
  std::string device_name() const override;
  std::string describe_plan(int64_t batch, int64_t length) const override;
  bool runs_window() const override;
  bool exact_window(int64_t batch, int64_t length) const override;
  void forward_window(const int32_t* tokens, int64_t length, InferenceState& state,
                      const ForwardOutputs& outputs) const override;
  void replay_window(InferenceState& state, const std::vector<int64_t>& steps) const override;
  bool replays_in_window() const override;
  void replay_then_window(const std::vector<int64_t>& steps, const std::vector<int64_t>& from, const int32_t* tokens,
                          int64_t length, InferenceState& state, const ForwardOutputs& outputs) const override;
  // The stream every forward and state copy runs on (the device's work is ordered on it).
  CUstream_st* stream() const;

  // An artifact's layer `layer` alone over `batch` sequences of `length` tokens, each from a zero
  // state: the residual rows at `in` (device, fp32 [batch · length, d_model]) go through the block,
  // and the residual after it (out_proj's output and bias added) is written to `out` (device; may
  // be `in`; null: not kept, and out_proj itself not run unless the observer watches its output).
  // The observer, if any, watches it. Returns when the device is done.
  // The export's layer-by-layer passes run this (pipeline/cuda_layer_passes.h).
  void forward_layer(int64_t layer, const float* in, float* out, int64_t batch, int64_t length) const;

  struct Impl;

 private:
  // The state as this backend's (a CudaState it made), or an Error.
  CudaState& cuda_state(InferenceState& state) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ssdq
