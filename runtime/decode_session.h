// The decode session every generation loop and speculative decoder runs on, written once over
// the Backend interface and its state API, so every backend (CPU specification, CUDA) has it:
//   prefill(seq, prompt)      sequence seq starts from a zero state and reads its prompt;
//   step(tokens[batch])       one token per sequence, logits of each;
//   verify(tokens[batch, K])  K tokens per sequence, logits at every one of the K positions;
//   accept(n[batch])          each sequence keeps only its first n of the K verified tokens.
// Two ways to verify (VerifyMode, the caller's choice), one contract: verify + accept(n) leaves
// each sequence where n plain steps of its tokens would.
// - kExact (the default), and kWindow on a backend without windows (the CPU specification): K
//   single-token steps, the same call a plain decode makes, keeping the state before each;
//   accept(n) restores the state after token n. Bit for bit what n plain steps give
//   (tests/runtime and tests/gpu decode_session_test.cc). Where the backend's window of that shape
//   gives single steps' bits (Backend::exact_window: the CUDA engine's FP model with rows_alone, up
//   to 16 rows), kExact verifies with that window as kWindow does: the same bits in one call.
// - kWindow on a backend with a verify window (Backend::runs_window: the CUDA engine): the K tokens
//   as one forward — the projections over K rows a sequence at once, the recurrence token by token
//   with the state rounded after each as a step stores it — after one snapshot of the state;
//   accept(n < K) restores the snapshot and replays n tokens from the activations the window kept
//   (Activation Replay). Where the backend replays inside its windows (Backend::replays_in_window:
//   the CUDA engine on one GPU) there is no snapshot: a window leaves the state before its tokens,
//   and the next window's launches replay the accepted ones first (or settle() replays them apart
//   before anything else reads the state). The SSD's arithmetic is a step's; the projections and norms run a K-row
//   schedule, so logits and states equal plain steps' to rounding (tests/gpu/decode_session_test.cc
//   bounds it), not bit for bit: a choice between two nearly tied tokens can then differ from
//   plain decoding's (docs/GENERATION.md counts how often).
// - kJoint (Joint Attainment and Advancement, the speculative-decoding paper's other method): no
//   state is kept per token and nothing is replayed. accept(n < K) leaves the sequence at its
//   last settled state with its n accepted tokens pending, and the next verify (or step) recomputes
//   them in the same pass as it verifies: each sequence reads [its pending tokens, the new tokens]
//   from the settled state, left-padded with no-op positions to one length (a no-op leaves a row's
//   state as it is: here the row is not stepped there). The paper's separate backtracking row
//   (the pending tokens alone, whose state settles) is, token by token, the same row's state after
//   its pending positions: the session settles into the state there and verifies the new tokens on
//   a copy. Every position is a single step at the session's batch, so kJoint is plain decoding
//   wherever kExact is (bit for bit on the CPU). It is the specification of a fused joint pass (both
//   rows in one multi-token call, no-op tokens masked inside the kernels), which no backend runs
//   yet. Under kJoint a verify must be accepted before the next step, verify or state().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/backend.h"

namespace ssdq {

enum class VerifyMode { kExact, kWindow, kJoint };

// What a session's call writes for each position it computes: the logits [.., vocab], or only the
// greedy choice (the argmax, ties to the lowest id), reduced where the backend runs, which is all
// greedy decoding reads (on a GPU, 4 bytes a position come back instead of the vocabulary's floats).
struct TokenOutputs {
  TokenOutputs() = default;
  TokenOutputs(float* logits) : logits(logits) {}  // NOLINT: a logits pointer is the common case
  static TokenOutputs argmax_only(int32_t* argmax) {
    TokenOutputs out;
    out.argmax = argmax;
    return out;
  }
  float* logits = nullptr;
  int32_t* argmax = nullptr;
  // The backend's outputs asking for these (every position of the forward).
  ForwardOutputs forward() const {
    ForwardOutputs out;
    out.logits = logits;
    out.argmax = argmax;
    return out;
  }
};

// Room for a call's outputs, kept between calls: each position's logits, or its argmax alone.
class OutputBuffers {
 public:
  OutputBuffers(int64_t vocab, bool argmax_only) : vocab_(vocab), argmax_only_(argmax_only) {}
  // Outputs for `positions` positions (the room of earlier calls reused).
  TokenOutputs room(int64_t positions) {
    if (argmax_only_) {
      argmax_.resize(positions);
      return TokenOutputs::argmax_only(argmax_.data());
    }
    logits_.resize(positions * vocab_);
    return TokenOutputs(logits_.data());
  }
  bool argmax_only() const { return argmax_only_; }
  const float* logits(int64_t position) const { return logits_.data() + position * vocab_; }
  int32_t argmax(int64_t position) const { return argmax_[position]; }

