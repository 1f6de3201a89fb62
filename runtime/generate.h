// Text generation on any backend through the decode session: prompts of different lengths in one
// batch, sampling (sampling.h), stop tokens and strings, text handed out as whole UTF-8
// characters as it grows, and exact speculative decoding (drafts verified in one window, each
// sequence keeping the tokens the model itself would have chosen).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tokenizer.h"
#include "runtime/backend.h"
#include "runtime/decode_session.h"
#include "runtime/ngram_drafter.h"
#include "runtime/sampling.h"

namespace ssdq {

// What a drafter proposes: tokens, and for a drafter that samples them (a model drafter when the
// sampling temperature is above 0) the distribution each was drawn from. With distributions the
// window is verified by speculative sampling's rule (sampling.h, speculative_choice): the text
// has the model's distribution but is not plain decoding's very sample. Without, a draft token
// stands only where the model's own choice equals it: the plain text, token for token.
// Other drafts for the same window (GenerateOptions::drafts above 1, deterministic drafts only)
// are verified beside `tokens`, each in its own row from the sequence's state; the one the model's
// choices follow furthest is kept.
struct Draft {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> distributions;  // empty, or one [vocab] per token
  std::vector<std::vector<int32_t>> alternatives;   // at most GenerateOptions::drafts − 1 are verified
};

// Proposes at most `max_tokens` draft tokens continuing `context` (prompt + generated so far) of
// sequence `sequence` (more are cut; a model drafter spends a step on each).
using Drafter = std::function<Draft(int64_t sequence, const std::vector<int32_t>& context, int64_t max_tokens)>;

// GenerateOptions::drafts at most.
constexpr int64_t kMaxDraftsPerSequence = 16;

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  std::vector<std::string> stop_strings;  // generation stops before the first occurrence of any
  std::vector<int32_t> stop_tokens;       // generation stops at any of these ids (not part of the text)
  // The id of prompt i in the random numbers that choose its tokens (default: i), so that a
  // prompt run alone can reproduce its text from a larger batch.
  std::vector<uint64_t> sequence_ids;
  // Speculation: off unless a drafter is set (ngram_drafter() for prompt lookup). At most
  // max_draft tokens are verified per window.
  Drafter drafter;
  int64_t max_draft = 6;
  // Rows per sequence (the seed's several drafts): the session holds `drafts` copies of each
  // sequence's state, a window verifies the draft and its alternatives side by side, and the row
  // that went furthest becomes every row's state. A plain step advances all the rows alike.
  int64_t drafts = 1;
  // Each sequence's draft length follows its acceptance: +2 (up to max_draft) after a window that
  // accepted every draft token, -1 (down to 1) after one that did not; a window that accepted
  // none also stops that sequence's drafting for 1, 2, 4 … 64 tokens (doubling while they keep
  // failing), so a drafter that keeps missing costs a few windows, not one per token. Off: every
  // draft is verified at its full length (the exactness tests' fixed windows).
  bool adaptive_draft = false;
  // Speculation pauses while its windows yield fewer tokens per second than plain steps, as
  // measured during this generation (runtime/speculation_payoff.h): on a backend and text where it
  // does not pay, generation runs nearly at plain decoding's speed. The tokens are the same either
  // way; only which of them came from windows depends on the timings.
  bool measured_payoff = false;
  // How windows are verified (runtime/decode_session.h): kExact token by token, the plain tokens
  // bit for bit; kWindow one multi-token call with Activation Replay where the backend has it,
  // faster on large models, equal to plain decoding to rounding (a near-tie can change the text).
  VerifyMode verify = VerifyMode::kExact;
};

// A drafter by prompt lookup (ngram_drafter.h); `drafts` above 1 adds that many − 1 alternatives.
Drafter ngram_drafter(const NgramDraftOptions& options, int64_t drafts = 1);

struct GeneratedText {
  std::vector<int32_t> tokens;  // the generated ids, a stop token excluded
  std::string text;             // their text, cut before a stop string
  std::string finish_reason;    // "length", "stop token" or "stop string"
  double ttft_ms = 0, tpot_ms = 0, tokens_per_second = 0;
  // Speculation: verify windows run, draft tokens proposed (the longest of a window's drafts) and
  // accepted (along the row kept), and how many windows accepted 0, 1, … max_draft of them.
  int64_t windows = 0, drafted = 0, accepted = 0;
  std::vector<int64_t> accepted_histogram;
  // GenerateOptions::measured_payoff: plain steps run while speculation was paused (the batch's),
  // and the measured tokens per ms of windows and of plain steps (0: not measured).
  int64_t paused_steps = 0;
  double window_tokens_per_ms = 0, step_tokens_per_ms = 0;
};

// Called as sequence `sequence`'s visible text grows by `piece` (whole UTF-8 characters, nothing
// that might still turn out to begin a stop string): once per model call that added to it, with
// every token that call chose (one for a plain step, the accepted drafts too for a window).
using TextCallback = std::function<void(int64_t sequence, const std::string& piece)>;

std::vector<GeneratedText> generate(const Backend& backend, const Tokenizer& tokenizer,
                                    const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                                    const TextCallback& on_text = {});

// The length of the longest prefix of `text` that ends on a whole UTF-8 character (an incomplete
// multi-byte sequence at the end is held back).
size_t complete_utf8_prefix(std::string_view text);

}  // namespace ssdq
