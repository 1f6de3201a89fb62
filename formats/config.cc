#include "formats/config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "formats/error.h"
#include "formats/file_io.h"

namespace ssdq {
namespace {

using nlohmann::json;

// Real config.json files are a few KB and a few levels deep. The caps keep a hostile file from
// being read whole into memory, and keep nesting within what json::dump (recursive) can print.
constexpr size_t kMaxConfigBytes = size_t{1} << 20;
constexpr int kMaxJsonDepth = 64;

class Fields {
 public:
  Fields(const json& object, std::string label) : object_(object), label_(std::move(label)) {}

  int64_t required_int(const char* key) const {
    if (!object_.contains(key)) fail("{}: missing field '{}'", label_, key);
    return as_int(key, object_.at(key));
  }
  int64_t optional_int(const char* key, int64_t fallback) const {
    if (!object_.contains(key) || object_.at(key).is_null()) return fallback;
    return as_int(key, object_.at(key));
  }
  bool optional_bool(const char* key, bool fallback) const {
    if (!object_.contains(key) || object_.at(key).is_null()) return fallback;
    const json& value = object_.at(key);
    if (!value.is_boolean()) fail("{}: field '{}' must be true or false, got {}", label_, key, value.dump());
    return value.get<bool>();
  }
  double optional_double(const char* key, double fallback) const {
    if (!object_.contains(key) || object_.at(key).is_null()) return fallback;
    return as_double(key, object_.at(key));
  }
  // A float that may be spelled {"__float__": "Infinity"} (transformers' JSON encoding of inf).
  double as_double(const std::string& key, const json& value) const {
    if (value.is_number()) return value.get<double>();
    if (value.is_object() && value.contains("__float__") && value.at("__float__").is_string()) {
      const std::string text = value.at("__float__").get<std::string>();
      if (text == "Infinity" || text == "inf") return INFINITY;
      if (text == "-Infinity" || text == "-inf") return -INFINITY;
      if (text == "NaN" || text == "nan") return NAN;
    }
    fail("{}: field '{}' must be a number, got {}", label_, key, value.dump());
  }
  const json& object() const { return object_; }
  const std::string& label() const { return label_; }