 private:
  int64_t vocab_;
  bool argmax_only_;
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;
};

class DecodeSession {
 public:
  DecodeSession(const Backend& backend, int64_t batch, VerifyMode mode = VerifyMode::kExact);
  // Whether verify runs as one window (kWindow asked and the backend has one).
  bool runs_window() const { return window_; }
  // Whether a verify of K tokens a sequence runs as one window: runs_window(), or under kExact a
  // backend whose window of that shape gives single steps' bits (Backend::exact_window).
  bool verifies_as_window(int64_t K) const;

  int64_t batch() const { return batch_; }
  const Backend& backend() const { return backend_; }
  // Every sequence's state (under kJoint, its pending tokens are stepped in first).
  InferenceState& state();
  // Rows dst[i] become copies of rows src[i] (their pending tokens too, under kJoint).
  void copy_rows(const std::vector<int64_t>& src, const std::vector<int64_t>& dst);
  // Whether rows a and b hold the same state as far as the session can tell: one was copied from
  // the other (or both from a third), and since then both were fed the same tokens.
  bool same_state(int64_t a, int64_t b) const { return label_.at(a) == label_.at(b); }

  // Sequence `seq` starts from a zero state and reads `length` prompt tokens (the other
  // sequences are untouched); its last position's logits go to last [vocab] (or its argmax to
  // last.argmax[0]) when set.
  void prefill(int64_t seq, const int32_t* tokens, int64_t length, TokenOutputs last);
  // One token per sequence (tokens [batch]); logits [batch, vocab] (argmax [batch]) when set.
  void step(const int32_t* tokens, TokenOutputs out);
  // Called after each position k of a verify run token by token (the last one too), position k's
  // logits written: whether to go on to position k + 1, and in `settled` (empty on entry) the rows
  // whose kept tokens end with token k. The caller decides acceptance a position at a time, so a
  // draft rejected early costs no steps past it, and no state is copied before each token: a
  // settled row's state is kept as it is at its position (only if the verify goes on past it), and
  // accept() must give that row the count k + 1.
  using VerifyContinues = std::function<bool(int64_t k, std::vector<int64_t>& settled)>;
  // K tokens per sequence (tokens [batch, K] row-major); logits [batch, K, vocab] (argmax [batch, K]):
  // position k's are those after token k. Returns the positions verified: K, or fewer where
  // `continues` (if set) stopped a token-by-token verify (a window, verifies_as_window(K), always
  // verifies all K; it calls nothing). The state advances by all of them; accept() decides what stays.
  int64_t verify(const int32_t* tokens, int64_t K, TokenOutputs out, const VerifyContinues& continues = {});
  // After verify: sequence b keeps its first counts[b] tokens (0 … the positions verified), as if
  // only those had been stepped. Each verify is accepted at most once.
  void accept(const std::vector<int64_t>& counts);
  // accept where row b becomes row from[b] after its first counts[from[b]] tokens (from[b] = b: row
  // b keeps its own, and a row others take from must keep its own): the draft rows of a sequence
  // all taking the accepted draft. It equals accept(counts) followed by copy_rows; where every row
  // held its source's state before the verify (same_state) and the backend replays inside its
  // windows, no row is copied: the next window replays the source's kept tokens into each row.
  void accept(const std::vector<int64_t>& counts, const std::vector<int64_t>& from);

