// The interface every runtime backend (CPU reference, CUDA) implements: run tokens forward
// through the model from a per-sequence state and return logits or per-token NLL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/config.h"

namespace ssdq {

// One buffer of per-sequence state: sequence b's bytes start at data + b * bytes_per_sequence.
struct StateTensor {
  void* data = nullptr;
  size_t bytes_per_sequence = 0;
};

// Per-sequence recurrent state (conv state and SSM state of every layer) for a batch of
// sequences. Backends subclass it with their own storage and say how bytes are copied there
// (host memcpy, or device-to-device copies on the backend's stream, which a CUDA graph can
// capture). The state API below is written once over those buffers: a snapshot is a state of
// the same backend whose rows receive copies, so rollback needs nothing backend-specific.
class InferenceState {
 public:
  virtual ~InferenceState() = default;
  virtual int64_t batch() const = 0;
  // Zeroes the state of every sequence (a new sequence starts from a zero state).
  virtual void reset() = 0;
  // Every per-sequence buffer (each layer's conv and SSM state), in one fixed order.
  virtual std::vector<StateTensor> tensors() const = 0;

  // Bytes one sequence's state occupies, summed over tensors().
  size_t bytes_per_sequence() const;
  // Row dst_rows[i] of this state becomes a copy of row src_rows[i] of `source`, a state made by
  // the same backend (it may be this state; each destination row must appear once).
  void copy_rows(const InferenceState& source, const std::vector<int64_t>& src_rows,
                 const std::vector<int64_t>& dst_rows);
  // Every row of `source` (same backend, same batch) copied into this state (virtual: a backend
  // whose buffers are one block copies it at once).
  virtual void copy_all(const InferenceState& source);
  // The given rows start again from a zero state.
  void zero_rows(const std::vector<int64_t>& rows);

 protected:
  virtual void copy_bytes(void* dst, const void* src, size_t bytes) const = 0;
  virtual void zero_bytes(void* dst, size_t bytes) const = 0;
};

// Where a backend runs and what it holds, for the commands' reports.
struct MemoryReport {
  size_t weight_bytes = 0;     // the model's weights where the backend runs them
  size_t workspace_bytes = 0;  // activations of the largest forward so far + library workspaces
  size_t state_bytes = 0;      // live per-sequence states
  size_t peak_bytes = 0;       // the most the backend held at once (0: not tracked)
};

// What a forward returns, per sequence for each of `rows` positions: all `length` positions, or
// only the last one when last_position_only is set (prefill before generation).
struct ForwardOutputs {
  float* logits = nullptr;           // if set: [batch, rows, vocab]
  int32_t* argmax = nullptr;         // if set: [batch, rows], the greedy next token
  const int32_t* targets = nullptr;  // with nll: [batch, rows], the next token of each position
  double* nll = nullptr;             // if set: [batch, rows], -log p(target | prefix)
  bool last_position_only = false;
  bool any() const { return logits || argmax || nll; }
  int64_t rows(int64_t length) const { return last_position_only ? 1 : length; }
  // The outputs of sequence b alone (pointers advanced past the sequences before it).
  ForwardOutputs for_sequence(int64_t b, int64_t length, int64_t vocab) const;
};

// The checks every backend's forward makes before it runs: token ids (and targets, when NLL is
// asked for) inside the vocabulary, naming the first bad one and its position.
void check_forward_ids(const int32_t* tokens, int64_t batch, int64_t length, int64_t vocab,
                       const ForwardOutputs& outputs);

// The rows that take another row's tokens (Backend::replay_window_from, DecodeSession::accept):
// dst[i] takes those of src[i], for every b with from[b] ≠ b. Each source must keep its own
// (from[src] = src) and lie inside the batch; `what` names the caller in the error.
struct TakenRows {
  std::vector<int64_t> src, dst;
};
TakenRows taken_rows(const std::vector<int64_t>& from, int64_t batch, const char* what);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const Mamba2Config& config() const = 0;
  virtual std::unique_ptr<InferenceState> new_state(int64_t batch) const = 0;
  // Advances `state` by `length` tokens of each of its sequences; tokens is [batch, length]
  // row-major. A single token uses the recurrent decode form, more use the chunked form;
  // both give the same result. Token ids outside the vocabulary are an Error.
  virtual void forward(const int32_t* tokens, int64_t length, InferenceState& state,
                       const ForwardOutputs& outputs) const = 0;

