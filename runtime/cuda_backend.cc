#include "runtime/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/dtype.h"
#include "formats/error.h"
#include "runtime/cuda_forward.h"
#include "runtime/cuda_resources.h"
#include "kernels/add_rmsnorm.h"
#include "kernels/causal_conv1d.h"
#include "kernels/device_info.h"
#include "kernels/embedding.h"
#include "kernels/fill_random.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/ssd_chunk_scan.h"
#include "kernels/ssd_state_update.h"

namespace ssdq {
namespace {

using bf16 = __nv_bfloat16;
using kernels::ElementType;

struct DeviceLayer {
  bf16 *in_proj, *out_proj;
  float *norm, *conv_weight, *conv_bias, *dt_bias, *A, *D, *gated_norm;
};

struct DeviceModel {
  bf16 *embedding, *head;
  float* norm_f;
  std::vector<DeviceLayer> layers;
};

// Offsets of every weight in the single weights allocation.
struct WeightOffsets {
  size_t embedding, head, norm_f;
  struct Layer {
    size_t in_proj, out_proj, norm, conv_weight, conv_bias, dt_bias, A, D, gated_norm;
  };
  std::vector<Layer> layers;
  size_t total;
};

WeightOffsets plan_weights(const Mamba2Config& c) {
  Layout layout;
  WeightOffsets o;
  o.embedding = layout.add(c.vocab_size * c.d_model * 2);
  o.head = c.tie_embeddings ? o.embedding : layout.add(c.vocab_size * c.d_model * 2);
  o.norm_f = layout.add(c.d_model * 4);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    WeightOffsets::Layer w;
    w.in_proj = layout.add(c.d_in_proj() * c.d_model * 2);
    w.out_proj = layout.add(c.d_model * c.d_inner() * 2);
    w.norm = layout.add(c.d_model * 4);
    w.conv_weight = layout.add(c.conv_dim() * c.d_conv * 4);
    w.conv_bias = layout.add(c.conv_dim() * 4);
    w.dt_bias = layout.add(c.nheads() * 4);
    w.A = layout.add(c.nheads() * 4);
    w.D = layout.add(c.nheads() * 4);
    w.gated_norm = layout.add(c.d_inner() * 4);
    o.layers.push_back(w);
  }
  o.total = layout.total();
  return o;
}

DeviceModel bind_weights(const WeightOffsets& o, const DeviceBlock& block) {
  DeviceModel m;
  m.embedding = block.at<bf16>(o.embedding);
  m.head = block.at<bf16>(o.head);
  m.norm_f = block.at<float>(o.norm_f);
  for (const auto& w : o.layers)
    m.layers.push_back({block.at<bf16>(w.in_proj), block.at<bf16>(w.out_proj), block.at<float>(w.norm),
                        block.at<float>(w.conv_weight), block.at<float>(w.conv_bias), block.at<float>(w.dt_bias),
                        block.at<float>(w.A), block.at<float>(w.D), block.at<float>(w.gated_norm)});
  return m;
}

void upload_bf16(bf16* dst, const std::vector<float>& src) {
  std::vector<uint16_t> bits(src.size());
  for (size_t i = 0; i < src.size(); ++i) bits[i] = float_to_bf16(src[i]);
  cuda_ok(cudaMemcpy(dst, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), "upload weights");
}

}  // namespace

// Buffers per layer: conv state [batch, conv_dim, d_conv - 1] in bf16, SSM state [batch, H, P, N] in fp32.
class CudaState : public DeviceState {
 public:
  CudaState(const Mamba2Config& c, int64_t batch, cudaStream_t stream, MemoryCounter* counter, const void* owner)
      : DeviceState(batch, buffer_bytes(c), stream, counter, owner) {}
  static std::vector<size_t> buffer_bytes(const Mamba2Config& c) {
    std::vector<size_t> bytes;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      bytes.push_back(c.conv_dim() * (c.d_conv - 1) * 2);
      bytes.push_back(c.nheads() * c.headdim * c.d_state * 4);
    }
    return bytes;
  }
  bf16* conv(int64_t layer) const { return buffer<bf16>(2 * layer); }
  float* ssm(int64_t layer) const { return buffer<float>(2 * layer + 1); }
};

struct CudaBackend::Impl : CudaEngineCore {
  Mamba2Config config;
  CudaBackendOptions options;
  DeviceBlock weights;
  DeviceModel model;

  // Activations for up to work_batch × work_length tokens.
  struct Work {
    int32_t *tokens, *targets, *argmax;
    float *residual, *logits, *nll;
    bf16 *normed, *zxbcdt, *xbc, *y, *gated;
    void* ssd;
    int64_t logits_rows;
  };
  mutable Work work{};

