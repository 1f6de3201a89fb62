// `ssdq export` end to end: model folder + calibration file → quantized model → .ssdq artifact
// with its description (recipe, calibration provenance, embedded tokenizer).
#pragma once

#include <string>

#include <functional>
#include <optional>

#include "pipeline/mixed_precision.h"
#include "pipeline/quantize_model.h"

namespace ssdq {

struct ExportRequest {
  std::string model_dir, calibration_path, tokenizer_path, out_path;  // tokenizer: "" = the model folder's
  // Where the layer passes run when not on the CPU (CudaCalibration::describe()), recorded in the
  // description's calibration record as "export_forward" (so a partial file from the other device
  // is not resumed); empty: the CPU, not recorded.
  std::string forward;
  // The finished layers are written to the partial file after a layer when at least this many
  // seconds have passed since the last write (0: after every layer). The file holds the embedding
  // and every finished layer, gigabytes for a 2.7B model, so rewriting it after each of 64 layers
  // would cost more than the layers; an interruption loses at most this long plus one layer.
  double checkpoint_seconds = 60;
};

struct ExportSummary {
  double seconds = 0;  // quantization (not loading or writing), the partial file's rewrites included
  double load_seconds = 0;        // reading (or drawing) the model and reading the statistics
  double checkpoint_seconds = 0;  // OUT.partial's rewrites: copying the model for them, and waiting for them
  double write_seconds = 0;       // writing the artifact
  int64_t samples = 0, seqlen = 0;
  int64_t bytes = 0;   // artifact size
  std::optional<MixedPrecisionChoice> mixed_precision;  // --w4a16-layers auto:K: what was measured
  int64_t resumed_layers = 0;  // layers taken from an interrupted export's partial file
};

// The file a layer-by-layer export keeps its finished layers in while it runs (`out_path` + ".partial").
std::string partial_export_path(const std::string& out_path);

// Fails before any work when the calibration file's model hash differs from the model folder's
// weights; writes atomically. A layer-by-layer export (had, quamba2, ssdi8) writes its finished
// layers to partial_export_path(out) after each layer and removes it at the end; an export of the
// same inputs (model, calibration file, recipe and options, tokenizer) finding that file resumes
// after its last layer, with the result of an uninterrupted run. The file is rewritten at most
// every request.checkpoint_seconds. A partial file of other inputs is
// replaced. `note` hears what was resumed or ignored, before the work starts. options.on_layer_done,
// when set, hears each finished layer before the partial file's write.
ExportSummary export_artifact(const ExportRequest& request, const ExportOptions& options,
                              const std::function<void(const std::string&)>& note = {});

}  // namespace ssdq
