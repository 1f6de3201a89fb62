// Mamba-2 hyper-parameters from config.json, in either spelling: mamba_ssm (`d_model`,
// `n_layer`, `ssm_cfg`) or Hugging Face transformers (`hidden_size`, `num_hidden_layers`, ...);
// or from Mistral's params.json (`dim`, `n_layers`, `n_groups`: mistral_inference builds a
// mamba_ssm Mamba2 model from it). Python's bare Infinity / NaN (json.dumps writes them, e.g.
// transformers' time_step_limit [0.0, Infinity]) are read as numbers.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace ssdq {

enum class ConfigSpelling { kMambaSsm, kTransformers, kMistralParams, kMegatronArgs };

struct Mamba2Config {
  int64_t d_model = 0;
  int64_t n_layer = 0;
  int64_t vocab_size = 0;  // rows of the embedding (already padded)
  int64_t d_state = 128;
  int64_t headdim = 64;
  int64_t ngroups = 1;
  int64_t d_conv = 4;
  int64_t expand = 2;
  int64_t chunk_size = 256;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  double dt_min = 0.0;  // time_step_limit: dt is clamped to [dt_min, dt_max]
  double dt_max = std::numeric_limits<double>::infinity();
  ConfigSpelling spelling = ConfigSpelling::kMambaSsm;
  // A tensor-parallel shard's d_inner (its heads' channels: expand · d_model / tp), which expand
  // cannot express; 0 for a whole model (model/tensor_parallel.h).
  int64_t d_inner_shard = 0;

  int64_t d_inner() const { return d_inner_shard ? d_inner_shard : expand * d_model; }
  int64_t nheads() const { return d_inner() / headdim; }
  int64_t conv_dim() const { return d_inner() + 2 * ngroups * d_state; }
  int64_t d_in_proj() const { return 2 * d_inner() + 2 * ngroups * d_state + nheads(); }
  int64_t heads_per_group() const { return nheads() / ngroups; }
  // Parameters with the tied embedding counted once.
  int64_t parameter_count() const;
  std::string summary() const;
};

// Parses config.json or params.json text; `label` (the file path) prefixes every error.
Mamba2Config parse_config_json(std::string_view text, const std::string& label);
Mamba2Config load_config(const std::string& path);
// Fails (naming `label`) if the widths are inconsistent or a feature ssdq does not run is on.
void validate_config(const Mamba2Config& config, const std::string& label);

}  // namespace ssdq