  explicit Impl(const Mamba2Config& c, const CudaBackendOptions& o) : CudaEngineCore(o.device), config(c), options(o) {}

  void reserve(int64_t batch, int64_t length) const {
    if (batch <= work_batch && length <= work_length) return;
    batch = std::max(batch, work_batch);
    length = std::max(length, work_length);
    const Mamba2Config& c = config;
    const int64_t M = batch * length;
    const int64_t logits_rows = std::max<int64_t>(1, std::min<int64_t>(M, kLogitsBlockBytes / (c.vocab_size * 4)));
    Layout layout;
    const size_t tokens = layout.add(M * 4), targets = layout.add(M * 4), argmax = layout.add(M * 4);
    const size_t residual = layout.add(M * c.d_model * 4), logits = layout.add(logits_rows * c.vocab_size * 4),
                 nll = layout.add(M * 4);
    const size_t normed = layout.add(M * c.d_model * 2), zxbcdt = layout.add(M * c.d_in_proj() * 2),
                 xbc = layout.add(M * c.conv_dim() * 2), y = layout.add(M * c.d_inner() * 2),
                 gated = layout.add(M * c.d_inner() * 2);
    const size_t ssd = layout.add(kernels::ssd_chunk_scan_workspace_bytes(ssd_chunk_shape(config, batch, length)));
    cuda_ok(cudaStreamSynchronize(stream), "synchronize before resizing the workspace");
    work_block = DeviceBlock();
    work_block = DeviceBlock(layout.total(), "activations", &counter);
    const DeviceBlock& b = work_block;
    work = {b.at<int32_t>(tokens), b.at<int32_t>(targets), b.at<int32_t>(argmax), b.at<float>(residual),
            b.at<float>(logits),   b.at<float>(nll),       b.at<bf16>(normed),    b.at<bf16>(zxbcdt),
            b.at<bf16>(xbc),       b.at<bf16>(y),          b.at<bf16>(gated),     b.at<void>(ssd),
            logits_rows};
    work_batch = batch;
    work_length = length;
    ++work_generation;
  }

  // What a forward of (batch, length) runs, decided once before the layer loop: decode of one
  // sequence with the norms riding in the GEMV prologues (4 launches per layer, not 6) — measured
  // on an H200 at 2.7b shapes (docs/BENCHMARKS.md): TPOT 3.20 ms fused against 3.46 ms with
  // out_proj unfused and 3.71 ms with neither; with m > 1 cuBLASLt's kernels are faster —, and the
  // chunked scan for prefill where it takes the shape (else the recurrence, exact for any length).
  struct Plan {
    bool gemv_decode = false;
    bool chunked_ssd = false;
    std::string describe(int64_t batch, int64_t length, int64_t layers) const {
      return fmt::format(
          "plan for batch {} x {} token{} ({} rows), bf16\nlayers 0-{}\n"
          "  norm        {}\n  in_proj     {}\n  conv        causal_conv1d\n  ssd         {}\n"
          "  gated norm  {}\n  out_proj    {}\nfinal norm  add_rmsnorm\n",
          batch, length, length == 1 ? "" : "s", batch * length, layers - 1,
          gemv_decode ? "in in_proj's prologue" : "add_rmsnorm", gemv_decode ? "gemv" : "cuBLASLt bf16",
          chunked_ssd ? "ssd_chunk_scan" : "ssd_state_update", gemv_decode ? "in out_proj's prologue" : "gated_rmsnorm",
          gemv_decode ? "gemv, adds into the residual" : "cuBLASLt bf16, accumulates into the residual");
    }
  };
  Plan plan_forward(int64_t batch, int64_t length, const CudaState& state) const {
    const Mamba2Config& c = config;
    const int64_t M = batch * length, D = c.d_model, E = c.d_inner();
    Plan plan;
    plan.gemv_decode = M == 1 && D % 8 == 0 && E % 8 == 0 && E <= 16384;
    plan.chunked_ssd = length > 1 && kernels::ssd_chunk_scan_supported(
                                         chunk_args(batch, length, model.layers[0], state.ssm(0)));
    return plan;
  }

