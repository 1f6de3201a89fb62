// The calibration driver: sample token windows from data files and run the FP32 CPU forward
// (without the lm_head) over them with a StatsObserver attached.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "calib/calibration_file.h"
#include "pipeline/stats_observer.h"
#include "formats/tokenizer.h"
#include "model/model_weights.h"

namespace ssdq {

// `samples` windows of `seqlen` tokens: every file's documents tokenized (tokenize_documents), all
// files' documents in the order given, joined by `separator`, and windows drawn by sample_windows
// with `seed`. Returns [samples, seqlen] row-major.
std::vector<int32_t> sample_calibration_tokens(const std::vector<std::string>& data_files, const Tokenizer& tokenizer,
                                               int32_t separator, int64_t samples, int64_t seqlen, uint64_t seed);

struct CollectOptions {
  bool ssd_internals = true;  // X_scaled, states and CB (SSDi8, Quamba2's state scales)
  std::function<void(int64_t done, int64_t total)> on_progress;  // after each wave of samples
};

// Statistics of the forward of every window (each from a zero state), samples spread over the
// cores; the result is bit-identical for any thread count. tokens: [samples, seqlen]. The
// collectors take the model's tensors (its fp32 engine is made from them, not from a copy): a
// caller that keeps its model passes a copy (copy_weights over the cores).
CalibrationStats collect_statistics(ModelWeights weights, const std::vector<int32_t>& tokens, int64_t samples,
                                    int64_t seqlen, const CollectOptions& options = {});

// `ssdq calibrate`: the whole run from a model folder and data files to the statistics file's
// contents, with provenance (file hashes, seed, sizes, timing).
struct CalibrationRequest {
  std::string model_dir;
  std::vector<std::string> data_files;
  std::string tokenizer_path;  // empty: the model folder's tokenizer.json
  int64_t samples = 512, seqlen = 2048;
  uint64_t seed = 0;
  std::string ssdq_version;
};
// What runs the forwards: collect_statistics (the CPU), or collect_statistics_cuda
// (pipeline/cuda_calibrate.h) bound to a device.
// `forward` is recorded in the provenance (CalibrationProvenance::forward).
using StatisticsCollector = std::function<CalibrationStats(ModelWeights weights, const std::vector<int32_t>& tokens,
                                                           int64_t samples, int64_t seqlen, const CollectOptions&)>;
CalibrationFile run_calibration(const CalibrationRequest& request, const CollectOptions& options,
                                const StatisticsCollector& collect = collect_statistics,
                                const std::string& forward = "cpu fp32");

}  // namespace ssdq
