#include "runtime/ngram_drafter.h"

#include <algorithm>

namespace ssdq {

std::vector<int32_t> ngram_draft(const std::vector<int32_t>& context, const NgramDraftOptions& options) {
  const int64_t length = static_cast<int64_t>(context.size());
  for (int64_t n = std::min(options.ngram_max, length - 1); n >= options.ngram_min && n >= 1; --n) {
    const int32_t* suffix = context.data() + length - n;
    // The most recent earlier occurrence (it ends before the suffix starts).
    for (int64_t start = length - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, context.data() + start)) continue;
      const int64_t from = start + n, count = std::min(options.draft, length - from);
      if (count <= 0) continue;
      return std::vector<int32_t>(context.begin() + from, context.begin() + from + count);
    }
  }
  return {};
}

}  // namespace ssdq
