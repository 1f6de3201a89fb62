#include "pipeline/cuda_layer_passes.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "formats/error.h"
#include "kernels/input_gram.h"
#include "kernels/row_bias.h"
#include "pipeline/cuda_stats_observer.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_observer.h"
#include "runtime/cuda_resources.h"
#include "runtime/parallel.h"

namespace ssdq {
namespace {

// Σ x xᵀ of one point's rows on the device (kernels/input_gram.h).
class GramObserver : public DeviceObserver {
 public:
  GramObserver(ActivationPoint point, int64_t dim, bool tf32)
      : point_(point), dim_(dim), tf32_(tf32), sum_(dim * dim * 4, "a GPTQ input Gram matrix", nullptr) {
    cuda_ok(cudaMemset(sum_.at<void>(0), 0, sum_.bytes()), "cudaMemset");
  }
  bool watches(ActivationPoint p) const override { return p == point_; }
  bool watches_ssd_inputs() const override { return false; }
  void on_activation(int64_t, ActivationPoint, const float* data, int64_t rows, int64_t width, int64_t stride,
                     CUstream_st* stream) override {
    if (width != dim_) fail("internal: a Gram of width {} given rows of {}", dim_, width);
    kernels::InputGramArgs a;
    a.rows = rows;
    a.dim = static_cast<int>(dim_);
    a.x = data;
    a.stride = stride;
    a.sum = sum_.at<float>(0);
    a.tf32 = tf32_;
    runner_.run(a, stream);
    rows_ += rows;
  }
  void on_ssd_inputs(int64_t, const DeviceSsdInputs&, CUstream_st*) override {}
  // Adds the sums so far to the CPU's InputGram `gram` (waits for the device).
  void add_into(InputGram& gram) const {
    const std::unique_ptr<float[]> sum(new float[dim_ * dim_]);  // written whole by the copy: no zeroing
    cuda_ok(cudaMemcpy(sum.get(), sum_.at<void>(0), sum_.bytes(), cudaMemcpyDeviceToHost), "read a Gram matrix");
    gram.add_sums(sum.get(), rows_, parallel_for);
  }
  size_t device_bytes() const { return sum_.bytes(); }

 private:
  ActivationPoint point_;
  int64_t dim_;
  bool tf32_;
  DeviceBlock sum_;
  kernels::InputGramRunner runner_;
  int64_t rows_ = 0;
};

// Pass A's observers together.
class BothObservers : public DeviceObserver {
 public:
  BothObservers(DeviceObserver& first, DeviceObserver* second) : first_(first), second_(second) {}
  bool watches(ActivationPoint p) const override { return first_.watches(p) || (second_ && second_->watches(p)); }
  bool watches_ssd_inputs() const override {
    return first_.watches_ssd_inputs() || (second_ && second_->watches_ssd_inputs());
  }
  void on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                     int64_t stride, CUstream_st* stream) override {
    for (DeviceObserver* o : {&first_, second_})
      if (o && o->watches(point)) o->on_activation(layer, point, data, rows, width, stride, stream);
  }
  void on_ssd_inputs(int64_t layer, const DeviceSsdInputs& inputs, CUstream_st* stream) override {
    for (DeviceObserver* o : {&first_, second_})
      if (o && o->watches_ssd_inputs()) o->on_ssd_inputs(layer, inputs, stream);
  }

 private:
  DeviceObserver& first_;
  DeviceObserver* second_;
};

class CudaLayerPasses : public LayerPasses {
 public:
  static constexpr int64_t kUnreadVocabulary = 16;  // the one-layer engines' embedding, never read

  CudaLayerPasses(const CudaCalibration& gpu, const Mamba2Config& config, const WeightMatrix& embedding,
                  const std::vector<int32_t>& tokens, int64_t samples, int64_t seqlen, const PassProgress& progress)
      : gpu_(gpu), c_(config), S_(samples), T_(seqlen), progress_(progress) {
    select_cuda_device(gpu.device);
    const int64_t D = c_.d_model;
    batch_ = std::clamp<int64_t>(kCudaCalibrationRows / seqlen, 1, samples);
    const size_t stream_bytes = seqlen * D * 4;
    try {
      streams_ = DeviceBlock(samples * stream_bytes, "the calibration samples' residual streams", nullptr);
    } catch (const Error& e) {
      fail("{}; they take {:.1f} MiB a sample: export fewer with --calib-samples, or on the CPU", e.what(),
           stream_bytes / 1048576.0);
    }
    std::vector<float> rows(seqlen * D);
    for (int64_t s = 0; s < samples; ++s) {
      parallel_for(seqlen, [&](int64_t t) { embedding.row_to_float(tokens[s * seqlen + t], rows.data() + t * D); });
      cuda_ok(cudaMemcpy(stream(s), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice), "upload a residual stream");
    }
    layer_config_ = c_;
    layer_config_.n_layer = 1;
  }
  ~CudaLayerPasses() override {
    if (gpu_.on_device_memory) gpu_.on_device_memory(peak_bytes_);
  }

  void observe_layer(const std::string& stage, int64_t l, QuantizedLayer& layer, bool internals,
                     CalibrationStats& stats, InputGram* in_gram) override {
    CudaStatsObserver point_stats(layer_config_, internals);
    std::unique_ptr<GramObserver> gram;
    if (in_gram) gram = std::make_unique<GramObserver>(ActivationPoint::kInProjIn, c_.d_model, gpu_.tf32_gemms);
    BothObservers both(point_stats, gram.get());
    const auto engine = make_engine(layer, &both);
    run(stage, *engine, /*advance=*/false, point_stats.device_bytes() + (gram ? gram->device_bytes() : 0));
    point_stats.check_finite(engine->stream(), l);
    stats.layers[l] = std::move(point_stats.read(engine->stream()).layers[0]);
    if (gram) gram->add_into(*in_gram);
  }

