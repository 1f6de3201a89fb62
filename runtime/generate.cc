#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "formats/error.h"
#include "runtime/decode_session.h"
#include "runtime/doubling_pause.h"
#include "runtime/speculation_payoff.h"

namespace ssdq {

Drafter ngram_drafter(const NgramDraftOptions& options, int64_t drafts) {
  return [options, drafts](int64_t, const std::vector<int32_t>& context, int64_t) {
    std::vector<std::vector<int32_t>> found = ngram_drafts(context, options, drafts);
    Draft draft;
    if (found.empty()) return draft;
    draft.tokens = std::move(found[0]);
    draft.alternatives.assign(std::make_move_iterator(found.begin() + 1), std::make_move_iterator(found.end()));
    return draft;
  };
}

size_t complete_utf8_prefix(std::string_view text) {
  const size_t n = text.size();
  // Look back at most 3 bytes for the lead byte of the last character.
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back < need ? n - back : n;
  }
  return n;
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One sequence's progress: what it generated, what was handed out, and when.
struct Progress {
  std::vector<int32_t> context;  // prompt + generated
  GeneratedText out;
  bool done = false;
  size_t emitted = 0;
  Clock::time_point first, last;
  // GenerateOptions::adaptive_draft: the draft length now, and the pause after windows that
  // accepted nothing.
  int64_t draft_limit = 0;
  DoublingPause pause;
};

// GenerateOptions::adaptive_draft after a window that accepted `accepted` of `drafted` tokens.
void adapt_draft(Progress& p, int64_t drafted, int64_t accepted, int64_t max_draft) {
  p.draft_limit = accepted == drafted ? std::min(max_draft, p.draft_limit + 2) : std::max<int64_t>(1, p.draft_limit - 1);
  if (accepted > 0) {
    p.pause.succeeded();
  } else {
    p.pause.failed();
  }
}

class Generator {
 public:
  Generator(const Tokenizer& tokenizer, const GenerateOptions& options, const TextCallback& on_text)
      : tokenizer_(tokenizer), options_(options), on_text_(on_text) {}

  // Appends a chosen token to sequence b and decides whether it is done.
  void append(int64_t b, Progress& p, int32_t token) {
    const auto now = Clock::now();
    if (p.out.tokens.empty()) p.first = now;
    p.last = now;
    if (std::find(options_.stop_tokens.begin(), options_.stop_tokens.end(), token) != options_.stop_tokens.end()) {
      finish(b, p, "stop token");
      return;
    }
    p.out.tokens.push_back(token);
    p.context.push_back(token);
    // Byte-level BPE decodes token by token, so the text grows by this token's bytes; a stop
    // string can only have completed in the new bytes or just before them.
    const size_t before = p.out.text.size();
    p.out.text += tokenizer_.decode(&token, 1);
    size_t stop_at = std::string::npos;
    for (const std::string& stop : options_.stop_strings)
      stop_at = std::min(stop_at, p.out.text.find(stop, before >= stop.size() ? before - stop.size() + 1 : 0));
    if (stop_at != std::string::npos) {
      p.out.text.resize(stop_at);
      finish(b, p, "stop string");
      return;
    }
    if (static_cast<int64_t>(p.out.tokens.size()) >= options_.max_new_tokens) {
      finish(b, p, "length");
      return;
    }
    emit(b, p, visible_length(p.out.text));
  }

  // Hands each sequence's new text to the callback in one piece: once per model call, so a window
  // that yields several tokens is written (and a terminal flushed) once, not once a token.
  void deliver() {
    for (size_t b = 0; b < unsent_.size(); ++b)
      if (!unsent_[b].empty()) {
        on_text_(static_cast<int64_t>(b), unsent_[b]);
        unsent_[b].clear();
      }
  }

 private:
  // Text that cannot change any more: whole characters, and not a tail that may begin a stop string.
  size_t visible_length(const std::string& text) const {
    size_t held = 0;
    for (const std::string& stop : options_.stop_strings)
      for (size_t k = std::min(stop.size() - 1, text.size()); k > held; --k)
        if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
          held = k;
          break;
        }
    return complete_utf8_prefix(std::string_view(text).substr(0, text.size() - held));
  }
  void emit(int64_t b, Progress& p, size_t upto) {
    if (upto > p.emitted && on_text_) {
      if (static_cast<int64_t>(unsent_.size()) <= b) unsent_.resize(b + 1);
      unsent_[b] += p.out.text.substr(p.emitted, upto - p.emitted);
    }
    p.emitted = std::max(p.emitted, upto);
  }
  void finish(int64_t b, Progress& p, const char* reason) {
    p.done = true;
    p.out.finish_reason = reason;
    emit(b, p, p.out.text.size());
  }

