// Shared by the quantization tests: small synthetic models (two or four B/C groups) and the
// bundled trained model.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "formats/checkpoint.h"
#include "model/checkpoint_weights.h"
#include "model/model_weights.h"

namespace ssdq::testing_models {

inline constexpr char kTinyModel[] = "examples/mamba2-tiny";

// d_model 128 (E 256: both Hadamard orders are powers of two), headdim 16, d_state 32, chunk 32.
inline Mamba2Config synthetic_config(int64_t ngroups, int64_t n_layer = 2) {
  Mamba2Config c;
  c.d_model = 128;
  c.n_layer = n_layer;
  c.vocab_size = 256;
  c.d_state = 32;
  c.headdim = 16;
  c.ngroups = ngroups;
  c.chunk_size = 32;
  return c;
}

inline ModelWeights tiny_model() { return load_fp32_weights(load_checkpoint(kTinyModel)); }

inline std::vector<int32_t> random_tokens(int64_t count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(count);
  for (auto& t : out) t = static_cast<int32_t>(rng() % vocab);
  return out;
}

// count values of N(0, stddev²) from a Mersenne Twister seeded with `seed`.
inline std::vector<float> random_normals(int64_t count, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng) * stddev;
  return out;
}

// max |a - ref| / max |ref|.
inline double max_relative(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - ref[i]));
    scale = std::max(scale, std::abs(double(ref[i])));
  }
  return diff / scale;
}

}  // namespace ssdq::testing_models
