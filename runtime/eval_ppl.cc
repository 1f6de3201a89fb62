#include "runtime/eval_ppl.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "formats/error.h"
#include "runtime/parallel.h"

namespace ssdq {

std::vector<EvalWindow> eval_windows(int64_t n, int64_t ctx) {
  std::vector<EvalWindow> windows;
  for (int64_t start = 0; start < n - 1; start += ctx) windows.push_back({start, std::min(start + ctx, n - 1) - start});
  return windows;
}

namespace {

// Windows of equal length run together, up to `batch` at a time (all but possibly the last window
// have length ctx): body(inputs, targets, count, length) with [count, length] row-major tokens.
struct WindowBatch {
  std::vector<int32_t> inputs, targets;
  int64_t count = 0, length = 0;
};

int64_t checked_token_count(const std::vector<int32_t>& tokens, const EvalOptions& options) {
  if (options.ctx < 1) fail("--ctx must be at least 1, got {}", options.ctx);
  if (options.max_tokens < 0) fail("--max-tokens must not be negative, got {}", options.max_tokens);
  const int64_t n = options.max_tokens > 0 ? std::min<int64_t>(options.max_tokens, tokens.size())
                                           : static_cast<int64_t>(tokens.size());
  if (n < 2) fail("the data has {} tokens; perplexity needs at least 2", n);
  return n;
}

void for_each_window_batch(const std::vector<int32_t>& tokens, const std::vector<EvalWindow>& windows,
                           int64_t batch, const std::function<void(const WindowBatch&)>& body) {
  for (size_t first = 0; first < windows.size();) {
    size_t last = first;
    while (last < windows.size() && static_cast<int64_t>(last - first) < batch &&
           windows[last].length == windows[first].length)
      ++last;
    WindowBatch wb;
    wb.count = last - first;
    wb.length = windows[first].length;
    wb.inputs.resize(wb.count * wb.length);
    wb.targets.resize(wb.count * wb.length);
    for (int64_t b = 0; b < wb.count; ++b) {
      const int64_t s = windows[first + b].start;
      std::copy_n(tokens.begin() + s, wb.length, wb.inputs.begin() + b * wb.length);
      std::copy_n(tokens.begin() + s + 1, wb.length, wb.targets.begin() + b * wb.length);
    }
    body(wb);
    first = last;
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

PerplexityResult evaluate_perplexity(const Backend& backend, const std::vector<int32_t>& all_tokens,
                                     const EvalOptions& options) {
  const int64_t n = checked_token_count(all_tokens, options);
  const std::vector<EvalWindow> windows = eval_windows(n, options.ctx);
  const int64_t batch = options.batch > 0 ? options.batch : thread_count();

  const auto start_time = std::chrono::steady_clock::now();
  PerplexityResult result;
  for_each_window_batch(all_tokens, windows, batch, [&](const WindowBatch& wb) {
    std::vector<double> nll(wb.count * wb.length);
    auto state = backend.new_state(wb.count);
    ForwardOutputs outputs;
    outputs.targets = wb.targets.data();
    outputs.nll = nll.data();
    backend.forward(wb.inputs.data(), wb.length, *state, outputs);
    for (double value : nll) result.nll.add(value);
    result.scored_tokens += wb.count * wb.length;
    result.windows += wb.count;
    if (options.on_progress) options.on_progress(result.scored_tokens, n - 1);
  });
  result.seconds = seconds_since(start_time);
  result.perplexity = perplexity_from_nll(result.nll);
  return result;
}

ComparisonResult compare_models(const Backend& model, const Backend& reference, const std::vector<int32_t>& all_tokens,
                                const EvalOptions& options, size_t logits_budget_bytes) {
  const int64_t vocab = model.config().vocab_size;
  if (reference.config().vocab_size != vocab)
    fail("the reference model's vocabulary ({} tokens) differs from the evaluated model's ({}); KL divergence "
         "compares distributions over the same tokens",
         reference.config().vocab_size, vocab);
  const int64_t n = checked_token_count(all_tokens, options);
  const std::vector<EvalWindow> windows = eval_windows(n, options.ctx);
  const int64_t window_rows = std::min<int64_t>(options.ctx, n - 1);
  const size_t window_bytes = 2 * sizeof(float) * static_cast<size_t>(window_rows) * vocab;  // both models
  int64_t batch = std::max<int64_t>(1, logits_budget_bytes / window_bytes);
  if (options.batch > 0) batch = std::min(batch, options.batch);

  const auto start_time = std::chrono::steady_clock::now();
  ComparisonResult result;
  result.batch = batch;
  ComparisonAccumulator accumulator;
  int64_t scored = 0;
  std::vector<float> logits, reference_logits;
  for_each_window_batch(all_tokens, windows, batch, [&](const WindowBatch& wb) {
    const int64_t rows = wb.count * wb.length;
    logits.resize(rows * vocab);
    reference_logits.resize(rows * vocab);
    for (const auto& [backend, out] : {std::pair{&model, &logits}, std::pair{&reference, &reference_logits}}) {
      auto state = backend->new_state(wb.count);
      ForwardOutputs outputs;
      outputs.logits = out->data();
      backend->forward(wb.inputs.data(), wb.length, *state, outputs);
    }
    std::vector<PositionComparison> positions(rows);
    parallel_for(rows, [&](int64_t r) {
      positions[r] = compare_position(logits.data() + r * vocab, reference_logits.data() + r * vocab, vocab,
                                      wb.targets[r]);
    });
    for (const PositionComparison& p : positions) accumulator.add(p);
    scored += rows;
    result.windows += wb.count;
    if (options.on_progress) options.on_progress(scored, n - 1);
  });
  result.seconds = seconds_since(start_time);
  result.summary = accumulator.summary();
  return result;
}

}  // namespace ssdq
