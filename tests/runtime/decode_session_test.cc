// The decode session's contract on the CPU specification, for the FP model and every recipe ×
// bit width, verified token by token (kExact) and by Joint Attainment (kJoint): verify(K) returns,
// bit for bit, the logits K plain steps give, and accept(n) leaves each sequence's state (and what
// follows) bit for bit as n plain steps would. Also the state
// API it is built on: row copies, zeroing, and the errors for rows that do not exist.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/synthetic_quantized.h"
#include "formats/error.h"
#include "model/model_weights.h"
#include "runtime/cpu_backend.h"
#include "runtime/decode_session.h"
#include "tests/support/recipe_cases.h"
#include "tests/support/session_checks.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using namespace testing_models;

std::vector<char> row_bytes(const InferenceState& state, int64_t row) {
  std::vector<char> out;
  for (const StateTensor& t : state.tensors()) {
    const char* begin = static_cast<const char*>(t.data) + row * t.bytes_per_sequence;
    out.insert(out.end(), begin, begin + t.bytes_per_sequence);
  }
  return out;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Three sequences with prompts of different lengths (one long enough for the chunked SSD), one
// plain step, then verify K = 4 drafts and accept 0, 2 and 4 of them, then one more step.
void expect_verify_accept_is_plain_decode(const Backend& backend, const std::string& name, VerifyMode mode) {
  const int64_t V = backend.config().vocab_size, B = 3, K = 4;
  const std::vector<int64_t> prompt_lengths = {70, 9, 1}, counts = {0, 2, 4};
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < B; ++b) prompts.push_back(random_tokens(prompt_lengths[b], V, 10 + b));
  const std::vector<int32_t> first = random_tokens(B, V, 20), drafts = random_tokens(B * K, V, 21),
                             next = random_tokens(B, V, 22);

  DecodeSession session(backend, B, mode);
  for (int64_t b = 0; b < B; ++b) session.prefill(b, prompts[b].data(), prompt_lengths[b], nullptr);
  session.step(first.data(), nullptr);
  std::vector<float> verified(B * K * V), after(B * V);
  session.verify(drafts.data(), K, verified.data());
  session.accept(counts);
  std::vector<std::vector<char>> accepted;
  for (int64_t b = 0; b < B; ++b) accepted.push_back(row_bytes(session.state(), b));
  session.step(next.data(), after.data());

  for (int64_t b = 0; b < B; ++b) {
    // The plain decode of sequence b alone: prompt, first token, then the drafts one at a time.
    DecodeSession plain(backend, 1);
    std::vector<float> logits(V), prompt_logits(V);
    plain.prefill(0, prompts[b].data(), prompt_lengths[b], prompt_logits.data());
    plain.step(&first[b], nullptr);
    for (int64_t k = 0; k < K; ++k) {
      plain.step(&drafts[b * K + k], logits.data());
      EXPECT_TRUE(same_bits(logits.data(), &verified[(b * K + k) * V], V))
          << name << ": sequence " << b << ", verified position " << k;
    }
    DecodeSession kept(backend, 1);
    kept.prefill(0, prompts[b].data(), prompt_lengths[b], nullptr);
    kept.step(&first[b], nullptr);
    for (int64_t k = 0; k < counts[b]; ++k) kept.step(&drafts[b * K + k], nullptr);
    EXPECT_EQ(accepted[b], row_bytes(kept.state(), 0))
        << name << ": sequence " << b << " state after accept(" << counts[b] << ")";
    kept.step(&next[b], logits.data());
    EXPECT_TRUE(same_bits(logits.data(), &after[b * V], V)) << name << ": sequence " << b << ", step after accept";
  }
}

TEST(DecodeSession, VerifyAcceptIsPlainDecodeForTheFloatModel) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  expect_verify_accept_is_plain_decode(backend, "fp32", VerifyMode::kExact);
  expect_verify_accept_is_plain_decode(backend, "fp32 joint", VerifyMode::kJoint);
}

