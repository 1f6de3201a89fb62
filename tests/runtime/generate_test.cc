// Generation on the CPU specification: speculative decoding is exact (greedy and sampled, the FP
// model and every recipe × bit width, drafts accepted in every length 0…K, a drafter that never
// matches, a batch whose sequences accept different counts and whose prompts differ in length);
// sampling depends only on (seed, prompt, position); stop strings, stop tokens and whole UTF-8
// characters in the streamed text; the errors for bad options.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "pipeline/synthetic_quantized.h"
#include "formats/error.h"
#include "formats/tokenizer.h"
#include "model/model_weights.h"
#include "runtime/cpu_backend.h"
#include "runtime/generate.h"
#include "runtime/model_drafter.h"
#include "runtime/speculation_payoff.h"
#include "tests/support/quantized_fixtures.h"
#include "tests/support/recipe_cases.h"
#include "tests/support/test_models.h"
#include "tests/runtime/speculation_checks.h"

namespace ssdq {
namespace {

using namespace testing_models;

TEST(Generate, GreedySpeculativeIsPlainForTheFloatModel) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const std::vector<int64_t> histogram = expect_speculation_exact(backend, {}, "fp32 greedy");
  for (size_t j = 0; j < histogram.size(); ++j) EXPECT_GT(histogram[j], 0) << "no window accepted " << j << " drafts";
}

TEST(Generate, SampledSpeculativeIsPlainSampled) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  GenerateOptions options;
  options.sampling = {0.8, 50, 0.9, 7};
  expect_speculation_exact(backend, options, "fp32 sampled");
}

TEST(Generate, SpeculativeIsPlainForEveryRecipeAndBits) {
  const Mamba2Config c = synthetic_config(2);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const RecipeOptions& o = recipe_case.options;
    const CpuBackend backend(std::make_shared<const QuantizedModel>(synthetic_quantized_model(c, o, 5)));
    const std::string name = recipe_case.name;
    expect_speculation_exact(backend, {}, name + " greedy");
    GenerateOptions sampled;
    sampled.sampling = {1.0, 0, 1.0, 11};
    expect_speculation_exact(backend, sampled, name + " sampled");
  }
}

// Joint Attainment (VerifyMode::kJoint): the plain text, greedy with windows accepting every length
// 0…K (so pending tokens of every length are recomputed beside the next window), sampled, with
// several drafts (rows copied with their pending tokens), and for every recipe × bits.
TEST(Generate, JointAttainmentIsPlainDecoding) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  GenerateOptions joint;
  joint.verify = VerifyMode::kJoint;
  const std::vector<int64_t> histogram = expect_speculation_exact(backend, joint, "joint greedy");
  for (size_t j = 0; j < histogram.size(); ++j) EXPECT_GT(histogram[j], 0) << "no window accepted " << j << " drafts";
  GenerateOptions sampled = joint;
  sampled.sampling = {0.8, 50, 0.9, 7};
  expect_speculation_exact(backend, sampled, "joint sampled");
  expect_speculation_exact(backend, joint, "joint, 3 drafts", 3);
  const Mamba2Config c = synthetic_config(2);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const CpuBackend artifact(std::make_shared<const QuantizedModel>(synthetic_quantized_model(c, recipe_case.options, 5)));
    expect_speculation_exact(artifact, joint, recipe_case.name + " joint");
  }
}

