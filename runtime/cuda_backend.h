// The CUDA backend: bf16 weights and activations with fp32 accumulation, an fp32 residual
// stream and fp32 SSM state (bf16 conv state: it holds bf16 inputs exactly). Decode steps are
// captured into a CUDA graph per state and replayed. Every op has a CPU reference in cpu_ops.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/backend.h"
#include "model/model_weights.h"

namespace ssdq {

struct CudaBackendOptions {
  int device = 0;
  bool use_graphs = true;  // capture decode steps (length 1) into CUDA graphs
};

class CudaBackend : public Backend {
 public:
  // Uploads `weights` (converted to bf16 where the kernels read bf16).
  CudaBackend(const ModelWeights& weights, const CudaBackendOptions& options);
  // Random weights generated on the device (synthetic benchmarks of models whose weights are
  // not at hand), with the value ranges of random_weights().
  CudaBackend(const Mamba2Config& config, uint64_t seed, const CudaBackendOptions& options);
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

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ssdq
