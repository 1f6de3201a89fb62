#include "runtime/cuda_backend.h"

#include "formats/error.h"
#include "runtime/cuda_engine.h"

namespace ssdq {

CudaBackend::CudaBackend(const ModelWeights& weights, const CudaBackendOptions& options)
    : impl_(std::make_unique<Impl>(weights.config, options)) {
  impl_->upload_bf16_model(weights);
}

CudaBackend::CudaBackend(const Mamba2Config& config, uint64_t seed, const CudaBackendOptions& options) {
  validate_config(config, "synthetic model");
  impl_ = std::make_unique<Impl>(config, options);
  impl_->fill_random_bf16_model(seed);
}

CudaBackend::CudaBackend(std::shared_ptr<const QuantizedModel> model, const CudaBackendOptions& options) {
  if (!model) fail("internal: no quantized model");
  validate_quantized_model(*model, "quantized model");
  impl_ = std::make_unique<Impl>(model->config, options);
  impl_->model = std::move(model);
  impl_->upload_quantized_model();
}

CudaBackend::~CudaBackend() = default;

const Mamba2Config& CudaBackend::config() const { return impl_->config; }

std::unique_ptr<InferenceState> CudaBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  auto state = std::make_unique<CudaState>(impl_->state_bytes, batch, impl_->stream, &impl_->counter, impl_.get());
  impl_->reserve(batch, 1);  // decode steps of this batch allocate nothing
  return state;
}

CudaState& CudaBackend::cuda_state(InferenceState& state) const {
  auto* s = dynamic_cast<CudaState*>(&state);
  if (!s || s->owner != impl_.get()) fail("the CUDA backend was given a state it did not make");
  return *s;
}

void CudaBackend::forward(const int32_t* tokens, int64_t length, InferenceState& state,
                          const ForwardOutputs& outputs) const {
  CudaState& s = cuda_state(state);
  if (length <= 0) return;
  s.window.length = 0;  // a forward after a window leaves nothing to replay
  run_cuda_forward(*impl_, tokens, length, s, outputs, impl_->options.use_graphs);
}

void CudaBackend::reserve(int64_t batch, int64_t length) const { impl_->reserve(batch, length); }

std::string CudaBackend::describe_plan(int64_t batch, int64_t length) const {
  if (batch <= 0 || length <= 0) fail("plan: batch and length must be positive, got {} x {}", batch, length);
  CudaState state(impl_->state_bytes, batch, impl_->stream, &impl_->counter, impl_.get());
  impl_->reserve(batch, length);
  return impl_->forward_plan(batch, length, state).describe();
}

MemoryReport CudaBackend::memory() const { return impl_->memory(impl_->weight_bytes); }

size_t CudaBackend::state_bytes_per_sequence() const {
  size_t bytes = 0;
  for (size_t b : impl_->state_bytes) bytes += b;
  return bytes;
}

std::string CudaBackend::device_name() const { return impl_->device_name(); }

CUstream_st* CudaBackend::stream() const { return impl_->stream; }

}  // namespace ssdq
