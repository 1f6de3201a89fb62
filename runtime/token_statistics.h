// Statistics of next-token predictions: a mean with its standard error, and the comparison of a
// model's distributions with a reference model's at the same positions (KL divergence, top-1
// agreement, change of the correct token's probability), the figures quantization tools are
// compared by (llama.cpp's `perplexity --kl-divergence` reports the same set).
#pragma once

#include <cstdint>
#include <vector>

namespace ssdq {

// A sample mean and its standard error sqrt(var / n), var the unbiased sample variance
// (error 0 with fewer than two values).
struct MeanWithError {
  double mean = 0, error = 0;
};

// Running sums of one quantity, enough for its mean and standard error.
struct RunningMean {
  double sum = 0, sum_sq = 0;
  int64_t count = 0;
  void add(double value) {
    sum += value;
    sum_sq += value * value;
    ++count;
  }
  void merge(const RunningMean& other) {
    sum += other.sum;
    sum_sq += other.sum_sq;
    count += other.count;
  }
  MeanWithError result() const;
};

// Perplexity exp(mean NLL) with its standard error by the delta method (ppl · SE(mean NLL)),
// treating positions as independent as llama.cpp does; positions of one window are correlated,
// so the true error is somewhat larger.
MeanWithError perplexity_from_nll(const RunningMean& nll);

// What one position's two distributions give (the model's and the reference's logits over the
// same vocabulary, and the token that came next).
struct PositionComparison {
  double kl = 0;          // KL(reference ‖ model) = Σ p_ref (log p_ref − log p_model), nats
  bool top1_agrees = false;
  double nll = 0, reference_nll = 0;  // −log p(target) under each
  double p_target = 0, reference_p_target = 0;
};
PositionComparison compare_position(const float* logits, const float* reference_logits, int64_t vocab,
                                    int32_t target);

// The comparison of a model with a reference over many positions.
struct ComparisonSummary {
  int64_t positions = 0;
  MeanWithError perplexity, reference_perplexity;
  MeanWithError kl;                  // mean KL divergence, nats
  double kl_p99 = 0, kl_p999 = 0;    // its 99th and 99.9th percentiles (nearest rank)
  double kl_max = 0;
  MeanWithError top1_agreement;      // share of positions with the same most likely token (0..1)
  MeanWithError abs_delta_p;         // mean |p(target) − p_ref(target)|
  MeanWithError log_ppl_ratio;       // ln(PPL / PPL_ref) = mean(NLL − NLL_ref), error from the paired differences
};

// Accumulates PositionComparisons (the KL values are kept for the percentiles: 8 bytes a position).
class ComparisonAccumulator {
 public:
  void add(const PositionComparison& position);
  ComparisonSummary summary() const;

 private:
  std::vector<double> kl_;
  RunningMean kl_mean_, top1_, abs_dp_, nll_, reference_nll_, nll_difference_;
};

// The value at quantile q ∈ [0, 1] of `values` by nearest rank (the ⌈q·n⌉-th smallest); 0 when empty.
double nearest_rank_quantile(std::vector<double> values, double q);

}  // namespace ssdq
