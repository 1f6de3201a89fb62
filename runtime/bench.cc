#include "runtime/bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>

#include "formats/error.h"
#include "runtime/decode_session.h"

namespace ssdq {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

double ssd_flops(const Mamba2Config& c, int64_t tokens) {
  const double P = c.headdim, N = c.d_state, L = c.chunk_size;
  return tokens * (c.nheads() * (4 * P * N + L * P) + c.ngroups * N * L);
}

double model_flops(const Mamba2Config& c, int64_t tokens) {
  return 2.0 * c.parameter_count() * tokens + c.n_layer * ssd_flops(c, tokens);
}

std::vector<ModelBenchRow> bench_model(const Backend& backend, const ModelBenchOptions& options,
                                       const std::function<void(ModelBenchRow&)>& after_batch) {
  if (options.prompt < 1 || options.gen < 1) fail("--prompt and --gen must be at least 1");
  const int64_t vocab = backend.config().vocab_size;
  std::vector<ModelBenchRow> rows;
  for (const int64_t batch : options.batches) {
    if (batch < 1) fail("--batch sizes must be at least 1, got {}", batch);
    std::mt19937_64 rng(options.seed + batch);
    std::vector<int32_t> prompt(batch * options.prompt);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % vocab);
    std::vector<int32_t> next(batch);
    ForwardOutputs out;
    out.argmax = next.data();
    out.last_position_only = true;
    auto state = backend.new_state(batch);
    std::vector<double> prefill_ms;
    for (int r = 0; r < options.repeats + 1; ++r) {  // the first run warms up
      state->reset();
      const double start = now_ms();
      backend.forward(prompt.data(), options.prompt, *state, out);
      if (r > 0) prefill_ms.push_back(now_ms() - start);
    }
    // Greedy decode: two warm-up steps (the second captures the CUDA graph), then timed steps.
    out.last_position_only = false;
    std::vector<int32_t> token = next;
    for (int w = 0; w < 2; ++w) {
      backend.forward(token.data(), 1, *state, out);
      token = next;
    }
    const double start = now_ms();
    for (int64_t g = 0; g < options.gen; ++g) {
      backend.forward(token.data(), 1, *state, out);
      token = next;
    }
    ModelBenchRow row;
    row.batch = batch;
    row.ttft_ms = median(prefill_ms);
    row.tpot_ms = (now_ms() - start) / options.gen;
    row.prefill_tokens_per_s = batch * options.prompt / (row.ttft_ms / 1e3);
    row.decode_tokens_per_s = batch / (row.tpot_ms / 1e3);
    if (after_batch) after_batch(row);
    rows.push_back(row);
  }
  return rows;
}

std::vector<VerifyBenchRow> bench_verify(const Backend& backend, const std::vector<int64_t>& batches,
                                         const std::vector<int64_t>& windows, int64_t iterations, uint64_t seed,
                                         double acceptance, bool as_greedy_generate, const std::vector<int64_t>& drafts) {
  if (iterations < 1) fail("verify timing: iterations must be at least 1");
  if (!(acceptance >= 0 && acceptance <= 1)) fail("verify timing: the acceptance rate must be in 0..1, got {}", acceptance);
  for (const int64_t d : drafts)
    if (d < 1) fail("verify timing: drafts per sequence must be at least 1, got {}", d);
  const int64_t vocab = backend.config().vocab_size, prompt_length = 64;
  const VerifyMode mode = as_greedy_generate ? VerifyMode::kExact : VerifyMode::kWindow;
  auto timed = [&](int warmups, const std::function<void()>& once) {
    for (int w = 0; w < warmups; ++w) once();
    const double start = now_ms();
    for (int64_t i = 0; i < iterations; ++i) once();
    return (now_ms() - start) / iterations;
  };
  std::vector<VerifyBenchRow> rows;
  for (const int64_t batch : batches) {
    std::mt19937_64 rng(seed + batch);
    auto random_tokens = [&](int64_t n) {
      std::vector<int32_t> t(n);
      for (auto& v : t) v = static_cast<int32_t>(rng() % vocab);
      return t;
    };
    OutputBuffers outputs(vocab, /*argmax_only=*/as_greedy_generate);
    double step_ms = 0;
    {  // plain decoding: one row a sequence
      DecodeSession plain(backend, batch, mode);
      for (int64_t b = 0; b < batch; ++b) plain.prefill(b, random_tokens(prompt_length).data(), prompt_length, nullptr);
      const std::vector<int32_t> column = random_tokens(batch);
      const TokenOutputs step_outputs = outputs.room(batch);
      step_ms = timed(2, [&] { plain.step(column.data(), step_outputs); });
    }
    for (const int64_t M : drafts) {
      // Row b·M + m is draft m of sequence b; its rows hold one state outside a window, as generate's.
      const int64_t R = batch * M;
      DecodeSession session(backend, R, mode);
      for (int64_t b = 0; b < batch; ++b) {
        session.prefill(b * M, random_tokens(prompt_length).data(), prompt_length, nullptr);
        for (int64_t m = 1; m < M; ++m) session.copy_rows({b * M}, {b * M + m});
      }
      for (const int64_t window : windows) {
        if (window < 1) fail("verify timing: windows must be at least 1 token, got {}", window);
        const std::vector<int32_t> tokens = random_tokens(R * window);
        const TokenOutputs window_outputs = outputs.room(R * window);
        VerifyBenchRow row;
        row.batch = batch;
        row.drafts = M;
        row.window = window;
        row.step_ms = step_ms;
        // Each sequence keeps the tokens of one of its rows (`kept[b]`), every row taking them.
        std::vector<int64_t> counts(R), from(R), kept(batch, 0);
        auto accept = [&](const std::function<int64_t(int64_t)>& count) {
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t m = 0; m < M; ++m) {
              counts[b * M + m] = count(b * M + m);
              from[b * M + m] = b * M + kept[b];
            }
          session.accept(counts, from);
        };
        row.verify_ms = timed(3, [&] {
          session.verify(tokens.data(), window, window_outputs);
          accept([&](int64_t) { return window; });
        });
        row.verify_replay_ms = timed(3, [&] {
          session.verify(tokens.data(), window, window_outputs);
          accept([&](int64_t) { return window / 2; });
        });
        if (acceptance > 0) {
          // Each row keeps its pending token and the drafts accepted before its first rejection (drawn
          // independently per row); a sequence keeps its longest row. The tokens per window average
          // every simulated window (warm-ups too: the draws are alike).
          std::bernoulli_distribution accepted(acceptance);
          std::vector<int64_t> keep(R);
          int64_t yielded = 0, calls = 0;
          row.window_ms = timed(3, [&] {
            for (int64_t b = 0; b < batch; ++b) {
              kept[b] = 0;
              for (int64_t m = 0; m < M; ++m) {
                int64_t& k = keep[b * M + m];
                for (k = 1; k < window && accepted(rng);) ++k;
                if (k > keep[b * M + kept[b]]) kept[b] = m;
              }
              yielded += keep[b * M + kept[b]];
            }
            ++calls;
            session.verify(tokens.data(), window, window_outputs);
            accept([&](int64_t r) { return keep[r]; });
          });
          std::fill(kept.begin(), kept.end(), 0);
          row.tokens_per_window = static_cast<double>(yielded) / (calls * batch);
        }
        rows.push_back(row);
      }
    }
  }
  return rows;
}

}  // namespace ssdq
