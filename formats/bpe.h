// Byte-level BPE merging: turns the bytes of one pre-token into token ids by applying merges in rank order,
// the lowest rank first and, among equal ranks, the leftmost (the order of HF tokenizers' BPE model).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ssdq {

struct BpeMerge {
  int32_t left, right, merged;  // token ids; the merge's rank is its index in the list
};

class BpeMerger {
 public:
  // byte_ids[b] is the id of the single-byte symbol for byte b, or -1 when the vocabulary has none (bytes that
  // never occur in UTF-8); such bytes are dropped, as HF drops characters missing from the vocabulary. Merge
  // ids must be >= 0. When a (left, right) pair appears twice in merges, the later rank wins (as HF builds its
  // merge map).
  BpeMerger(const std::array<int32_t, 256>& byte_ids, const std::vector<BpeMerge>& merges);

  // Appends the ids of `word` to out.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Slot {
    uint64_t key;  // kEmptyKey when unused
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  static constexpr uint32_t kNoRank = ~uint32_t{0};

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t slot_index(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  // The rank of merging (left, right), kNoRank when no merge exists; sets merged.
  uint32_t find(int32_t left, int32_t right, int32_t& merged) const;

  void encode_short_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_long_word(std::string_view word, std::vector<int32_t>& out) const;

  std::array<int32_t, 256> byte_ids_;
  std::vector<Slot> slots_;  // open addressing, linear probing, power-of-two size
  unsigned shift_ = 64;
};

}  // namespace ssdq
