// The forwards of the layer-by-layer export (pipeline/quantize_model.h): the calibration samples'
// residual streams entering the current layer, and the three passes quantize_model runs over them
// at each layer. Two implementations: the CPU's (cpu_layer_passes: samples spread over the cores,
// folded in sample order, so the result does not depend on the thread count) and a GPU's
// (pipeline/cuda_layer_passes.h: the streams on the device, samples in batches).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "calib/calibration_stats.h"
#include "calib/channel_stats.h"
#include "calib/input_gram.h"
#include "formats/config.h"
#include "model/quantized_model.h"

namespace ssdq {

// Told after each sample (or batch of samples) of a pass; `stage` names the layer and pass.
using PassProgress = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

// Each pass borrows `layer` for the call (a GPU's moves it into the engine's one-layer model rather
// than copying a layer's fp32 projections, gigabytes at 8B) and gives it back unchanged.
class LayerPasses {
 public:
  virtual ~LayerPasses() = default;
  // Pass A: layer l (in fp32) over every stream, the streams left as they are: the statistics of
  // its points into stats.layers[l] (SSDi8's internals with `internals`), and, when `in_gram` is
  // given, in_proj's input Gram (of the layer's dimension d_model, empty) summed into it.
  virtual void observe_layer(const std::string& stage, int64_t l, QuantizedLayer& layer, bool internals,
                             CalibrationStats& stats, InputGram* in_gram) = 0;
  // Pass B: out_proj's input Gram (d_inner, empty) of the layer with its in_proj and activations
  // quantized, the streams left as they are.
  virtual void observe_out_proj_input(const std::string& stage, int64_t l, QuantizedLayer& layer,
                                      InputGram& gram) = 0;
  // Pass C: the streams advanced through the layer (which has no out_proj bias); with `output`
  // (d_model channels, sums tracked), out_proj's output folded into it.
  virtual void advance(const std::string& stage, int64_t l, QuantizedLayer& layer, ChannelStats* output) = 0;
  // bias[i] added to every row of every stream (SSDi8's mean correction); nothing for an empty one.
  virtual void add_bias(const std::vector<float>& bias) = 0;
  // Seconds the passes so far spent preparing to run (a GPU's: making each pass's engine).
  virtual double setup_seconds() const { return 0; }
};

// Makes the passes for a model of `config` whose streams start as the rows of `embedding` for the
// tokens [samples, seqlen]; `progress` may be empty.
using LayerPassesMaker = std::function<std::unique_ptr<LayerPasses>(
    const Mamba2Config& config, const WeightMatrix& embedding, const std::vector<int32_t>& tokens, int64_t samples,
    int64_t seqlen, const PassProgress& progress)>;

std::unique_ptr<LayerPasses> cpu_layer_passes(const Mamba2Config& config, const WeightMatrix& embedding,
                                              const std::vector<int32_t>& tokens, int64_t samples, int64_t seqlen,
                                              const PassProgress& progress);

}  // namespace ssdq
