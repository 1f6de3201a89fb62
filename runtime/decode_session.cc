#include "runtime/decode_session.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "formats/error.h"

namespace ssdq {

DecodeSession::DecodeSession(const Backend& backend, int64_t batch, VerifyMode mode)
    : backend_(backend),
      batch_(batch),
      window_(mode == VerifyMode::kWindow && backend.runs_window()),
      joint_(mode == VerifyMode::kJoint),
      state_(backend.new_state(batch)),
      pending_tokens_(batch) {
  for (int64_t b = 0; b < batch; ++b) label_.push_back(next_label_++);
}

void DecodeSession::split_labels(const std::function<int64_t(int64_t)>& key) {
  if (!labels_shared_) return;  // every row its own label: nothing to split (plain decoding's steps)
  std::map<std::pair<int64_t, int64_t>, int64_t> fresh;
  for (int64_t r = 0; r < batch_; ++r) {
    const auto it = fresh.emplace(std::make_pair(label_[r], key(r)), next_label_).first;
    if (it->second == next_label_) ++next_label_;
    label_[r] = it->second;
  }
  labels_shared_ = static_cast<int64_t>(fresh.size()) < batch_;
}

bool DecodeSession::verifies_as_window(int64_t K) const {
  return window_ || (!joint_ && backend_.exact_window(batch_, K));
}

InferenceState& DecodeSession::state() {
  require_accepted("state");
  settle();
  return *state_;
}

void DecodeSession::copy_rows(const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
  require_accepted("copy_rows");
  if (src.size() != dst.size()) fail("copy_rows: {} source rows for {} destinations", src.size(), dst.size());
  for (const std::vector<int64_t>* rows : {&src, &dst})
    for (int64_t r : *rows)
      if (r < 0 || r >= batch_) fail("copy_rows: row {} is outside 0..{}", r, batch_ - 1);
  std::vector<int64_t> copied_labels;
  for (int64_t r : src) copied_labels.push_back(label_[r]);
  for (size_t i = 0; i < dst.size(); ++i) label_[dst[i]] = copied_labels[i];
  labels_shared_ = labels_shared_ || !dst.empty();
  copy_state_rows(src, dst);
}

void DecodeSession::copy_state_rows(const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
  settle_window();
  state_->copy_rows(*state_, src, dst);
  if (!joint_) return;
  std::vector<std::vector<int32_t>> copied;
  for (int64_t r : src) copied.push_back(pending_tokens_[r]);
  for (size_t i = 0; i < dst.size(); ++i) pending_tokens_[dst[i]] = std::move(copied[i]);
}

void DecodeSession::step_with_no_ops(const std::vector<int32_t>& tokens) {
  std::vector<int64_t> no_ops;
  std::vector<int32_t> fed(tokens);
  for (int64_t r = 0; r < batch_; ++r)
    if (tokens[r] < 0) {
      no_ops.push_back(r);
      fed[r] = 0;  // any id: the row's state is put back below
    }
  if (static_cast<int64_t>(no_ops.size()) == batch_) return;
  if (!no_ops.empty()) {
    if (!held_rows_) held_rows_ = backend_.new_state(batch_);
    held_rows_->copy_rows(*state_, no_ops, no_ops);
  }
  backend_.forward(fed.data(), 1, *state_, {});
  if (!no_ops.empty()) state_->copy_rows(*held_rows_, no_ops, no_ops);
}

void DecodeSession::settle_window() {
  if (!deferred_) return;
  deferred_ = false;
  if (std::any_of(deferred_counts_.begin(), deferred_counts_.end(), [](int64_t n) { return n > 0; }))
    backend_.replay_window_from(*state_, deferred_counts_, deferred_from_);
  deferred_from_.clear();
}

void DecodeSession::settle() {
  settle_window();
  if (!joint_) return;
  int64_t longest = 0;
  for (const std::vector<int32_t>& p : pending_tokens_) longest = std::max<int64_t>(longest, p.size());
  std::vector<int32_t> column(batch_);
  for (int64_t j = 0; j < longest; ++j) {  // left-padded: sequence b's tokens end at the last position
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t pad = longest - static_cast<int64_t>(pending_tokens_[b].size());
      column[b] = j < pad ? -1 : pending_tokens_[b][j - pad];
    }
    step_with_no_ops(column);
  }
  for (std::vector<int32_t>& p : pending_tokens_) p.clear();
}

void DecodeSession::require_accepted(const char* what) const {
  if (joint_ && pending_k_ != 0)
    fail("{}: the joint verify of {} tokens waits for accept (Joint Attainment keeps no state to fall back on)", what,
         pending_k_);
}

