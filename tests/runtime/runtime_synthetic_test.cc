// The CPU backend on synthetic random-weight models (ngroups > 1, lengths that are not a
// multiple of the chunk): chunked prefill equals the recurrent decode, prefill + decode equals
// one longer prefill, and a batch equals its sequences run alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "formats/error.h"
#include "runtime/cpu_backend.h"
#include "tests/support/compare.h"

namespace ssdq {
namespace {

Mamba2Config small_config(int64_t ngroups) {
  Mamba2Config c;
  c.d_model = 64;
  c.n_layer = 2;
  c.vocab_size = 96;
  c.d_state = 32;
  c.headdim = 16;
  c.ngroups = ngroups;
  c.expand = 2;
  c.chunk_size = 16;
  return c;
}

std::vector<int32_t> random_tokens(int64_t count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(count);
  for (auto& t : out) t = static_cast<int32_t>(rng() % vocab);
  return out;
}

class SyntheticModel : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    config_ = small_config(GetParam());
    backend_ = std::make_unique<CpuBackend>(std::make_shared<ModelWeights>(random_weights(config_, 42)));
  }
  std::vector<float> prefill_logits(const std::vector<int32_t>& tokens, InferenceState& state) {
    std::vector<float> logits(tokens.size() * config_.vocab_size);
    ForwardOutputs out;
    out.logits = logits.data();
    backend_->forward(tokens.data(), tokens.size(), state, out);
    return logits;
  }
  std::vector<float> decode_logits(const std::vector<int32_t>& tokens, InferenceState& state) {
    std::vector<float> logits(tokens.size() * config_.vocab_size);
    for (size_t t = 0; t < tokens.size(); ++t) {
      ForwardOutputs out;
      out.logits = logits.data() + t * config_.vocab_size;
      backend_->forward(&tokens[t], 1, state, out);
    }
    return logits;
  }
  Mamba2Config config_;
  std::unique_ptr<CpuBackend> backend_;
};

TEST_P(SyntheticModel, ChunkedPrefillEqualsRecurrentDecode) {
  const auto tokens = random_tokens(53, config_.vocab_size, 7);  // 3 full chunks of 16 and a partial one
  auto prefill_state = backend_->new_state(1);
  auto decode_state = backend_->new_state(1);
  EXPECT_LT(testing::max_relative_difference(prefill_logits(tokens, *prefill_state), decode_logits(tokens, *decode_state)), 1e-4);
  // The final states agree too: one more token from each gives the same logits.
  const std::vector<int32_t> next = {5};
  EXPECT_LT(testing::max_relative_difference(decode_logits(next, *prefill_state), decode_logits(next, *decode_state)), 1e-4);
}

TEST_P(SyntheticModel, PrefillThenDecodeEqualsLongerPrefill) {
  const auto tokens = random_tokens(40, config_.vocab_size, 9);
  auto whole_state = backend_->new_state(1);
  const auto whole = prefill_logits(tokens, *whole_state);
  auto split_state = backend_->new_state(1);
  const std::vector<int32_t> head(tokens.begin(), tokens.begin() + 21), tail(tokens.begin() + 21, tokens.end());
  auto split = prefill_logits(head, *split_state);
  const auto rest = decode_logits(tail, *split_state);
  split.insert(split.end(), rest.begin(), rest.end());
  EXPECT_LT(testing::max_relative_difference(split, whole), 1e-4);
  // Prefill in two chunked pieces (the second starting from a non-zero state) as well.
  auto two_state = backend_->new_state(1);
  auto two = prefill_logits(head, *two_state);
  const auto second = prefill_logits(tail, *two_state);
  two.insert(two.end(), second.begin(), second.end());
  EXPECT_LT(testing::max_relative_difference(two, whole), 1e-4);
}

TEST_P(SyntheticModel, BatchEqualsSequencesAlone) {
  const int64_t batch = 3, length = 20;
  const auto tokens = random_tokens(batch * length, config_.vocab_size, 11);
  auto batch_state = backend_->new_state(batch);
  std::vector<float> logits(batch * length * config_.vocab_size);
  ForwardOutputs out;
  out.logits = logits.data();
  backend_->forward(tokens.data(), length, *batch_state, out);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int32_t> one(tokens.begin() + b * length, tokens.begin() + (b + 1) * length);
    auto state = backend_->new_state(1);
    const auto alone = prefill_logits(one, *state);
    std::vector<float> slice(logits.begin() + b * length * config_.vocab_size,
                             logits.begin() + (b + 1) * length * config_.vocab_size);
    EXPECT_LT(testing::max_relative_difference(slice, alone), 1e-6) << "sequence " << b;
  }
}

TEST_P(SyntheticModel, NllMatchesLogSoftmaxOfLogits) {
  const auto tokens = random_tokens(30, config_.vocab_size, 13);
  std::vector<int32_t> inputs(tokens.begin(), tokens.end() - 1), targets(tokens.begin() + 1, tokens.end());
  auto state = backend_->new_state(1);
  const auto logits = prefill_logits(inputs, *state);
  std::vector<double> nll(inputs.size());
  ForwardOutputs out;
  out.targets = targets.data();
  out.nll = nll.data();
  state->reset();
  backend_->forward(inputs.data(), inputs.size(), *state, out);
  for (size_t t = 0; t < inputs.size(); ++t) {
    const float* row = logits.data() + t * config_.vocab_size;
    double sum = 0;
    for (int64_t v = 0; v < config_.vocab_size; ++v) sum += std::exp(double(row[v]));
    EXPECT_NEAR(nll[t], std::log(sum) - row[targets[t]], 1e-5);
  }
}

TEST_P(SyntheticModel, LastPositionOnlyAndArgmaxAgreeWithFullLogits) {
  const int64_t batch = 2, length = 19, V = config_.vocab_size;
  const auto tokens = random_tokens(batch * length, V, 17);
  std::vector<float> all(batch * length * V);
  auto state = backend_->new_state(batch);
  ForwardOutputs full;
  full.logits = all.data();
  backend_->forward(tokens.data(), length, *state, full);
  std::vector<float> last(batch * V);
  std::vector<int32_t> argmax(batch);
  ForwardOutputs tail;
  tail.logits = last.data();
  tail.argmax = argmax.data();
  tail.last_position_only = true;
  state->reset();
  backend_->forward(tokens.data(), length, *state, tail);
  for (int64_t b = 0; b < batch; ++b) {
    const float* expected = all.data() + (b * length + length - 1) * V;
    for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(last[b * V + v], expected[v], 1e-5) << "sequence " << b;  // GEMM blocking differs
    EXPECT_EQ(argmax[b], std::max_element(expected, expected + V) - expected);
  }
}

TEST_P(SyntheticModel, RejectsTokenOutsideVocabulary) {
  auto state = backend_->new_state(1);
  const std::vector<int32_t> tokens = {1, static_cast<int32_t>(config_.vocab_size)};
  try {
    backend_->forward(tokens.data(), tokens.size(), *state, ForwardOutputs{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, SyntheticModel, ::testing::Values(1, 4));

}  // namespace
}  // namespace ssdq