// Greedy generation asks for the argmax alone: it is the argmax of the logits the same calls give,
// at one sequence (outputs written in place) and three (staged per step), verified both ways.
TEST(DecodeSession, ArgmaxOutputsAreTheArgmaxOfTheLogits) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  for (const int64_t batch : {1, 3}) {
    expect_argmax_outputs_are_the_logits_argmax(backend, VerifyMode::kExact, "fp32", batch, 4);
    expect_argmax_outputs_are_the_logits_argmax(backend, VerifyMode::kJoint, "fp32 joint", batch, 4);
  }
}

TEST(DecodeSession, VerifyAcceptIsPlainDecodeForEveryRecipeAndBits) {
  const Mamba2Config c = synthetic_config(2);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const RecipeOptions& o = recipe_case.options;
    const CpuBackend backend(std::make_shared<const QuantizedModel>(synthetic_quantized_model(c, o, 5)));
    expect_verify_accept_is_plain_decode(backend, recipe_case.name, VerifyMode::kExact);
    expect_verify_accept_is_plain_decode(backend, recipe_case.name + " joint", VerifyMode::kJoint);
  }
}

// Joint Attainment over several rounds without the state read between them, so each verify also
// steps the tokens the previous one kept (sequences keeping 0 … K, pending tokens of different
// lengths left-padded with no-ops), with a row copied (its pending tokens with it) and a sequence
// started again in between: every verified position's logits are plain decoding's, bit for bit,
// and so is the state at the end.
TEST(DecodeSession, JointRoundsAreThePlainDecodeOfTheKeptTokens) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const int64_t V = backend.config().vocab_size, B = 3, K = 3, rounds = 5;
  // Each sequence's prompt and the tokens it kept since; plain decoding reads the prompt, then steps.
  std::vector<std::vector<int32_t>> prompt(B), kept(B);
  for (int64_t b = 0; b < B; ++b) prompt[b] = random_tokens(5 + 7 * b, V, 40 + b);
  DecodeSession session(backend, B, VerifyMode::kJoint);
  for (int64_t b = 0; b < B; ++b) session.prefill(b, prompt[b].data(), prompt[b].size(), nullptr);
  auto plain_of = [&](int64_t b, DecodeSession& plain) {
    plain.prefill(0, prompt[b].data(), prompt[b].size(), nullptr);
    for (int32_t t : kept[b]) plain.step(&t, nullptr);
  };
  const std::vector<std::vector<int64_t>> counts = {{0, 2, 3}, {1, 0, 3}, {3, 1, 0}, {2, 2, 1}, {0, 3, 2}};
  for (int64_t round = 0; round < rounds; ++round) {
    const std::vector<int32_t> tokens = random_tokens(B * K, V, 60 + round);
    std::vector<float> verified(B * K * V), expected(V);
    session.verify(tokens.data(), K, verified.data());
    for (int64_t b = 0; b < B; ++b) {
      DecodeSession plain(backend, 1);
      plain_of(b, plain);
      for (int64_t k = 0; k < K; ++k) {
        plain.step(&tokens[b * K + k], expected.data());
        EXPECT_TRUE(same_bits(expected.data(), &verified[(b * K + k) * V], V))
            << "round " << round << ", sequence " << b << ", position " << k;
      }
    }
    session.accept(counts[round]);
    for (int64_t b = 0; b < B; ++b)
      kept[b].insert(kept[b].end(), tokens.begin() + b * K, tokens.begin() + b * K + counts[round][b]);
    if (round == 1) {  // sequence 2 becomes a copy of sequence 0, pending tokens and all
      session.copy_rows({0}, {2});
      prompt[2] = prompt[0];
      kept[2] = kept[0];
    }
    if (round == 2) {  // sequence 1 starts again from a prompt while the others keep pending tokens
      prompt[1] = random_tokens(4, V, 70);
      kept[1].clear();
      session.prefill(1, prompt[1].data(), prompt[1].size(), nullptr);
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    DecodeSession plain(backend, 1);
    plain_of(b, plain);
    EXPECT_EQ(row_bytes(session.state(), b), row_bytes(plain.state(), 0)) << "sequence " << b;
  }
}

