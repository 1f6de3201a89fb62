// Finds added tokens (like "<|endoftext|>" or runs of spaces) inside text the way HF tokenizers does:
// scanning left to right, at the first position where any token starts, the longest token that starts there.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ssdq {

class AddedTokenMatcher {
 public:
  // content must be non-empty; returns false when a token with the same content is already there.
  bool add(std::string_view content, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }

  // Calls on_text(piece) for each non-empty stretch between tokens and on_token(id) for each token, in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    if (empty()) {
      if (!text.empty()) on_text(text);
      return;
    }
    size_t piece_start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      if (!starts_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      const auto [length, id] = longest_at(text, pos);
      if (length == 0) {
        ++pos;
        continue;
      }
      if (pos > piece_start) on_text(text.substr(piece_start, pos - piece_start));
      on_token(id);
      pos += length;
      piece_start = pos;
    }
    if (piece_start < text.size()) on_text(text.substr(piece_start));
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> children;  // (byte, node index)
    int32_t token_id = -1;
  };
  // (length, id) of the longest token starting at text[pos], length 0 when none does.
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;

  std::vector<Node> nodes_{Node{}};  // a byte trie; nodes_[0] is the root
  std::array<bool, 256> starts_{};   // first bytes of the tokens
};

}  // namespace ssdq
