#include "model/model_weights.h"

#include <cmath>
#include <random>

namespace ssdq {

ModelWeights random_weights(const Mamba2Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  auto gaussian = [&](int64_t count, float stddev) {
    std::vector<float> out(count);
    for (float& v : out) v = normal(rng) * stddev;
    return out;
  };
  auto around = [&](int64_t count, float center, float spread) {
    std::vector<float> out(count);
    for (float& v : out) v = center + spread * (2 * uniform(rng) - 1);
    return out;
  };
  ModelWeights w;
  w.config = c;
  w.embedding = gaussian(c.vocab_size * c.d_model, 0.02f);
  if (!c.tie_embeddings) w.lm_head = gaussian(c.vocab_size * c.d_model, 0.02f);
  w.norm_f = around(c.d_model, 1.0f, 0.1f);
  w.layers.resize(c.n_layer);
  for (LayerWeights& layer : w.layers) {
    layer.norm = around(c.d_model, 1.0f, 0.1f);
    layer.in_proj = gaussian(c.d_in_proj() * c.d_model, 1.0f / std::sqrt(static_cast<float>(c.d_model)));
    layer.conv_weight = gaussian(c.conv_dim() * c.d_conv, 0.3f);
    layer.conv_bias = gaussian(c.conv_dim(), 0.1f);
    layer.A.resize(c.nheads());
    layer.dt_bias.resize(c.nheads());
    for (int64_t h = 0; h < c.nheads(); ++h) {
      layer.A[h] = -(1.0f + 15.0f * uniform(rng));  // mamba_ssm: A ~ U[1, 16]
      const float dt = std::exp(std::log(1e-3f) + uniform(rng) * (std::log(1e-1f) - std::log(1e-3f)));
      layer.dt_bias[h] = dt + std::log(-std::expm1(-dt));  // inverse softplus
    }
    layer.D = around(c.nheads(), 1.0f, 0.1f);
    layer.gated_norm = around(c.d_inner(), 1.0f, 0.1f);
    layer.out_proj = gaussian(c.d_model * c.d_inner(), 1.0f / std::sqrt(static_cast<float>(c.d_inner())));
  }
  return w;
}

}  // namespace ssdq
