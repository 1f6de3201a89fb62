#include "model/quantized_artifact.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "formats/artifact.h"
#include "formats/base64.h"
#include "formats/sentencepiece_model.h"
#include "formats/dtype.h"
#include "formats/error.h"

namespace ssdq {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxGroupSize = int64_t{1} << 20;

const char* format_name(ActFormat f) {
  switch (f) {
    case ActFormat::kFloat32: return "fp32";
    case ActFormat::kFloat16: return "fp16";
    case ActFormat::kInt8: return "int8";
  }
  return "?";
}

template <typename T>
Tensor tensor_of(DType dtype, Shape shape, const T* values, size_t count) {
  std::vector<uint8_t> bytes(count * sizeof(T));
  if (count) std::memcpy(bytes.data(), values, bytes.size());
  return Tensor::own(dtype, std::move(shape), std::move(bytes));
}

// Named points of a layer, in the order of docs/QUANTIZATION.md, "Quantization points".
struct PointRef {
  const char* name;
  ActQuant QuantizedLayer::*member;
};
constexpr PointRef kPoints[] = {
    {"in_proj.in", &QuantizedLayer::in_proj_in}, {"conv.in", &QuantizedLayer::conv_in},
    {"ssd.x", &QuantizedLayer::ssd_x},           {"ssd.B", &QuantizedLayer::ssd_B},
    {"ssd.C", &QuantizedLayer::ssd_C},           {"ssd.dt", &QuantizedLayer::ssd_dt},
    {"ssd.x_scaled", &QuantizedLayer::x_scaled}, {"ssd.state", &QuantizedLayer::ssm_state},
    {"ssd.cb", &QuantizedLayer::cb},             {"out_proj.in", &QuantizedLayer::out_proj_in},
};

class Writer {
 public:
  explicit Writer(ParallelFor parallel = {}) : parallel_(std::move(parallel)) {}
  void floats(const std::string& name, const std::vector<float>& v, Shape shape) {
    tensors[name] = Tensor::from_f32(std::move(shape), v);
  }
  void weight(const std::string& name, const WeightMatrix& w) {
    switch (w.kind) {
      case WeightMatrix::Kind::kFloat32:
        floats(name, w.dense, {w.rows, w.cols});
        return;
      case WeightMatrix::Kind::kFloat16: {
        // Straight into the tensor's bytes, in blocks over `parallel_` (an embedding of 1e9 values).
        std::vector<uint8_t> bytes(w.dense.size() * 2);
        const int64_t count = static_cast<int64_t>(w.dense.size()), blocks = (count + kBlock - 1) / kBlock;
        run_items(parallel_, blocks, [&](int64_t b) {
          for (int64_t i = b * kBlock; i < std::min(count, (b + 1) * kBlock); ++i) {
            const uint16_t h = float_to_half(w.dense[i]);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
          }
        });
        tensors[name] = Tensor::own(DType::F16, {w.rows, w.cols}, std::move(bytes));
        return;
      }
      case WeightMatrix::Kind::kQuantized: {
        const QuantizedMatrix& q = w.quantized;
        if (q.bits == QuantBits::kInt8) {
          tensors[name + ".q8"] = tensor_of(DType::I8, {q.rows, q.cols}, q.values.data(), q.values.size());
        } else {
          const std::vector<uint8_t> packed = pack_int4(q.values.data(), static_cast<int64_t>(q.values.size()));
          tensors[name + ".q4"] = tensor_of(DType::U8, {static_cast<int64_t>(packed.size())}, packed.data(), packed.size());
        }
        floats(name + ".scales", q.scales, {q.rows, q.groups_per_row()});
        const int32_t group = static_cast<int32_t>(q.group_size);
        tensors[name + ".group_size"] = Tensor::from_i32({1}, {group});
        return;
      }
    }
  }
  json act(const std::string& name, const ActQuant& a) {
    if (a.is_int8()) {
      const int64_t groups = static_cast<int64_t>(a.scales.size()) / a.inner;
      floats(name + ".scales", a.scales, a.inner == 1 ? Shape{groups} : Shape{groups, a.inner});
      if (!a.index.empty()) tensors[name + ".index"] = Tensor::from_i32({static_cast<int64_t>(a.index.size())}, a.index);
    }
    return format_name(a.format);
  }
  TensorMap tensors;