 private:
  // kJoint: the pending tokens settled into state_, then the K tokens stepped on a copy of it.
  int64_t verify_joint(const int32_t* tokens, int64_t K, TokenOutputs out, const VerifyContinues& continues);
  // kJoint: fails while a verify waits for its accept.
  void require_accepted(const char* what) const;
  // accept(counts) of each row's own tokens, whichever way the verify ran.
  void accept_own(const std::vector<int64_t>& counts);
  // copy_rows without the checks and the labels.
  void copy_state_rows(const std::vector<int64_t>& src, const std::vector<int64_t>& dst);
  // Rows keep equal labels only where key(row) is equal too (each a fresh label).
  void split_labels(const std::function<int64_t(int64_t)>& key);
  // Brings state_ to where the accepted tokens leave it: settle_window(), and under kJoint the
  // pending tokens stepped in (rows without any are not stepped).
  void settle();
  // The deferred window's accepted tokens replayed into state_ (Backend::replay_window).
  void settle_window();
  // K tokens per sequence (tokens [batch, K]) stepped one position at a time on `rows`, logits
  // [batch, K, vocab] (argmax [batch, K]) when set; keep_states: the state before token k kept in before_token_[k] (or,
  // with `continues`, the settled rows' states in settled_). Stops after the position `continues`
  // (if set) says not to go on from; returns the positions stepped.
  int64_t step_tokens(InferenceState& rows, const int32_t* tokens, int64_t K, TokenOutputs out, bool keep_states,
                      const VerifyContinues& continues = {});
  // One position of state_: tokens[b] < 0 is a no-op for sequence b, whose state is kept as it was.
  void step_with_no_ops(const std::vector<int32_t>& tokens);

  const Backend& backend_;
  int64_t batch_;
  bool window_;
  bool joint_;
  std::unique_ptr<InferenceState> state_;
  std::unique_ptr<InferenceState> prompt_state_;              // batch 1: one sequence's prefill
  std::vector<std::unique_ptr<InferenceState>> before_token_;  // stepped verify: state before token k
  // A stepped verify with VerifyContinues: rows settled before its last position, their state then
  // (settled_) and their count (settled_count_[row], -1 for the other rows).
  std::unique_ptr<InferenceState> settled_;
  std::vector<int64_t> settled_count_;
  bool lazy_verify_ = false;
  bool window_verify_ = false;  // the verify awaiting accept ran as one window
  int64_t pending_k_ = 0;  // positions verified by a verify not yet accepted
  // A window verify: before_token_[0] is the snapshot taken before the window, except where the
  // backend replays inside its windows (Backend::replays_in_window): then no snapshot is taken,
  // and state_ stays before the last window's tokens, deferred_counts_[b] of which (all of them
  // until accept says otherwise) the next window takes in or settle() replays.
  bool deferred_ = false;
  std::vector<int64_t> deferred_counts_;
  std::vector<int64_t> deferred_from_;  // the rows whose kept tokens each row takes (empty: its own)
  // Rows with equal labels hold the same state (same_state); labels_shared_: some two rows share
  // one (only a row copy or an accept with sources makes them so).
  std::vector<int64_t> label_;
  int64_t next_label_ = 0;
  bool labels_shared_ = false;
  std::vector<int32_t> column_;
  std::vector<float> step_logits_;
  std::vector<int32_t> step_argmax_;
  // kJoint: each sequence's accepted tokens not yet in state_, the last verify's tokens, the rows
  // it stepped, and the rows a no-op keeps during a step.
  std::vector<std::vector<int32_t>> pending_tokens_;
  std::vector<int32_t> verified_;
  int64_t verified_stride_ = 0;  // K of the last joint verify: verified_ is [batch, K]
  std::unique_ptr<InferenceState> joint_rows_;
  std::unique_ptr<InferenceState> held_rows_;
};

}  // namespace ssdq
