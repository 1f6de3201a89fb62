// The CUDA backend of a QuantizedModel (an .ssdq artifact): the CPU quantized runtime
// (cpu_block.h) step by step on the device. Activations between ops are fp32 holding the
// values their point's format gives them (fake-quantized int8, fp16-rounded), as on the CPU;
// integer projections multiply the int8 values (qgemv for a few rows; per-channel weights: the
// CUTLASS or cuBLASLt IMMA GEMM; weight groups: gemm_s8_grouped) with the CPU's exact scaling
// chain; the SSDi8 SSD
// runs the integer chunked kernel; int8 decode states are stored as int8.
// Float parts (exp, norms, fp16 GEMMs of float and W4A16 projections, the fp16 lm_head) differ
// from the CPU in the last bits; tests/gpu/quantized_cuda_backend_test.cc bounds the difference.
#pragma once

#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/cuda_backend.h"
#include "model/quantized_model.h"

namespace ssdq {

class QuantizedCudaBackend : public Backend {
 public:
  // Validates the model (validate_quantized_model), checks that every layer has a CUDA path,
  // and uploads the weights in their stored widths.
  QuantizedCudaBackend(std::shared_ptr<const QuantizedModel> model, int device);
  ~QuantizedCudaBackend() override;

  std::string name() const override { return "cuda"; }
  const Mamba2Config& config() const override;
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override;
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override;

  void reserve(int64_t batch, int64_t length) const override;
  MemoryReport memory() const override;
  bool on_device() const override { return true; }
  size_t state_bytes_per_sequence() const override;
  std::string device_name() const override;
  std::string describe_plan(int64_t batch, int64_t length) const override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ssdq