// Several drafts per sequence, each in its own row: the plain text, greedy and sampled, for the
// FP model and one artifact of each recipe; the rows that accept most are kept, so the windows
// accept more than the first draft alone (whose errors cycle through every position).
TEST(Generate, SeveralDraftsPerSequenceAreExactAndAcceptMore) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  auto accepted_share = [](const std::vector<int64_t>& histogram) {
    double windows = 0, accepted = 0;
    for (size_t j = 0; j < histogram.size(); ++j) {
      windows += histogram[j];
      accepted += j * histogram[j];
    }
    return accepted / windows;
  };
  // Rows are independent on the CPU: plain decoding at 3 rows a sequence is plain decoding.
  GenerateOptions plain;
  plain.max_new_tokens = 20;
  const auto prompts = prompts_of(backend.config().vocab_size);
  const auto at_one_row = run(backend, plain, prompts), at_three_rows = plain_at_rows(backend, plain, prompts, 3);
  for (size_t b = 0; b < prompts.size(); ++b) EXPECT_EQ(at_three_rows[b].tokens, at_one_row[b].tokens);
  const double one = accepted_share(expect_speculation_exact(backend, {}, "1 draft"));
  const std::vector<int64_t> three = expect_speculation_exact(backend, {}, "3 drafts", 3);
  EXPECT_GT(accepted_share(three), one + 0.5);
  EXPECT_EQ(three[0], 0) << "a window's rows have their errors at different positions; one accepts at least 1";
  GenerateOptions sampled;
  sampled.sampling = {0.8, 50, 0.9, 7};
  expect_speculation_exact(backend, sampled, "2 drafts sampled", 2);
  const Mamba2Config c = synthetic_config(2);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const CpuBackend artifact(std::make_shared<const QuantizedModel>(synthetic_quantized_model(c, recipe_case.options, 5)));
    expect_speculation_exact(artifact, {}, recipe_case.name + " 3 drafts", 3);
  }
}

// Prompt lookup's several drafts on real text: the plain text, and the bad --drafts refused.
TEST(Generate, NgramDraftsOnRepeatedTextAreExact) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const int64_t V = backend.config().vocab_size;
  // Prompts that repeat themselves with variations, so lookup finds several continuations.
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t p = 0; p < 2; ++p) {
    std::vector<int32_t> prompt;
    const std::vector<int32_t> phrase = random_tokens(6, V, 10 + p);
    for (int64_t r = 0; r < 5; ++r) {
      prompt.insert(prompt.end(), phrase.begin(), phrase.end());
      prompt.push_back(static_cast<int32_t>((r * 13 + p) % V));
    }
    prompts.push_back(prompt);
  }
  GenerateOptions options;
  options.max_new_tokens = 24;
  const auto plain = run(backend, options, prompts);
  options.drafter = ngram_drafter({4, 1, 3}, 3);
  options.drafts = 3;
  options.max_draft = 4;
  const auto speculative = run(backend, options, prompts);
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(speculative[b].tokens, plain[b].tokens) << "prompt " << b;
    EXPECT_GT(speculative[b].windows, 0);
  }
  options.drafts = 0;
  EXPECT_THROW(run(backend, options, prompts), Error);
  options.drafts = kMaxDraftsPerSequence + 1;
  EXPECT_THROW(run(backend, options, prompts), Error);
  options.drafts = 2;
  options.drafter = nullptr;
  EXPECT_THROW(run(backend, options, prompts), Error);
}

// Speculation with a model drafting (runtime/model_drafter.h), greedy: the plain text; returns the
// speculative results.
std::vector<GeneratedText> expect_model_drafts_exact(const Backend& target, const Backend& draft,
                                                     const std::string& name) {
  const auto prompts = prompts_of(target.config().vocab_size);
  GenerateOptions options;
  options.max_new_tokens = 24;
  const std::vector<GeneratedText> plain = run(target, options, prompts);
  options.drafter = model_drafter(draft, static_cast<int64_t>(prompts.size()), 4, options.sampling);
  options.max_draft = 4;
  const std::vector<GeneratedText> speculative = run(target, options, prompts);
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(speculative[b].tokens, plain[b].tokens) << name << ": prompt " << b;
    EXPECT_GT(speculative[b].windows, 0) << name;
  }
  return speculative;
}

// Sampled speculation with a model drafting: speculative sampling's rule (its distribution is
// tests/runtime/sampling_test's), reproducible for a seed; returns the results.
std::vector<GeneratedText> sampled_model_drafts(const Backend& target, const Backend& draft) {
  const auto prompts = prompts_of(target.config().vocab_size);
  GenerateOptions options;
  options.max_new_tokens = 24;
  options.sampling = {0.8, 50, 0.9, 7};
  options.drafter = model_drafter(draft, static_cast<int64_t>(prompts.size()), 4, options.sampling);
  options.max_draft = 4;
  const std::vector<GeneratedText> first = run(target, options, prompts);
  options.drafter = model_drafter(draft, static_cast<int64_t>(prompts.size()), 4, options.sampling);
  const std::vector<GeneratedText> again = run(target, options, prompts);
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(first[b].tokens, again[b].tokens) << "prompt " << b;
    EXPECT_EQ(first[b].tokens.size(), 24u) << "prompt " << b;
    EXPECT_GT(first[b].windows, 0);
  }
  return first;
}