int64_t DecodeSession::verify_joint(const int32_t* tokens, int64_t K, TokenOutputs out, const VerifyContinues& continues) {
  settle();  // the pending positions, each sequence's left-padded with no-ops
  if (!joint_rows_) joint_rows_ = backend_.new_state(batch_);
  joint_rows_->copy_all(*state_);
  verified_.assign(tokens, tokens + batch_ * K);
  verified_stride_ = K;
  pending_k_ = step_tokens(*joint_rows_, tokens, K, out, /*keep_states=*/false, continues);
  return pending_k_;
}

void DecodeSession::prefill(int64_t seq, const int32_t* tokens, int64_t length, TokenOutputs last) {
  if (seq < 0 || seq >= batch_) fail("prefill: sequence {} is outside 0..{}", seq, batch_ - 1);
  if (length <= 0) fail("prefill: sequence {} has an empty prompt", seq);
  pending_k_ = 0;
  settle_window();
  pending_tokens_[seq].clear();
  label_[seq] = next_label_++;
  if (!prompt_state_) prompt_state_ = backend_.new_state(1);
  prompt_state_->reset();
  ForwardOutputs out = last.forward();
  out.last_position_only = true;
  backend_.forward(tokens, length, *prompt_state_, out);
  state_->copy_rows(*prompt_state_, {0}, {seq});
}

void DecodeSession::step(const int32_t* tokens, TokenOutputs out) {
  require_accepted("step");
  pending_k_ = 0;
  settle();
  backend_.forward(tokens, 1, *state_, out.forward());
  split_labels([&](int64_t r) { return tokens[r]; });
}

int64_t DecodeSession::verify(const int32_t* tokens, int64_t K, TokenOutputs out, const VerifyContinues& continues) {
  if (K <= 0) fail("verify: K must be at least 1, got {}", K);
  if (joint_) {
    require_accepted("verify");
    return verify_joint(tokens, K, out, continues);
  }
  window_verify_ = verifies_as_window(K);
  if (window_verify_ && backend_.replays_in_window()) {
    // The last window's kept tokens are replayed inside this one's launches; this window's stay
    // kept until the next (all of them, unless accept keeps fewer).
    backend_.replay_then_window(deferred_ ? deferred_counts_ : std::vector<int64_t>(batch_, 0),
                                deferred_ ? deferred_from_ : std::vector<int64_t>{}, tokens, K, *state_, out.forward());
    deferred_ = true;
    deferred_counts_.assign(batch_, K);
    deferred_from_.clear();
    pending_k_ = K;
    return K;
  }
  settle();
  if (window_verify_) {
    if (before_token_.empty()) before_token_.push_back(backend_.new_state(batch_));
    before_token_[0]->copy_all(*state_);
    backend_.forward_window(tokens, K, *state_, out.forward());
    pending_k_ = K;
    return K;
  }
  lazy_verify_ = static_cast<bool>(continues);
  if (lazy_verify_) {
    settled_count_.assign(batch_, -1);
  } else {
    while (static_cast<int64_t>(before_token_.size()) < K) before_token_.push_back(backend_.new_state(batch_));
  }
  pending_k_ = step_tokens(*state_, tokens, K, out, /*keep_states=*/true, continues);
  return pending_k_;
}

int64_t DecodeSession::step_tokens(InferenceState& rows, const int32_t* tokens, int64_t K, TokenOutputs out,
                                   bool keep_states, const VerifyContinues& continues) {
  const int64_t V = backend_.config().vocab_size;
  column_.resize(batch_);
  // One row's outputs of position k go straight to logits + k·V (argmax + k); several rows' are
  // [batch, V] a step, staged and spread to [batch, K, V] (a copy of V floats a row: ~20 µs at
  // V = 50,288, against a 0.33 ms CUDA step of the bundled model).
  const bool staged = batch_ > 1;
  if (staged && out.logits) step_logits_.resize(batch_ * V);
  if (staged && out.argmax) step_argmax_.resize(batch_);
  std::vector<int64_t> settled;
  for (int64_t k = 0; k < K; ++k) {
    if (keep_states && !continues) before_token_[k]->copy_all(rows);
    for (int64_t b = 0; b < batch_; ++b) column_[b] = tokens[b * K + k];
    ForwardOutputs forward;
    if (out.logits) forward.logits = staged ? step_logits_.data() : out.logits + k * V;
    if (out.argmax) forward.argmax = staged ? step_argmax_.data() : out.argmax + k;
    backend_.forward(column_.data(), 1, rows, forward);
    if (staged)
      for (int64_t b = 0; b < batch_; ++b) {
        if (out.logits) std::memcpy(out.logits + (b * K + k) * V, step_logits_.data() + b * V, V * sizeof(float));
        if (out.argmax) out.argmax[b * K + k] = step_argmax_[b];
      }
    if (!continues) continue;
    settled.clear();
    const bool go_on = continues(k, settled) && k + 1 < K;
    if (!go_on) return k + 1;
    if (keep_states && !settled.empty()) {  // their state now is their final one: kept aside
      if (!settled_) settled_ = backend_.new_state(batch_);
      for (int64_t r : settled) {
        if (r < 0 || r >= batch_) fail("verify: settled row {} is outside 0..{}", r, batch_ - 1);
        settled_count_[r] = k + 1;
      }
      settled_->copy_rows(rows, settled, settled);
    }
  }
  return K;
}

