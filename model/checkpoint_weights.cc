#include "model/checkpoint_weights.h"

#include <cmath>

namespace ssdq {

ModelWeights load_fp32_weights(const Checkpoint& checkpoint) {
  const Mamba2Config& c = checkpoint.config;
  auto get = [&](const std::string& name) { return checkpoint.tensors.at(name).to_f32(); };
  ModelWeights w;
  w.config = c;
  w.embedding = get(tensor_names::kEmbedding);
  if (!c.tie_embeddings) w.lm_head = get(tensor_names::kLmHead);
  w.norm_f = get(tensor_names::kNormF);
  w.layers.resize(c.n_layer);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto name = [&](const char* suffix) { return tensor_names::layer(i, suffix); };
    LayerWeights& layer = w.layers[i];
    layer.norm = get(name("norm.weight"));
    layer.in_proj = get(name("mixer.in_proj.weight"));
    layer.conv_weight = get(name("mixer.conv1d.weight"));
    layer.conv_bias = get(name("mixer.conv1d.bias"));
    layer.dt_bias = get(name("mixer.dt_bias"));
    layer.A = get(name("mixer.A_log"));
    for (float& a : layer.A) a = -std::exp(a);
    layer.D = get(name("mixer.D"));
    layer.gated_norm = get(name("mixer.norm.weight"));
    layer.out_proj = get(name("mixer.out_proj.weight"));
  }
  return w;
}

}  // namespace ssdq
