// End-to-end latency of a backend: time to first token for a prompt (prefill, logits of the last
// position only) and time per output token over greedy decode steps, per batch size.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/backend.h"

namespace ssdq {

struct ModelBenchOptions {
  std::vector<int64_t> batches = {1};
  int64_t prompt = 1024, gen = 128;
  int repeats = 3;  // prefill timings per batch; the median is reported
  uint64_t seed = 0;
};

struct ModelBenchRow {
  int64_t batch = 0;
  double ttft_ms = 0, tpot_ms = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  size_t peak_bytes = 0;  // filled by the caller where the backend can tell
};

// `after_batch` is called after each batch size (for memory readings and progress).
std::vector<ModelBenchRow> bench_model(const Backend& backend, const ModelBenchOptions& options,
                                       const std::function<void(ModelBenchRow&)>& after_batch);

// The cost of a speculative verify window against a plain decode step, on one DecodeSession of
// `batch` sequences (VerifyMode::kWindow: one call where the backend has windows) (prompts of 64 random tokens), logits of every position copied back as
// generate uses them: one step; verify(window) accepted whole (no replay); verify(window) with
// every sequence keeping half of it (the snapshot restored and the kept half replayed).
// With `acceptance` in (0, 1]: speculative decoding simulated at that rate — each draft token of a
// window accepted with probability `acceptance` while the ones before it were (a seeded draw per
// sequence and window; the tokens fed are random, so the model's choices are not compared, but
// every window, snapshot and replay runs as generate runs it) — for `iterations` windows: the
// tokens each window yields (accepted drafts + the model's own token) and its mean time, so the
// speed-up over plain steps is tokens_per_window × step_ms / window_ms.
struct VerifyBenchRow {
  int64_t batch = 0, drafts = 1, window = 0;
  double step_ms = 0, verify_ms = 0, verify_replay_ms = 0;
  double tokens_per_window = 0, window_ms = 0;  // the simulation (0 without one)
};
// `as_greedy_generate`: the session verifies as greedy `generate` does by default (VerifyMode::kExact:
// one window where the backend's window gives single steps' bits, Backend::exact_window, token by
// token elsewhere) and every call copies back each position's argmax alone, not its logits.
// `drafts`: rows a sequence (generate's --drafts), each entry timed: a window verifies batch ×
// drafts rows from one state a sequence and every row takes the kept row's tokens
// (DecodeSession::accept with sources; in the simulation each row's acceptance is drawn apart and
// a sequence keeps its longest row); the step stays plain decoding's, one row a sequence.
std::vector<VerifyBenchRow> bench_verify(const Backend& backend, const std::vector<int64_t>& batches,
                                         const std::vector<int64_t>& windows, int64_t iterations, uint64_t seed,
                                         double acceptance = 0, bool as_greedy_generate = false,
                                         const std::vector<int64_t>& drafts = {1});

// FLOPs of one forward over `tokens` tokens: 2 × parameters × tokens plus the SSD's.
double model_flops(const Mamba2Config& config, int64_t tokens);
// FLOPs of the chunked SSD over `tokens` tokens (state, inter-chunk output, causal intra-chunk, C·Bᵀ).
double ssd_flops(const Mamba2Config& config, int64_t tokens);

}  // namespace ssdq
