// Helpers for the GPU tests that run whole models: the golden WikiText-2 tokens, a forward's
// logits and mean NLL through the Backend interface, and the GPUs visible.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "runtime/backend.h"

namespace ssdq::testing {

inline int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// The first `count` tokens of the golden WikiText-2 fixture.
inline std::vector<int32_t> golden_tokens(int64_t count) {
  const auto golden = read_safetensors("tests/fixtures/golden/golden-wikitext2-first512.safetensors");
  const Tensor& t = golden.tensors.at("tokens");
  return {t.as<int32_t>(), t.as<int32_t>() + count};
}

// The logits of one forward of `tokens` ([batch, length] row-major) from a zero state.
inline std::vector<float> logits_of(const Backend& backend, const std::vector<int32_t>& tokens, int64_t batch) {
  std::vector<float> logits(tokens.size() * backend.config().vocab_size);
  auto state = backend.new_state(batch);
  ForwardOutputs out;
  out.logits = logits.data();
  backend.forward(tokens.data(), static_cast<int64_t>(tokens.size()) / batch, *state, out);
  return logits;
}

// Mean NLL of each token of `tokens` after its prefix (one sequence, one forward).
inline double mean_nll(const Backend& backend, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> inputs(tokens.begin(), tokens.end() - 1), targets(tokens.begin() + 1, tokens.end());
  std::vector<double> nll(inputs.size());
  auto state = backend.new_state(1);
  ForwardOutputs out;
  out.targets = targets.data();
  out.nll = nll.data();
  backend.forward(inputs.data(), static_cast<int64_t>(inputs.size()), *state, out);
  double sum = 0;
  for (double v : nll) sum += v;
  return sum / nll.size();
}

// Greedy continuation of `prompt` for `count` tokens, one decode step at a time.
inline std::vector<int32_t> greedy(const Backend& backend, const std::vector<int32_t>& prompt, int count) {
  auto state = backend.new_state(1);
  int32_t next = 0;
  ForwardOutputs out;
  out.argmax = &next;
  out.last_position_only = true;
  backend.forward(prompt.data(), static_cast<int64_t>(prompt.size()), *state, out);
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) {
    tokens.push_back(next);
    backend.forward(&tokens.back(), 1, *state, out);
  }
  return tokens;
}

// `steps` decode steps of two sequences (tokens[t] and tokens[t + offset]): every step's argmax and
// the last step's logits, for graph replay against eager steps.
inline std::pair<std::vector<int32_t>, std::vector<float>> two_sequence_steps(const Backend& backend,
                                                                                const std::vector<int32_t>& tokens,
                                                                                int steps, int offset) {
  auto state = backend.new_state(2);
  std::vector<float> logits(2 * backend.config().vocab_size);
  std::vector<int32_t> argmax(2), all;
  for (int t = 0; t < steps; ++t) {
    const int32_t step[2] = {tokens[t], tokens[t + offset]};
    ForwardOutputs out;
    out.logits = logits.data();
    out.argmax = argmax.data();
    backend.forward(step, 1, *state, out);
    all.insert(all.end(), argmax.begin(), argmax.end());
  }
  return {all, logits};
}

}  // namespace ssdq::testing
