// Drafts for speculative decoding by prompt lookup: the longest suffix of the text so far
// (n tokens, from ngram_max down to ngram_min) that also occurs earlier in it proposes the tokens
// that followed its most recent earlier occurrence. Several drafts (the seed's PNG(n, d)): the
// first is that one; the others are the other distinct continuations of the same suffix, the most
// frequent first (ties: the more recent), then those of shorter suffixes.
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

// Up to `count` distinct drafts continuing `context`, the first ngram_draft's; a continuation
// that is a prefix of one already taken is skipped (its tokens are verified there already).
std::vector<std::vector<int32_t>> ngram_drafts(const std::vector<int32_t>& context, const NgramDraftOptions& options,
                                               int64_t count);

}  // namespace ssdq
