#include "runtime/cuda_backend.h"

#include "formats/error.h"
#include "runtime/cuda_engine.h"

namespace ssdq {
namespace {

// An observer sees every point as the CPU reports it only where the engine computes in fp32 and
// no point has a format to apply after the observed kernel (conv.in's and ssd.x/B/C's are applied
// inside the conv) and no bias is added after out_proj's GEMM.
void check_observable(const QuantizedModel* model, const CudaBackendOptions& options) {
  if (!options.observer) return;
  if (!options.fp32_float_math || !model)
    fail("internal: an observer needs the fp32 engine (CudaBackendOptions::fp32_float_math) over a quantized model");
  if (options.communicator) fail("internal: an observer watches one GPU's whole model, not a tensor-parallel rank");
  for (size_t l = 0; l < model->layers.size(); ++l) {
    const QuantizedLayer& q = model->layers[l];
    for (const ActQuant* a :
         {&q.in_proj_in, &q.conv_in, &q.ssd_x, &q.ssd_B, &q.ssd_C, &q.ssd_dt, &q.out_proj_in, &q.ssm_state})
      if (a->format != ActFormat::kFloat32)
        fail("internal: layer {} has a formatted point; the CUDA observer watches fp32 models only", l);
    if (!q.out_bias.empty() || q.ssd_mode != SsdMode::kFloat)
      fail("internal: layer {} has an out_proj bias or an integer SSD; the CUDA observer watches fp32 models only", l);
  }
}

}  // namespace

CudaBackend::CudaBackend(const ModelWeights& weights, const CudaBackendOptions& options)
    : impl_(std::make_unique<Impl>(weights.config, options)) {
  check_observable(nullptr, options);
  impl_->upload_bf16_model(weights);
}

CudaBackend::CudaBackend(const Mamba2Config& config, uint64_t seed, const CudaBackendOptions& options) {
  validate_config(config, "synthetic model");
  check_observable(nullptr, options);
  impl_ = std::make_unique<Impl>(config, options);
  impl_->fill_random_bf16_model(seed);
}

CudaBackend::CudaBackend(std::shared_ptr<const QuantizedModel> model, const CudaBackendOptions& options) {
  if (!model) fail("internal: no quantized model");
  validate_quantized_model(*model, "quantized model", options.head_rows);
  check_observable(model.get(), options);
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
