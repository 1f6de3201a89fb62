// Drafts for speculative decoding by prompt lookup: the longest suffix of the text so far
// (n tokens, from ngram_max down to ngram_min) that also occurs earlier in it proposes the tokens
// that followed its most recent earlier occurrence.
#pragma once

#include <cstdint>
#include <vector>

namespace ssdq {

struct NgramDraftOptions {
  int64_t draft = 6;  // at most this many tokens
  int64_t ngram_min = 1, ngram_max = 3;
};

// Up to options.draft tokens continuing `context` (empty when no suffix matches).
std::vector<int32_t> ngram_draft(const std::vector<int32_t>& context, const NgramDraftOptions& options);

}  // namespace ssdq
