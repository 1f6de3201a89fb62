// The decode session every generation loop and speculative decoder runs on, written once over
// the Backend interface and its state API, so every backend (CPU specification, CUDA) has it:
//   prefill(seq, prompt)      sequence seq starts from a zero state and reads its prompt;
//   step(tokens[batch])       one token per sequence, logits of each;
//   verify(tokens[batch, K])  K tokens per sequence, logits at every one of the K positions;
//   accept(n[batch])          each sequence keeps only its first n of the K verified tokens.
// Exactness: verify runs K single-token steps (the same call a plain decode makes) and keeps the
// state before each one; accept(n) restores the state after token n. So verify + accept leaves
// every state, and the logits it returns, bit for bit what n plain steps give on that backend
// (tests/runtime/decode_session_test.cc, tests/gpu/decode_session_test.cc). It costs K state
// copies per verify; replaying kept activations instead (docs/RUNTIME.md) is the faster
// implementation of the same contract.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend.h"

namespace ssdq {

class DecodeSession {
 public:
  DecodeSession(const Backend& backend, int64_t batch);

  int64_t batch() const { return batch_; }
  const Backend& backend() const { return backend_; }
  InferenceState& state() { return *state_; }
  const InferenceState& state() const { return *state_; }

  // Sequence `seq` starts from a zero state and reads `length` prompt tokens (the other
  // sequences are untouched); its last position's logits go to last_logits [vocab] when set.
  void prefill(int64_t seq, const int32_t* tokens, int64_t length, float* last_logits);
  // One token per sequence (tokens [batch]); logits [batch, vocab] when set.
  void step(const int32_t* tokens, float* logits);
  // K tokens per sequence (tokens [batch, K] row-major); logits [batch, K, vocab]: position k's
  // logits are those after token k. The state advances by all K; accept() decides what stays.
  void verify(const int32_t* tokens, int64_t K, float* logits);
  // After verify: sequence b keeps its first counts[b] tokens (0..K), as if only those had been
  // stepped. Each verify is accepted at most once.
  void accept(const std::vector<int64_t>& counts);

 private:
  const Backend& backend_;
  int64_t batch_;
  std::unique_ptr<InferenceState> state_;
  std::unique_ptr<InferenceState> prompt_state_;              // batch 1: one sequence's prefill
  std::vector<std::unique_ptr<InferenceState>> before_token_;  // before_token_[k]: state before verified token k
  int64_t pending_k_ = 0;                                     // K of a verify not yet accepted
  std::vector<int32_t> column_;
  std::vector<float> step_logits_;
};

}  // namespace ssdq
