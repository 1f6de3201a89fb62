// `ssdq export`: a FP model and its calibration file to a QuantizedModel by one recipe of
// docs/QUANTIZATION.md ("Recipes") (docs/QUANTIZATION.md says what each recipe does at each point).
//
// rtn and fp16 need no forward: weights are rounded, activation scales come straight from the
// calibration statistics. had, quamba2 and ssdi8 transform the weights (γ fusion, residual
// rotation, online Hadamard at out_proj.in; quamba2 also sort-and-cluster reordering) and then
// go layer by layer over the calibration samples, each layer seeing the outputs of the layers
// already quantized (and mean-corrected) before it:
//   pass A  the layer in fp32: maxima at every point (its static scales) and, with GPTQ, the
//           in_proj input Hessian; in_proj is quantized;
//   pass B  (GPTQ only) the layer with in_proj and activations quantized: the out_proj input
//           Hessian; out_proj is quantized;
//   pass C  the quantized layer advances the samples' residual streams; with SSDi8 mean
//           correction its out_proj.out mean μ_q gives c = η·(μ_fp − μ_q), which is stored as the
//           layer's out_proj bias and added to the streams (Algorithm 1).
// The passes run through pipeline/layer_passes.h: on the CPU samples run in parallel and are
// merged in sample order (the result does not depend on the thread count); on a GPU
// (ExportOptions::layer_passes, pipeline/cuda_layer_passes.h) in batches on the device.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "calib/calibration_file.h"
#include "calib/calibration_stats.h"
#include "pipeline/calibrate.h"
#include "pipeline/layer_passes.h"
#include "quant/gptq.h"
#include "quant/recipe.h"
#include "quant/sort_cluster.h"
#include "model/model_weights.h"
#include "model/quantized_model.h"

namespace ssdq {

// Seconds a layer-by-layer export spent in each part: the three forwards over the samples (pass A
// with its statistics and in_proj's Gram, pass B with out_proj's Gram, pass C advancing the
// streams; `pass_setup` is the part of them spent making each pass's engine, LayerPasses::
// setup_seconds), GPTQ's Hessians made from the Grams on the host, and quantizing the projections
// (GPTQ or rounding; `gptq_factor` and `gptq_rows` are the parts of it spent in
// ExportOptions::gptq_factored_row_pass, as its maker reports them). Before the layers: `prepare`,
// the weights copied and transformed (γ fusion, rotation, sort-and-cluster, the out_proj Hadamard)
// and the embedding converted; `streams`, the samples' residual streams placed where the passes run.
struct ExportTimes {
  double observe = 0, out_proj_gram = 0, advance = 0, pass_setup = 0, hessians = 0, weights = 0;
  double gptq_factor = 0, gptq_rows = 0, prepare = 0, streams = 0;
  double passes() const { return observe + out_proj_gram + advance; }
};

struct ExportOptions {
  RecipeOptions recipe;
  int64_t max_samples = 0;  // use the first N calibration samples (0: all)
  // Called after each sample (or batch of samples) of each pass; `stage` names the layer and pass.
  PassProgress on_progress;
  // Where the layer-by-layer passes run: empty for the CPU (cpu_layer_passes), or a GPU's
  // (pipeline/cuda_layer_passes.h); and what runs the FP forward of a subset of the samples
  // (--calib-samples with mean correction): empty for collect_statistics.
  LayerPassesMaker layer_passes;
  StatisticsCollector collect;
  ExportTimes* times = nullptr;  // when set, the time of each part is added to it
  // GPTQ's factor and row pass elsewhere (GptqOptions::factored_row_pass; export --device cuda's,
  // pipeline/cuda_gptq.h): empty for the host's. Its times are its to report (ExportTimes'
  // gptq_factor and gptq_rows, added to by the command that makes it).
  std::function<bool(const std::vector<double>& h, const GptqRowPassJob& job)> gptq_factored_row_pass;
  // Resumption (export_artifact): the first layers as an interrupted export with the same inputs left
  // them. They are not quantized again, only run over the samples to bring them to the next layer,
  // so the result is the uninterrupted export's, bit for bit. Layer-by-layer recipes only.
  std::vector<QuantizedLayer> done_layers;
  // Called when a layer-by-layer export has finished a layer, with the model so far (its embedding,
  // norms, head and first layers).
  std::function<void(const QuantizedModel& so_far)> on_layer_done;
};

// Fails when the calibration file was made for a different model shape, or on invalid options.
// The transforms work in a copy of `weights` (made over the cores), or, given the model to keep,
// in its own tensors (no second fp32 model in host memory: 32 GB at 8B).
QuantizedModel quantize_model(const ModelWeights& weights, const CalibrationFile& calibration,
                              const ExportOptions& options);
QuantizedModel quantize_model(ModelWeights&& weights, const CalibrationFile& calibration, const ExportOptions& options);

// A layer's activations all in fp16 (a W4A16 layer of a mixed-precision model: no int8 SSD).
void use_fp16_activations(QuantizedLayer& layer);

// The activation formats a recipe gives layer `l` from the layer's statistics (docs/QUANTIZATION.md ("Recipes"));
// `clusters` is quamba2's sort-and-cluster result for the layer (null for the other recipes).
void assign_activation_formats(QuantizedLayer& layer, const LayerStats& stats, const RecipeOptions& options,
                               int64_t l, const Mamba2Config& config, const SortClusterResult* clusters);

}  // namespace ssdq
