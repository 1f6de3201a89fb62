// The decode session's contract on the CPU specification, for the FP model and every recipe ×
// bit width, verified token by token (kExact) and by Joint Attainment (kJoint): verify(K) returns,
// bit for bit, the logits K plain steps give, and accept(n) leaves each sequence's state (and what
// follows) bit for bit as n plain steps would; the session around a backend whose windows replay
// inside the next one (emulated here: the CUDA engine's). Also the state
// API it is built on: row copies, zeroing, and the errors for rows that do not exist.
#include <gtest/gtest.h>

#include <algorithm>
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

// The contract of a backend whose windows replay inside the next one (Backend::replays_in_window,
// the CUDA engine on one GPU), emulated over the CPU specification with single steps: a window
// leaves the state before its tokens and keeps them; replay_then_window first steps each
// sequence's count of the previous window's kept tokens; replay_window steps them apart. What the
// session must do around it — pass the accepted counts to the next window, replay apart before a
// step, a row copy, a prefill or a read of the state — is then checked without a GPU.
class ReplayInWindowBackend : public Backend {
 public:
  explicit ReplayInWindowBackend(const Backend& inner) : inner_(inner) {}
  std::string name() const override { return "replay-in-window emulation"; }
  const Mamba2Config& config() const override { return inner_.config(); }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override { return inner_.new_state(batch); }
  void forward(const int32_t* tokens, int64_t length, InferenceState& state, const ForwardOutputs& outputs) const override {
    inner_.forward(tokens, length, state, outputs);
  }
  std::string device_name() const override { return inner_.device_name(); }
  MemoryReport memory() const override { return inner_.memory(); }
  size_t state_bytes_per_sequence() const override { return inner_.state_bytes_per_sequence(); }
  std::string describe_plan(int64_t batch, int64_t length) const override { return inner_.describe_plan(batch, length); }
  bool runs_window() const override { return true; }
  bool exact_window(int64_t, int64_t) const override { return true; }
  bool replays_in_window() const override { return true; }

  void forward_window(const int32_t*, int64_t, InferenceState&, const ForwardOutputs&) const override {
    ADD_FAILURE() << "the session replays apart from its windows although the backend replays inside them";
  }
  void replay_then_window(const std::vector<int64_t>& steps, const std::vector<int64_t>& from, const int32_t* tokens,
                          int64_t length, InferenceState& state, const ForwardOutputs& outputs) const override {
    step_kept(state, steps, from);
    ++windows;
    const int64_t B = state.batch(), V = config().vocab_size;
    auto rows = inner_.new_state(B);
    rows->copy_all(state);
    std::vector<int32_t> column(B);
    std::vector<float> logits(B * V);
    for (int64_t k = 0; k < length; ++k) {
      for (int64_t b = 0; b < B; ++b) column[b] = tokens[b * length + k];
      ForwardOutputs out;
      out.logits = logits.data();
      inner_.forward(column.data(), 1, *rows, out);
      for (int64_t b = 0; b < B; ++b) {
        const float* row = logits.data() + b * V;
        if (outputs.logits) std::memcpy(outputs.logits + (b * length + k) * V, row, V * sizeof(float));
        if (outputs.argmax) outputs.argmax[b * length + k] = static_cast<int32_t>(std::max_element(row, row + V) - row);
      }
    }
    kept_.assign(tokens, tokens + B * length);
    kept_length_ = length;
  }
  void replay_window(InferenceState& state, const std::vector<int64_t>& steps) const override {
    if (kept_length_ == 0) ADD_FAILURE() << "replay_window without a window";
    step_kept(state, steps, {});
    ++apart;
  }
  mutable int64_t windows = 0, apart = 0, taken_from_another = 0;

