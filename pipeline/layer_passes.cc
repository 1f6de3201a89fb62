#include "pipeline/layer_passes.h"

#include "formats/error.h"
#include "pipeline/ordered_parallel.h"
#include "pipeline/stats_observer.h"
#include "runtime/cpu_block.h"
#include "runtime/parallel.h"

namespace ssdq {
namespace {

// The observer of one sample in one pass: whichever of its parts are set.
struct PassSlot : ForwardObserver {
  std::unique_ptr<StatsObserver> stats;      // pass A: every point of the layer
  std::unique_ptr<InputGram> in_proj_gram;   // pass A with GPTQ
  std::unique_ptr<InputGram> out_proj_gram;  // pass B
  std::unique_ptr<ChannelStats> output;      // pass C: out_proj.out sums

  void on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                     int64_t stride) override {
    if (stats) stats->on_activation(layer, point, data, rows, width, stride);
    if (in_proj_gram && point == ActivationPoint::kInProjIn) in_proj_gram->add_rows(data, rows, stride);
    if (out_proj_gram && point == ActivationPoint::kOutProjIn) out_proj_gram->add_rows(data, rows, stride);
    if (output && point == ActivationPoint::kOutProjOut) output->add_rows(data, rows, stride, "out_proj.out");
  }
  void on_ssd_inputs(int64_t layer, const cpu::SsdDims& dims, const cpu::SsdInputs& inputs, int64_t length,
                     int64_t chunk, const float* initial_state) override {
    if (stats) stats->on_ssd_inputs(layer, dims, inputs, length, chunk, initial_state);
  }
};

class CpuLayerPasses : public LayerPasses {
 public:
  CpuLayerPasses(const Mamba2Config& config, const WeightMatrix& embedding, const std::vector<int32_t>& tokens,
                 int64_t samples, int64_t seqlen, const PassProgress& progress)
      : c_(config), T_(seqlen), progress_(progress), streams_(samples, std::vector<float>(seqlen * config.d_model)) {
    const int64_t D = c_.d_model;
    parallel_for(samples, [&](int64_t s) {
      for (int64_t t = 0; t < T_; ++t) embedding.row_to_float(tokens[s * T_ + t], streams_[s].data() + t * D);
    });
  }

  void observe_layer(const std::string& stage, int64_t l, QuantizedLayer& layer, bool internals,
                     CalibrationStats& stats, InputGram* in_gram) override {
    run(
        stage,
        [&] {
          auto slot = std::make_unique<PassSlot>();
          slot->stats = std::make_unique<StatsObserver>(c_, internals, l);
          if (in_gram) slot->in_proj_gram = std::make_unique<InputGram>(c_.d_model);
          return slot;
        },
        [&](int64_t s, PassSlot& slot) { run_copy(s, l, layer, slot); },
        [&](PassSlot& slot) {
          stats.merge(slot.stats->stats());
          if (in_gram) in_gram->merge(*slot.in_proj_gram);
        });
  }

  void observe_out_proj_input(const std::string& stage, int64_t l, QuantizedLayer& layer,
                              InputGram& gram) override {
    run(
        stage,
        [&] {
          auto slot = std::make_unique<PassSlot>();
          slot->out_proj_gram = std::make_unique<InputGram>(c_.d_inner());
          return slot;
        },
        [&](int64_t s, PassSlot& slot) { run_copy(s, l, layer, slot); },
        [&](PassSlot& slot) { gram.merge(*slot.out_proj_gram); });
  }

  void advance(const std::string& stage, int64_t l, QuantizedLayer& layer, ChannelStats* output) override {
    run(
        stage,
        [&] {
          auto slot = std::make_unique<PassSlot>();
          if (output) slot->output = std::make_unique<ChannelStats>(c_.d_model, true);
          return slot;
        },
        [&](int64_t s, PassSlot& slot) { run_block(l, layer, streams_[s].data(), &slot); },
        [&](PassSlot& slot) {
          if (output) output->merge(*slot.output);
        });
  }

  void add_bias(const std::vector<float>& bias) override {
    const size_t width = bias.size();
    if (width == 0) return;
    parallel_for(static_cast<int64_t>(streams_.size()), [&](int64_t s) {
      std::vector<float>& rows = streams_[s];
      for (size_t at = 0; at < rows.size(); at += width)
        for (size_t i = 0; i < width; ++i) rows[at + i] += bias[i];
    });
  }

 private:
  using Slot = std::unique_ptr<PassSlot>;

  // The block from a zero state over one stream, in place.
  void run_block(int64_t l, const QuantizedLayer& layer, float* residual, ForwardObserver* observer) const {
    std::vector<float> conv(c_.conv_dim() * (c_.d_conv - 1), 0.0f), ssm(c_.nheads() * c_.headdim * c_.d_state, 0.0f);
    cpu_block_forward(c_, layer, l, residual, T_, conv.data(), ssm.data(), observer);
  }
  // The block over a copy of stream s (passes A and B leave the streams as they are).
  void run_copy(int64_t s, int64_t l, const QuantizedLayer& layer, ForwardObserver& observer) const {
    std::vector<float> residual = streams_[s];
    run_block(l, layer, residual.data(), &observer);
  }
  // work(sample, slot) on the threads, fold(slot) in sample order.
  void run(const std::string& stage, const std::function<Slot()>& make, const std::function<void(int64_t, PassSlot&)>& work,
           const std::function<void(PassSlot&)>& fold) {
    const int64_t samples = static_cast<int64_t>(streams_.size());
    ordered_parallel_fold<Slot>(
        samples, make, [&](int64_t s, Slot& slot) { work(s, *slot); },
        [&](int64_t s, Slot& slot) {
          fold(*slot);
          slot.reset();
          if (progress_) progress_(stage, s + 1, samples);
        });
  }

  Mamba2Config c_;
  int64_t T_;
  PassProgress progress_;
  std::vector<std::vector<float>> streams_;  // [samples][seqlen · d_model]
};

}  // namespace

std::unique_ptr<LayerPasses> cpu_layer_passes(const Mamba2Config& config, const WeightMatrix& embedding,
                                              const std::vector<int32_t>& tokens, int64_t samples, int64_t seqlen,
                                              const PassProgress& progress) {
  if (samples <= 0 || seqlen <= 0 || static_cast<int64_t>(tokens.size()) < samples * seqlen)
    fail("internal: layer passes over {} samples of {} tokens from {} tokens", samples, seqlen, tokens.size());
  return std::make_unique<CpuLayerPasses>(config, embedding, tokens, samples, seqlen, progress);
}

}  // namespace ssdq
