// Quamba2's mixed precision made automatic (export --w4a16-layers auto:K): which layers of a W4A8
// model keep fp16 activations. Each layer's cost is measured, not guessed: the W4A8 model with only
// that layer's activations in fp16 is compared with the FP model on calibration samples, and the K
// layers whose switch lowers the KL divergence the most are chosen.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "calib/calibration_file.h"
#include "pipeline/quantize_model.h"
#include "model/model_weights.h"

namespace ssdq {

struct LayerSensitivity {
  int64_t layer = 0;
  double kl = 0;  // mean KL(FP ‖ model) with this layer's activations in fp16
};

struct MixedPrecisionChoice {
  double w4a8_kl = 0;                     // mean KL of the all-W4A8 model on the same samples
  std::vector<LayerSensitivity> layers;   // every layer, in layer order
  std::vector<int64_t> w4a16_layers;      // the K chosen, ascending
};

// The first `samples` calibration windows (fewer if the file has fewer) are the measurement text.
MixedPrecisionChoice measure_w4a16_layers(const ModelWeights& fp, const QuantizedModel& w4a8,
                                          const CalibrationFile& calibration, int64_t k, int64_t samples = 8);

// options with --w4a16-layers auto:K replaced by the measured choice (one W4A8 export, then the
// measurement); unchanged when auto is off. `report` receives the measurement.
ExportOptions resolve_auto_w4a16_layers(const ModelWeights& fp, const CalibrationFile& calibration,
                                        const ExportOptions& options,
                                        const std::function<void(const MixedPrecisionChoice&)>& report = {});

}  // namespace ssdq
