// Perplexity by the protocol of docs/ACCURACY.md ("Protocol"): windows of `ctx` tokens at s = w·ctx, targets
// shifted by one, every window from a zero state, ppl = exp(Σ NLL / Σ targets).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/backend.h"

namespace ssdq {

struct EvalOptions {
  int64_t ctx = 2048;
  int64_t max_tokens = 0;  // 0: all tokens
  int64_t batch = 0;       // windows run together; 0: the backend's choice (cores for the CPU)
  std::function<void(int64_t scored, int64_t total)> on_progress;
};

struct PerplexityResult {
  double perplexity = 0;
  double nll_sum = 0;
  int64_t scored_tokens = 0;
  int64_t windows = 0;
  double seconds = 0;
  double tokens_per_second() const { return seconds > 0 ? scored_tokens / seconds : 0; }
};

struct EvalWindow {
  int64_t start, length;  // inputs t[start, start + length), targets shifted by one
};
std::vector<EvalWindow> eval_windows(int64_t token_count, int64_t ctx);

PerplexityResult evaluate_perplexity(const Backend& backend, const std::vector<int32_t>& tokens,
                                     const EvalOptions& options);

}  // namespace ssdq