 private:
  int64_t as_int(const char* key, const json& value) const {
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail("{}: field '{}' = {} is too large", label_, key, value.dump());
    if (value.is_number_integer()) return value.get<int64_t>();
    // Whole floats (2.0e3) are accepted; beyond +-2^62 the cast to int64 would be undefined.
    constexpr double kLimit = 4.6e18;
    if (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>() &&
        std::fabs(value.get<double>()) < kLimit)
      return static_cast<int64_t>(value.get<double>());
    fail("{}: field '{}' must be an integer, got {}", label_, key, value.dump());
  }
  const json& object_;
  std::string label_;
};

void parse_mamba_ssm(const Fields& top, Mamba2Config& config) {
  config.spelling = ConfigSpelling::kMambaSsm;
  config.d_model = top.required_int("d_model");
  config.n_layer = top.required_int("n_layer");
  config.vocab_size = top.required_int("vocab_size");
  const int64_t pad = top.optional_int("pad_vocab_size_multiple", 16);
  if (pad <= 0 || pad > (1 << 24))
    fail("{}: pad_vocab_size_multiple must be in 1..{}, got {}", top.label(), 1 << 24, pad);
  // Out-of-range sizes are left for validate_config to report (padding them could overflow).
  if (config.vocab_size > 0 && config.vocab_size <= INT32_MAX && config.vocab_size % pad != 0)
    config.vocab_size += pad - config.vocab_size % pad;
  config.tie_embeddings = top.optional_bool("tie_embeddings", true);
  if (!top.optional_bool("rms_norm", true)) fail("{}: rms_norm = false (LayerNorm) is not supported", top.label());
  if (top.optional_int("d_intermediate", 0) != 0)
    fail("{}: d_intermediate > 0 (gated MLP layers) is not supported", top.label());
  const json& object = top.object();
  if (object.contains("attn_layer_idx") && !object.at("attn_layer_idx").is_null() &&
      !(object.at("attn_layer_idx").is_array() && object.at("attn_layer_idx").empty()))
    fail("{}: attention layers (attn_layer_idx) are not supported", top.label());
  if (!object.contains("ssm_cfg") || object.at("ssm_cfg").is_null()) return;
  if (!object.at("ssm_cfg").is_object()) fail("{}: field 'ssm_cfg' must be an object", top.label());
  const Fields ssm(object.at("ssm_cfg"), top.label() + ": ssm_cfg");
  if (ssm.object().contains("layer") && ssm.object().at("layer") != "Mamba2")
    fail("{}: ssm_cfg.layer is {}, only Mamba2 is supported", top.label(), ssm.object().at("layer").dump());
  config.d_state = ssm.optional_int("d_state", config.d_state);
  config.headdim = ssm.optional_int("headdim", config.headdim);
  config.ngroups = ssm.optional_int("ngroups", config.ngroups);
  config.d_conv = ssm.optional_int("d_conv", config.d_conv);
  config.expand = ssm.optional_int("expand", config.expand);
  config.chunk_size = ssm.optional_int("chunk_size", config.chunk_size);
  if (ssm.optional_bool("bias", false)) fail("{}: ssm_cfg.bias = true is not supported", top.label());
  if (!ssm.optional_bool("conv_bias", true)) fail("{}: ssm_cfg.conv_bias = false is not supported", top.label());
  if (!ssm.optional_bool("rmsnorm", true)) fail("{}: ssm_cfg.rmsnorm = false is not supported", top.label());
  if (ssm.optional_bool("norm_before_gate", false))
    fail("{}: ssm_cfg.norm_before_gate = true is not supported", top.label());
  if (ssm.optional_bool("D_has_hdim", false)) fail("{}: ssm_cfg.D_has_hdim = true is not supported", top.label());
  validate_config(config, top.label());  // d_inner() below must not overflow
  if (ssm.object().contains("d_ssm") && !ssm.object().at("d_ssm").is_null() &&
      ssm.optional_int("d_ssm", 0) != config.d_inner())
    fail("{}: ssm_cfg.d_ssm different from d_inner is not supported", top.label());
  if (ssm.object().contains("dt_limit")) {
    const json& limit = ssm.object().at("dt_limit");
    if (!limit.is_array() || limit.size() != 2) fail("{}: ssm_cfg.dt_limit must be a pair", top.label());
    config.dt_min = ssm.as_double("dt_limit[0]", limit[0]);
    config.dt_max = ssm.as_double("dt_limit[1]", limit[1]);
  }
}

// Mistral's params.json for Mamba models (mistral_inference's MambaArgs) names the mamba_ssm
// config it builds: d_model = dim, n_layer = n_layers, ssm_cfg {ngroups, layer Mamba2}, every
// other SSM width at mamba_ssm's default.
json mamba_ssm_from_mistral_params(const json& params, const std::string& label) {
  if (params.contains("model_type") && params.at("model_type") != "mamba")
    fail("{}: model_type is {}, expected \"mamba\"", label, params.at("model_type").dump());
  json out = json::object();
  out["d_model"] = params.at("dim");
  if (!params.contains("n_layers")) fail("{}: missing field 'n_layers'", label);
  out["n_layer"] = params.at("n_layers");
  if (!params.contains("vocab_size")) fail("{}: missing field 'vocab_size'", label);
  out["vocab_size"] = params.at("vocab_size");
  for (const char* key : {"pad_vocab_size_multiple", "tie_embeddings", "rms_norm"})
    if (params.contains(key)) out[key] = params.at(key);
  out["ssm_cfg"] = {{"layer", "Mamba2"}, {"ngroups", params.value("n_groups", json(1))}};
  return out;
}

// Python's json.dumps writes inf and nan as bare Infinity / -Infinity / NaN, which JSON does
// not have; outside strings they become {"__float__": "..."}, the spelling as_double reads.
std::string with_python_nonfinite(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::strlen(token);
      if (text.compare(i, n, token) == 0) {
        out += fmt::format("{{\"__float__\": \"{}\"}}", token);
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

void parse_transformers(const Fields& top, Mamba2Config& config) {
  config.spelling = ConfigSpelling::kTransformers;
  config.d_model = top.required_int("hidden_size");
  config.n_layer = top.required_int("num_hidden_layers");
  config.vocab_size = top.required_int("vocab_size");
  config.d_state = top.required_int("state_size");
  config.headdim = top.required_int("head_dim");
  config.ngroups = top.required_int("n_groups");
  config.expand = top.optional_int("expand", 2);
  config.d_conv = top.optional_int("conv_kernel", 4);
  config.chunk_size = top.optional_int("chunk_size", 256);
  config.norm_eps = top.optional_double("layer_norm_epsilon", 1e-5);
  config.tie_embeddings = top.optional_bool("tie_word_embeddings", false);
  validate_config(config, top.label());  // nheads() below must not divide by zero or overflow
  const int64_t heads = top.optional_int("num_heads", config.nheads());
  if (heads != config.nheads())
    fail("{}: num_heads = {} but expand * hidden_size / head_dim = {}", top.label(), heads, config.nheads());
  if (top.optional_bool("use_bias", false)) fail("{}: use_bias = true is not supported", top.label());
  if (!top.optional_bool("use_conv_bias", true)) fail("{}: use_conv_bias = false is not supported", top.label());
  if (!top.optional_bool("rms_norm", true)) fail("{}: rms_norm = false is not supported", top.label());
  const json& object = top.object();
  if (object.contains("time_step_limit") && !object.at("time_step_limit").is_null()) {
    const json& limit = object.at("time_step_limit");
    if (!limit.is_array() || limit.size() != 2) fail("{}: time_step_limit must be a pair", top.label());
    config.dt_min = top.as_double("time_step_limit[0]", limit[0]);
    config.dt_max = top.as_double("time_step_limit[1]", limit[1]);
  }
}

}  // namespace

int64_t Mamba2Config::parameter_count() const {
  const int64_t per_layer = d_model + d_in_proj() * d_model + conv_dim() * (d_conv + 1) + 3 * nheads() +
                            d_inner() + d_model * d_inner();
  return vocab_size * d_model * (tie_embeddings ? 1 : 2) + n_layer * per_layer + d_model;
}

std::string Mamba2Config::summary() const {
  return fmt::format(
      "d_model {} · layers {} · d_inner {} · heads {} × headdim {} · d_state {} · ngroups {} · d_conv {} · chunk {} · "
      "vocab {} · {} embeddings · {:.1f} M parameters",
      d_model, n_layer, d_inner(), nheads(), headdim, d_state, ngroups, d_conv, chunk_size, vocab_size,
      tie_embeddings ? "tied" : "untied", parameter_count() / 1e6);
}

void validate_config(const Mamba2Config& c, const std::string& label) {
  auto positive = [&](const char* name, int64_t value, int64_t limit) {
    if (value <= 0 || value > limit) fail("{}: {} = {} is out of range (1..{})", label, name, value, limit);
  };
  positive("d_model", c.d_model, 1 << 16);
  positive("n_layer", c.n_layer, 1024);
  positive("vocab_size", c.vocab_size, 1 << 24);
  positive("d_state", c.d_state, 1024);
  positive("headdim", c.headdim, 1024);
  positive("ngroups", c.ngroups, 1024);
  positive("d_conv", c.d_conv, 64);
  positive("expand", c.expand, 16);
  positive("chunk_size", c.chunk_size, 4096);
  if (c.d_inner() % c.headdim != 0)
    fail("{}: d_inner = {} is not a multiple of headdim = {}", label, c.d_inner(), c.headdim);
  if (c.nheads() % c.ngroups != 0)
    fail("{}: nheads = {} is not a multiple of ngroups = {}", label, c.nheads(), c.ngroups);
  if (!(c.norm_eps > 0)) fail("{}: the norm epsilon must be positive", label);
  if (!(c.dt_min >= 0) || !(c.dt_max > c.dt_min)) fail("{}: time step limit [{}, {}] is invalid", label, c.dt_min, c.dt_max);
}

Mamba2Config parse_config_json(std::string_view text, const std::string& label) {
  if (text.size() > kMaxConfigBytes)
    fail("{}: {} bytes is too large for a config.json (the limit is {} bytes)", label, text.size(), kMaxConfigBytes);
  json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) fail("{}: JSON nested more than {} levels deep", label, kMaxJsonDepth);
    return true;
  };
  const std::string cleaned = with_python_nonfinite(text);
  json object = json::parse(cleaned.begin(), cleaned.end(), limit_depth, /*allow_exceptions=*/false);
  if (object.is_discarded()) fail("{}: not valid JSON", label);
  if (!object.is_object()) fail("{}: expected a JSON object", label);
  Mamba2Config config;
  if (object.contains("dim") && !object.contains("d_model") && !object.contains("hidden_size")) {
    const json translated = mamba_ssm_from_mistral_params(object, label);
    parse_mamba_ssm(Fields(translated, label), config);
    config.spelling = ConfigSpelling::kMistralParams;
  } else if (object.contains("d_model")) {
    parse_mamba_ssm(Fields(object, label), config);
  } else if (object.contains("hidden_size")) {
    if (object.contains("model_type") && object.at("model_type") != "mamba2")
      fail("{}: model_type is {}, expected \"mamba2\"", label, object.at("model_type").dump());
    parse_transformers(Fields(object, label), config);
  } else {
    fail("{}: missing field 'd_model' (mamba_ssm spelling), 'hidden_size' (transformers spelling) or 'dim' (Mistral's "
         "params.json)",
         label);
  }
  validate_config(config, label);
  return config;
}

Mamba2Config load_config(const std::string& path) {
  const auto file = MappedFile::open(path);
  return parse_config_json(file->view(), path);
}

}  // namespace ssdq
