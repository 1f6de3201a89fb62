#include "formats/checkpoint.h"

#include <cstring>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/megatron_checkpoint.h"
#include "formats/safetensors.h"
#include "formats/torch_bin.h"

namespace ssdq {

std::string tensor_names::layer(int64_t index, const std::string& suffix) {
  return "backbone.layers." + std::to_string(index) + "." + suffix;
}

namespace {

struct Expected {
  std::string name;
  Shape shape;
};

std::vector<Expected> expected_tensors(const Mamba2Config& c) {
  std::vector<Expected> out = {{tensor_names::kEmbedding, {c.vocab_size, c.d_model}},
                               {tensor_names::kNormF, {c.d_model}}};
  if (!c.tie_embeddings) out.push_back({tensor_names::kLmHead, {c.vocab_size, c.d_model}});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto name = [&](const char* suffix) { return tensor_names::layer(i, suffix); };
    out.push_back({name("norm.weight"), {c.d_model}});
    out.push_back({name("mixer.in_proj.weight"), {c.d_in_proj(), c.d_model}});
    out.push_back({name("mixer.conv1d.weight"), {c.conv_dim(), 1, c.d_conv}});
    out.push_back({name("mixer.conv1d.bias"), {c.conv_dim()}});
    out.push_back({name("mixer.dt_bias"), {c.nheads()}});
    out.push_back({name("mixer.A_log"), {c.nheads()}});
    out.push_back({name("mixer.D"), {c.nheads()}});
    out.push_back({name("mixer.norm.weight"), {c.d_inner()}});
    out.push_back({name("mixer.out_proj.weight"), {c.d_model, c.d_inner()}});
  }
  return out;
}

std::string canonical_name(const std::string& name) {
  static const std::string kHfEmbedding = "backbone.embeddings.weight";
  if (name == kHfEmbedding) return tensor_names::kEmbedding;
  return name;
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape &&
         (a.data == b.data || std::memcmp(a.data, b.data, a.nbytes()) == 0);
}

}  // namespace

TensorMap canonicalize_tensors(TensorMap tensors, const Mamba2Config& config, const std::string& label) {
  TensorMap renamed;
  for (auto& [name, tensor] : tensors) {
    const std::string canonical = canonical_name(name);
    if (!renamed.emplace(canonical, std::move(tensor)).second)
      fail("{}: tensor '{}' appears under both spellings", label, canonical);
  }
  if (config.tie_embeddings) {
    auto head = renamed.find(tensor_names::kLmHead);
    if (head != renamed.end()) {
      auto embedding = renamed.find(tensor_names::kEmbedding);
      if (embedding != renamed.end() && !same_tensor(head->second, embedding->second))
        fail("{}: config says the embeddings are tied, but lm_head.weight differs from {}", label,
             tensor_names::kEmbedding);
      renamed.erase(head);
    }
  }
  TensorMap out;
  for (const Expected& expected : expected_tensors(config)) {
    auto found = renamed.find(expected.name);
    if (found == renamed.end()) fail("{}: missing tensor '{}' (expected shape {})", label, expected.name, shape_str(expected.shape));
    const Tensor& tensor = found->second;
    if (tensor.shape != expected.shape)
      fail("{}: tensor '{}' has shape {}, the config implies {}", label, expected.name, shape_str(tensor.shape),
           shape_str(expected.shape));
    if (!dtype_is_float(tensor.dtype))
      fail("{}: tensor '{}' has dtype {}, expected a float type", label, expected.name, dtype_name(tensor.dtype));
    out.emplace(expected.name, tensor);
    renamed.erase(found);
  }
  if (!renamed.empty()) fail("{}: unexpected tensor '{}' (not part of a Mamba-2 model)", label, renamed.begin()->first);
  return out;
}

Checkpoint load_checkpoint(const std::string& dir) {
  Checkpoint checkpoint;
  checkpoint.dir = dir;
  // config.json, else Mistral's params.json (which names the same hyper-parameters).
  std::string config_path = join_path(dir, "config.json");
  if (!file_exists(config_path)) config_path = join_path(dir, "params.json");
  if (!file_exists(config_path)) {
    if (is_megatron_checkpoint(dir)) return load_megatron_checkpoint(dir);
    fail("{}: no config.json in the model folder (nor Mistral's params.json, nor a Megatron-LM checkpoint: "
         "latest_checkpointed_iteration.txt, release/ or mp_rank_00/)",
         dir);
  }
  checkpoint.config = load_config(config_path);
  const std::string consolidated = join_path(dir, "consolidated.safetensors");
  const std::string single = join_path(dir, "model.safetensors");
  const std::string index = join_path(dir, "model.safetensors.index.json");
  const std::string bin = join_path(dir, "pytorch_model.bin");
  TensorMap tensors;
  if (file_exists(single)) {
    checkpoint.weights_path = single;
    checkpoint.layout = "safetensors";
    tensors = read_safetensors(single).tensors;
  } else if (file_exists(index)) {
    checkpoint.weights_path = index;
    checkpoint.layout = "sharded safetensors";
    tensors = read_safetensors_index(index).tensors;
  } else if (file_exists(bin)) {
    checkpoint.weights_path = bin;
    checkpoint.layout = "torch.save (pytorch_model.bin)";
    tensors = read_torch_bin(bin);
  } else if (file_exists(consolidated)) {
    checkpoint.weights_path = consolidated;
    checkpoint.layout = "Mistral (consolidated.safetensors)";
    tensors = read_safetensors(consolidated).tensors;
  } else {
    fail("{}: no weights found (expected model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
         "consolidated.safetensors)",
         dir);
  }
  checkpoint.tensors = canonicalize_tensors(std::move(tensors), checkpoint.config, checkpoint.weights_path);
  return checkpoint;
}

}  // namespace ssdq
