#include "pipeline/calibrate.h"

#include <chrono>
#include <memory>
#include <utility>

#include "pipeline/ordered_parallel.h"
#include "formats/digest.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/text_data.h"
#include "formats/token_data.h"
#include "runtime/cpu_backend.h"
#include "model/model_loader.h"

namespace ssdq {

std::vector<int32_t> sample_calibration_tokens(const std::vector<std::string>& data_files, const Tokenizer& tokenizer,
                                               int32_t separator, int64_t samples, int64_t seqlen, uint64_t seed) {
  if (data_files.empty()) fail("calibration needs at least one data file");
  if (samples <= 0) fail("--samples must be positive, got {}", samples);
  if (seqlen <= 1) fail("--seqlen must be at least 2, got {}", seqlen);
  std::vector<std::vector<int32_t>> documents;
  for (const std::string& path : data_files) {
    std::vector<std::vector<int32_t>> file_documents = tokenize_documents(path, tokenizer);
    for (auto& document : file_documents) documents.push_back(std::move(document));
  }
  const std::vector<std::vector<int32_t>> windows = sample_windows(documents, separator, samples, seqlen, seed);
  std::vector<int32_t> tokens;
  tokens.reserve(samples * seqlen);
  for (const auto& window : windows) tokens.insert(tokens.end(), window.begin(), window.end());
  return tokens;
}

CalibrationStats collect_statistics(ModelWeights weights, const std::vector<int32_t>& tokens, int64_t samples,
                                    int64_t seqlen, const CollectOptions& options) {
  if (samples <= 0 || seqlen <= 1 || static_cast<int64_t>(tokens.size()) != samples * seqlen)
    fail("internal: {} calibration tokens for {} samples of {}", tokens.size(), samples, seqlen);
  const Mamba2Config config = weights.config;
  const CpuBackend backend(std::move(weights));
  CalibrationStats total = CalibrationStats::empty_for(config);
  using Slot = std::unique_ptr<StatsObserver>;
  ordered_parallel_fold<Slot>(
      samples, [&] { return std::make_unique<StatsObserver>(config, options.ssd_internals); },
      [&](int64_t sample, Slot& observer) {
        auto state = backend.new_state(1);
        static_cast<CpuState&>(*state).set_observer(observer.get());
        backend.forward(tokens.data() + sample * seqlen, seqlen, *state, ForwardOutputs{});
      },
      [&](int64_t sample, Slot& observer) {
        total.merge(observer->stats());
        observer.reset();
        if (options.on_progress) options.on_progress(sample + 1, samples);
      });
  return total;
}

CalibrationFile run_calibration(const CalibrationRequest& request, const CollectOptions& options,
                                const StatisticsCollector& collect, const std::string& forward) {
  LoadedModel model = load_model(request.model_dir);
  const TokenizerSource tokenizer_source =
      find_tokenizer(request.model_dir, request.tokenizer_path, model.weights->config.vocab_size);
  const Tokenizer tokenizer = Tokenizer::from_bytes(tokenizer_source.bytes, tokenizer_source.label);
  CalibrationFile file;
  file.config = model.weights->config;
  CalibrationProvenance& p = file.provenance;
  p.samples = request.samples;
  p.seqlen = request.seqlen;
  p.seed = request.seed;
  p.separator = end_of_text_id(tokenizer, tokenizer_source.label);
  p.model_dir = request.model_dir;
  p.weights_file = model.weights_path;
  p.weights_sha256 = model.weights_sha256;
  p.tokenizer_file = tokenizer_source.label;
  p.tokenizer_sha256 = tokenizer_source.sha256;
  p.ssdq_version = request.ssdq_version;
  p.forward = forward;
  for (const std::string& path : request.data_files)
    p.data_files.push_back({path, file_sha256_hex(path), static_cast<int64_t>(MappedFile::open(path)->size())});
  file.tokens = sample_calibration_tokens(request.data_files, tokenizer, p.separator, p.samples, p.seqlen, p.seed);
  const auto start = std::chrono::steady_clock::now();
  // The loaded model is not needed after this: its tensors become the engine's.
  file.stats = collect(std::move(*model.weights), file.tokens, p.samples, p.seqlen, options);
  model.weights.reset();
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return file;
}

}  // namespace ssdq
