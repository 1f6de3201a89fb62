#include "calib/calibration_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/artifact.h"
#include "formats/error.h"
#include "formats/safetensors.h"

namespace ssdq {
namespace {

using json = nlohmann::json;

std::string point_key(int64_t layer, StatPoint point, const char* part) {
  return fmt::format("layers.{}.{}.{}", layer, stat_point_name(point), part);
}

json provenance_json(const CalibrationProvenance& p) {
  json files = json::array();
  for (const DataFileRecord& f : p.data_files) files.push_back({{"path", f.path}, {"sha256", f.sha256}, {"bytes", f.bytes}});
  return {{"data_files", files},
          {"seed", p.seed},
          {"samples", p.samples},
          {"seqlen", p.seqlen},
          {"separator", p.separator},
          {"model_dir", p.model_dir},
          {"weights_file", p.weights_file},
          {"weights_sha256", p.weights_sha256},
          {"tokenizer_file", p.tokenizer_file},
          {"tokenizer_sha256", p.tokenizer_sha256},
          {"ssdq_version", p.ssdq_version},
          {"seconds", p.seconds},
          {"forward", p.forward}};
}

// Typed access to the provenance object with errors naming the file and the key.
class ProvenanceReader {
 public:
  ProvenanceReader(const json& object, std::string label) : object_(object), label_(std::move(label)) {}
  const json& field(const char* key) const {
    if (!object_.contains(key)) fail("{}: provenance lacks \"{}\"", label_, key);
    return object_.at(key);
  }
  std::string text(const char* key) const {
    const json& v = field(key);
    if (!v.is_string()) fail("{}: provenance \"{}\" must be a string", label_, key);
    return v.get<std::string>();
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = field(key);
    if (!v.is_number_integer()) fail("{}: provenance \"{}\" must be an integer", label_, key);
    const int64_t value = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : v.get<int64_t>();
    if (value < lo || value > hi) fail("{}: provenance \"{}\" = {} is outside {}..{}", label_, key, v.dump(), lo, hi);
    return value;
  }

 private:
  const json& object_;
  std::string label_;
};

CalibrationProvenance parse_provenance(const std::string& text, const std::string& label) {
  const json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) fail("{}: metadata \"provenance\" is not a JSON object", label);
  const ProvenanceReader r(object, label);
  CalibrationProvenance p;
  const json& seed = r.field("seed");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0))
    fail("{}: provenance \"seed\" must be a non-negative integer", label);
  p.seed = seed.get<uint64_t>();
  p.samples = r.integer("samples", 1, int64_t{1} << 24);
  p.seqlen = r.integer("seqlen", 2, int64_t{1} << 24);
  p.separator = static_cast<int32_t>(r.integer("separator", 0, INT32_MAX));
  p.model_dir = r.text("model_dir");
  p.weights_file = r.text("weights_file");
  p.weights_sha256 = r.text("weights_sha256");
  p.tokenizer_file = r.text("tokenizer_file");
  p.tokenizer_sha256 = r.text("tokenizer_sha256");
  p.ssdq_version = r.text("ssdq_version");
  const json& seconds = r.field("seconds");
  if (!seconds.is_number()) fail("{}: provenance \"seconds\" must be a number", label);
  p.seconds = seconds.get<double>();
  if (object.contains("forward")) p.forward = r.text("forward");
  const json& files = r.field("data_files");
  if (!files.is_array() || files.empty() || files.size() > 4096)
    fail("{}: provenance \"data_files\" must be a list of 1..4096 files", label);
  for (size_t i = 0; i < files.size(); ++i) {
    if (!files[i].is_object()) fail("{}: provenance data_files[{}] is not an object", label, i);
    const ProvenanceReader f(files[i], fmt::format("{}: data_files[{}]", label, i));
    p.data_files.push_back({f.text("path"), f.text("sha256"), f.integer("bytes", 0, INT64_MAX)});
  }
  return p;
}

int64_t read_i64_scalar(const Tensor& tensor) {
  int64_t value;
  std::memcpy(&value, tensor.data, sizeof value);
  return value;
}

Tensor i64_scalar(int64_t value) {
  std::vector<uint8_t> bytes(sizeof value);
  std::memcpy(bytes.data(), &value, sizeof value);
  return Tensor::own(DType::I64, {1}, std::move(bytes));
}

}  // namespace

void write_calibration_file(const std::string& path, const CalibrationFile& file) {
  const Mamba2Config& c = file.config;
  const CalibrationProvenance& p = file.provenance;
  if (static_cast<int64_t>(file.tokens.size()) != p.samples * p.seqlen)
    fail("internal: {} tokens for {} samples of {}", file.tokens.size(), p.samples, p.seqlen);
  if (static_cast<int64_t>(file.stats.layers.size()) != c.n_layer)
    fail("internal: statistics for {} layers, the model has {}", file.stats.layers.size(), c.n_layer);
  TensorMap tensors;
  tensors["tokens"] = Tensor::from_i32({p.samples, p.seqlen}, file.tokens);
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (int i = 0; i < kStatPointCount; ++i) {
      const auto point = static_cast<StatPoint>(i);
      const ChannelStats& stats = file.stats.layers[l].at(point);
      if (stats.channels() != stat_point_width(c, point) || stats.tracks_sums() != stat_point_tracks_mean(point))
        fail("internal: layer {} {} statistics have the wrong shape", l, stat_point_name(point));
      tensors[point_key(l, point, "absmax")] = Tensor::from_f32({stats.channels()}, stats.absmax());
      if (stats.tracks_sums()) tensors[point_key(l, point, "sums")] = Tensor::from_f64({stats.channels()}, stats.sums());
      tensors[point_key(l, point, "rows")] = i64_scalar(stats.rows());
      if (stats.tracks_histogram())
        tensors[point_key(l, point, "histogram")] = Tensor::from_i64({ChannelStats::kHistogramBins}, stats.histogram());
      if (stats.tracks_top_values())
        tensors[point_key(l, point, "top")] =
            Tensor::from_f32({stats.channels(), ChannelStats::kTopValues}, stats.top_values_table());
    }
  const std::map<std::string, std::string> metadata = {
      {"format", kCalibrationFormat},
      {"format_version", fmt::format("{}.0", kCalibrationVersionMajor)},
      {"model_config", model_config_to_json(c)},
      {"provenance", provenance_json(p).dump()},
  };
  write_safetensors(path, tensors, metadata);
}

