// A Mamba-2 checkpoint folder: config.json plus weights in any published layout
// (model.safetensors, sharded safetensors with model.safetensors.index.json, or
// pytorch_model.bin), or a Megatron-LM checkpoint (formats/megatron_checkpoint.h), with tensor names brought to the mamba_ssm spelling and every shape
// checked against the config.
#pragma once

#include <string>

#include "formats/config.h"
#include "formats/tensor.h"

namespace ssdq {

struct Checkpoint {
  std::string dir;
  std::string weights_path;  // the file the tensors came from (the index for sharded checkpoints)
  std::string layout;        // what was read, e.g. "sharded safetensors (3 files)", for `ssdq info`
  Mamba2Config config;
  TensorMap tensors;  // mamba_ssm names; lm_head.weight only when the embeddings are untied
};

Checkpoint load_checkpoint(const std::string& dir);

// Canonical (mamba_ssm) tensor names.
namespace tensor_names {
std::string layer(int64_t index, const std::string& suffix);  // "backbone.layers.{i}." + suffix
inline const char* kEmbedding = "backbone.embedding.weight";
inline const char* kNormF = "backbone.norm_f.weight";
inline const char* kLmHead = "lm_head.weight";
}  // namespace tensor_names

// Renames transformers' tensor names to mamba_ssm's, drops a tied lm_head, and checks that
// exactly the expected tensors are present with the expected shapes (errors name the tensor).
TensorMap canonicalize_tensors(TensorMap tensors, const Mamba2Config& config, const std::string& label);

}  // namespace ssdq
