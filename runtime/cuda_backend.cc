#include "runtime/cuda_backend.h"

#include "formats/error.h"
#include "runtime/cuda_engine.h"

namespace ssdq {
namespace {

// An observer of every point sees it as the CPU reports it only where the engine computes in fp32
// and no point has a format to apply after the observed kernel (conv.in's and ssd.x/B/C's are
// applied inside the conv) and no bias is added after out_proj's GEMM. An observer of out_proj
// only (DeviceObserver::watches_out_proj_only) sees its input after the format where out_proj's
// weights are float (GatedOut::kFp32ThenFormat), and its output before any bias, so a watched
// out_proj input needs float weights and no layer may have a bias.
void check_observable(const QuantizedModel* model, const CudaBackendOptions& options) {
  const DeviceObserver* observer = options.observer;
  if (!observer) return;
  if (!options.fp32_float_math || !model)
    fail("internal: an observer needs the fp32 engine (CudaBackendOptions::fp32_float_math) over a quantized model");
  if (options.communicator) fail("internal: an observer watches one GPU's whole model, not a tensor-parallel rank");
  const bool out_proj_only = observer->watches_out_proj_only();
  for (size_t l = 0; l < model->layers.size(); ++l) {
    const QuantizedLayer& q = model->layers[l];
    if (!q.out_bias.empty()) fail("internal: layer {} has an out_proj bias; the CUDA observer sees outputs without one", l);
    if (out_proj_only) {
      if (observer->watches(ActivationPoint::kOutProjIn) && q.out_proj.is_quantized())
        fail("internal: layer {}'s out_proj input is watched, but its weights are quantized", l);
      continue;
    }
    for (const ActQuant* a :
         {&q.in_proj_in, &q.conv_in, &q.ssd_x, &q.ssd_B, &q.ssd_C, &q.ssd_dt, &q.out_proj_in, &q.ssm_state})
      if (a->format != ActFormat::kFloat32)
        fail("internal: layer {} has a formatted point; an observer of every point watches fp32 models only", l);
    if (q.ssd_mode != SsdMode::kFloat)
      fail("internal: layer {} has an integer SSD; an observer of every point watches fp32 models only", l);
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

void CudaBackend::forward_layer(int64_t layer, const float* in, float* out, int64_t batch, int64_t length) const {
  Impl& m = *impl_;
  const Mamba2Config& c = m.config;
  if (!m.model || m.options.communicator)
    fail("internal: forward_layer runs a whole artifact's layer on one GPU");
  if (layer < 0 || layer >= c.n_layer || batch <= 0 || length <= 0 || !in)
    fail("internal: forward_layer of layer {} over {} x {} tokens", layer, batch, length);
  m.reserve(batch, length);
  CudaState state(m.state_bytes, batch, m.stream, &m.counter, impl_.get());
  const ForwardPlan& plan = m.forward_plan(batch, length, state);
  const LayerPlan& p = plan.layers[layer];
  if (p.pending_delta) fail("internal: forward_layer of layer {}, whose input waits on the layer before", layer);
  const int64_t M = batch * length, D = c.d_model;
  cuda_ok(cudaMemcpyAsync(m.work.residual, in, M * D * 4, cudaMemcpyDeviceToDevice, m.stream), "forward_layer input");
  const DeviceLayer& d = m.layers[layer];
  // Without `out` and without an observer of out_proj's output, nothing reads what out_proj makes
  // (the export's pass B; pass A's statistics include out_proj's output): the layer stops at
  // out_proj's input.
  const bool output_read = out || (m.options.observer && m.options.observer->watches(ActivationPoint::kOutProjOut));
  m.enqueue_layer(d, p, batch, length, state, layer, nullptr, /*stop_at_out_proj=*/!output_read);
  if (output_read && !p.out_proj.residual_add && p.all_reduce.empty()) {
    // out_proj wrote apart from the residual: the add of the next norm, whose output is not needed.
    kernels::AddRmsNormArgs add;
    add.rows = M;
    add.dim = static_cast<int>(D);
    add.eps = static_cast<float>(c.norm_eps);
    add.residual = m.work.residual;
    add.delta = m.work.out_proj_delta;
    add.delta_bias = d.out_bias.bytes() ? d.out_bias.at<float>(0) : nullptr;
    add.weight = d.norm.at<float>(0);
    add.out = m.work.normed;
    add.out_type = ElementType::kF32;
    cuda_ok(kernels::launch_add_rmsnorm(add, m.stream), "forward_layer: residual add");
  }
  if (out)
    cuda_ok(cudaMemcpyAsync(out, m.work.residual, M * D * 4, cudaMemcpyDeviceToDevice, m.stream), "forward_layer output");
  cuda_ok(cudaStreamSynchronize(m.stream), "forward_layer");  // before the state is freed
}

}  // namespace ssdq
