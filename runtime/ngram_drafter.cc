#include "runtime/ngram_drafter.h"

#include <algorithm>

namespace ssdq {
namespace {

// Whether `a` is a prefix of `b` (or equal to it).
bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

struct Continuation {
  std::vector<int32_t> tokens;
  int64_t count = 0;   // occurrences of the suffix followed by exactly these tokens
  int64_t latest = 0;  // where the most recent of them starts
};

// The distinct continuations of the n-token suffix of `context` at its earlier occurrences, the
// most recent occurrence's first, then by frequency (ties: the more recent); with `only_latest`,
// that first one alone.
std::vector<Continuation> continuations(const std::vector<int32_t>& context, int64_t n, int64_t draft,
                                        bool only_latest) {
  const int64_t length = static_cast<int64_t>(context.size());
  const int32_t* suffix = context.data() + length - n;
  std::vector<Continuation> found;
  // Occurrences end before the suffix starts; walked from the most recent back.
  for (int64_t start = length - n - 1; start >= 0; --start) {
    if (!std::equal(suffix, suffix + n, context.data() + start)) continue;
    const int64_t from = start + n, count = std::min(draft, length - from);
    if (count <= 0) continue;
    std::vector<int32_t> tokens(context.begin() + from, context.begin() + from + count);
    auto same = std::find_if(found.begin(), found.end(), [&](const Continuation& c) { return c.tokens == tokens; });
    if (same != found.end()) {
      ++same->count;
    } else {
      found.push_back({std::move(tokens), 1, start});
      if (only_latest) return found;
    }
  }
  if (found.size() > 1)
    std::stable_sort(found.begin() + 1, found.end(), [](const Continuation& a, const Continuation& b) {
      return a.count != b.count ? a.count > b.count : a.latest > b.latest;
    });
  return found;
}

}  // namespace

std::vector<std::vector<int32_t>> ngram_drafts(const std::vector<int32_t>& context, const NgramDraftOptions& options,
                                               int64_t count) {
  std::vector<std::vector<int32_t>> drafts;
  const int64_t length = static_cast<int64_t>(context.size());
  for (int64_t n = std::min(options.ngram_max, length - 1); n >= options.ngram_min && n >= 1; --n) {
    for (Continuation& c : continuations(context, n, options.draft, count == 1)) {
      if (static_cast<int64_t>(drafts.size()) >= count) return drafts;
      if (std::any_of(drafts.begin(), drafts.end(), [&](const std::vector<int32_t>& d) { return is_prefix(c.tokens, d); }))
        continue;
      drafts.push_back(std::move(c.tokens));
    }
  }
  return drafts;
}

std::vector<int32_t> ngram_draft(const std::vector<int32_t>& context, const NgramDraftOptions& options) {
  std::vector<std::vector<int32_t>> drafts = ngram_drafts(context, options, 1);
  return drafts.empty() ? std::vector<int32_t>{} : std::move(drafts[0]);
}

}  // namespace ssdq
