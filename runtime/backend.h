// The interface every runtime backend (CPU reference, CUDA) implements: run tokens forward
// through the model from a per-sequence state and return logits or per-token NLL.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "formats/config.h"

namespace ssdq {

// Per-sequence recurrent state (conv state and SSM state of every layer) for a batch of
// sequences. Backends subclass it with their own storage.
class InferenceState {
 public:
  virtual ~InferenceState() = default;
  virtual int64_t batch() const = 0;
  // Zeroes the state of every sequence (a new sequence starts from a zero state).
  virtual void reset() = 0;
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
};

}  // namespace ssdq