// The model drafting for itself proposes its own greedy continuation, or samples from its own
// distribution, so every draft is accepted: the drafter's state follows the context through
// accepted windows and rolls back its own drafts.
TEST(Generate, ModelDraftingForItselfIsAlwaysAccepted) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  for (const GeneratedText& r : expect_model_drafts_exact(backend, backend, "self-draft greedy"))
    EXPECT_EQ(r.accepted, r.drafted);
  for (const GeneratedText& r : sampled_model_drafts(backend, backend)) EXPECT_EQ(r.accepted, r.drafted);
}

// A quantized artifact of the model drafting (self-speculation): greedy gives the plain text both
// ways round, and the artifact's drafts are the model's often enough to be accepted, greedy and
// sampled.
TEST(Generate, QuantizedDraftOfTheModelIsExact) {
  const ModelWeights weights = random_weights(synthetic_config(2), 3);
  const CpuBackend target(weights);
  ExportOptions o = synthetic_model_options(RecipeName::kRtn, BitWidth::kW8A8);
  const CpuBackend draft(std::make_shared<const QuantizedModel>(
      quantize_model(weights, calibration_in_memory(weights, 2, 64, 1), o)));
  int64_t accepted = 0, drafted = 0;
  for (const GeneratedText& r : expect_model_drafts_exact(target, draft, "w8a8 draft greedy")) accepted += r.accepted;
  EXPECT_GT(accepted, 0);
  expect_model_drafts_exact(draft, target, "fp32 draft for the artifact");
  accepted = 0;
  for (const GeneratedText& r : sampled_model_drafts(target, draft)) {
    accepted += r.accepted;
    drafted += r.drafted;
  }
  EXPECT_GT(accepted, drafted / 2);  // the two distributions are close
}

// Drafts the next `length` tokens of the reference output `plain`, each shifted by `offset` in
// the vocabulary (0: always right; otherwise always wrong).
Drafter shifted_reference_drafter(const std::vector<std::vector<int32_t>>& prompts,
                                  const std::vector<GeneratedText>& plain, size_t length, int32_t offset, int64_t V) {
  return [&prompts, &plain, length, offset, V](int64_t b, const std::vector<int32_t>& context, int64_t) {
    const size_t n = context.size() - prompts[b].size();
    Draft draft;
    for (size_t k = 0; k < length && n + k < plain[b].tokens.size(); ++k)
      draft.tokens.push_back(static_cast<int32_t>((plain[b].tokens[n + k] + offset) % V));
    return draft;
  };
}

TEST(Generate, NeverMatchingDrafterChangesNothing) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const int64_t V = backend.config().vocab_size;
  const auto prompts = prompts_of(V);
  GenerateOptions options;
  options.max_new_tokens = 12;
  const auto plain = run(backend, options, prompts);
  options.drafter = shifted_reference_drafter(prompts, plain, 3, 7, V);
  options.max_draft = 3;
  const auto speculative = run(backend, options, prompts);
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(speculative[b].tokens, plain[b].tokens);
    EXPECT_EQ(speculative[b].accepted, 0);
  }
}