  // Everything from the embedding to the final norm, on the stream.
  void enqueue_body(int64_t batch, int64_t length, const CudaState& state) const {
    const Mamba2Config& c = config;
    const int64_t M = batch * length, D = c.d_model, E = c.d_inner(), in_dim = c.d_in_proj(), conv_dim = c.conv_dim();
    cuda_ok(kernels::launch_embedding({M, static_cast<int>(D), work.tokens, model.embedding, work.residual}, stream),
                        "embedding");
    kernels::AddRmsNormArgs norm;
    norm.rows = M;
    norm.dim = static_cast<int>(D);
    norm.eps = static_cast<float>(c.norm_eps);
    norm.residual = work.residual;
    norm.out = work.normed;
    norm.out_type = ElementType::kBF16;
    const Plan plan = plan_forward(batch, length, state);
    const bool fused = plan.gemv_decode;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const DeviceLayer& w = model.layers[l];
      if (fused) {
        kernels::GemvArgs in_proj;
        in_proj.m = static_cast<int>(M);
        in_proj.n = static_cast<int>(in_dim);
        in_proj.k = static_cast<int>(D);
        in_proj.input = kernels::GemvInput::kRmsNorm;
        in_proj.residual = work.residual;
        in_proj.norm_weight = w.norm;
        in_proj.eps = norm.eps;
        in_proj.w = w.in_proj;
        in_proj.out = work.zxbcdt;
        in_proj.ldout = in_dim;
        cuda_ok(kernels::launch_gemv(in_proj, stream), "in_proj (gemv)");
      } else {
        norm.weight = w.norm;
        cuda_ok(kernels::launch_add_rmsnorm(norm, stream), "rmsnorm");
        kernels::GemmArgs in_proj;
        in_proj.m = M;
        in_proj.n = in_dim;
        in_proj.k = D;
        in_proj.x = work.normed;
        in_proj.ldx = D;
        in_proj.w = w.in_proj;
        in_proj.out = work.zxbcdt;
        in_proj.ldout = in_dim;
        gemm->run(in_proj, stream);
      }

      kernels::CausalConv1dArgs conv;
      conv.batch = static_cast<int>(batch);
      conv.seqlen = static_cast<int>(length);
      conv.channels = static_cast<int>(conv_dim);
      conv.width = static_cast<int>(c.d_conv);
      conv.in = work.zxbcdt + E;
      conv.in_stride = in_dim;
      conv.weight = w.conv_weight;
      conv.bias = w.conv_bias;
      conv.state = state.conv(l);
      conv.out = work.xbc;
      cuda_ok(kernels::launch_causal_conv1d(conv, stream), "causal_conv1d");

      enqueue_ssd(batch, length, w, state.ssm(l), plan.chunked_ssd);

      if (fused) {
        kernels::GemvArgs out_proj;
        out_proj.m = static_cast<int>(M);
        out_proj.n = static_cast<int>(D);
        out_proj.k = static_cast<int>(E);
        out_proj.input = kernels::GemvInput::kGatedRmsNorm;
        out_proj.y = work.y;
        out_proj.z = work.zxbcdt;
        out_proj.z_stride = in_dim;
        out_proj.group_size = static_cast<int>(E / c.ngroups);
        out_proj.norm_weight = w.gated_norm;
        out_proj.eps = norm.eps;
        out_proj.w = w.out_proj;
        out_proj.out = work.residual;
        out_proj.ldout = D;
        out_proj.out_type = ElementType::kF32;
        out_proj.accumulate = true;
        cuda_ok(kernels::launch_gemv(out_proj, stream), "out_proj (gemv)");
        continue;
      }
      kernels::GatedRmsNormArgs gated;
      gated.rows = M;
      gated.width = static_cast<int>(E);
      gated.group_size = static_cast<int>(E / c.ngroups);
      gated.eps = static_cast<float>(c.norm_eps);
      gated.y = work.y;
      gated.z = work.zxbcdt;
      gated.z_stride = in_dim;
      gated.weight = w.gated_norm;
      gated.out = work.gated;
      cuda_ok(kernels::launch_gated_rmsnorm(gated, stream), "gated_rmsnorm");

      kernels::GemmArgs out_proj;
      out_proj.m = M;
      out_proj.n = D;
      out_proj.k = E;
      out_proj.x = work.gated;
      out_proj.ldx = E;
      out_proj.w = w.out_proj;
      out_proj.out = work.residual;
      out_proj.ldout = D;
      out_proj.out_type = ElementType::kF32;
      out_proj.accumulate = true;
      gemm->run(out_proj, stream);
    }
    norm.weight = model.norm_f;
    cuda_ok(kernels::launch_add_rmsnorm(norm, stream), "final rmsnorm");
  }

  kernels::SsdChunkScanArgs chunk_args(int64_t batch, int64_t length, const DeviceLayer& w, float* ssm) const {
    const Mamba2Config& c = config;
    const int64_t E = c.d_inner(), GN = c.ngroups * c.d_state, in_dim = c.d_in_proj(), conv_dim = c.conv_dim();
    kernels::SsdChunkScanArgs chunk = ssd_chunk_shape(config, batch, length);
    chunk.x = work.xbc;
    chunk.x_row_stride = conv_dim;
    chunk.B = work.xbc + E;
    chunk.C = work.xbc + E + GN;
    chunk.bc_row_stride = conv_dim;
    chunk.dt_raw = work.zxbcdt + E + conv_dim;
    chunk.dt_row_stride = in_dim;
    chunk.dt_bias = w.dt_bias;
    chunk.A = w.A;
    chunk.D = w.D;
    chunk.dt_min = static_cast<float>(c.dt_min);
    chunk.dt_max = static_cast<float>(std::min<double>(c.dt_max, 3e38));
    chunk.state = ssm;
    chunk.y = work.y;
    chunk.workspace = work.ssd;
    return chunk;
  }

  // Prefill runs the chunked scan (plan.chunked_ssd); decode (and shapes the chunked kernels do not
  // take) the recurrence with the state on chip, which is exact for any length.
  void enqueue_ssd(int64_t batch, int64_t length, const DeviceLayer& w, float* ssm, bool chunked) const {
    const Mamba2Config& c = config;
    const int64_t E = c.d_inner(), conv_dim = c.conv_dim(), in_dim = c.d_in_proj();
    const kernels::SsdChunkScanArgs chunk = chunk_args(batch, length, w, ssm);
    if (chunked) {
      cuda_ok(kernels::launch_ssd_chunk_scan(chunk, stream), "ssd_chunk_scan");
      return;
    }
    kernels::SsdStateUpdateArgs step;
    step.batch = chunk.batch;
    step.heads = chunk.heads;
    step.headdim = chunk.headdim;
    step.groups = chunk.groups;
    step.dstate = chunk.dstate;
    step.steps = chunk.seqlen;
    step.io_type = ElementType::kBF16;
    step.x = chunk.x;
    step.x_stride = conv_dim;
    step.B = chunk.B;
    step.C = chunk.C;
    step.bc_stride = conv_dim;
    step.dt = chunk.dt_raw;
    step.dt_stride = in_dim;
    step.dt_bias = w.dt_bias;
    step.dt_min = chunk.dt_min;
    step.dt_max = chunk.dt_max;
    step.A = w.A;
    step.D = w.D;
    step.state = ssm;
    step.y = work.y;
    step.y_stride = E;
    if (!kernels::ssd_state_update_supported(step))
      fail("CUDA: no SSD kernel supports heads {} × headdim {}, ngroups {}, d_state {}", step.heads, step.headdim,
           step.groups, step.dstate);
    cuda_ok(kernels::launch_ssd_state_update(step, stream), "ssd_state_update");
  }

  std::pair<const void*, ElementType> head_weights() const { return {model.head, ElementType::kBF16}; }
  bool enqueue_head_gemv(const bf16*, int64_t, int64_t) const { return false; }  // the bf16 GEMM / GEMV

  // The rows of the final norm's output that feed lm_head: all, or the last of each sequence.
  std::pair<const bf16*, int64_t> head_input(int64_t length, bool last_position_only) const {
    const int64_t D = config.d_model;
    if (last_position_only) return {work.normed + (length - 1) * D, length * D};
    return {work.normed, D};
  }
};

