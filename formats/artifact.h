// The .ssdq artifact container (docs/ARTIFACT.md): a safetensors file whose "__metadata__"
// carries "format" = "ssdq", "format_version" = "MAJOR.MINOR" and JSON strings describing the
// model, recipe, calibration and tokenizer. This layer checks the container and gives named,
// checked access to tensors and metadata; runtime/quantized_artifact maps it to a model.
// The same version check serves the calibration statistics file (calib/calibration_file).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "formats/config.h"
#include "formats/tensor.h"

namespace ssdq {

inline constexpr const char* kArtifactFormat = "ssdq";
// The newest major version this build reads and writes (2.0: block-diagonal online Hadamard
// rotations, docs/ARTIFACT.md). Files that need nothing new are still written as 1.0.
inline constexpr int kArtifactVersionMajor = 2;
inline constexpr int kArtifactVersionMinor = 0;

struct ArtifactFile {
  std::string path;
  TensorMap tensors;  // point into the mapped file
  std::map<std::string, std::string> metadata;
  int version_major = 0, version_minor = 0;
};

// Metadata keys every artifact has (JSON strings): model_config, recipe, calibration, tokenizer.
inline constexpr const char* kArtifactRequiredMetadata[] = {"model_config", "recipe", "calibration", "tokenizer"};

// Writes atomically (nothing is left at `path` on failure). Adds "format" and "format_version"
// ("version_major.0"); fails when a required metadata key is missing or a caller passes
// "format"/"format_version".
void write_artifact(const std::string& path, const TensorMap& tensors, std::map<std::string, std::string> metadata,
                    int version_major = kArtifactVersionMajor);

// Reads and checks the container: a safetensors file, format "ssdq", a major version this
// build reads (newer majors are refused with a message saying to upgrade), required metadata
// present and each a JSON value.
ArtifactFile read_artifact(const std::string& path);

// "MAJOR.MINOR" of metadata["format_version"] after checking metadata["format"] == format.
// Fails, naming `label`, on a missing or different format, a malformed version, or a major
// version above `supported_major`.
std::pair<int, int> check_format_version(const std::map<std::string, std::string>& metadata, std::string_view format,
                                         int supported_major, const std::string& label);

// The tensor `name` with exactly this dtype and shape, or an Error naming label, tensor and both.
const Tensor& require_tensor(const TensorMap& tensors, const std::string& name, DType dtype, const Shape& shape,
                             const std::string& label);
const std::string& require_metadata(const std::map<std::string, std::string>& metadata, const std::string& key,
                                    const std::string& label);

// config.json text (transformers spelling, which carries every field of Mamba2Config) that
// parse_config_json reads back to an equal config.
std::string model_config_to_json(const Mamba2Config& config);

}  // namespace ssdq
