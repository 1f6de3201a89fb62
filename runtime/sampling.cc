#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "formats/error.h"

namespace ssdq {

void check_sampling_options(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    fail("--temperature must be 0 (greedy) or more, got {}", o.temperature);
  if (o.top_k < 0) fail("--top-k must be 0 (every token) or more, got {}", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1)) fail("--top-p must be above 0 and at most 1, got {}", o.top_p);
}

namespace {

uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

double counter_uniform(uint64_t seed, uint64_t sequence, uint64_t position) {
  const uint64_t bits = mix(mix(mix(seed) ^ sequence) ^ position);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

namespace {

// The tokens sampling chooses among, in order of decreasing logit (ties: lower id first), cut by
// top-k and then top-p, with their weights softmax(logit / T) in double (not normalised).
struct Candidates {
  std::vector<int32_t> order;
  std::vector<double> weight;
  double total = 0;
};

Candidates candidates(const float* logits, int64_t vocab, const SamplingOptions& o) {
  Candidates c;
  c.order.resize(vocab);
  std::iota(c.order.begin(), c.order.end(), 0);
  const int64_t keep = o.top_k > 0 ? std::min<int64_t>(o.top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(c.order.begin(), c.order.begin() + keep, c.order.end(), by_logit);
  c.order.resize(keep);
  c.weight.resize(keep);
  const double top = logits[c.order[0]];
  for (int64_t i = 0; i < keep; ++i) c.total += c.weight[i] = std::exp((logits[c.order[i]] - top) / o.temperature);
  if (o.top_p < 1) {
    double mass = 0;
    int64_t count = 0;
    while (count < keep) {
      mass += c.weight[count++] / c.total;
      if (mass >= o.top_p) break;
    }
    c.order.resize(count);
    c.weight.resize(count);
    c.total = 0;
    for (double w : c.weight) c.total += w;
  }
  return c;
}

}  // namespace

int32_t choose_token(const float* logits, int64_t vocab, const SamplingOptions& o, double u) {
  if (o.temperature == 0) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  // The inverse CDF at u over the candidates in their order.
  const Candidates c = candidates(logits, vocab, o);
  double target = u * c.total;
  for (size_t i = 0; i < c.order.size(); ++i) {
    if (target < c.weight[i]) return c.order[i];
    target -= c.weight[i];
  }
  return c.order.back();
}

std::vector<double> token_distribution(const float* logits, int64_t vocab, const SamplingOptions& o) {
  std::vector<double> p(vocab, 0.0);
  if (o.temperature == 0) {
    p[std::max_element(logits, logits + vocab) - logits] = 1.0;
    return p;
  }
  const Candidates c = candidates(logits, vocab, o);
  for (size_t i = 0; i < c.order.size(); ++i) p[c.order[i]] = c.weight[i] / c.total;
  return p;
}

int32_t sample_distribution(const std::vector<double>& p, double u) {
  double total = 0;
  for (double v : p) total += v;
  double target = u * total;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    if (target < p[i]) return static_cast<int32_t>(i);
    target -= p[i];
    last = static_cast<int32_t>(i);
  }
  return last;
}

SpeculativeChoice speculative_choice(const std::vector<double>& p, const std::vector<double>& q, int32_t draft,
                                     double u_accept, double u_resample) {
  if (p.size() != q.size() || draft < 0 || static_cast<size_t>(draft) >= p.size())
    fail("internal: speculative choice over {} and {} probabilities, draft {}", p.size(), q.size(), draft);
  // Accept the draft with probability min(1, p/q); else draw from max(0, p − q), normalised.
  if (q[draft] > 0 && u_accept * q[draft] < p[draft]) return {true, draft};
  std::vector<double> residual(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) mass += residual[i] = std::max(0.0, p[i] - q[i]);
  return {false, sample_distribution(mass > 0 ? residual : p, u_resample)};
}

}  // namespace ssdq
