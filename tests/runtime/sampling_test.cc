// Sampling's distributions: choose_token draws from token_distribution (checked by sweeping its
// uniform number), and speculative sampling's rule gives tokens distributed as the model's p for
// any draft distribution q (drafts weighted by q, both uniform numbers swept over a fine grid).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/sampling.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

std::vector<float> random_logits(int64_t vocab, uint32_t seed) { return testing_models::random_normals(vocab, seed, 2.f); }

// The distribution of f(u) for u on a midpoint grid of n points.
template <typename F>
std::vector<double> swept(int64_t vocab, int64_t n, F f) {
  std::vector<double> out(vocab, 0.0);
  for (int64_t i = 0; i < n; ++i) out[f((i + 0.5) / n)] += 1.0 / n;
  return out;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(Sampling, ChooseTokenDrawsFromTokenDistribution) {
  const int64_t V = 12;
  const std::vector<float> logits = random_logits(V, 1);
  for (const SamplingOptions o : {SamplingOptions{1.0, 0, 1.0, 0}, SamplingOptions{0.7, 5, 1.0, 0},
                                  SamplingOptions{1.3, 0, 0.8, 0}, SamplingOptions{0.0, 0, 1.0, 0}}) {
    const std::vector<double> p = token_distribution(logits.data(), V, o);
    double total = 0;
    int64_t support = 0;
    for (double v : p) {
      total += v;
      support += v > 0;
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
    if (o.top_k > 0) EXPECT_LE(support, o.top_k);
    if (o.temperature == 0) EXPECT_EQ(support, 1);
    const auto drawn = swept(V, 100000, [&](double u) { return choose_token(logits.data(), V, o, u); });
    EXPECT_LE(largest_difference(drawn, p), 1e-4) << "temperature " << o.temperature << ", top-k " << o.top_k;
  }
}

TEST(Sampling, SpeculativeChoiceKeepsTheModelsDistribution) {
  const int64_t V = 9, n = 4000;
  const SamplingOptions target{0.9, 0, 0.9, 0}, draft{1.2, 6, 1.0, 0};
  for (uint32_t seed : {2u, 3u, 4u}) {
    const std::vector<float> p_logits = random_logits(V, seed), q_logits = random_logits(V, seed + 100);
    const std::vector<double> p = token_distribution(p_logits.data(), V, target);
    for (const std::vector<double>& q : {token_distribution(q_logits.data(), V, draft), p}) {
      const bool self = q == p;
      // P(token) = Σ_d q(d) · P(token | draft d): u_accept and u_resample are independent, so the
      // accept probability and the replacement's distribution are swept apart.
      std::vector<double> out(V, 0.0);
      double accepted = 0;
      for (int32_t d = 0; d < V; ++d) {
        if (q[d] == 0) continue;
        double accept = 0;
        for (int64_t i = 0; i < n; ++i) accept += speculative_choice(p, q, d, (i + 0.5) / n, 0.5).accepted ? 1.0 / n : 0.0;
        out[d] += q[d] * accept;
        accepted += q[d] * accept;
        const auto replaced = swept(V, n, [&](double u) {
          const SpeculativeChoice c = speculative_choice(p, q, d, 1.0 - 1e-12, u);  // a rejection, if one is possible
          return c.accepted ? d : c.token;
        });
        for (int32_t t = 0; t < V; ++t) out[t] += q[d] * (1 - accept) * replaced[t];
      }
      EXPECT_LE(largest_difference(out, p), 2e-3) << "seed " << seed;
      if (self) EXPECT_NEAR(accepted, 1.0, 1e-12);
    }
    // Drafting from p itself: every draft is accepted.
    for (int32_t d = 0; d < V; ++d)
      if (p[d] > 0) EXPECT_TRUE(speculative_choice(p, p, d, 0.999999, 0.5).accepted);
  }
}

}  // namespace
}  // namespace ssdq
