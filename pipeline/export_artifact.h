// `ssdq export` end to end: model folder + calibration file → quantized model → .ssdq artifact
// with its description (recipe, calibration provenance, embedded tokenizer).
#pragma once

#include <string>

#include <optional>

#include "pipeline/mixed_precision.h"
#include "pipeline/quantize_model.h"

namespace ssdq {

struct ExportRequest {
  std::string model_dir, calibration_path, tokenizer_path, out_path;  // tokenizer: "" = the model folder's
};

struct ExportSummary {
  double seconds = 0;  // quantization (not loading or writing)
  int64_t samples = 0, seqlen = 0;
  int64_t bytes = 0;   // artifact size
  std::optional<MixedPrecisionChoice> mixed_precision;  // --w4a16-layers auto:K: what was measured
};

// Fails before any work when the calibration file's model hash differs from the model folder's
// weights; writes atomically.
ExportSummary export_artifact(const ExportRequest& request, const ExportOptions& options);

}  // namespace ssdq