// A token-by-token verify told after position 1 not to go on steps two of its four positions
// (the caller is asked after each, the last too), sequence 1 settled after position 0 and sequence
// 0 after position 1: their logits are plain decoding's, verify returns 2, accept takes the settled
// counts (not 3, nor another count for a settled row: no other state was kept), and the kept
// states are plain decoding's; for kExact and kJoint, two rounds so that Joint Attainment's
// pending tokens are the stopped verify's.
TEST(DecodeSession, VerifyStopsWhereTheCallerSays) {
  const CpuBackend backend(random_weights(synthetic_config(2), 3));
  const int64_t V = backend.config().vocab_size, B = 2, K = 4;
  for (VerifyMode mode : {VerifyMode::kExact, VerifyMode::kJoint}) {
    SCOPED_TRACE(mode == VerifyMode::kJoint ? "joint" : "exact");
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(6, V, 80), random_tokens(11, V, 81)};
    DecodeSession session(backend, B, mode);
    for (int64_t b = 0; b < B; ++b) session.prefill(b, prompts[b].data(), prompts[b].size(), nullptr);
    std::vector<std::vector<int32_t>> kept(B);
    const std::vector<int64_t> counts = {2, 1};
    for (int round = 0; round < 2; ++round) {
      const std::vector<int32_t> tokens = random_tokens(B * K, V, 90 + round);
      std::vector<float> verified(B * K * V, 0.f), expected(V);
      std::vector<int64_t> asked;
      const int64_t positions =
          session.verify(tokens.data(), K, verified.data(), [&](int64_t k, std::vector<int64_t>& settled) {
            EXPECT_TRUE(settled.empty());
            asked.push_back(k);
            settled.push_back(k == 0 ? 1 : 0);
            return k < 1;
          });
      EXPECT_EQ(positions, 2);
      EXPECT_EQ(asked, (std::vector<int64_t>{0, 1}));
      for (int64_t b = 0; b < B; ++b) {
        DecodeSession plain(backend, 1);
        plain.prefill(0, prompts[b].data(), prompts[b].size(), nullptr);
        for (int32_t t : kept[b]) plain.step(&t, nullptr);
        for (int64_t k = 0; k < positions; ++k) {
          plain.step(&tokens[b * K + k], expected.data());
          EXPECT_TRUE(same_bits(expected.data(), &verified[(b * K + k) * V], V)) << "sequence " << b << ", position " << k;
        }
      }
      if (round == 0) {
        EXPECT_THROW(session.accept({3, 1}), Error);
        if (mode == VerifyMode::kExact) {
          EXPECT_THROW(session.accept({2, 0}), Error);
        }
      }
      session.accept(counts);
      for (int64_t b = 0; b < B; ++b) kept[b].insert(kept[b].end(), tokens.begin() + b * K, tokens.begin() + b * K + counts[b]);
    }
    for (int64_t b = 0; b < B; ++b) {
      DecodeSession plain(backend, 1);
      plain.prefill(0, prompts[b].data(), prompts[b].size(), nullptr);
      for (int32_t t : kept[b]) plain.step(&t, nullptr);
      EXPECT_EQ(row_bytes(session.state(), b), row_bytes(plain.state(), 0)) << "sequence " << b;
    }
  }
}