 private:
  // Sequence b steps the first steps[b] kept tokens of sequence from[b] (its own where from is
  // empty) from its own state, alone (rows are independent on the CPU), as the CUDA kernels do.
  void step_kept(InferenceState& state, const std::vector<int64_t>& steps, const std::vector<int64_t>& from) const {
    auto one = inner_.new_state(1);
    for (int64_t b = 0; b < static_cast<int64_t>(steps.size()); ++b) {
      if (steps[b] > kept_length_) ADD_FAILURE() << "sequence " << b << " replays " << steps[b] << " of " << kept_length_;
      if (steps[b] <= 0) continue;
      const int64_t source = from.empty() ? b : from[b];
      if (source != b) ++taken_from_another;
      one->copy_rows(state, {b}, {0});
      for (int64_t j = 0; j < steps[b]; ++j) inner_.forward(&kept_[source * kept_length_ + j], 1, *one, {});
      state.copy_rows(*one, {0}, {b});
    }
    kept_length_ = 0;
  }
  const Backend& inner_;
  mutable std::vector<int32_t> kept_;
  mutable int64_t kept_length_ = 0;
};

// Rounds of verify + accept with a plain step, a row copy, a prefill and a read of the state
// between some of them, against a session that steps the accepted tokens: bit for bit.
TEST(DecodeSession, WindowsThatReplayInsideTheNextArePlainDecode) {
  const CpuBackend cpu(random_weights(synthetic_config(2), 3));
  const ReplayInWindowBackend backend(cpu);
  const int64_t V = cpu.config().vocab_size, B = 3, K = 4;
  DecodeSession session(backend, B, VerifyMode::kExact), plain(cpu, B);
  ASSERT_TRUE(session.verifies_as_window(K));
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t> prompt = random_tokens(5 + 3 * b, V, 30 + b);
    session.prefill(b, prompt.data(), 5 + 3 * b, nullptr);
    plain.prefill(b, prompt.data(), 5 + 3 * b, nullptr);
  }
  std::vector<float> verified(B * K * V), logits(B * V), expected(B * V);
  for (int64_t round = 0; round < 6; ++round) {
    const std::vector<int32_t> drafts = random_tokens(B * K, V, 40 + round);
    session.verify(drafts.data(), K, verified.data());
    std::vector<int64_t> counts(B);
    for (int64_t b = 0; b < B; ++b) counts[b] = (round + 2 * b) % (K + 1);
    session.accept(counts);
    // The reference: each sequence steps its accepted drafts alone (the others held).
    for (int64_t b = 0; b < B; ++b) {
      DecodeSession one(cpu, 1);
      one.state().copy_rows(plain.state(), {b}, {0});
      for (int64_t k = 0; k < counts[b]; ++k) {
        one.step(&drafts[b * K + k], expected.data());
        EXPECT_TRUE(same_bits(expected.data(), &verified[(b * K + k) * V], V))
            << "round " << round << ", sequence " << b << ", position " << k;
      }
      plain.state().copy_rows(one.state(), {0}, {b});
    }
    const std::vector<int32_t> column = random_tokens(B, V, 60 + round);
    switch (round) {
      case 1:  // a plain step between windows
        session.step(column.data(), logits.data());
        plain.step(column.data(), expected.data());
        EXPECT_TRUE(same_bits(logits.data(), expected.data(), B * V)) << "the step after round " << round;
        break;
      case 2:  // a row copy
        session.copy_rows({0}, {2});
        plain.state().copy_rows(plain.state(), {0}, {2});
        break;
      case 3: {  // sequence 1 restarts
        const std::vector<int32_t> prompt = random_tokens(7, V, 70);
        session.prefill(1, prompt.data(), 7, nullptr);
        plain.prefill(1, prompt.data(), 7, nullptr);
        break;
      }
      case 4:  // the state read between windows
        for (int64_t b = 0; b < B; ++b) EXPECT_EQ(row_bytes(session.state(), b), row_bytes(plain.state(), b)) << b;
        break;
      default:
        break;
    }
  }
  session.step(random_tokens(B, V, 80).data(), logits.data());
  plain.step(random_tokens(B, V, 80).data(), expected.data());
  EXPECT_TRUE(same_bits(logits.data(), expected.data(), B * V)) << "the last step";
  for (int64_t b = 0; b < B; ++b) EXPECT_EQ(row_bytes(session.state(), b), row_bytes(plain.state(), b)) << b;
  EXPECT_EQ(backend.windows, 6);
  // Apart only where something else came first: the step, the copy, the prefill, the read, the end.
  EXPECT_EQ(backend.apart, 5);
}