CudaBackend::CudaBackend(const ModelWeights& w, const CudaBackendOptions& options)
    : impl_(std::make_unique<Impl>(w.config, options)) {
  const Mamba2Config& c = w.config;
  const WeightOffsets offsets = plan_weights(c);
  impl_->weights = DeviceBlock(offsets.total, "the model weights", &impl_->counter);
  impl_->model = bind_weights(offsets, impl_->weights);
  DeviceModel& m = impl_->model;
  upload_bf16(m.embedding, w.embedding);
  if (!c.tie_embeddings) upload_bf16(m.head, w.lm_head);
  upload(m.norm_f, w.norm_f);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& src = w.layers[l];
    const DeviceLayer& dst = m.layers[l];
    upload_bf16(dst.in_proj, src.in_proj);
    upload_bf16(dst.out_proj, src.out_proj);
    upload(dst.norm, src.norm);
    upload(dst.conv_weight, src.conv_weight);
    upload(dst.conv_bias, src.conv_bias);
    upload(dst.dt_bias, src.dt_bias);
    upload(dst.A, src.A);
    upload(dst.D, src.D);
    upload(dst.gated_norm, src.gated_norm);
  }
}

CudaBackend::CudaBackend(const Mamba2Config& c, uint64_t seed, const CudaBackendOptions& options)
    : impl_(std::make_unique<Impl>(c, options)) {
  validate_config(c, "synthetic model");
  const WeightOffsets offsets = plan_weights(c);
  impl_->weights = DeviceBlock(offsets.total, "the model weights", &impl_->counter);
  impl_->model = bind_weights(offsets, impl_->weights);
  const DeviceModel& m = impl_->model;
  uint64_t tensor = 0;
  auto fill = [&](void* ptr, int64_t count, ElementType type, float center, float spread) {
    kernels::FillRandomArgs a;
    a.count = count;
    a.seed = seed * 1000003 + tensor++;
    a.center = center;
    a.spread = spread;
    a.type = type;
    a.out = ptr;
    cuda_ok(kernels::launch_fill_random(a, impl_->stream), "fill random weights");
  };
  const float sqrt3 = std::sqrt(3.0f);  // uniform with the standard deviations of random_weights()
  fill(m.embedding, c.vocab_size * c.d_model, ElementType::kBF16, 0.f, 0.02f * sqrt3);
  if (!c.tie_embeddings) fill(m.head, c.vocab_size * c.d_model, ElementType::kBF16, 0.f, 0.02f * sqrt3);
  fill(m.norm_f, c.d_model, ElementType::kF32, 1.f, 0.1f);
  for (const DeviceLayer& l : m.layers) {
    fill(l.in_proj, c.d_in_proj() * c.d_model, ElementType::kBF16, 0.f, sqrt3 / std::sqrt(float(c.d_model)));
    fill(l.out_proj, c.d_model * c.d_inner(), ElementType::kBF16, 0.f, sqrt3 / std::sqrt(float(c.d_inner())));
    fill(l.norm, c.d_model, ElementType::kF32, 1.f, 0.1f);
    fill(l.conv_weight, c.conv_dim() * c.d_conv, ElementType::kF32, 0.f, 0.3f * sqrt3);
    fill(l.conv_bias, c.conv_dim(), ElementType::kF32, 0.f, 0.1f * sqrt3);
    fill(l.dt_bias, c.nheads(), ElementType::kF32, -4.f, 1.f);
    fill(l.A, c.nheads(), ElementType::kF32, -8.5f, 7.5f);
    fill(l.D, c.nheads(), ElementType::kF32, 1.f, 0.1f);
    fill(l.gated_norm, c.d_inner(), ElementType::kF32, 1.f, 0.1f);
  }
  cuda_ok(cudaStreamSynchronize(impl_->stream), "fill random weights");
}

