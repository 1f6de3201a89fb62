// The statistics eval-ppl reports (perplexity ± error, KL divergence, top-1 agreement, |Δp|,
// ln PPL ratio): their arithmetic on hand-made distributions, and compare_models on a synthetic
// model against itself (KL 0, agreement 100 %) and against a known perturbation of its logits
// (the analytic KL divergence at every position).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "formats/error.h"
#include "model/model_weights.h"
#include "runtime/cpu_backend.h"
#include "runtime/eval_ppl.h"
#include "runtime/token_statistics.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using namespace testing_models;

TEST(RunningMean, MeanAndStandardErrorOfTheSample) {
  RunningMean m;
  for (double v : {1.0, 2.0, 3.0, 4.0}) m.add(v);
  const MeanWithError r = m.result();
  EXPECT_DOUBLE_EQ(r.mean, 2.5);
  EXPECT_NEAR(r.error, std::sqrt((5.0 / 3.0) / 4.0), 1e-12);  // unbiased variance 5/3
  RunningMean one;
  one.add(7);
  EXPECT_EQ(one.result().error, 0);
}

TEST(RunningMean, PerplexityErrorIsTheDeltaMethod) {
  RunningMean nll;
  for (double v : {4.0, 5.0, 6.0}) nll.add(v);
  const MeanWithError ppl = perplexity_from_nll(nll);
  EXPECT_NEAR(ppl.mean, std::exp(5.0), 1e-9);
  EXPECT_NEAR(ppl.error, std::exp(5.0) * std::sqrt(1.0 / 3.0), 1e-9);
}

TEST(NearestRankQuantile, PicksTheCeilRankValue) {
  std::vector<double> values;
  for (int i = 1000; i >= 1; --i) values.push_back(i);
  EXPECT_EQ(nearest_rank_quantile(values, 0.99), 990);
  EXPECT_EQ(nearest_rank_quantile(values, 0.999), 999);
  EXPECT_EQ(nearest_rank_quantile(values, 1.0), 1000);
  EXPECT_EQ(nearest_rank_quantile(values, 0.0), 1);
  EXPECT_EQ(nearest_rank_quantile({}, 0.5), 0);
  EXPECT_THROW(nearest_rank_quantile(values, 1.5), Error);
}

TEST(ComparePosition, TwoTokenDistributionsGiveTheirAnalyticValues) {
  // reference p = (0.8, 0.2), model q = (0.4, 0.6) written as logits log p + arbitrary offsets.
  const float ref[2] = {static_cast<float>(std::log(0.8) + 3), static_cast<float>(std::log(0.2) + 3)};
  const float model[2] = {static_cast<float>(std::log(0.4) - 1), static_cast<float>(std::log(0.6) - 1)};
  const PositionComparison c = compare_position(model, ref, 2, 1);
  EXPECT_NEAR(c.kl, 0.8 * std::log(0.8 / 0.4) + 0.2 * std::log(0.2 / 0.6), 1e-6);
  EXPECT_FALSE(c.top1_agrees);
  EXPECT_NEAR(c.nll, -std::log(0.6), 1e-6);
  EXPECT_NEAR(c.reference_nll, -std::log(0.2), 1e-6);
  EXPECT_NEAR(c.p_target, 0.6, 1e-6);
  EXPECT_NEAR(c.reference_p_target, 0.2, 1e-6);
  EXPECT_THROW(compare_position(model, ref, 2, 2), Error);
}

// The logits of `inner`, with `shift` added to token `token`'s at every position.
class ShiftedLogitBackend : public Backend {
 public:
  ShiftedLogitBackend(const Backend& inner, int32_t token, float shift) : inner_(inner), token_(token), shift_(shift) {}
  std::string name() const override { return "shifted"; }
  const Mamba2Config& config() const override { return inner_.config(); }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override { return inner_.new_state(batch); }
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override {
    inner_.forward(tokens, length, state, outputs);
    const int64_t V = config().vocab_size, rows = state.batch() * outputs.rows(length);
    for (int64_t r = 0; r < rows; ++r) outputs.logits[r * V + token_] += shift_;
  }
  std::string device_name() const override { return inner_.device_name(); }
  MemoryReport memory() const override { return inner_.memory(); }
  size_t state_bytes_per_sequence() const override { return inner_.state_bytes_per_sequence(); }
  std::string describe_plan(int64_t batch, int64_t length) const override { return inner_.describe_plan(batch, length); }

 private:
  const Backend& inner_;
  int32_t token_;
  float shift_;
};

struct SyntheticCase {
  ModelWeights weights = random_weights(synthetic_config(2), 5);
  CpuBackend backend{weights};
  std::vector<int32_t> tokens = random_tokens(301, 256, 9);
  EvalOptions options() const {
    EvalOptions o;
    o.ctx = 64;
    o.batch = 3;
    return o;
  }
};