// Draft rows (two sequences × three rows, equal outside a window) accepted with `from`: every row
// takes its sequence's kept row. On the replay-in-window backend no row is copied (each row replays
// the kept row's tokens inside the next window); on the CPU specification accept + copy. Both end
// bit for bit where one row per sequence stepping the kept tokens does.
TEST(DecodeSession, DraftRowsTakeTheKeptRowsTokensWithoutACopy) {
  const CpuBackend cpu(random_weights(synthetic_config(2), 3));
  const ReplayInWindowBackend fused(cpu);
  const int64_t V = cpu.config().vocab_size, S = 2, M = 3, K = 4;
  for (const Backend* backend : {static_cast<const Backend*>(&fused), static_cast<const Backend*>(&cpu)}) {
    SCOPED_TRACE(backend->name());
    DecodeSession rows(*backend, S * M, VerifyMode::kExact), plain(cpu, S);
    for (int64_t s = 0; s < S; ++s) {
      const std::vector<int32_t> prompt = random_tokens(6 + s, V, 90 + s);
      rows.prefill(s * M, prompt.data(), 6 + s, nullptr);
      plain.prefill(s, prompt.data(), 6 + s, nullptr);
      rows.copy_rows({s * M, s * M}, {s * M + 1, s * M + 2});
    }
    EXPECT_TRUE(rows.same_state(0, 2));
    EXPECT_FALSE(rows.same_state(0, 3));
    std::vector<float> verified(S * M * K * V), expected(V);
    for (int64_t round = 0; round < 5; ++round) {
      const std::vector<int32_t> drafts = random_tokens(S * M * K, V, 100 + round);
      rows.verify(drafts.data(), K, verified.data());
      std::vector<int64_t> counts(S * M, K), from(S * M);
      for (int64_t s = 0; s < S; ++s) {
        const int64_t kept = s * M + (round + s) % M;  // the kept row changes from round to round
        counts[kept] = (round + 2 * s) % (K + 1);
        for (int64_t m = 0; m < M; ++m) from[s * M + m] = kept;
        DecodeSession one(cpu, 1);
        one.state().copy_rows(plain.state(), {s}, {0});
        for (int64_t k = 0; k < counts[kept]; ++k) {
          one.step(&drafts[kept * K + k], expected.data());
          EXPECT_TRUE(same_bits(expected.data(), &verified[(kept * K + k) * V], V)) << round << " " << s << " " << k;
        }
        plain.state().copy_rows(one.state(), {0}, {s});
      }
      rows.accept(counts, from);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t m = 1; m < M; ++m) EXPECT_TRUE(rows.same_state(s * M, s * M + m)) << round;
    }
    for (int64_t s = 0; s < S; ++s)
      for (int64_t m = 0; m < M; ++m)
        EXPECT_EQ(row_bytes(rows.state(), s * M + m), row_bytes(plain.state(), s)) << s << " " << m;
  }
  EXPECT_GT(fused.taken_from_another, 0);
  EXPECT_EQ(fused.apart, 1);  // the read of the state at the end
}