  void observe_out_proj_input(const std::string& stage, int64_t, QuantizedLayer& layer, InputGram& gram) override {
    GramObserver observer(ActivationPoint::kOutProjIn, c_.d_inner(), gpu_.tf32_gemms);
    const auto engine = make_engine(layer, &observer);
    run(stage, *engine, /*advance=*/false, observer.device_bytes());
    observer.add_into(gram);
  }

  void advance(const std::string& stage, int64_t l, QuantizedLayer& layer, ChannelStats* output) override {
    std::unique_ptr<CudaStatsObserver> observer;  // out_proj's output alone: its maxima and sums
    if (output) observer = std::make_unique<CudaStatsObserver>(layer_config_, false, ActivationPoint::kOutProjOut);
    const auto engine = make_engine(layer, observer.get());
    run(stage, *engine, /*advance=*/true, observer ? observer->device_bytes() : 0);
    if (!output) return;
    observer->check_finite(engine->stream(), l);
    output->merge(observer->read(engine->stream()).layers[0].at(StatPoint::kOutProjOut));
  }

  double setup_seconds() const override { return setup_seconds_; }

  void add_bias(const std::vector<float>& bias) override {
    if (bias.empty()) return;
    if (static_cast<int64_t>(bias.size()) != c_.d_model) fail("internal: a bias of {} for d_model {}", bias.size(), c_.d_model);
    DeviceBlock device_bias(bias.size() * 4, "the mean-correction bias", nullptr);
    cuda_ok(cudaMemcpy(device_bias.at<void>(0), bias.data(), bias.size() * 4, cudaMemcpyHostToDevice), "upload bias");
    kernels::RowBiasArgs a;
    a.rows = S_ * T_;
    a.width = static_cast<int>(c_.d_model);
    a.data = streams_.at<float>(0);
    a.bias = device_bias.at<float>(0);
    cuda_ok(kernels::launch_add_row_bias(a, nullptr), "add the mean correction to the streams");
    cuda_ok(cudaDeviceSynchronize(), "add the mean correction to the streams");
  }

 private:
  float* stream(int64_t sample) const { return streams_.at<float>(sample * T_ * c_.d_model * 4); }

  // An engine over layer alone (a one-layer artifact whose embedding is never read). The layer is
  // moved into the one-layer model for the engine's upload and moved back after it (the engine
  // keeps no use of the host model after its upload), so no pass copies a layer's projections
  // (0.4 GB of fp32 at 8B, on one thread).
  std::unique_ptr<CudaBackend> make_engine(QuantizedLayer& layer, DeviceObserver* observer) {
    const auto start = std::chrono::steady_clock::now();
    if (!model_) {
      model_ = std::make_shared<QuantizedModel>();
      model_->config = layer_config_;
      model_->config.tie_embeddings = true;
      model_->config.vocab_size = kUnreadVocabulary;
      model_->embedding.rows = kUnreadVocabulary;
      model_->embedding.cols = c_.d_model;
      model_->embedding.kind = WeightMatrix::Kind::kFloat16;
      model_->embedding.dense.assign(kUnreadVocabulary * c_.d_model, 0.0f);
      model_->norm_f.assign(c_.d_model, 1.0f);
      model_->layers.resize(1);
    }
    CudaBackendOptions o;
    o.device = gpu_.device;
    o.use_graphs = false;
    o.fp32_float_math = true;
    o.tf32_gemms = gpu_.tf32_gemms;
    o.observer = observer;
    struct GiveBack {  // the layer returns to the caller however the engine's making ends
      QuantizedLayer& layer;
      QuantizedLayer& lent;
      ~GiveBack() { std::swap(layer, lent); }
    } give_back{layer, model_->layers[0]};
    std::swap(layer, model_->layers[0]);
    auto engine = std::make_unique<CudaBackend>(std::shared_ptr<const QuantizedModel>(model_), o);
    setup_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return engine;
  }

  // The layer over every stream in batches; `advance`: the streams replaced by the layer's output.
  void run(const std::string& stage, const CudaBackend& engine, bool advance, size_t observer_bytes) {
    for (int64_t first = 0; first < S_; first += batch_) {
      const int64_t n = std::min(batch_, S_ - first);
      engine.forward_layer(0, stream(first), advance ? stream(first) : nullptr, n, T_);
      if (progress_) progress_(stage, first + n, S_);
    }
    peak_bytes_ = std::max(peak_bytes_, streams_.bytes() + engine.memory().peak_bytes + observer_bytes);
  }

  CudaCalibration gpu_;
  Mamba2Config c_, layer_config_;
  int64_t S_, T_, batch_ = 1;
  PassProgress progress_;
  DeviceBlock streams_;
  std::shared_ptr<QuantizedModel> model_;  // the one-layer model every engine is made from
  size_t peak_bytes_ = 0;
  double setup_seconds_ = 0;
};

}  // namespace

LayerPassesMaker cuda_layer_passes(const CudaCalibration& gpu) {
  return [gpu](const Mamba2Config& config, const WeightMatrix& embedding, const std::vector<int32_t>& tokens,
               int64_t samples, int64_t seqlen, const PassProgress& progress) -> std::unique_ptr<LayerPasses> {
    if (samples <= 0 || seqlen <= 1 || static_cast<int64_t>(tokens.size()) < samples * seqlen)
      fail("internal: GPU layer passes over {} samples of {} tokens from {} tokens", samples, seqlen, tokens.size());
    return std::make_unique<CudaLayerPasses>(gpu, config, embedding, tokens, samples, seqlen, progress);
  };
}

}  // namespace ssdq
