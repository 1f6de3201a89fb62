#include "runtime/decode_session.h"

#include <algorithm>
#include <cstring>

#include "formats/error.h"

namespace ssdq {

DecodeSession::DecodeSession(const Backend& backend, int64_t batch, VerifyMode mode)
    : backend_(backend),
      batch_(batch),
      window_(mode == VerifyMode::kWindow && backend.runs_window()),
      state_(backend.new_state(batch)) {}

void DecodeSession::prefill(int64_t seq, const int32_t* tokens, int64_t length, float* last_logits) {
  if (seq < 0 || seq >= batch_) fail("prefill: sequence {} is outside 0..{}", seq, batch_ - 1);
  if (length <= 0) fail("prefill: sequence {} has an empty prompt", seq);
  pending_k_ = 0;
  if (!prompt_state_) prompt_state_ = backend_.new_state(1);
  prompt_state_->reset();
  ForwardOutputs out;
  out.logits = last_logits;
  out.last_position_only = true;
  backend_.forward(tokens, length, *prompt_state_, out);
  state_->copy_rows(*prompt_state_, {0}, {seq});
}

void DecodeSession::step(const int32_t* tokens, float* logits) {
  pending_k_ = 0;
  ForwardOutputs out;
  out.logits = logits;
  backend_.forward(tokens, 1, *state_, out);
}

void DecodeSession::verify(const int32_t* tokens, int64_t K, float* logits) {
  if (K <= 0) fail("verify: K must be at least 1, got {}", K);
  const int64_t V = backend_.config().vocab_size;
  if (window_) {
    if (before_token_.empty()) before_token_.push_back(backend_.new_state(batch_));
    before_token_[0]->copy_all(*state_);
    ForwardOutputs out;
    out.logits = logits;
    backend_.forward_window(tokens, K, *state_, out);
    pending_k_ = K;
    return;
  }
  while (static_cast<int64_t>(before_token_.size()) < K) before_token_.push_back(backend_.new_state(batch_));
  column_.resize(batch_);
  if (logits) step_logits_.resize(batch_ * V);
  for (int64_t k = 0; k < K; ++k) {
    before_token_[k]->copy_all(*state_);
    for (int64_t b = 0; b < batch_; ++b) column_[b] = tokens[b * K + k];
    ForwardOutputs out;
    out.logits = logits ? step_logits_.data() : nullptr;
    backend_.forward(column_.data(), 1, *state_, out);
    if (logits)
      for (int64_t b = 0; b < batch_; ++b)
        std::memcpy(logits + (b * K + k) * V, step_logits_.data() + b * V, V * sizeof(float));
  }
  pending_k_ = K;
}

void DecodeSession::accept(const std::vector<int64_t>& counts) {
  if (pending_k_ == 0) fail("accept: no verify to accept (accept follows one verify)");
  if (static_cast<int64_t>(counts.size()) != batch_)
    fail("accept: {} counts for a batch of {}", counts.size(), batch_);
  for (int64_t b = 0; b < batch_; ++b)
    if (counts[b] < 0 || counts[b] > pending_k_)
      fail("accept: sequence {} keeps {} tokens; the count must be in 0..{} (the verified K)", b, counts[b],
           pending_k_);
  if (window_) {
    // Sequences that keep fewer than K tokens restart from the snapshot and replay their count.
    std::vector<int64_t> rows, replay(batch_, 0);
    for (int64_t b = 0; b < batch_; ++b)
      if (counts[b] < pending_k_) {
        rows.push_back(b);
        replay[b] = counts[b];
      }
    if (static_cast<int64_t>(rows.size()) == batch_)
      state_->copy_all(*before_token_[0]);
    else if (!rows.empty())
      state_->copy_rows(*before_token_[0], rows, rows);
    if (std::any_of(replay.begin(), replay.end(), [](int64_t n) { return n > 0; }))
      backend_.replay_window(*state_, replay);
    pending_k_ = 0;
    return;
  }
  // Sequences that keep fewer than K tokens take the state from before token counts[b].
  for (int64_t b = 0; b < batch_; ++b)
    if (counts[b] < pending_k_) state_->copy_rows(*before_token_[counts[b]], {b}, {b});
  pending_k_ = 0;
}

}  // namespace ssdq