// A row that does not hold its source's state (another prompt) is copied, not replayed into.
TEST(DecodeSession, RowsOfAnotherStateAreCopiedNotReplayedInto) {
  const CpuBackend cpu(random_weights(synthetic_config(2), 3));
  const ReplayInWindowBackend fused(cpu);
  const int64_t V = cpu.config().vocab_size, K = 3;
  const std::vector<int32_t> first = random_tokens(6, V, 110), second = random_tokens(9, V, 111);
  DecodeSession rows(fused, 2, VerifyMode::kExact), plain(cpu, 1);
  rows.prefill(0, first.data(), 6, nullptr);
  rows.prefill(1, second.data(), 9, nullptr);
  plain.prefill(0, first.data(), 6, nullptr);
  EXPECT_FALSE(rows.same_state(0, 1));
  const std::vector<int32_t> drafts = random_tokens(2 * K, V, 112);
  std::vector<float> verified(2 * K * V);
  rows.verify(drafts.data(), K, verified.data());
  rows.accept({2, 1}, {0, 0});
  EXPECT_TRUE(rows.same_state(0, 1));
  plain.verify(drafts.data(), K, verified.data());
  plain.accept({2});
  EXPECT_EQ(fused.apart, 1);  // replayed apart before the copy
  EXPECT_EQ(fused.taken_from_another, 0);
  EXPECT_EQ(row_bytes(rows.state(), 0), row_bytes(plain.state(), 0));
  EXPECT_EQ(row_bytes(rows.state(), 1), row_bytes(plain.state(), 0));
}

// Rows copied from one another hold one state until a step feeds them different tokens; after
// that a row taking another's tokens is copied, not replayed into.
TEST(DecodeSession, RowsFedDifferentTokensNoLongerHoldOneState) {
  const CpuBackend cpu(random_weights(synthetic_config(2), 3));
  const ReplayInWindowBackend fused(cpu);
  const int64_t V = cpu.config().vocab_size, K = 3;
  const std::vector<int32_t> prompt = random_tokens(6, V, 130), drafts = random_tokens(2 * K, V, 131);
  DecodeSession rows(fused, 2, VerifyMode::kExact), plain(cpu, 1);
  rows.prefill(0, prompt.data(), 6, nullptr);
  rows.copy_rows({0}, {1});
  plain.prefill(0, prompt.data(), 6, nullptr);
  EXPECT_TRUE(rows.same_state(0, 1));
  const std::vector<int32_t> same{5, 5}, different{5, 9};
  rows.step(same.data(), nullptr);
  EXPECT_TRUE(rows.same_state(0, 1)) << "the same token keeps one state";
  rows.step(different.data(), nullptr);
  EXPECT_FALSE(rows.same_state(0, 1));
  plain.step(&same[0], nullptr);
  plain.step(&different[0], nullptr);
  std::vector<float> verified(2 * K * V);
  rows.verify(drafts.data(), K, verified.data());
  rows.accept({2, 3}, {0, 0});
  plain.verify(drafts.data(), K, verified.data());
  plain.accept({2});
  EXPECT_EQ(fused.taken_from_another, 0);
  EXPECT_EQ(row_bytes(rows.state(), 1), row_bytes(plain.state(), 0));
}

// accept's source rows are checked: in range, and a source keeps its own tokens.
TEST(DecodeSession, RefusesSourceRowsThatDoNotKeepTheirOwn) {
  const CpuBackend cpu(random_weights(synthetic_config(2), 3));
  const int64_t V = cpu.config().vocab_size;
  DecodeSession rows(cpu, 3);
  const std::vector<int32_t> prompt = random_tokens(5, V, 120), drafts = random_tokens(6, V, 121);
  for (int64_t b = 0; b < 3; ++b) rows.prefill(b, prompt.data(), 5, nullptr);
  rows.verify(drafts.data(), 2, nullptr);
  const auto refused = [&](const std::vector<int64_t>& from, const std::string& says) {
    try {
      rows.accept({1, 1, 1}, from);
      ADD_FAILURE() << "accepted source rows " << from.size();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused({1, 2, 2, 2}, "4 source rows for a batch of 3");
  refused({0, 3, 2}, "row 1 takes the tokens of row 3, which is not a row that keeps its own");
  refused({1, 2, 2}, "row 0 takes the tokens of row 1, which is not a row that keeps its own");
  rows.accept({1, 2, 0}, {0, 0, 2});
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
