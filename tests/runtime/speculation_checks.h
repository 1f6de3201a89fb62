// Shared by the CPU and GPU generation tests: a drafter that proposes the reference continuation
// with one wrong token at a position that cycles through the window (so every accepted length
// 0…K occurs), and the check that speculative output equals plain output.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "formats/tokenizer.h"
#include "runtime/generate.h"
#include "tests/support/test_models.h"

namespace ssdq::testing_models {

inline const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file("examples/mamba2-tiny/tokenizer.json");
  return t;
}

inline std::vector<std::vector<int32_t>> prompts_of(int64_t vocab) {
  return {random_tokens(5, vocab, 1), random_tokens(40, vocab, 2), random_tokens(1, vocab, 3)};
}

// Proposes the reference continuation with one wrong token: at draft position (call count mod
// K + 1) of the sequence (K + 1: no error), so the windows accept every length 0…K. With `drafts`
// above 1, alternative m has its wrong token at (call count + 2m) mod (K + 1) instead, so a
// window's rows accept different lengths and the longest is not always the first draft's.
struct OracleDrafter {
  std::vector<std::vector<int32_t>> reference;
  std::vector<size_t> prompt_lengths;
  int64_t K, vocab;
  int64_t drafts = 1;
  std::shared_ptr<std::vector<int64_t>> calls = std::make_shared<std::vector<int64_t>>();
  Draft operator()(int64_t b, const std::vector<int32_t>& context, int64_t) const {
    if (calls->size() <= static_cast<size_t>(b)) calls->resize(b + 1);
    const int64_t call = (*calls)[b]++;
    const size_t n = context.size() - prompt_lengths[b];  // tokens generated; the next draft continues them
    auto with_error_at = [&](int64_t error_at) {
      std::vector<int32_t> draft;
      for (int64_t k = 0; k < K && n + k < reference[b].size(); ++k) {
        const int32_t token = reference[b][n + k];
        draft.push_back(k == error_at ? (token + 1) % static_cast<int32_t>(vocab) : token);
      }
      return draft;
    };
    Draft draft{with_error_at(call % (K + 1)), {}, {}};
    for (int64_t m = 1; m < drafts; ++m) draft.alternatives.push_back(with_error_at((call + 2 * m) % (K + 1)));
    return draft;
  }
};

inline std::vector<GeneratedText> run(const Backend& backend, const GenerateOptions& options,
                               const std::vector<std::vector<int32_t>>& prompts) {
  return generate(backend, tokenizer(), prompts, options);
}

// Plain decoding with `drafts` rows per sequence (a drafter that never proposes): every step runs
// the batch's rows as speculation with that many drafts does, so a backend whose schedules depend
// on the batch (CUDA) rounds alike.
inline std::vector<GeneratedText> plain_at_rows(const Backend& backend, GenerateOptions options,
                                                const std::vector<std::vector<int32_t>>& prompts, int64_t drafts) {
  options.drafts = drafts;
  options.drafter = [](int64_t, const std::vector<int32_t>&, int64_t) { return Draft{}; };
  return run(backend, options, prompts);
}

// Which plain output speculation with several drafts is held to: plain decoding with as many rows
// per sequence, or plain decoding itself (one row a sequence), which a backend gives only where its
// decode step computes each row as it would alone (CUDA: up to the GEMV's 4 rows).
enum class PlainReference { kAtTheDraftsRows, kItself };

// Speculative output against plain output for one backend, with `drafts` rows per sequence;
// returns the windows' histogram.
inline std::vector<int64_t> expect_speculation_exact(const Backend& backend, GenerateOptions options, const std::string& name,
                                                     int64_t drafts = 1,
                                                     PlainReference reference = PlainReference::kAtTheDraftsRows,
                                                     std::vector<std::vector<int32_t>> prompts = {}) {
  const int64_t V = backend.config().vocab_size, K = 4;
  if (prompts.empty()) prompts = prompts_of(V);
  options.max_new_tokens = 20;
  const std::vector<GeneratedText> plain = drafts == 1 || reference == PlainReference::kItself
                                               ? run(backend, options, prompts)
                                               : plain_at_rows(backend, options, prompts, drafts);
  OracleDrafter oracle{{}, {}, K, V, drafts};
  options.drafts = drafts;
  for (size_t b = 0; b < prompts.size(); ++b) {
    oracle.reference.push_back(plain[b].tokens);
    oracle.prompt_lengths.push_back(prompts[b].size());
  }
  options.drafter = oracle;
  options.max_draft = K;
  const std::vector<GeneratedText> speculative = run(backend, options, prompts);
  std::vector<int64_t> histogram(K + 1, 0);
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(speculative[b].tokens, plain[b].tokens) << name << ": prompt " << b;
    EXPECT_EQ(speculative[b].text, plain[b].text) << name << ": prompt " << b;
    EXPECT_GT(speculative[b].windows, 0) << name;
    for (size_t j = 0; j < speculative[b].accepted_histogram.size(); ++j) histogram[j] += speculative[b].accepted_histogram[j];
  }
  return histogram;
}

}  // namespace ssdq::testing_models