 private:
  static constexpr int64_t kBlock = int64_t{1} << 20;
  ParallelFor parallel_;
};

class Reader {
 public:
  Reader(const TensorMap& tensors, std::string label) : tensors_(tensors), label_(std::move(label)) {}

  std::vector<float> floats(const std::string& name, const Shape& shape) const {
    return require_tensor(tensors_, name, DType::F32, shape, label_).to_f32();
  }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }

  WeightMatrix weight(const std::string& name, int64_t rows, int64_t cols) const {
    WeightMatrix w;
    w.rows = rows;
    w.cols = cols;
    if (has(name)) {
      const Tensor& t = tensors_.at(name);
      if (t.dtype != DType::F32 && t.dtype != DType::F16)
        fail("{}: tensor '{}' is {}, expected F32 or F16", label_, name, dtype_name(t.dtype));
      require_tensor(tensors_, name, t.dtype, {rows, cols}, label_);
      w.kind = t.dtype == DType::F16 ? WeightMatrix::Kind::kFloat16 : WeightMatrix::Kind::kFloat32;
      w.dense = t.to_f32();
      return w;
    }
    w.kind = WeightMatrix::Kind::kQuantized;
    QuantizedMatrix& q = w.quantized;
    q.rows = rows;
    q.cols = cols;
    const int32_t group = *require_tensor(tensors_, name + ".group_size", DType::I32, {1}, label_).as<int32_t>();
    if (group <= 0 || group > cols || group > kMaxGroupSize)
      fail("{}: tensor '{}.group_size' is {}, expected 1..{}", label_, name, group, cols);
    q.group_size = group;
    q.granularity = group == cols ? Granularity::kPerChannel : Granularity::kPerGroup;
    if (has(name + ".q8")) {
      q.bits = QuantBits::kInt8;
      const Tensor& t = require_tensor(tensors_, name + ".q8", DType::I8, {rows, cols}, label_);
      q.values.assign(t.as<int8_t>(), t.as<int8_t>() + rows * cols);
    } else if (has(name + ".q4")) {
      q.bits = QuantBits::kInt4;
      const int64_t packed = (rows * cols + 1) / 2;
      const Tensor& t = require_tensor(tensors_, name + ".q4", DType::U8, {packed}, label_);
      q.values = unpack_int4(t.as<uint8_t>(), rows * cols);
    } else {
      fail("{}: weight '{}' is missing (no '{}', '{}.q8' or '{}.q4')", label_, name, name, name, name);
    }
    q.scales = floats(name + ".scales", {rows, q.groups_per_row()});
    return w;
  }

  ActQuant act(const std::string& name, const std::string& format, int64_t channels, int64_t inner) const {
    ActQuant a;
    if (format == "fp32") return a;
    if (format == "fp16") return ActQuant::float16();
    if (format != "int8") fail("{}: layout gives {} the format \"{}\", expected fp32, fp16 or int8", label_, name, format);
    a.format = ActFormat::kInt8;
    const auto found = tensors_.find(name + ".scales");
    if (found == tensors_.end()) fail("{}: tensor '{}.scales' is missing", label_, name);
    const Shape& shape = found->second.shape;
    if (shape.size() == 2 && inner > 1 && shape[1] == inner) a.inner = inner;
    const int64_t groups = shape.empty() ? 0 : shape[0];
    if (groups <= 0 || groups > std::max<int64_t>(channels, 1))
      fail("{}: tensor '{}.scales' has shape {}, expected [1..{}]{}", label_, name, shape_str(shape), channels,
           inner > 1 ? fmt::format(" or [1..{}, {}]", channels, inner) : "");
    a.scales = floats(name + ".scales", a.inner == 1 ? Shape{groups} : Shape{groups, a.inner});
    if (has(name + ".index")) {
      const Tensor& t = require_tensor(tensors_, name + ".index", DType::I32, {channels}, label_);
      a.index.assign(t.as<int32_t>(), t.as<int32_t>() + channels);
    }
    return a;
  }

 private:
  const TensorMap& tensors_;
  std::string label_;
};