CalibrationFile read_calibration_file(const std::string& path) {
  const SafetensorsFile st = read_safetensors(path);
  check_format_version(st.metadata, kCalibrationFormat, kCalibrationVersionMajor, path);
  CalibrationFile file;
  file.config = parse_config_json(require_metadata(st.metadata, "model_config", path), path + ": model_config");
  file.provenance = parse_provenance(require_metadata(st.metadata, "provenance", path), path);
  const Mamba2Config& c = file.config;
  const CalibrationProvenance& p = file.provenance;

  const Tensor& tokens = require_tensor(st.tensors, "tokens", DType::I32, {p.samples, p.seqlen}, path);
  file.tokens.assign(tokens.as<int32_t>(), tokens.as<int32_t>() + tokens.numel());
  for (size_t i = 0; i < file.tokens.size(); ++i)
    if (file.tokens[i] < 0 || file.tokens[i] >= c.vocab_size)
      fail("{}: tokens[{}] = {} is outside the vocabulary (0..{})", path, i, file.tokens[i], c.vocab_size - 1);

  file.stats.layers.resize(c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (int i = 0; i < kStatPointCount; ++i) {
      const auto point = static_cast<StatPoint>(i);
      const int64_t width = stat_point_width(c, point);
      const std::string absmax_key = point_key(l, point, "absmax");
      const Tensor& absmax = require_tensor(st.tensors, absmax_key, DType::F32, {width}, path);
      std::vector<float> maxima(absmax.as<float>(), absmax.as<float>() + width);
      for (int64_t k = 0; k < width; ++k)
        if (!(maxima[k] >= 0) || !std::isfinite(maxima[k]))
          fail("{}: tensor '{}' has {} at channel {}, expected a finite value >= 0", path, absmax_key, maxima[k], k);
      std::vector<double> sums;
      if (stat_point_tracks_mean(point)) {
        const std::string sums_key = point_key(l, point, "sums");
        const Tensor& tensor = require_tensor(st.tensors, sums_key, DType::F64, {width}, path);
        sums.assign(tensor.as<double>(), tensor.as<double>() + width);
        for (int64_t k = 0; k < width; ++k)
          if (!std::isfinite(sums[k])) fail("{}: tensor '{}' has {} at channel {}", path, sums_key, sums[k], k);
      }
      const std::string rows_key = point_key(l, point, "rows");
      const int64_t rows = read_i64_scalar(require_tensor(st.tensors, rows_key, DType::I64, {1}, path));
      if (rows < 0) fail("{}: tensor '{}' is {}, expected a count >= 0", path, rows_key, rows);
      // Clipping data (absent from files of ssdq before --act-clip: export then offers absmax only).
      std::vector<int64_t> histogram;
      const std::string histogram_key = point_key(l, point, "histogram");
      if (st.tensors.count(histogram_key)) {
        const Tensor& tensor =
            require_tensor(st.tensors, histogram_key, DType::I64, {ChannelStats::kHistogramBins}, path);
        histogram.assign(tensor.as<int64_t>(), tensor.as<int64_t>() + ChannelStats::kHistogramBins);
        int64_t total = 0;
        for (int64_t count : histogram) {
          if (count < 0) fail("{}: tensor '{}' has the negative count {}", path, histogram_key, count);
          total += count;
        }
        if (total != rows * width)
          fail("{}: tensor '{}' counts {} values, but the point saw {} rows of {} channels", path, histogram_key,
               total, rows, width);
      }
      std::vector<float> top;
      const std::string top_key = point_key(l, point, "top");
      if (st.tensors.count(top_key)) {
        const Tensor& tensor = require_tensor(st.tensors, top_key, DType::F32, {width, ChannelStats::kTopValues}, path);
        top.assign(tensor.as<float>(), tensor.as<float>() + tensor.numel());
        for (int64_t k = 0; k < width; ++k)
          for (int64_t j = 0; j < ChannelStats::kTopValues; ++j) {
            const float v = top[k * ChannelStats::kTopValues + j];
            const float before = j ? top[k * ChannelStats::kTopValues + j - 1] : maxima[k];
            if (!(v >= 0 && v <= before))
              fail("{}: tensor '{}' channel {} entry {} is {}; expected values >= 0, largest first, none above the "
                   "channel's absmax",
                   path, top_key, k, j, v);
          }
      }
      file.stats.layers[l].at(point) = ChannelStats::from_parts(std::move(maxima), std::move(sums), rows,
                                                                std::move(histogram), std::move(top));
    }
  return file;
}

}  // namespace ssdq