CudaBackend::~CudaBackend() = default;

const Mamba2Config& CudaBackend::config() const { return impl_->config; }

std::unique_ptr<InferenceState> CudaBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  auto state = std::make_unique<CudaState>(impl_->config, batch, impl_->stream, &impl_->counter, impl_.get());
  impl_->reserve(batch, 1);  // decode steps of this batch allocate nothing
  return state;
}

void CudaBackend::forward(const int32_t* tokens, int64_t length, InferenceState& state,
                          const ForwardOutputs& outputs) const {
  auto* cuda_state = dynamic_cast<CudaState*>(&state);
  if (!cuda_state || cuda_state->owner != impl_.get()) fail("the CUDA backend was given a state it did not make");
  if (length <= 0) return;
  run_cuda_forward(*impl_, tokens, length, *cuda_state, outputs, impl_->options.use_graphs);
}

void CudaBackend::reserve(int64_t batch, int64_t length) const { impl_->reserve(batch, length); }

std::string CudaBackend::describe_plan(int64_t batch, int64_t length) const {
  if (batch <= 0 || length <= 0) fail("plan: batch and length must be positive, got {} x {}", batch, length);
  const CudaState state(impl_->config, batch, impl_->stream, &impl_->counter, impl_.get());
  impl_->reserve(batch, length);
  return impl_->plan_forward(batch, length, state).describe(batch, length, impl_->config.n_layer);
}

size_t CudaBackend::state_bytes_per_sequence() const {
  size_t bytes = 0;
  for (size_t b : CudaState::buffer_bytes(impl_->config)) bytes += b;
  return bytes;
}

MemoryReport CudaBackend::memory() const { return impl_->memory(impl_->weights.bytes()); }

std::string CudaBackend::device_name() const { return impl_->device_name(); }

}  // namespace ssdq