// The CPU backend, its model positions counted: what a generation costs in steps.
class CountingBackend : public Backend {
 public:
  explicit CountingBackend(const Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  const Mamba2Config& config() const override { return inner_.config(); }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override { return inner_.new_state(batch); }
  void forward(const int32_t* tokens, int64_t length, InferenceState& state, const ForwardOutputs& out) const override {
    positions_ += length;
    inner_.forward(tokens, length, state, out);
  }
  std::string device_name() const override { return inner_.device_name(); }
  MemoryReport memory() const override { return inner_.memory(); }
  size_t state_bytes_per_sequence() const override { return inner_.state_bytes_per_sequence(); }
  std::string describe_plan(int64_t batch, int64_t length) const override { return inner_.describe_plan(batch, length); }
  int64_t positions() const { return positions_; }

 private:
  const Backend& inner_;
  mutable int64_t positions_ = 0;
};

// Verified token by token, a window stops at its first rejected draft: a drafter that is always
// wrong, asked at every token (fixed draft length, no pauses), costs not one model call more
// than plain decoding, greedy and sampled, one draft and several (a row a draft).
TEST(Generate, RejectedDraftsCostNoStepsWhenVerifiedTokenByToken) {
  const CpuBackend cpu(random_weights(synthetic_config(2), 3));
  const int64_t V = cpu.config().vocab_size;
  const auto prompts = prompts_of(V);
  for (const float temperature : {0.f, 0.8f}) {
    GenerateOptions options;
    options.max_new_tokens = 12;
    options.sampling.temperature = temperature;
    options.sampling.seed = 5;
    CountingBackend plain_backend(cpu);
    const auto plain = run(plain_backend, options, prompts);
    for (const int64_t drafts : {int64_t{1}, int64_t{2}}) {
      SCOPED_TRACE(fmt::format("temperature {}, drafts {}", temperature, drafts));
      GenerateOptions speculative_options = options;
      const Drafter wrong = shifted_reference_drafter(prompts, plain, 4, 7, V);
      speculative_options.drafter = [wrong, drafts](int64_t b, const std::vector<int32_t>& context, int64_t limit) {
        Draft d = wrong(b, context, limit);
        if (drafts > 1) d.alternatives.push_back(d.tokens);
        return d;
      };
      speculative_options.max_draft = 4;
      speculative_options.drafts = drafts;
      CountingBackend speculative_backend(cpu);
      const auto speculative = run(speculative_backend, speculative_options, prompts);
      int64_t windows = 0;
      for (size_t b = 0; b < prompts.size(); ++b) {
        EXPECT_EQ(speculative[b].tokens, plain[b].tokens);
        EXPECT_EQ(speculative[b].accepted, 0);
        windows += speculative[b].windows;
      }
      EXPECT_GT(windows, 0);
      EXPECT_EQ(speculative_backend.positions(), plain_backend.positions());
    }
  }
}

// The adaptive draft length: a drafter that always misses is asked a few times, not once per
// token (pauses of 1, 2, 4 … tokens), and one that is always right keeps its full windows; both
// give the plain tokens.
TEST(Generate, AdaptiveDraftBacksOffAMissingDrafterAndKeepsAGoodOne) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const int64_t V = backend.config().vocab_size;
  const auto prompts = prompts_of(V);
  GenerateOptions options;
  options.max_new_tokens = 40;
  const auto plain = run(backend, options, prompts);
  options.max_draft = 4;
  options.adaptive_draft = true;
  for (const int offset : {7, 0}) {  // 7: every draft token wrong; 0: every one right
    options.drafter = shifted_reference_drafter(prompts, plain, 4, offset, V);
    const auto speculative = run(backend, options, prompts);
    for (size_t b = 0; b < prompts.size(); ++b) {
      SCOPED_TRACE(::testing::Message() << "offset " << offset << ", prompt " << b);
      EXPECT_EQ(speculative[b].tokens, plain[b].tokens);
      if (offset != 0) {
        // 39 tokens after the first: windows at the tokens 1, 2, 4, 7, 12, 21, 38 at most.
        EXPECT_LE(speculative[b].windows, 7);
        EXPECT_EQ(speculative[b].accepted, 0);
      } else {
        EXPECT_EQ(speculative[b].accepted, speculative[b].drafted);
        EXPECT_LE(speculative[b].windows, 11);  // 39 tokens, 4 + 1 a window (the last ones shorter)
      }
    }
  }
}

TEST(Generate, SamplingDependsOnlyOnSeedPromptAndPosition) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const auto prompts = prompts_of(backend.config().vocab_size);
  GenerateOptions options;
  options.max_new_tokens = 10;
  options.sampling = {1.0, 0, 1.0, 5};
  const auto together = run(backend, options, prompts);
  options.sequence_ids = {1};
  const auto alone = run(backend, options, {prompts[1]});
  EXPECT_EQ(alone[0].tokens, together[1].tokens);
  options.sequence_ids.clear();
  options.sampling.seed = 6;
  const auto other_seed = run(backend, options, prompts);
  EXPECT_NE(other_seed[1].tokens, together[1].tokens);
}

