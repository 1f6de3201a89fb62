// FP32 host copy of a Mamba-2 model's weights, the input of every backend.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/config.h"
#include "quant/parallel_items.h"

namespace ssdq {

struct LayerWeights {
  std::vector<float> norm;         // [D]
  std::vector<float> in_proj;      // [d_in_proj, D], rows z | x | B | C | dt
  std::vector<float> conv_weight;  // [conv_dim, K]
  std::vector<float> conv_bias;    // [conv_dim]
  std::vector<float> dt_bias;      // [H]
  std::vector<float> A;            // [H], A = -exp(A_log)
  std::vector<float> D;            // [H]
  std::vector<float> gated_norm;   // [E]
  std::vector<float> out_proj;     // [D, E]
};

struct ModelWeights {
  Mamba2Config config;
  std::vector<float> embedding;  // [V, D]
  std::vector<float> lm_head;    // [V, D]; empty when tied to the embedding
  std::vector<float> norm_f;     // [D]
  std::vector<LayerWeights> layers;

  const std::vector<float>& head() const { return lm_head.empty() ? embedding : lm_head; }
};

// A model with the config's shapes and seeded random weights in the ranges a trained Mamba-2
// has (A_log, dt_bias like mamba_ssm's initialisation), for tests and synthetic benchmarks.
ModelWeights random_weights(const Mamba2Config& config, uint64_t seed);
// The same ranges drawn on every core (each layer and block of table rows from a generator of its
// own, so other values than random_weights'): `--synthetic` models, whose 2.7B–8B parameters take
// minutes on one thread.
ModelWeights random_weights_threaded(const Mamba2Config& config, uint64_t seed);

// A copy of the model, its layers (and embedding and lm_head) copied over `parallel` when set: a
// 2.7b model's 10.8 GB copied on one thread is bound by the new storage's page faults (~1 GB/s on
// this repository's machine).
ModelWeights copy_weights(const ModelWeights& weights, const ParallelFor& parallel = {});

}  // namespace ssdq