const json& field(const json& object, const char* key, const std::string& label) {
  if (!object.is_object() || !object.contains(key)) fail("{}: layout lacks \"{}\"", label, key);
  return object.at(key);
}

}  // namespace

std::string tokenizer_metadata(const std::string& bytes, const std::string& sha256) {
  if (SentencePieceModel::looks_like_model(bytes))
    return json{{"sha256", sha256}, {"sentencepiece_base64", base64_encode(bytes)}}.dump();
  return json{{"sha256", sha256}, {"json", bytes}}.dump();
}

void write_quantized_artifact(const std::string& path, const QuantizedModel& model, const ArtifactDescription& d,
                              const ParallelFor& parallel) {
  validate_quantized_model(model, path);
  Writer w(parallel);
  w.weight("embedding", model.embedding);
  w.floats("norm_f", model.norm_f, {model.config.d_model});
  if (!model.lm_head.empty()) w.weight("lm_head", model.lm_head);
  const Mamba2Config& c = model.config;
  // The layers' tensors (int4 packing, copies) made a layer an item, then gathered in layer order.
  const int64_t L = static_cast<int64_t>(model.layers.size());
  std::vector<Writer> layer_writers(L);
  std::vector<json> entries(L);
  run_items(parallel, L, [&](int64_t l) {
    Writer& lw = layer_writers[l];
    const QuantizedLayer& q = model.layers[l];
    const std::string p = fmt::format("layers.{}.", l);
    lw.floats(p + "norm", q.norm, {c.d_model});
    lw.weight(p + "in_proj", q.in_proj);
    lw.floats(p + "conv_weight", q.conv_weight, {c.conv_dim(), c.d_conv});
    lw.floats(p + "conv_bias", q.conv_bias, {c.conv_dim()});
    lw.floats(p + "dt_bias", q.dt_bias, {c.nheads()});
    lw.floats(p + "A", q.A, {c.nheads()});
    lw.floats(p + "D", q.D, {c.nheads()});
    lw.floats(p + "gated_norm", q.gated_norm, {c.d_inner()});
    lw.weight(p + "out_proj", q.out_proj);
    if (!q.out_bias.empty()) lw.floats(p + "out_bias", q.out_bias, {c.d_model});
    json points = json::object();
    for (const PointRef& point : kPoints) points[point.name] = lw.act(p + "act." + point.name, q.*point.member);
    json entry = {{"ssd_mode", q.ssd_mode == SsdMode::kSsdi8 ? "ssdi8" : "float"},
                  {"online_hadamard", q.online_hadamard},
                  {"points", points}};
    if (q.hadamard_blocks != 1) entry["hadamard_blocks"] = q.hadamard_blocks;
    entries[l] = std::move(entry);
  });
  json layers = json::array();
  for (int64_t l = 0; l < L; ++l) {
    w.tensors.merge(layer_writers[l].tensors);
    layers.push_back(std::move(entries[l]));
  }
  // Block-diagonal rotations are new in format 2.0: a file with them is 2.0, so that an older reader
  // (which would rotate over all channels) refuses it; a file without them stays 1.0.
  const bool blocks = std::any_of(model.layers.begin(), model.layers.end(),
                                  [](const QuantizedLayer& q) { return q.hadamard_blocks != 1; });
  std::map<std::string, std::string> metadata = {
      {"model_config", model_config_to_json(c)},
      {"recipe", d.recipe},
      {"calibration", d.calibration},
      {"tokenizer", d.tokenizer},
      {"layout", json{{"layers", layers}}.dump()},
  };
  write_artifact(path, w.tensors, std::move(metadata), blocks ? kArtifactVersionMajor : 1);
}

