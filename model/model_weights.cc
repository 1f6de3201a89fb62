#include "model/model_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>

namespace ssdq {
namespace {

// count values of N(0, stddev²) from `normal` (which keeps a second value between draws, so the
// caller's is shared).
std::vector<float> gaussian(std::mt19937_64& rng, std::normal_distribution<float>& normal, int64_t count, float stddev) {
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng) * stddev;
  return out;
}

// count values uniform in [center − spread, center + spread].
std::vector<float> around(std::mt19937_64& rng, int64_t count, float center, float spread) {
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out) v = center + spread * (2 * uniform(rng) - 1);
  return out;
}

// The initialisation of one layer (random_weights' order of draws).
void random_layer(const Mamba2Config& c, std::mt19937_64& rng, std::normal_distribution<float>& normal,
                  LayerWeights& layer) {
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  layer.norm = around(rng, c.d_model, 1.0f, 0.1f);
  layer.in_proj = gaussian(rng, normal, c.d_in_proj() * c.d_model, 1.0f / std::sqrt(static_cast<float>(c.d_model)));
  layer.conv_weight = gaussian(rng, normal, c.conv_dim() * c.d_conv, 0.3f);
  layer.conv_bias = gaussian(rng, normal, c.conv_dim(), 0.1f);
  layer.A.resize(c.nheads());
  layer.dt_bias.resize(c.nheads());
  for (int64_t h = 0; h < c.nheads(); ++h) {
    layer.A[h] = -(1.0f + 15.0f * uniform(rng));  // mamba_ssm: A ~ U[1, 16]
    const float dt = std::exp(std::log(1e-3f) + uniform(rng) * (std::log(1e-1f) - std::log(1e-3f)));
    layer.dt_bias[h] = dt + std::log(-std::expm1(-dt));  // inverse softplus
  }
  layer.D = around(rng, c.nheads(), 1.0f, 0.1f);
  layer.gated_norm = around(rng, c.d_inner(), 1.0f, 0.1f);
  layer.out_proj = gaussian(rng, normal, c.d_model * c.d_inner(), 1.0f / std::sqrt(static_cast<float>(c.d_inner())));
}

}  // namespace

ModelWeights random_weights(const Mamba2Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ModelWeights w;
  w.config = c;
  w.embedding = gaussian(rng, normal, c.vocab_size * c.d_model, 0.02f);
  if (!c.tie_embeddings) w.lm_head = gaussian(rng, normal, c.vocab_size * c.d_model, 0.02f);
  w.norm_f = around(rng, c.d_model, 1.0f, 0.1f);
  w.layers.resize(c.n_layer);
  for (LayerWeights& layer : w.layers) random_layer(c, rng, normal, layer);
  return w;
}

ModelWeights random_weights_threaded(const Mamba2Config& c, uint64_t seed) {
  ModelWeights w;
  w.config = c;
  const int64_t V = c.vocab_size, D = c.d_model;
  w.embedding.resize(V * D);
  if (!c.tie_embeddings) w.lm_head.resize(V * D);
  w.layers.resize(c.n_layer);
  // Jobs: the tables in blocks of rows, then one per layer; job j draws from its own generator.
  constexpr int64_t kRowsPerJob = 4096;
  const int64_t table_jobs = (V + kRowsPerJob - 1) / kRowsPerJob * (c.tie_embeddings ? 1 : 2);
  const int64_t jobs = table_jobs + c.n_layer + 1;
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t j = next++; j < jobs; j = next++) {
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(j) + 1);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      if (j < table_jobs) {
        const int64_t blocks = (V + kRowsPerJob - 1) / kRowsPerJob;
        std::vector<float>& table = j < blocks ? w.embedding : w.lm_head;
        const int64_t first = (j % blocks) * kRowsPerJob, rows = std::min(kRowsPerJob, V - first);
        for (int64_t i = first * D; i < (first + rows) * D; ++i) table[i] = normal(rng) * 0.02f;
      } else if (j < table_jobs + c.n_layer) {
        random_layer(c, rng, normal, w.layers[j - table_jobs]);
      } else {
        w.norm_f = around(rng, D, 1.0f, 0.1f);
      }
    }
  };
  const int threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 64));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return w;
}

ModelWeights copy_weights(const ModelWeights& fp, const ParallelFor& parallel) {
  ModelWeights w;
  w.config = fp.config;
  w.norm_f = fp.norm_f;
  const int64_t L = static_cast<int64_t>(fp.layers.size());
  w.layers.resize(L);
  run_items(parallel, L + 2, [&](int64_t i) {
    if (i < L) {
      w.layers[i] = fp.layers[i];
    } else if (i == L) {
      w.embedding = fp.embedding;
    } else {
      w.lm_head = fp.lm_head;
    }
  });
  return w;
}

}  // namespace ssdq
