#include "pipeline/export_artifact.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <sys/stat.h>

#include "formats/digest.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "model/model_loader.h"
#include "model/quantized_artifact.h"
#include "runtime/parallel.h"

namespace ssdq {

std::string partial_export_path(const std::string& out_path) { return out_path + ".partial"; }

ExportSummary export_artifact(const ExportRequest& request, const ExportOptions& options,
                              const std::function<void(const std::string&)>& note) {
  const auto load_start = std::chrono::steady_clock::now();
  LoadedModel model = load_model(request.model_dir);
  const CalibrationFile calib = read_calibration_file(request.calibration_path);
  const std::string& weights_hash = model.weights_sha256;
  if (weights_hash != calib.provenance.weights_sha256)
    fail("{}: the statistics were computed for weights with sha256 {} ({}), but {} has sha256 {}; run ssdq calibrate "
         "on this model",
         request.calibration_path, calib.provenance.weights_sha256, calib.provenance.weights_file, model.weights_path,
         weights_hash);
  const TokenizerSource tokenizer_source =
      find_tokenizer(request.model_dir, request.tokenizer_path, model.weights->config.vocab_size);

  const auto start = std::chrono::steady_clock::now();
  ExportSummary summary;
  summary.load_seconds = std::chrono::duration<double>(start - load_start).count();
  ExportOptions resolved = resolve_auto_w4a16_layers(
      *model.weights, calib, options, [&](const MixedPrecisionChoice& choice) { summary.mixed_precision = choice; });
  summary.seqlen = calib.provenance.seqlen;
  summary.samples = options.max_samples > 0 ? std::min(options.max_samples, calib.provenance.samples)
                                            : calib.provenance.samples;

  nlohmann::json calibration = {{"file", request.calibration_path},
                                 {"sha256", file_sha256_hex(request.calibration_path)},
                                 {"samples_used", summary.samples},
                                 {"seqlen", summary.seqlen}};
  calibration["provenance"] = {{"data_files", nlohmann::json::array()},
                               {"seed", calib.provenance.seed},
                               {"samples", calib.provenance.samples},
                               {"seqlen", calib.provenance.seqlen},
                               {"model_dir", calib.provenance.model_dir},
                               {"weights_sha256", calib.provenance.weights_sha256},
                               {"ssdq_version", calib.provenance.ssdq_version}};
  if (!request.forward.empty()) calibration["export_forward"] = request.forward;
  for (const DataFileRecord& f : calib.provenance.data_files)
    calibration["provenance"]["data_files"].push_back({{"path", f.path}, {"sha256", f.sha256}, {"bytes", f.bytes}});
  const Mamba2Config c = model.weights->config;
  RecipeOptions recorded = resolved.recipe.resolved(c.heads_per_group(), c.headdim);
  recorded.auto_w4a16_layers = options.recipe.auto_w4a16_layers;  // the layers above were chosen by measurement
  const ArtifactDescription description{recorded.to_json(), calibration.dump(),
                                        tokenizer_metadata(tokenizer_source.bytes, tokenizer_source.sha256)};

  // Resumption: the partial file's description names every input (the weights through the
  // calibration's provenance), so equal descriptions mean the same layers would be made again.
  const std::string partial = partial_export_path(request.out_path);
  if (file_exists(partial)) {
    std::string why;
    try {
      const LoadedArtifact found = read_quantized_artifact(partial);
      if (found.description.recipe != description.recipe || found.description.calibration != description.calibration ||
          found.description.tokenizer != description.tokenizer)
        why = "it was made from other inputs (model, calibration, recipe options or tokenizer)";
      else if (static_cast<int64_t>(found.model->layers.size()) >= c.n_layer)
        why = fmt::format("it holds {} layers, the model has {}", found.model->layers.size(), c.n_layer);
      else
        resolved.done_layers = found.model->layers;
    } catch (const Error& e) {
      why = e.what();
    }
    if (note)
      note(why.empty() ? fmt::format("resuming from {}: {} of {} layers done", partial, resolved.done_layers.size(),
                                     c.n_layer)
                       : fmt::format("not resuming from {}: {}; starting over", partial, why));
  }
  summary.resumed_layers = static_cast<int64_t>(resolved.done_layers.size());
  // OUT.partial is written on a thread of its own while the next layers run (gigabytes at 2.7b):
  // the export waits for a write only when the next one is due, or before the artifact. A failed
  // write fails the export there; an export that fails first still waits for the write (the
  // future's destructor), so the partial file is never left half written by this process.
  // The writes share one copy of the finished part, which each write extends by the layers finished
  // since the last (the embedding, gigabytes for an 8B model, is copied once, not once a write).
  std::future<void> checkpoint;
  auto done = std::make_shared<QuantizedModel>();
  auto last_write = std::chrono::steady_clock::now();
  resolved.on_layer_done = [&](const QuantizedModel& so_far) {
    if (options.on_layer_done) options.on_layer_done(so_far);
    if (static_cast<int64_t>(so_far.layers.size()) >= c.n_layer) return;  // the artifact itself comes next
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_write).count() < request.checkpoint_seconds) return;
    if (checkpoint.valid()) checkpoint.get();  // rethrows the last write's error; `done` is ours again
    if (done->layers.empty()) {
      done->config = so_far.config;
      done->embedding = so_far.embedding;
      done->lm_head = so_far.lm_head;
      done->norm_f = so_far.norm_f;
    }
    done->layers.insert(done->layers.end(), so_far.layers.begin() + done->layers.size(), so_far.layers.end());
    done->config.n_layer = static_cast<int64_t>(done->layers.size());
    checkpoint = std::async(std::launch::async,
                            [done, &partial, &description] { write_quantized_artifact(partial, *done, description); });
    last_write = std::chrono::steady_clock::now();
    summary.checkpoint_seconds += std::chrono::duration<double>(last_write - now).count();
  };

  // The loaded model is not needed after this: the export transforms its tensors in place.
  const QuantizedModel quantized = quantize_model(std::move(*model.weights), calib, resolved);
  model.weights.reset();
  if (checkpoint.valid()) {
    const auto wait_start = std::chrono::steady_clock::now();
    checkpoint.get();
    summary.checkpoint_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  }
  done.reset();  // the partial file's copy is not needed while the artifact is written
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto write_start = std::chrono::steady_clock::now();
  write_quantized_artifact(request.out_path, quantized, description, parallel_for);
  summary.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - write_start).count();
  std::remove(partial.c_str());
  struct stat st {};
  if (::stat(request.out_path.c_str(), &st) == 0) summary.bytes = st.st_size;
  return summary;
}

}  // namespace ssdq