TEST(Generate, StopsAtStopStringsAndTokensAndStreamsWholeText) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const auto prompts = prompts_of(backend.config().vocab_size);
  GenerateOptions options;
  options.max_new_tokens = 16;
  const auto plain = run(backend, options, {prompts[1]});
  ASSERT_EQ(plain[0].finish_reason, "length");
  ASSERT_GE(plain[0].text.size(), 6u);
  // A stop string from the middle of the text: the output is the text before its first occurrence.
  const std::string stop = plain[0].text.substr(plain[0].text.size() / 2, 3);
  options.stop_strings = {stop};
  std::string streamed;
  const auto stopped = generate(backend, tokenizer(), {prompts[1]}, options,
                                [&](int64_t, const std::string& piece) { streamed += piece; });
  EXPECT_EQ(stopped[0].finish_reason, "stop string");
  EXPECT_EQ(stopped[0].text, plain[0].text.substr(0, plain[0].text.find(stop)));
  EXPECT_EQ(streamed, stopped[0].text);
  // A stop token: generation ends before it, and it is not part of the output.
  options.stop_strings.clear();
  options.stop_tokens = {plain[0].tokens[3]};
  const auto at_token = run(backend, options, {prompts[1]});
  EXPECT_EQ(at_token[0].finish_reason, "stop token");
  const size_t first = std::find(plain[0].tokens.begin(), plain[0].tokens.end(), plain[0].tokens[3]) - plain[0].tokens.begin();
  EXPECT_EQ(at_token[0].tokens, std::vector<int32_t>(plain[0].tokens.begin(), plain[0].tokens.begin() + first));
}

TEST(Generate, HoldsBackIncompleteUtf8Characters) {
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("a\xC3"), 1u);              // é's first byte
  EXPECT_EQ(complete_utf8_prefix("a\xC3\xA9"), 3u);          // é whole
  EXPECT_EQ(complete_utf8_prefix("a\xE2\x82"), 1u);          // € missing its last byte
  EXPECT_EQ(complete_utf8_prefix("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98"), 0u);       // an emoji cut short
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98\x80x"), 5u);
}

TEST(Generate, NgramDraftContinuesTheLatestEarlierMatch) {
  NgramDraftOptions o;
  o.draft = 3;
  o.ngram_min = 1;
  o.ngram_max = 3;
  EXPECT_EQ(ngram_draft({1, 2, 3, 9, 8, 1, 2}, o), (std::vector<int32_t>{3, 9, 8}));
  EXPECT_EQ(ngram_draft({5, 1, 2, 7, 1, 2, 4, 4, 1, 2}, o), (std::vector<int32_t>{4, 4, 1}));  // the latest
  EXPECT_EQ(ngram_draft({1, 2, 3}, o), std::vector<int32_t>{});                              // nothing repeats
  EXPECT_EQ(ngram_draft({4, 4, 4}, o), (std::vector<int32_t>{4}));
}

// Several drafts: the most recent match's continuation first, then the others of the same
// suffix by frequency (ties: the more recent), then those of shorter suffixes; a continuation
// already covered by a taken draft is skipped.
TEST(Generate, NgramDraftsRankTheContinuationsOfTheMatch) {
  NgramDraftOptions o;
  o.draft = 2;
  o.ngram_min = 1;
  o.ngram_max = 1;
  using Drafts = std::vector<std::vector<int32_t>>;
  // [7] follows at 6 ([3, 7]), 4 and 2 ([2, 7], twice) and 0 ([1, 7]).
  EXPECT_EQ(ngram_drafts({7, 1, 7, 2, 7, 2, 7, 3, 7}, o, 3), (Drafts{{3, 7}, {2, 7}, {1, 7}}));
  EXPECT_EQ(ngram_drafts({7, 1, 7, 2, 7, 2, 7, 3, 7}, o, 2), (Drafts{{3, 7}, {2, 7}}));
  EXPECT_EQ(ngram_drafts({7, 1, 7, 2, 7, 2, 7, 3, 7}, o, 1), (Drafts{ngram_draft({7, 1, 7, 2, 7, 2, 7, 3, 7}, o)}));
  o.ngram_max = 2;
  // [6, 6] at 0 gives [1, 6]; then [6] at 3 ([6], cut by the end), 1 ([1, 6] again: skipped), 0 ([6, 1]).
  EXPECT_EQ(ngram_drafts({6, 6, 1, 6, 6}, o, 4), (Drafts{{1, 6}, {6}, {6, 1}}));
  EXPECT_EQ(ngram_drafts({1, 2, 3}, o, 3), Drafts{});
}

