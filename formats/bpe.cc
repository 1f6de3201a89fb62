#include "formats/bpe.h"

#include <cstring>
#include <functional>
#include <queue>
#include <utility>

namespace ssdq {
namespace {

// Words up to this many bytes merge by rescanning a small array (cheap for short words); longer ones use a
// priority queue so that a huge single pre-token (a long run of letters) stays O(n log n).
constexpr size_t kShortWordBytes = 64;

}  // namespace

BpeMerger::BpeMerger(const std::array<int32_t, 256>& byte_ids, const std::vector<BpeMerge>& merges)
    : byte_ids_(byte_ids) {
  size_t capacity = 16;
  unsigned bits = 4;
  while (capacity < merges.size() * 2) {
    capacity *= 2;
    ++bits;
  }
  slots_.assign(capacity, Slot{kEmptyKey, 0, 0});
  shift_ = 64 - bits;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const BpeMerge& merge = merges[rank];
    const uint64_t key = pair_key(merge.left, merge.right);
    size_t index = slot_index(key);
    while (slots_[index].key != kEmptyKey && slots_[index].key != key) index = (index + 1) & (capacity - 1);
    slots_[index] = Slot{key, static_cast<uint32_t>(rank), merge.merged};
  }
}

uint32_t BpeMerger::find(int32_t left, int32_t right, int32_t& merged) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t index = slot_index(key);; index = (index + 1) & mask) {
    const Slot& slot = slots_[index];
    if (slot.key == key) {
      merged = slot.merged;
      return slot.rank;
    }
    if (slot.key == kEmptyKey) return kNoRank;
  }
}

void BpeMerger::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() <= kShortWordBytes) {
    encode_short_word(word, out);
  } else {
    encode_long_word(word, out);
  }
}

void BpeMerger::encode_short_word(std::string_view word, std::vector<int32_t>& out) const {
  int32_t symbols[kShortWordBytes];
  uint32_t ranks[kShortWordBytes];  // ranks[i]: rank of merging symbols[i] and symbols[i + 1]
  int32_t merged[kShortWordBytes];
  size_t count = 0;
  for (char byte : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(byte)];
    if (id >= 0) symbols[count++] = id;
  }
  for (size_t i = 0; i + 1 < count; ++i) ranks[i] = find(symbols[i], symbols[i + 1], merged[i]);
  while (count > 1) {  // merge the lowest-ranked pair, the leftmost among equals
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoRank) break;
    symbols[best] = merged[best];
    const size_t tail = count - best - 2;  // pairs after the merged one
    std::memmove(symbols + best + 1, symbols + best + 2, tail * sizeof(int32_t));
    std::memmove(ranks + best, ranks + best + 1, tail * sizeof(uint32_t));
    std::memmove(merged + best, merged + best + 1, tail * sizeof(int32_t));
    --count;
    if (best > 0) ranks[best - 1] = find(symbols[best - 1], symbols[best], merged[best - 1]);
    if (best + 1 < count) ranks[best] = find(symbols[best], symbols[best + 1], merged[best]);
  }
  out.insert(out.end(), symbols, symbols + count);
}

void BpeMerger::encode_long_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  for (char byte : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(byte)];
    if (id >= 0) symbols.push_back(id);
  }
  const size_t count = symbols.size();
  if (count == 0) return;
  std::vector<int64_t> prev(count), next(count);  // linked list over the live symbols; -1 ends it
  std::vector<bool> alive(count, true);
  for (size_t i = 0; i < count; ++i) {
    prev[i] = static_cast<int64_t>(i) - 1;
    next[i] = i + 1 < count ? static_cast<int64_t>(i) + 1 : -1;
  }
  // Entries are (rank, position of the left symbol), lowest first; stale ones are skipped when popped.
  using Candidate = std::pair<uint32_t, int64_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int64_t left) {
    int32_t merged_id;
    const uint32_t rank = find(symbols[left], symbols[next[left]], merged_id);
    if (rank != kNoRank) queue.push({rank, left});
  };
  for (size_t i = 0; i + 1 < count; ++i) push_pair(static_cast<int64_t>(i));
  while (!queue.empty()) {
    const auto [rank, left] = queue.top();
    queue.pop();
    if (!alive[left] || next[left] < 0) continue;
    const int64_t right = next[left];
    int32_t merged_id = -1;
    if (find(symbols[left], symbols[right], merged_id) != rank) continue;
    symbols[left] = merged_id;
    alive[right] = false;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    if (prev[left] >= 0) push_pair(prev[left]);
    if (next[left] >= 0) push_pair(left);
  }
  for (int64_t i = 0; i >= 0; i = next[i]) out.push_back(symbols[i]);
}

}  // namespace ssdq
