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

int32_t choose_token(const float* logits, int64_t vocab, const SamplingOptions& o, double u) {
  if (o.temperature == 0) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  // Candidates in order of decreasing logit (ties: lower id first), cut by top-k, weighted by
  // softmax(logit / T) in double, cut by top-p, then the inverse CDF at u.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int64_t keep = o.top_k > 0 ? std::min<int64_t>(o.top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  order.resize(keep);
  std::vector<double> weight(keep);
  const double top = logits[order[0]];
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += weight[i] = std::exp((logits[order[i]] - top) / o.temperature);
  int64_t count = keep;
  if (o.top_p < 1) {
    double mass = 0;
    for (count = 0; count < keep;) {
      mass += weight[count++] / total;
      if (mass >= o.top_p) break;
    }
    total = 0;
    for (int64_t i = 0; i < count; ++i) total += weight[i];
  }
  double target = u * total;
  for (int64_t i = 0; i < count; ++i) {
    if (target < weight[i]) return order[i];
    target -= weight[i];
  }
  return order[count - 1];
}

}  // namespace ssdq