  const Tokenizer& tokenizer_;
  const GenerateOptions& options_;
  const TextCallback& on_text_;
  std::vector<std::string> unsent_;  // each sequence's text handed out since the last deliver()
};

}  // namespace

std::vector<GeneratedText> generate(const Backend& backend, const Tokenizer& tokenizer,
                                    const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                                    const TextCallback& on_text) {
  check_sampling_options(options.sampling);
  const int64_t B = static_cast<int64_t>(prompts.size()), V = backend.config().vocab_size, M = options.drafts;
  if (B == 0) fail("generate: no prompts");
  if (options.max_new_tokens < 1) fail("--max-new-tokens must be 1 or more, got {}", options.max_new_tokens);
  if (options.drafter && options.max_draft < 1) fail("--draft must be 1 or more, got {}", options.max_draft);
  if (M < 1 || M > kMaxDraftsPerSequence) fail("--drafts must be 1 … {}, got {}", kMaxDraftsPerSequence, M);
  if (M > 1 && !options.drafter) fail("--drafts {} needs speculation (a drafter)", M);
  if (!options.sequence_ids.empty() && static_cast<int64_t>(options.sequence_ids.size()) != B)
    fail("internal: {} sequence ids for {} prompts", options.sequence_ids.size(), B);
  for (int64_t b = 0; b < B; ++b) {
    if (prompts[b].empty()) fail("prompt {} is empty (after tokenization)", b);
    for (int32_t id : prompts[b])
      if (id < 0 || id >= V) fail("prompt {}: token id {} is outside the model's vocabulary (0..{})", b, id, V - 1);
  }
  auto sequence_id = [&](int64_t b) { return options.sequence_ids.empty() ? uint64_t(b) : options.sequence_ids[b]; };
  auto choose = [&](int64_t b, const Progress& p, const float* logits) {
    const double u = counter_uniform(options.sampling.seed, sequence_id(b), p.out.tokens.size());
    return choose_token(logits, V, options.sampling, u);
  };
  // Greedy decoding reads only each position's argmax (ties to the lowest id, as choose_token),
  // which the backend reduces where it runs: a GPU sends back 4 bytes a position, not V floats.
  OutputBuffers outputs(V, /*argmax_only=*/options.sampling.temperature == 0);
  // The model's choice for sequence b at output position i of the last call.
  auto choose_at = [&](int64_t b, const Progress& p, int64_t i) {
    return outputs.argmax_only() ? outputs.argmax(i) : choose(b, p, outputs.logits(i));
  };

  Generator generator(tokenizer, options, on_text);
  const auto start = Clock::now();
  std::vector<Progress> seq(B);
  // Row b·M + m of the session is sequence b's m-th draft row; outside a window its rows are equal.
  DecodeSession session(backend, B * M, options.verify);
  std::vector<int32_t> pending(B);  // the chosen token each sequence feeds next
  std::vector<int64_t> first_rows, other_rows;  // each sequence's row 0, and the rows copied from it
  for (int64_t b = 0; b < B; ++b) {
    seq[b].context = prompts[b];
    seq[b].draft_limit = options.max_draft;
    session.prefill(b * M, prompts[b].data(), static_cast<int64_t>(prompts[b].size()), outputs.room(1));
    for (int64_t m = 1; m < M; ++m) {
      first_rows.push_back(b * M);
      other_rows.push_back(b * M + m);
    }
    pending[b] = choose_at(b, seq[b], 0);
    generator.append(b, seq[b], pending[b]);
  }
  generator.deliver();
  if (M > 1) session.copy_rows(first_rows, other_rows);
  auto all_done = [&] { return std::all_of(seq.begin(), seq.end(), [](const Progress& p) { return p.done; }); };
  std::vector<int32_t> row_tokens(B * M);
  SpeculationPayoff payoff(backend.on_device());
  auto tokens_so_far = [&] {
    int64_t n = 0;
    for (const Progress& p : seq) n += static_cast<int64_t>(p.out.tokens.size());
    return n;
  };
  while (!all_done()) {
    const auto window_start = Clock::now();
    const int64_t tokens_before = tokens_so_far();
    // Drafts: at most max_draft tokens, and no more than a sequence may still generate.
    std::vector<Draft> drafts(B);
    int64_t K = 0;
    if (options.drafter && (!options.measured_payoff || payoff.speculate()))
      for (int64_t b = 0; b < B; ++b) {
        if (seq[b].done) continue;
        if (options.adaptive_draft && seq[b].pause.take_paused_step()) continue;
        const int64_t room = options.max_new_tokens - static_cast<int64_t>(seq[b].out.tokens.size()) - 1;
        const int64_t limit = std::min(options.adaptive_draft ? seq[b].draft_limit : options.max_draft, room);
        if (limit <= 0) continue;
        Draft& d = drafts[b] = options.drafter(b, seq[b].context, limit);
        if (static_cast<int64_t>(d.alternatives.size()) > M - 1) d.alternatives.resize(M - 1);
        auto fit = [&](std::vector<int32_t>& tokens) {
          tokens.resize(std::min<int64_t>(static_cast<int64_t>(tokens.size()), limit));
          for (int32_t& t : tokens) t = std::clamp<int32_t>(t, 0, static_cast<int32_t>(V - 1));
          K = std::max<int64_t>(K, static_cast<int64_t>(tokens.size()));
        };
        fit(d.tokens);
        for (std::vector<int32_t>& alternative : d.alternatives) fit(alternative);
        if (!d.distributions.empty()) {
          if (d.distributions.size() < d.tokens.size() || options.sampling.temperature == 0)
            fail("internal: a draft of {} tokens with {} distributions at temperature {}", d.tokens.size(),
                 d.distributions.size(), options.sampling.temperature);
          if (M > 1) fail("several drafts per sequence ({}) need drafts without distributions (prompt lookup)", M);
          d.distributions.resize(d.tokens.size());
        }
      }
    if (K == 0) {  // nothing to verify: a plain step
      const auto step_start = Clock::now();
      for (int64_t r = 0; r < B * M; ++r) row_tokens[r] = pending[r / M];
      session.step(row_tokens.data(), outputs.room(B * M));
      for (int64_t b = 0; b < B; ++b) {
        if (seq[b].done) continue;
        pending[b] = choose_at(b, seq[b], b * M);
        generator.append(b, seq[b], pending[b]);
      }
      generator.deliver();
      payoff.record_step(ms_between(step_start, Clock::now()), tokens_so_far() - tokens_before);
      continue;
    }
    // One window of K + 1 tokens per row: its sequence's pending token, then the row's draft (an
    // alternative, or the draft again where there is none; padded with the pending token: a padded
    // position is never compared, so its value does not matter).
    const int64_t W = K + 1;
    auto row_draft = [&](int64_t b, int64_t m) -> const std::vector<int32_t>& {
      const Draft& d = drafts[b];
      return m >= 1 && m - 1 < static_cast<int64_t>(d.alternatives.size()) ? d.alternatives[m - 1] : d.tokens;
    };
    std::vector<int32_t> window(B * M * W);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t m = 0; m < M; ++m) {
        const std::vector<int32_t>& draft = row_draft(b, m);
        for (int64_t j = 0; j < W; ++j)
          window[(b * M + m) * W + j] =
              j == 0 || j > static_cast<int64_t>(draft.size()) ? pending[b] : draft[j - 1];
      }
    const TokenOutputs window_outputs = outputs.room(B * M * W);
    // Each sequence's acceptance, decided a position at a time as the logits come: `row` the draft
    // row it follows (rows whose drafts equal every choice so far have the same logits; the first
    // is read), `j` the drafts accepted, `open` while it may accept more.
    struct Acceptance {
      bool open = false;
      int64_t row = 0, j = 0, drafted = 0;
      std::vector<char> alive;
    };
    std::vector<Acceptance> acceptance(B);
    for (int64_t b = 0; b < B; ++b) {
      if (seq[b].done) continue;
      Acceptance& a = acceptance[b];
      a.open = true;
      a.alive.assign(M, 1);
      for (int64_t m = 0; m < M; ++m) a.drafted = std::max<int64_t>(a.drafted, static_cast<int64_t>(row_draft(b, m).size()));
    }
    // Position j's logits follow window token j: the model's choice there, for every sequence still
    // accepting (whose j is this position). Returns whether any sequence may accept position j + 1.
    int64_t considered = 0;
    auto consider = [&](int64_t j, std::vector<int64_t>& settled) {
      considered = j + 1;
      bool any_open = false;
      for (int64_t b = 0; b < B; ++b) {
        Acceptance& a = acceptance[b];
        if (!a.open) continue;
        Progress& p = seq[b];
        const Draft& d = drafts[b];
        const int64_t at = (b * M + a.row) * W + j;  // this position's output
        a.j = j;
        a.open = false;
        if (j < static_cast<int64_t>(d.tokens.size()) && !d.distributions.empty()) {  // speculative sampling's rule
          const uint64_t t = p.out.tokens.size();
          const SpeculativeChoice c =
              speculative_choice(token_distribution(outputs.logits(at), V, options.sampling),
                                 d.distributions[j], d.tokens[j],
                                 counter_uniform(options.sampling.seed ^ kAcceptStream, sequence_id(b), t),
                                 counter_uniform(options.sampling.seed, sequence_id(b), t));
          pending[b] = c.token;
          generator.append(b, p, pending[b]);
          a.open = !p.done && c.accepted;
        } else {
          pending[b] = choose_at(b, p, at);
          generator.append(b, p, pending[b]);
          if (!p.done) {
            int64_t next = -1;
            for (int64_t m = 0; m < M; ++m) {
              const std::vector<int32_t>& draft = row_draft(b, m);
              a.alive[m] = a.alive[m] && j < static_cast<int64_t>(draft.size()) && draft[j] == pending[b];
              if (a.alive[m] && next < 0) next = m;
            }
            if (next >= 0) {
              a.row = next;
              a.open = true;
            }
          }
        }
        any_open = any_open || a.open;
        if (!a.open) settled.push_back(b * M + a.row);  // its kept tokens end here
      }
      return any_open;
    };
    // Token by token, the session asks after each position and stops where every draft has failed;
    // a window has every position's logits at once, read here in the same order.
    const int64_t verified = session.verify(window.data(), W, window_outputs,
                                            session.verifies_as_window(W) ? DecodeSession::VerifyContinues{} : consider);
    for (std::vector<int64_t> settled; considered < verified && consider(considered, settled); settled.clear()) {
    }
    std::vector<int64_t> keep(B * M, verified), from(B * M);
    for (int64_t r = 0; r < B * M; ++r) from[r] = r;
    for (int64_t b = 0; b < B; ++b) {
      const Acceptance& a = acceptance[b];
      if (a.alive.empty()) continue;  // done before this window
      Progress& p = seq[b];
      keep[b * M + a.row] = a.j + 1;  // the window tokens fed: pending + the j accepted drafts
      for (int64_t m = 0; m < M; ++m) from[b * M + m] = b * M + a.row;  // every row takes the kept row's
      if (a.drafted > 0) {
        ++p.out.windows;
        p.out.drafted += a.drafted;
        p.out.accepted += a.j;
        if (static_cast<int64_t>(p.out.accepted_histogram.size()) < options.max_draft + 1)
          p.out.accepted_histogram.resize(options.max_draft + 1);
        ++p.out.accepted_histogram[a.j];
        if (options.adaptive_draft) adapt_draft(p, a.drafted, a.j, options.max_draft);
      }
    }
    session.accept(keep, from);
    generator.deliver();
    payoff.record_window(W, ms_between(window_start, Clock::now()), tokens_so_far() - tokens_before);
  }
  for (Progress& p : seq) {
    p.out.paused_steps = payoff.paused_steps();
    p.out.window_tokens_per_ms = payoff.window_rate();
    p.out.step_tokens_per_ms = payoff.step_rate();
    const int64_t n = static_cast<int64_t>(p.out.tokens.size());
    p.out.ttft_ms = ms_between(start, p.first);
    p.out.tpot_ms = n > 1 ? ms_between(p.first, p.last) / (n - 1) : 0;
    const double total_ms = ms_between(start, p.last);
    p.out.tokens_per_second = total_ms > 0 ? n / (total_ms / 1000) : 0;
  }
  std::vector<GeneratedText> out;
  for (Progress& p : seq) out.push_back(std::move(p.out));
  return out;
}

}  // namespace ssdq
