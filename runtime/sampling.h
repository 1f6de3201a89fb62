// Choosing the next token from logits: greedy, or sampling with temperature, top-k and top-p.
// The random number behind the choice of token t of prompt i depends only on (seed, i, t)
// (counter_uniform), so a seed gives the same text whatever the batch, the device or
// speculation (speculative sampling draws the same number for the same position).
#pragma once

#include <cstdint>

namespace ssdq {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax; ties to the lowest id)
  int64_t top_k = 0;       // 0: every token
  double top_p = 1;        // nucleus: the smallest set of most likely tokens whose mass reaches top_p
  uint64_t seed = 0;
};

// Fails naming the flag when a value is out of range: temperature ≥ 0 and finite, top_k ≥ 0,
// 0 < top_p ≤ 1.
void check_sampling_options(const SamplingOptions& options);

// A uniform number in [0, 1) from (seed, sequence, position) alone: a counter-based generator
// (SplitMix64's finalizer applied to the three words in turn), 53 random bits.
double counter_uniform(uint64_t seed, uint64_t sequence, uint64_t position);

// The token chosen from logits[vocab] with the uniform number u (ignored when greedy).
int32_t choose_token(const float* logits, int64_t vocab, const SamplingOptions& options, double u);

}  // namespace ssdq
