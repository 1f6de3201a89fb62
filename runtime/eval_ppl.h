// Perplexity by the protocol of docs/ACCURACY.md ("Protocol"): windows of `ctx` tokens at s = w·ctx, targets
// shifted by one, every window from a zero state, ppl = exp(Σ NLL / Σ targets). The comparison of a model
// with a reference model (KL divergence, top-1 agreement) runs both on the same windows.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/backend.h"
#include "runtime/token_statistics.h"

namespace ssdq {

struct EvalOptions {
  int64_t ctx = 2048;
  int64_t max_tokens = 0;  // 0: all tokens
  int64_t batch = 0;       // windows run together; 0: the backend's choice (cores for the CPU)
  std::function<void(int64_t scored, int64_t total)> on_progress;
};

struct PerplexityResult {
  MeanWithError perplexity;  // exp(mean NLL) ± its standard error
  RunningMean nll;           // per scored token
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

struct ComparisonResult {
  ComparisonSummary summary;
  int64_t windows = 0;
  int64_t batch = 0;  // windows run together (bounded by the logits both models return)
  double seconds = 0;
};

// Runs `model` and `reference` on the same windows and compares their next-token distributions at
// every position. Both must have the same vocabulary. Logits of a whole batch of windows are held on
// the host for both models, so the batch is capped at what fits `logits_budget_bytes` (at least one
// window); options.batch, when set, is an upper bound.
ComparisonResult compare_models(const Backend& model, const Backend& reference, const std::vector<int32_t>& tokens,
                                const EvalOptions& options, size_t logits_budget_bytes = size_t{1} << 30);

}  // namespace ssdq
