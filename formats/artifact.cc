#include "formats/artifact.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>

#include "formats/error.h"
#include "formats/safetensors.h"

namespace ssdq {

using json = nlohmann::json;

std::pair<int, int> check_format_version(const std::map<std::string, std::string>& metadata, std::string_view format,
                                         int supported_major, const std::string& label) {
  const auto found = metadata.find("format");
  if (found == metadata.end())
    fail("{}: no \"format\" in the safetensors metadata; this is not an {} file", label, format);
  if (found->second != format) fail("{}: format is \"{}\", expected \"{}\"", label, found->second, format);
  const auto version = metadata.find("format_version");
  if (version == metadata.end()) fail("{}: no \"format_version\" in the metadata", label);
  const std::string& text = version->second;
  const size_t dot = text.find('.');
  auto number = [&](std::string_view part) {
    if (part.empty() || part.size() > 6 || part.find_first_not_of("0123456789") != std::string_view::npos)
      fail("{}: format_version \"{}\" is not MAJOR.MINOR", label, text);
    return std::atoi(std::string(part).c_str());
  };
  if (dot == std::string::npos) fail("{}: format_version \"{}\" is not MAJOR.MINOR", label, text);
  const int major = number(std::string_view(text).substr(0, dot));
  const int minor = number(std::string_view(text).substr(dot + 1));
  if (major > supported_major)
    fail("{}: format_version {} is newer than this ssdq reads (major {}); upgrade ssdq", label, text,
         supported_major);
  if (major < 1) fail("{}: format_version {} is not a released version", label, text);
  return {major, minor};
}

void write_artifact(const std::string& path, const TensorMap& tensors, std::map<std::string, std::string> metadata,
                    int version_major) {
  if (version_major < 1 || version_major > kArtifactVersionMajor)
    fail("internal: artifact format version {} is not one this build writes", version_major);
  for (const char* reserved : {"format", "format_version"})
    if (metadata.count(reserved)) fail("internal: artifact metadata must not set \"{}\"", reserved);
  for (const char* key : kArtifactRequiredMetadata)
    if (!metadata.count(key)) fail("internal: artifact metadata lacks \"{}\"", key);
  metadata["format"] = kArtifactFormat;
  metadata["format_version"] = std::to_string(version_major) + "." + std::to_string(kArtifactVersionMinor);
  write_safetensors(path, tensors, metadata);
}

ArtifactFile read_artifact(const std::string& path) {
  SafetensorsFile file = read_safetensors(path);
  ArtifactFile artifact;
  artifact.path = path;
  std::tie(artifact.version_major, artifact.version_minor) =
      check_format_version(file.metadata, kArtifactFormat, kArtifactVersionMajor, path);
  for (const char* key : kArtifactRequiredMetadata) {
    const std::string& text = require_metadata(file.metadata, key, path);
    if (!json::accept(text)) fail("{}: metadata \"{}\" is not valid JSON", path, key);
  }
  artifact.tensors = std::move(file.tensors);
  artifact.metadata = std::move(file.metadata);
  return artifact;
}

const Tensor& require_tensor(const TensorMap& tensors, const std::string& name, DType dtype, const Shape& shape,
                             const std::string& label) {
  const auto found = tensors.find(name);
  if (found == tensors.end()) fail("{}: tensor '{}' is missing", label, name);
  const Tensor& tensor = found->second;
  if (tensor.dtype != dtype || tensor.shape != shape)
    fail("{}: tensor '{}' is {} {}, expected {} {}", label, name, dtype_name(tensor.dtype), shape_str(tensor.shape),
         dtype_name(dtype), shape_str(shape));
  return tensor;
}

const std::string& require_metadata(const std::map<std::string, std::string>& metadata, const std::string& key,
                                    const std::string& label) {
  const auto found = metadata.find(key);
  if (found == metadata.end()) fail("{}: metadata \"{}\" is missing", label, key);
  return found->second;
}

std::string model_config_to_json(const Mamba2Config& c) {
  auto number = [](double value) -> json {
    if (std::isinf(value)) return json{{"__float__", value > 0 ? "Infinity" : "-Infinity"}};
    return value;
  };
  json out = {
      {"model_type", "mamba2"},
      {"hidden_size", c.d_model},
      {"num_hidden_layers", c.n_layer},
      {"vocab_size", c.vocab_size},
      {"state_size", c.d_state},
      {"head_dim", c.headdim},
      {"num_heads", c.nheads()},
      {"n_groups", c.ngroups},
      {"conv_kernel", c.d_conv},
      {"expand", c.expand},
      {"chunk_size", c.chunk_size},
      {"layer_norm_epsilon", c.norm_eps},
      {"tie_word_embeddings", c.tie_embeddings},
      {"time_step_limit", json::array({number(c.dt_min), number(c.dt_max)})},
      {"use_bias", false},
      {"use_conv_bias", true},
      {"rms_norm", true},
  };
  return out.dump();
}

}  // namespace ssdq
