#include "runtime/token_statistics.h"

#include <algorithm>
#include <cmath>

#include "formats/error.h"

namespace ssdq {

MeanWithError RunningMean::result() const {
  MeanWithError out;
  if (count == 0) return out;
  out.mean = sum / count;
  if (count > 1) {
    const double variance = std::max(0.0, (sum_sq - sum * out.mean) / (count - 1));
    out.error = std::sqrt(variance / count);
  }
  return out;
}

MeanWithError perplexity_from_nll(const RunningMean& nll) {
  const MeanWithError mean_nll = nll.result();
  const double ppl = std::exp(mean_nll.mean);
  return {ppl, ppl * mean_nll.error};
}

namespace {

// log Σ exp(x_i), and the index of the largest x (the first on ties, as argmax does).
struct LogSumExp {
  double value;
  int64_t argmax;
};
LogSumExp log_sum_exp(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  const float top = x[best];
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - top);
  return {top + std::log(sum), best};
}

}  // namespace

PositionComparison compare_position(const float* logits, const float* reference_logits, int64_t vocab,
                                    int32_t target) {
  if (vocab < 1) fail("comparing distributions over an empty vocabulary");
  if (target < 0 || target >= vocab) fail("target token {} is outside the vocabulary of {}", target, vocab);
  const LogSumExp model = log_sum_exp(logits, vocab);
  // One pass over the reference: with e_i = exp(x_ref_i − max_ref) and Z = Σ e_i,
  // KL = Σ (e_i / Z)(x_ref_i − x_i) − (L_ref − L), L_ref = max_ref + log Z. The exponentials are
  // taken in float (every e_i ≤ 1) and summed in double.
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (reference_logits[i] > reference_logits[best]) best = i;
  const float top = reference_logits[best];
  double z = 0, weighted = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float e = std::exp(reference_logits[i] - top);
    z += e;
    weighted += static_cast<double>(e) * (reference_logits[i] - logits[i]);
  }
  const double reference_lse = top + std::log(z);
  PositionComparison out;
  // Rounding can leave a tiny negative value where the distributions agree; KL is never negative.
  out.kl = std::max(0.0, weighted / z - (reference_lse - model.value));
  out.top1_agrees = model.argmax == best;
  out.nll = model.value - logits[target];
  out.reference_nll = reference_lse - reference_logits[target];
  out.p_target = std::exp(-out.nll);
  out.reference_p_target = std::exp(-out.reference_nll);
  return out;
}

void ComparisonAccumulator::add(const PositionComparison& p) {
  kl_.push_back(p.kl);
  kl_mean_.add(p.kl);
  top1_.add(p.top1_agrees ? 1.0 : 0.0);
  abs_dp_.add(std::abs(p.p_target - p.reference_p_target));
  nll_.add(p.nll);
  reference_nll_.add(p.reference_nll);
  nll_difference_.add(p.nll - p.reference_nll);
}

double nearest_rank_quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  if (!(q >= 0 && q <= 1)) fail("quantile must be in [0, 1], got {}", q);
  const int64_t n = values.size();
  const int64_t rank = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q * n)), 1, n);
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

ComparisonSummary ComparisonAccumulator::summary() const {
  ComparisonSummary s;
  s.positions = kl_mean_.count;
  s.perplexity = perplexity_from_nll(nll_);
  s.reference_perplexity = perplexity_from_nll(reference_nll_);
  s.kl = kl_mean_.result();
  s.kl_p99 = nearest_rank_quantile(kl_, 0.99);
  s.kl_p999 = nearest_rank_quantile(kl_, 0.999);
  s.kl_max = kl_.empty() ? 0 : *std::max_element(kl_.begin(), kl_.end());
  s.top1_agreement = top1_.result();
  s.abs_delta_p = abs_dp_.result();
  s.log_ppl_ratio = nll_difference_.result();
  return s;
}

}  // namespace ssdq
