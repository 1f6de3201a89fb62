// The calibration statistics file written by `ssdq calibrate` and read by `ssdq export`: a
// safetensors file (format "ssdq-calibration", version 1.0) with the sampled token ids, every
// layer's statistics and the provenance of both. Layout in docs/ARTIFACT.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calib/calibration_stats.h"
#include "formats/config.h"

namespace ssdq {

inline constexpr const char* kCalibrationFormat = "ssdq-calibration";
inline constexpr int kCalibrationVersionMajor = 1;

struct DataFileRecord {
  std::string path;
  std::string sha256;
  int64_t bytes = 0;
};

struct CalibrationProvenance {
  std::vector<DataFileRecord> data_files;
  uint64_t seed = 0;
  int64_t samples = 0, seqlen = 0;
  int32_t separator = 0;  // token between documents
  std::string model_dir, weights_file, weights_sha256;
  std::string tokenizer_file, tokenizer_sha256;
  std::string ssdq_version;
  double seconds = 0;  // wall time of the forward passes
  // Where and in what arithmetic the forwards ran: "cpu fp32", "cuda:0 fp32", "cuda:0 fp32, TF32
  // GEMMs" (files written before this was recorded read as "cpu fp32").
  std::string forward = "cpu fp32";
};

struct CalibrationFile {
  Mamba2Config config;
  CalibrationProvenance provenance;
  std::vector<int32_t> tokens;  // [samples, seqlen]
  CalibrationStats stats;
};

// Atomic; fails (leaving nothing) when the contents are inconsistent with the config.
void write_calibration_file(const std::string& path, const CalibrationFile& file);
// Checks format, version, every tensor's dtype and shape against the stored config, token ids
// against the vocabulary, and that statistics are finite (maxima >= 0, row counts >= 0).
CalibrationFile read_calibration_file(const std::string& path);

}  // namespace ssdq