void DecodeSession::accept(const std::vector<int64_t>& counts) { accept(counts, {}); }

void DecodeSession::accept(const std::vector<int64_t>& counts, const std::vector<int64_t>& from) {
  if (pending_k_ == 0) fail("accept: no verify to accept (accept follows one verify)");
  if (static_cast<int64_t>(counts.size()) != batch_)
    fail("accept: {} counts for a batch of {}", counts.size(), batch_);
  for (int64_t b = 0; b < batch_; ++b)
    if (counts[b] < 0 || counts[b] > pending_k_)
      fail("accept: sequence {} keeps {} tokens; the count must be in 0..{} (the positions verified)", b, counts[b],
           pending_k_);
  const TakenRows taken = taken_rows(from, batch_, "accept");
  // Whether every row held its source's state before the verify.
  bool held_equal = true;
  for (size_t i = 0; i < taken.dst.size(); ++i) held_equal = held_equal && same_state(taken.dst[i], taken.src[i]);
  const auto source = [&](int64_t r) { return from.empty() ? r : from[r]; };
  // Row r now holds its source's state before the verify, advanced by the source's kept tokens.
  const std::vector<int64_t> before(label_);
  for (int64_t r = 0; r < batch_; ++r) label_[r] = before[source(r)];
  labels_shared_ = labels_shared_ || !taken.dst.empty();
  split_labels([&](int64_t r) { return counts[source(r)] > 0 ? source(r) : -1; });
  if (!taken.dst.empty() && held_equal && window_verify_ && deferred_) {
    deferred_counts_.resize(batch_);
    for (int64_t b = 0; b < batch_; ++b) deferred_counts_[b] = counts[source(b)];
    deferred_from_ = from;
    pending_k_ = 0;
    return;
  }
  accept_own(counts);
  if (!taken.dst.empty()) copy_state_rows(taken.src, taken.dst);
}

void DecodeSession::accept_own(const std::vector<int64_t>& counts) {
  if (joint_) {
    // All K kept: the verified row's state. Fewer: the settled state stays, the kept tokens pending
    // for the next pass.
    std::vector<int64_t> whole;
    for (int64_t b = 0; b < batch_; ++b) {
      const int32_t* kept = verified_.data() + b * verified_stride_;
      if (counts[b] == pending_k_)
        whole.push_back(b);
      else
        pending_tokens_[b].assign(kept, kept + counts[b]);
    }
    if (static_cast<int64_t>(whole.size()) == batch_)
      state_->copy_all(*joint_rows_);
    else if (!whole.empty())
      state_->copy_rows(*joint_rows_, whole, whole);
    pending_k_ = 0;
    return;
  }
  if (window_verify_ && deferred_) {  // taken in by the next window, or by settle()
    deferred_counts_ = counts;
    deferred_from_.clear();
    pending_k_ = 0;
    return;
  }
  if (window_verify_) {
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
  if (lazy_verify_) {
    // Rows settled before the last position take the state kept when they settled.
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < batch_; ++b) {
      if (counts[b] == pending_k_) continue;
      if (settled_count_[b] != counts[b])
        fail("accept: sequence {} keeps {} tokens, but its verify settled it at {} (no other state was kept)", b,
             counts[b], settled_count_[b] < 0 ? pending_k_ : settled_count_[b]);
      rows.push_back(b);
    }
    if (!rows.empty()) state_->copy_rows(*settled_, rows, rows);
    pending_k_ = 0;
    return;
  }
  // Sequences that keep fewer than K tokens take the state from before token counts[b].
  for (int64_t b = 0; b < batch_; ++b)
    if (counts[b] < pending_k_) state_->copy_rows(*before_token_[counts[b]], {b}, {b});
  pending_k_ = 0;
}

}  // namespace ssdq
