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

PerplexityResult evaluate_perplexity(const Backend& backend, const std::vector<int32_t>& all_tokens,
                                     const EvalOptions& options) {
  if (options.ctx < 1) fail("--ctx must be at least 1, got {}", options.ctx);
  if (options.max_tokens < 0) fail("--max-tokens must not be negative, got {}", options.max_tokens);
  const int64_t n = options.max_tokens > 0 ? std::min<int64_t>(options.max_tokens, all_tokens.size())
                                           : static_cast<int64_t>(all_tokens.size());
  if (n < 2) fail("the data has {} tokens; perplexity needs at least 2", n);
  const std::vector<EvalWindow> windows = eval_windows(n, options.ctx);
  const int64_t batch = options.batch > 0 ? options.batch : thread_count();

  const auto start_time = std::chrono::steady_clock::now();
  PerplexityResult result;
  const int64_t total = n - 1;
  // Windows of equal length run together (all but possibly the last have length ctx).
  for (size_t first = 0; first < windows.size();) {
    size_t last = first;
    while (last < windows.size() && static_cast<int64_t>(last - first) < batch &&
           windows[last].length == windows[first].length)
      ++last;
    const int64_t count = last - first, length = windows[first].length;
    std::vector<int32_t> inputs(count * length), targets(count * length);
    for (int64_t b = 0; b < count; ++b) {
      const int64_t s = windows[first + b].start;
      std::copy_n(all_tokens.begin() + s, length, inputs.begin() + b * length);
      std::copy_n(all_tokens.begin() + s + 1, length, targets.begin() + b * length);
    }
    std::vector<double> nll(count * length);
    auto state = backend.new_state(count);
    ForwardOutputs outputs;
    outputs.targets = targets.data();
    outputs.nll = nll.data();
    backend.forward(inputs.data(), length, *state, outputs);
    for (double value : nll) result.nll_sum += value;
    result.scored_tokens += count * length;
    result.windows += count;
    if (options.on_progress) options.on_progress(result.scored_tokens, total);
    first = last;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  result.perplexity = std::exp(result.nll_sum / result.scored_tokens);
  return result;
}

}  // namespace ssdq