TEST(DecodeSession, RefusesAcceptWithoutVerifyAndCountsOutOfRange) {
  const CpuBackend backend(random_weights(synthetic_config(2, 1), 3));
  DecodeSession session(backend, 2);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_THROW(session.accept({0, 0}), Error);
  session.verify(tokens.data(), 2, nullptr);
  EXPECT_THROW(session.accept({0, 3}), Error);
  EXPECT_THROW(session.accept({0}), Error);
  session.accept({1, 2});
  EXPECT_THROW(session.accept({1, 2}), Error);  // each verify is accepted once
  EXPECT_THROW(session.verify(tokens.data(), 0, nullptr), Error);
  EXPECT_THROW(session.prefill(2, tokens.data(), 2, nullptr), Error);
  EXPECT_THROW(session.prefill(0, tokens.data(), 0, nullptr), Error);
}

// Joint Attainment keeps no state to fall back on: a verify must be accepted before anything
// else reads or moves the state; a new prompt drops it.
TEST(DecodeSession, JointVerifyMustBeAcceptedFirst) {
  const CpuBackend backend(random_weights(synthetic_config(2, 1), 3));
  DecodeSession session(backend, 2, VerifyMode::kJoint);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  session.prefill(0, tokens.data(), 2, nullptr);
  session.prefill(1, tokens.data(), 3, nullptr);
  session.verify(tokens.data(), 2, nullptr);
  EXPECT_THROW(session.step(tokens.data(), nullptr), Error);
  EXPECT_THROW(session.verify(tokens.data(), 2, nullptr), Error);
  EXPECT_THROW(session.state(), Error);
  EXPECT_THROW(session.copy_rows({0}, {1}), Error);
  session.accept({1, 0});
  session.step(tokens.data(), nullptr);
  session.verify(tokens.data(), 2, nullptr);
  session.prefill(0, tokens.data(), 2, nullptr);  // a new prompt: the verify is dropped
  session.step(tokens.data(), nullptr);
}

TEST(StateApi, CopiesAndZeroesRows) {
  const CpuBackend backend(random_weights(synthetic_config(2, 2), 3));
  const int64_t V = backend.config().vocab_size;
  auto state = backend.new_state(3);
  const std::vector<int32_t> tokens = random_tokens(3 * 40, V, 4);
  backend.forward(tokens.data(), 40, *state, {});
  EXPECT_EQ(state->bytes_per_sequence(), backend.state_bytes_per_sequence());
  const std::vector<char> row0 = row_bytes(*state, 0), row1 = row_bytes(*state, 1), row2 = row_bytes(*state, 2);
  ASSERT_NE(row0, row1);

  auto snapshot = backend.new_state(2);
  snapshot->copy_rows(*state, {2, 0}, {0, 1});
  EXPECT_EQ(row_bytes(*snapshot, 0), row2);
  EXPECT_EQ(row_bytes(*snapshot, 1), row0);

  state->copy_rows(*state, {0}, {1});  // one sequence's state into another of the same batch
  EXPECT_EQ(row_bytes(*state, 1), row0);
  state->zero_rows({0});
  EXPECT_EQ(row_bytes(*state, 0), std::vector<char>(row0.size(), 0));
  state->copy_rows(*snapshot, {1, 0}, {0, 2});  // restore
  EXPECT_EQ(row_bytes(*state, 0), row0);
  EXPECT_EQ(row_bytes(*state, 2), row2);

  EXPECT_THROW(state->copy_rows(*snapshot, {2}, {0}), Error);       // no source row 2
  EXPECT_THROW(state->copy_rows(*snapshot, {0}, {3}), Error);       // no destination row 3
  EXPECT_THROW(state->copy_rows(*snapshot, {0, 1}, {1, 1}), Error);  // a destination twice
  EXPECT_THROW(state->copy_rows(*state, {0, 1}, {1, 2}), Error);     // row 1 read and overwritten
  EXPECT_THROW(state->copy_all(*snapshot), Error);                   // batches differ
  EXPECT_THROW(state->zero_rows({-1}), Error);
  const CpuBackend other(random_weights(synthetic_config(2, 1), 3));  // one layer: other buffers
  EXPECT_THROW(state->copy_rows(*other.new_state(1), {0}, {0}), Error);
}

}  // namespace
}  // namespace ssdq