// The measured payoff: windows that yield fewer tokens per ms than plain steps pause speculation
// for 1, 2, 4 … steps; windows that yield more keep it on; the first step and the first window of
// each width are not counted where calls warm up (a GPU); before any plain step is measured, two
// are taken (one without warm-up).
TEST(Generate, SpeculationPausesWhileItsWindowsYieldLessThanSteps) {
  SpeculationPayoff cpu(false);
  cpu.record_window(5, 1.0, 3);  // counted at once; one step taken to compare
  EXPECT_DOUBLE_EQ(cpu.window_rate(), 3.0);
  EXPECT_FALSE(cpu.speculate());
  EXPECT_TRUE(cpu.speculate());
  cpu.record_step(1.0, 2);
  EXPECT_DOUBLE_EQ(cpu.step_rate(), 2.0);
  SpeculationPayoff payoff(true);
  EXPECT_TRUE(payoff.speculate());
  payoff.record_window(5, 1.0, 3);  // first of width 5: not counted
  EXPECT_EQ(payoff.window_rate(), 0);
  payoff.record_window(5, 1.0, 3);  // counted, but no step to compare with: two steps taken
  EXPECT_DOUBLE_EQ(payoff.window_rate(), 3.0);
  EXPECT_FALSE(payoff.speculate());
  EXPECT_FALSE(payoff.speculate());
  EXPECT_TRUE(payoff.speculate());
  payoff.record_step(100.0, 1);  // the first step: not counted
  payoff.record_step(1.0, 1);    // 1 token per ms
  EXPECT_DOUBLE_EQ(payoff.step_rate(), 1.0);
  payoff.record_window(5, 1.0, 3);  // windows yield more: no pause
  EXPECT_TRUE(payoff.speculate());
  // Windows that yield 0.2 tokens per ms pull the average below the steps' 1: pauses of 1, 2, 4.
  int64_t pauses = 0;
  std::vector<int64_t> lengths;
  for (int round = 0; round < 12 && lengths.size() < 3; ++round) {
    payoff.record_window(5, 10.0, 2);
    int64_t paused = 0;
    while (!payoff.speculate()) ++paused;
    if (paused > 0) lengths.push_back(paused);
    pauses += paused;
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(payoff.paused_steps(), pauses + 2);
  // Once windows pay again the next pause is short again.
  for (int i = 0; i < 20; ++i) payoff.record_window(5, 0.1, 7);
  EXPECT_GT(payoff.window_rate(), payoff.step_rate());
  EXPECT_TRUE(payoff.speculate());
  // Bad windows again: the first pause after they fall below the steps is 1 step long.
  int64_t paused = 0;
  while (payoff.window_rate() >= payoff.step_rate()) payoff.record_window(5, 100.0, 1);
  while (!payoff.speculate()) ++paused;
  EXPECT_EQ(paused, 1);
}

// Measured payoff changes which tokens come from windows, never the tokens.
TEST(Generate, MeasuredPayoffKeepsThePlainText) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  GenerateOptions options;
  options.measured_payoff = true;
  options.adaptive_draft = true;
  const std::vector<int64_t> histogram = expect_speculation_exact(backend, options, "measured payoff");
  EXPECT_GT(histogram.size(), 0u);
}

TEST(Generate, RefusesBadOptionsAndPrompts) {
  const CpuBackend backend(random_weights(synthetic_config(2, 1), 3));
  GenerateOptions options;
  EXPECT_THROW(run(backend, options, {{}}), Error);
  EXPECT_THROW(run(backend, options, {{1, 300}}), Error);  // outside the 256-token vocabulary
  options.sampling.temperature = -1;
  EXPECT_THROW(run(backend, options, {{1}}), Error);
  options.sampling.temperature = 1;
  options.sampling.top_p = 0;
  EXPECT_THROW(run(backend, options, {{1}}), Error);
  options.sampling.top_p = 1.5;
  EXPECT_THROW(run(backend, options, {{1}}), Error);
  options.sampling.top_p = 1;
  options.sampling.top_k = -2;
  EXPECT_THROW(run(backend, options, {{1}}), Error);
}

}  // namespace
}  // namespace ssdq