TEST(CompareModels, AModelAgainstItselfHasZeroDivergenceAndFullAgreement) {
  SyntheticCase c;
  const ComparisonResult result = compare_models(c.backend, c.backend, c.tokens, c.options());
  const ComparisonSummary& s = result.summary;
  EXPECT_EQ(s.positions, 300);
  EXPECT_EQ(result.windows, 5);  // 64, 64, 64, 64, 44
  EXPECT_EQ(s.kl.mean, 0);
  EXPECT_EQ(s.kl_max, 0);
  EXPECT_EQ(s.top1_agreement.mean, 1);
  EXPECT_EQ(s.top1_agreement.error, 0);
  EXPECT_EQ(s.abs_delta_p.mean, 0);
  EXPECT_EQ(s.log_ppl_ratio.mean, 0);
  // The perplexity from logits is the perplexity eval-ppl computes from the backend's NLL (whose
  // log-sum-exp sums in another order: equal to ~1e-9 relative).
  const PerplexityResult plain = evaluate_perplexity(c.backend, c.tokens, c.options());
  EXPECT_NEAR(s.perplexity.mean, plain.perplexity.mean, 1e-7 * plain.perplexity.mean);
  EXPECT_NEAR(s.perplexity.error, plain.perplexity.error, 1e-6 * plain.perplexity.error);
  EXPECT_GT(plain.perplexity.error, 0);
}

TEST(CompareModels, AShiftedLogitGivesTheAnalyticDivergenceAtEveryPosition) {
  SyntheticCase c;
  const int32_t token = 17;
  const float shift = 1.5f;
  const ShiftedLogitBackend shifted(c.backend, token, shift);
  const ComparisonSummary s = compare_models(shifted, c.backend, c.tokens, c.options()).summary;

  // KL(p ‖ q) with q_i ∝ p_i e^{shift [i = token]}: log(1 + p_k (e^shift − 1)) − shift · p_k.
  const int64_t V = 256;
  std::vector<float> logits(300 * V);
  double expected_kl = 0, expected_nll_difference = 0;
  int64_t agree = 0;
  const EvalOptions options = c.options();
  for (int64_t start = 0; start < 300; start += options.ctx) {
    const int64_t length = std::min<int64_t>(options.ctx, 300 - start);
    auto state = c.backend.new_state(1);
    ForwardOutputs outputs;
    outputs.logits = logits.data() + start * V;
    c.backend.forward(c.tokens.data() + start, length, *state, outputs);
  }
  for (int64_t r = 0; r < 300; ++r) {
    const float* x = logits.data() + r * V;
    double z = 0;
    int64_t best = 0, shifted_best = 0;
    for (int64_t i = 0; i < V; ++i) {
      z += std::exp(double(x[i]));
      if (x[i] > x[best]) best = i;
      const auto value = [&](int64_t j) { return x[j] + (j == token ? shift : 0.f); };
      if (value(i) > value(shifted_best)) shifted_best = i;
    }
    const double pk = std::exp(double(x[token])) / z, log_norm = std::log1p(pk * std::expm1(double(shift)));
    expected_kl += log_norm - shift * pk;
    expected_nll_difference += log_norm - (c.tokens[r + 1] == token ? shift : 0.0);
    agree += best == shifted_best;
  }
  EXPECT_NEAR(s.kl.mean, expected_kl / 300, 1e-5 * expected_kl / 300);
  EXPECT_GT(s.kl.mean, 0);
  EXPECT_NEAR(s.log_ppl_ratio.mean, expected_nll_difference / 300, 1e-5);
  EXPECT_DOUBLE_EQ(s.top1_agreement.mean, agree / 300.0);
  EXPECT_GE(s.kl_p999, s.kl_p99);
  EXPECT_GE(s.kl_max, s.kl_p999);
}

TEST(CompareModels, ALogitsBudgetOfOneWindowGivesTheSameFigures) {
  SyntheticCase c;
  const ShiftedLogitBackend shifted(c.backend, 3, -2.0f);
  const ComparisonResult wide = compare_models(shifted, c.backend, c.tokens, c.options());
  const ComparisonResult narrow = compare_models(shifted, c.backend, c.tokens, c.options(), 1);
  EXPECT_EQ(wide.batch, 3);
  EXPECT_EQ(narrow.batch, 1);
  EXPECT_NEAR(narrow.summary.kl.mean, wide.summary.kl.mean, 1e-9 * wide.summary.kl.mean);
  EXPECT_EQ(narrow.summary.positions, wide.summary.positions);
}

TEST(CompareModels, DifferentVocabulariesAreRefused) {
  SyntheticCase c;
  Mamba2Config other = synthetic_config(2);
  other.vocab_size = 512;
  const CpuBackend wider(random_weights(other, 6));
  try {
    compare_models(wider, c.backend, c.tokens, c.options());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary (256 tokens) differs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ssdq