  // The device in words ("NVIDIA H100 80GB HBM3", "CPU (16 threads)").
  virtual std::string device_name() const = 0;
  virtual MemoryReport memory() const = 0;
  // Bytes of one sequence's decode state (conv + SSM, every layer) in the formats stored.
  virtual size_t state_bytes_per_sequence() const = 0;
  // Makes forwards of up to batch × length tokens allocate nothing later (a no-op where
  // nothing is preallocated).
  virtual void reserve(int64_t /*batch*/, int64_t /*length*/) const {}
  // What a forward of batch × length tokens runs, layer by layer, in words (`ssdq bench
  // --show-plan`): the kernels and fusions the backend decided for that shape.
  virtual std::string describe_plan(int64_t batch, int64_t length) const = 0;
  // Whether the backend runs on a GPU (timings then use device events).
  virtual bool on_device() const { return false; }

  // Speculative verification in one call (DecodeSession::verify / accept, Activation Replay).
  // Whether forward_window runs here for this model; false: the session verifies token by token.
  virtual bool runs_window() const { return false; }
  // Whether forward_window of `length` tokens of `batch` sequences gives, bit for bit, the logits
  // and the state that `length` single steps give (every row of the window computed as a step
  // computes it alone); the session then verifies exactly with one window instead of token by token.
  virtual bool exact_window(int64_t /*batch*/, int64_t /*length*/) const { return false; }
  // forward over a window of `length` tokens of each sequence, with the recurrence stepped token by
  // token and the state rounded after each as a single step stores it, keeping in `state` what
  // replay_window needs (every layer's in_proj and conv outputs of the window).
  virtual void forward_window(const int32_t* tokens, int64_t length, InferenceState& state,
                              const ForwardOutputs& outputs) const;
  // After forward_window, with each sequence b where steps[b] > 0 restored to its state before the
  // window: advances it by the first steps[b] tokens of the window from the kept activations (the
  // conv state and the state update replayed, no projection recomputed); steps[b] = 0 leaves b.
  // What the window kept is then spent.
  virtual void replay_window(InferenceState& state, const std::vector<int64_t>& steps) const;
  // replay_window where sequence b takes the first steps[b] kept tokens of sequence from[b] (from
  // empty: each its own): the sources replayed, then copied into the rows that take them.
  void replay_window_from(InferenceState& state, const std::vector<int64_t>& steps,
                          const std::vector<int64_t>& from) const;
  // Whether replay_then_window runs here (the replay inside the window's own launches).
  virtual bool replays_in_window() const { return false; }
  // forward_window whose launches first replay steps[b] tokens of the previous window for each
  // sequence b (as replay_window_from(state, steps, from) would; all 0 where nothing was kept) and
  // which leaves the state there: the window's own tokens are kept but not stepped into the state,
  // for a replay_window or the next replay_then_window to take in those that are accepted. No copy
  // of the state is made and nothing is replayed apart (seed 003's fused Activation Replay). A
  // sequence b with from[b] ≠ b steps sequence from[b]'s kept tokens from its own state, so the two
  // must have held the same state before the previous window (the draft rows of one sequence:
  // every row then takes the accepted draft's state without a copy).
  virtual void replay_then_window(const std::vector<int64_t>& steps, const std::vector<int64_t>& from,
                                  const int32_t* tokens, int64_t length, InferenceState& state,
                                  const ForwardOutputs& outputs) const;
};

}  // namespace ssdq
