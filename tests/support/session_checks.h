// Checks of the decode session shared by the CPU and GPU tests: its argmax outputs
// (TokenOutputs::argmax_only, what greedy generation reads) against the argmax of its logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/decode_session.h"
#include "tests/support/test_models.h"

namespace ssdq::testing_models {

// The first largest logit's index of each of `rows` rows of `vocab` logits.
inline std::vector<int32_t> argmax_rows(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  std::vector<int32_t> out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    out[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
  return out;
}

// Two sessions of `batch` sequences fed the same tokens, one asked for logits, the other for the
// argmax alone: prefill, a step, verify of K tokens accepted in part (each sequence a different
// count), a step after. Every argmax equals the argmax of the matching logits.
inline void expect_argmax_outputs_are_the_logits_argmax(const Backend& backend, VerifyMode mode,
                                                        const std::string& name, int64_t batch, int64_t K) {
  const int64_t V = backend.config().vocab_size;
  DecodeSession with_logits(backend, batch, mode), with_argmax(backend, batch, mode);
  std::vector<float> logits(batch * K * V);
  std::vector<int32_t> argmax(batch * K);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int32_t> prompt = random_tokens(5 + 7 * b, V, 70 + static_cast<uint32_t>(b));
    with_logits.prefill(b, prompt.data(), static_cast<int64_t>(prompt.size()), logits.data());
    with_argmax.prefill(b, prompt.data(), static_cast<int64_t>(prompt.size()), TokenOutputs::argmax_only(argmax.data()));
    EXPECT_EQ(argmax[0], argmax_rows(logits, 1, V)[0]) << name << ": prefill of sequence " << b;
  }
  auto step_both = [&](uint32_t seed, const char* what) {
    const std::vector<int32_t> column = random_tokens(batch, V, seed);
    with_logits.step(column.data(), logits.data());
    with_argmax.step(column.data(), TokenOutputs::argmax_only(argmax.data()));
    const std::vector<int32_t> expected = argmax_rows(logits, batch, V);
    EXPECT_EQ(std::vector<int32_t>(argmax.begin(), argmax.begin() + batch), expected) << name << ": " << what;
  };
  step_both(80, "step");
  const std::vector<int32_t> window = random_tokens(batch * K, V, 81);
  const int64_t a = with_logits.verify(window.data(), K, logits.data());
  const int64_t b = with_argmax.verify(window.data(), K, TokenOutputs::argmax_only(argmax.data()));
  ASSERT_EQ(a, K) << name;
  ASSERT_EQ(b, K) << name;
  EXPECT_EQ(argmax, argmax_rows(logits, batch * K, V)) << name << ": verify of " << K;
  std::vector<int64_t> counts(batch);
  for (int64_t s = 0; s < batch; ++s) counts[s] = (s * 2 + 1) % (K + 1);
  with_logits.accept(counts);
  with_argmax.accept(counts);
  step_both(82, "step after accept");
}

}  // namespace ssdq::testing_models
