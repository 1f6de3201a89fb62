// The decode session on both CUDA backends: verify(K) + accept(n) against the CUDA single-step
// path at the same batch size (bit for bit: logits of every verified position, each sequence's
// state after accept, the logits of the next step), for the bundled model in bf16 and synthetic
// models of every recipe × bit width; and the state API's device-to-device row copies.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/synthetic_quantized.h"
#include "formats/error.h"
#include "model/model_loader.h"
#include "runtime/cuda_backend.h"
#include "runtime/decode_session.h"
#include "tests/support/recipe_cases.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using namespace testing_models;

std::vector<char> row_bytes(const InferenceState& state, int64_t row) {
  std::vector<char> out;
  for (const StateTensor& t : state.tensors()) {
    std::vector<char> part(t.bytes_per_sequence);
    EXPECT_EQ(cudaMemcpy(part.data(), static_cast<const char*>(t.data) + row * t.bytes_per_sequence, part.size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Three sequences (prompts of 70, 9 and 1 tokens), a plain step, verify K = 4 and accept 0, 2, 4,
// a step after. The reference for count n is a session of the same batch that steps n drafts.
void expect_verify_accept_is_plain_decode(const Backend& backend, const std::string& name) {
  const int64_t V = backend.config().vocab_size, B = 3, K = 4;
  const std::vector<int64_t> prompt_lengths = {70, 9, 1}, counts = {0, 2, 4};
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < B; ++b) prompts.push_back(random_tokens(prompt_lengths[b], V, 10 + b));
  const std::vector<int32_t> first = random_tokens(B, V, 20), drafts = random_tokens(B * K, V, 21),
                             next = random_tokens(B, V, 22);
  auto start = [&](DecodeSession& s) {
    for (int64_t b = 0; b < B; ++b) s.prefill(b, prompts[b].data(), prompt_lengths[b], nullptr);
    s.step(first.data(), nullptr);
  };
  DecodeSession session(backend, B);
  start(session);
  std::vector<float> verified(B * K * V), after(B * V);
  session.verify(drafts.data(), K, verified.data());
  session.accept(counts);
  std::vector<std::vector<char>> accepted;
  for (int64_t b = 0; b < B; ++b) accepted.push_back(row_bytes(session.state(), b));
  session.step(next.data(), after.data());

  for (int64_t n : {0, 2, 4}) {
    DecodeSession plain(backend, B);
    start(plain);
    std::vector<float> logits(B * V);
    std::vector<int32_t> column(B);
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t b = 0; b < B; ++b) column[b] = drafts[b * K + k];
      plain.step(column.data(), logits.data());
      for (int64_t b = 0; b < B; ++b)
        EXPECT_EQ(std::memcmp(&logits[b * V], &verified[(b * K + k) * V], V * 4), 0)
            << name << ": sequence " << b << ", verified position " << k;
    }
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < B; ++b)
      if (counts[b] == n) rows.push_back(b);
    for (int64_t b : rows)
      EXPECT_EQ(accepted[b], row_bytes(plain.state(), b)) << name << ": state after accept(" << n << ")";
    plain.step(next.data(), logits.data());
    for (int64_t b : rows)
      EXPECT_EQ(std::memcmp(&logits[b * V], &after[b * V], V * 4), 0) << name << ": sequence " << b << ", next step";
  }
}

TEST(CudaDecodeSession, VerifyAcceptIsPlainDecodeInBf16) {
  CudaBackendOptions options;
  const CudaBackend backend(*load_model(kTinyModel).weights, options);
  expect_verify_accept_is_plain_decode(backend, "bf16 " + backend.device_name());
}

TEST(CudaDecodeSession, VerifyAcceptIsPlainDecodeForEveryRecipeAndBits) {
  const Mamba2Config c = synthetic_config(2);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const RecipeOptions& o = recipe_case.options;
    const CudaBackend backend(std::make_shared<const QuantizedModel>(synthetic_quantized_model(c, o, 5)), CudaBackendOptions{});
    expect_verify_accept_is_plain_decode(backend, recipe_case.name);
  }
}

TEST(CudaStateApi, CopiesAndZeroesRowsOnTheDevice) {
  CudaBackendOptions options;
  const CudaBackend backend(*load_model(kTinyModel).weights, options);
  auto state = backend.new_state(3);
  const std::vector<int32_t> tokens = random_tokens(3 * 40, backend.config().vocab_size, 4);
  backend.forward(tokens.data(), 40, *state, {});
  EXPECT_EQ(state->bytes_per_sequence(), backend.state_bytes_per_sequence());
  const std::vector<char> row0 = row_bytes(*state, 0), row2 = row_bytes(*state, 2);
  auto snapshot = backend.new_state(2);
  snapshot->copy_rows(*state, {2, 0}, {0, 1});
  state->zero_rows({0});
  EXPECT_EQ(row_bytes(*state, 0), std::vector<char>(row0.size(), 0));
  state->copy_rows(*snapshot, {1, 0}, {0, 1});
  EXPECT_EQ(row_bytes(*state, 0), row0);
  EXPECT_EQ(row_bytes(*state, 1), row2);
}

}  // namespace
}  // namespace ssdq
