// Choosing the next token from logits: greedy, or sampling with temperature, top-k and top-p.
// The random number behind the choice of token t of prompt i depends only on (seed, i, t)
// (counter_uniform), so a seed gives the same text whatever the batch, the device or
// speculation (speculative sampling draws the same number for the same position).
#pragma once

#include <cstdint>
#include <vector>

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

// The streams of uniform numbers speculative sampling draws besides the token choice's: the
// seed passed to counter_uniform is the sampling seed XOR one of these.
inline constexpr uint64_t kDraftStream = 0x5d1a9e0b7c3f2841ull;   // a model drafter's sampled drafts
inline constexpr uint64_t kAcceptStream = 0x2b8e4f6a19d3c705ull;  // speculative_choice's u_accept

// A uniform number in [0, 1) from (seed, sequence, position) alone: a counter-based generator
// (SplitMix64's finalizer applied to the three words in turn), 53 random bits.
double counter_uniform(uint64_t seed, uint64_t sequence, uint64_t position);

// The token chosen from logits[vocab] with the uniform number u (ignored when greedy).
int32_t choose_token(const float* logits, int64_t vocab, const SamplingOptions& options, double u);

// The distribution choose_token draws from: [vocab] probabilities, zero outside top-k / top-p (one
// at the argmax when greedy).
std::vector<double> token_distribution(const float* logits, int64_t vocab, const SamplingOptions& options);

// The inverse CDF of p (not necessarily normalised) at u, over token ids in increasing order.
int32_t sample_distribution(const std::vector<double>& p, double u);

// Speculative sampling's rule for a draft token drawn from q where the model's distribution is p:
// accepted with probability min(1, p(draft) / q(draft)) (u_accept), otherwise replaced by a draw
// from max(0, p − q) normalised (u_resample). The token that results is distributed as p, whatever
// q (tests/runtime/sampling_test integrates over both numbers).
struct SpeculativeChoice {
  bool accepted = false;
  int32_t token = 0;
};
SpeculativeChoice speculative_choice(const std::vector<double>& p, const std::vector<double>& q, int32_t draft,
                                     double u_accept, double u_resample);

}  // namespace ssdq
