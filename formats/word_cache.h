// A thread-safe cache from pre-token bytes to their BPE ids. It fills up to a fixed number of words and then
// stops growing (like HF tokenizers' BPE cache), so memory stays bounded whatever the input.
#pragma once

#include <cstdint>
#include <deque>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ssdq {

class WordCache {
 public:
  WordCache(size_t max_words, size_t max_word_bytes) : max_words_(max_words), max_word_bytes_(max_word_bytes) {}

  // Appends the cached ids of word to out and returns true, or returns false when word is not cached.
  bool append_cached(std::string_view word, std::vector<int32_t>& out) const;
  // Remembers ids for word unless the cache is full or word is longer than max_word_bytes.
  void insert(std::string_view word, const int32_t* ids, size_t count);

 private:
  const size_t max_words_;
  const size_t max_word_bytes_;
  mutable std::shared_mutex mutex_;
  std::deque<std::string> keys_;  // owns the bytes the map's keys point to (a deque never moves its elements)
  std::vector<int32_t> ids_;      // the ids of every cached word, back to back
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> words_;  // word -> (offset, count) in ids_
};

}  // namespace ssdq
