#include "pipeline/mixed_precision.h"

#include <algorithm>
#include <memory>

#include "formats/error.h"
#include "runtime/cpu_backend.h"
#include "runtime/eval_ppl.h"

namespace ssdq {
namespace {

double mean_kl(const Backend& model, const Backend& reference, const std::vector<int32_t>& tokens, int64_t seqlen) {
  EvalOptions options;
  options.ctx = seqlen;
  return compare_models(model, reference, tokens, options).summary.kl.mean;
}

}  // namespace

MixedPrecisionChoice measure_w4a16_layers(const ModelWeights& fp, const QuantizedModel& w4a8,
                                          const CalibrationFile& calibration, int64_t k, int64_t samples) {
  const int64_t L = w4a8.config.n_layer, seqlen = calibration.provenance.seqlen;
  if (k < 1 || k > L) fail("--w4a16-layers auto:K: K must be in 1..{}, got {}", L, k);
  const int64_t used = std::min(samples, calibration.provenance.samples);
  if (used < 1) fail("--w4a16-layers auto:K needs calibration samples to measure on; the file has none");
  const std::vector<int32_t> tokens(calibration.tokens.begin(), calibration.tokens.begin() + used * seqlen);
  const CpuBackend reference(fp);
  MixedPrecisionChoice choice;
  choice.w4a8_kl = mean_kl(CpuBackend(std::make_shared<QuantizedModel>(w4a8)), reference, tokens, seqlen);
  for (int64_t l = 0; l < L; ++l) {
    auto switched = std::make_shared<QuantizedModel>(w4a8);
    use_fp16_activations(switched->layers[l]);
    choice.layers.push_back({l, mean_kl(CpuBackend(switched), reference, tokens, seqlen)});
  }
  std::vector<LayerSensitivity> ranked = choice.layers;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const LayerSensitivity& a, const LayerSensitivity& b) { return a.kl < b.kl; });
  for (int64_t i = 0; i < k; ++i) choice.w4a16_layers.push_back(ranked[i].layer);
  std::sort(choice.w4a16_layers.begin(), choice.w4a16_layers.end());
  return choice;
}

ExportOptions resolve_auto_w4a16_layers(const ModelWeights& fp, const CalibrationFile& calibration,
                                        const ExportOptions& options,
                                        const std::function<void(const MixedPrecisionChoice&)>& report) {
  const int64_t k = options.recipe.auto_w4a16_layers;
  if (k == 0) return options;
  options.recipe.validate(fp.config.n_layer, fp.config.heads_per_group(), fp.config.headdim);
  ExportOptions w4a8 = options;
  w4a8.recipe.auto_w4a16_layers = 0;
  const QuantizedModel model = quantize_model(fp, calibration, w4a8);
  const MixedPrecisionChoice choice = measure_w4a16_layers(fp, model, calibration, k);
  if (report) report(choice);
  ExportOptions out = w4a8;
  out.recipe.w4a16_layers = choice.w4a16_layers;
  return out;
}

}  // namespace ssdq
