#include "formats/word_cache.h"

#include <mutex>

namespace ssdq {

bool WordCache::append_cached(std::string_view word, std::vector<int32_t>& out) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  const auto found = words_.find(word);
  if (found == words_.end()) return false;
  const auto [offset, count] = found->second;
  out.insert(out.end(), ids_.begin() + offset, ids_.begin() + offset + count);
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t count) {
  if (word.size() > max_word_bytes_) return;
  std::unique_lock<std::shared_mutex> lock(mutex_);
  if (words_.size() >= max_words_ || words_.count(word) != 0) return;
  if (ids_.size() + count > UINT32_MAX) return;
  keys_.emplace_back(word);
  words_.emplace(keys_.back(), std::make_pair(static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)));
  ids_.insert(ids_.end(), ids, ids + count);
}

}  // namespace ssdq