LoadedArtifact read_quantized_artifact(const std::string& path) {
  const ArtifactFile file = read_artifact(path);
  auto model = std::make_shared<QuantizedModel>();
  model->config = parse_config_json(file.metadata.at("model_config"), path + ": model_config");
  const Mamba2Config& c = model->config;
  const Reader r(file.tensors, path);
  model->embedding = r.weight("embedding", c.vocab_size, c.d_model);
  model->norm_f = r.floats("norm_f", {c.d_model});
  const bool has_head = r.has("lm_head") || r.has("lm_head.q8") || r.has("lm_head.q4");
  if (has_head) model->lm_head = r.weight("lm_head", c.vocab_size, c.d_model);

  const json layout = json::parse(require_metadata(file.metadata, "layout", path), nullptr, false);
  if (layout.is_discarded()) fail("{}: metadata \"layout\" is not valid JSON", path);
  const json& layers = field(layout, "layers", path);
  if (!layers.is_array() || static_cast<int64_t>(layers.size()) != c.n_layer)
    fail("{}: layout describes {} layers, the config has {}", path, layers.is_array() ? layers.size() : 0, c.n_layer);
  const int64_t E = c.d_inner(), H = c.nheads(), GN = c.ngroups * c.d_state;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = fmt::format("layers.{}.", l), at = fmt::format("{}: layout layer {}", path, l);
    const json& entry = layers[l];
    QuantizedLayer q;
    q.norm = r.floats(p + "norm", {c.d_model});
    q.in_proj = r.weight(p + "in_proj", c.d_in_proj(), c.d_model);
    q.conv_weight = r.floats(p + "conv_weight", {c.conv_dim(), c.d_conv});
    q.conv_bias = r.floats(p + "conv_bias", {c.conv_dim()});
    q.dt_bias = r.floats(p + "dt_bias", {H});
    q.A = r.floats(p + "A", {H});
    q.D = r.floats(p + "D", {H});
    q.gated_norm = r.floats(p + "gated_norm", {E});
    q.out_proj = r.weight(p + "out_proj", c.d_model, E);
    if (r.has(p + "out_bias")) q.out_bias = r.floats(p + "out_bias", {c.d_model});
    const json& mode = field(entry, "ssd_mode", at);
    if (mode == "ssdi8") {
      q.ssd_mode = SsdMode::kSsdi8;
    } else if (mode != "float") {
      fail("{}: ssd_mode {} is neither \"float\" nor \"ssdi8\"", at, mode.dump());
    }
    const json& hadamard = field(entry, "online_hadamard", at);
    if (!hadamard.is_boolean()) fail("{}: online_hadamard must be true or false", at);
    q.online_hadamard = hadamard.get<bool>();
    if (entry.contains("hadamard_blocks")) {
      const json& blocks = entry.at("hadamard_blocks");
      if (!blocks.is_number_integer() || file.version_major < 2)
        fail("{}: hadamard_blocks must be an integer, in a file of format 2.0 or newer", at);
      q.hadamard_blocks = blocks.get<int64_t>();
    }
    const json& points = field(entry, "points", at);
    const int64_t widths[] = {c.d_model, c.conv_dim(), E, GN, GN, H, E, E, c.ngroups, E};
    for (size_t i = 0; i < std::size(kPoints); ++i) {
      const json& format = field(points, kPoints[i].name, at);
      if (!format.is_string()) fail("{}: the format of {} must be a string", at, kPoints[i].name);
      const bool state = kPoints[i].member == &QuantizedLayer::ssm_state;
      q.*kPoints[i].member = r.act(p + "act." + kPoints[i].name, format.get<std::string>(),
                                   state ? E : widths[i], state ? c.d_state : 1);
    }
    model->layers.push_back(std::move(q));
  }
  validate_quantized_model(*model, path);

  LoadedArtifact loaded;
  loaded.model = std::move(model);
  loaded.description = {file.metadata.at("recipe"), file.metadata.at("calibration"), file.metadata.at("tokenizer")};
  const json tokenizer = json::parse(loaded.description.tokenizer, nullptr, false);
  if (tokenizer.is_object() && tokenizer.contains("json")) {
    if (!tokenizer.at("json").is_string()) fail("{}: metadata tokenizer.json must be a string", path);
    loaded.tokenizer_bytes = tokenizer.at("json").get<std::string>();
  } else if (tokenizer.is_object() && tokenizer.contains("sentencepiece_base64")) {
    if (!tokenizer.at("sentencepiece_base64").is_string())
      fail("{}: metadata tokenizer.sentencepiece_base64 must be a string", path);
    loaded.tokenizer_bytes =
        base64_decode(tokenizer.at("sentencepiece_base64").get<std::string>(), path + ": tokenizer.sentencepiece_base64");
  }
  return loaded;
}

}  // namespace ssdq
