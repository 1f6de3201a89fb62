#include "formats/added_tokens.h"

namespace ssdq {
namespace {

constexpr uint32_t kNoChild = ~uint32_t{0};

template <typename Children>
uint32_t child_of(const Children& children, unsigned char byte) {
  for (const auto& [child_byte, child] : children) {
    if (child_byte == byte) return child;
  }
  return kNoChild;
}

}  // namespace

bool AddedTokenMatcher::add(std::string_view content, int32_t id) {
  uint32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<unsigned char>(c);
    uint32_t child = child_of(nodes_[node].children, byte);
    if (child == kNoChild) {
      child = static_cast<uint32_t>(nodes_.size());
      nodes_[node].children.emplace_back(byte, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  if (node == 0 || nodes_[node].token_id >= 0) return false;
  nodes_[node].token_id = id;
  starts_[static_cast<unsigned char>(content[0])] = true;
  return true;
}

std::pair<size_t, int32_t> AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child_of(nodes_[node].children, static_cast<unsigned char>(text[i]));
    if (node == kNoChild) break;
    if (nodes_[node].token_id >= 0) best = {i + 1 - pos, nodes_[node].token_id};
  }
  return best;
}

}  // namespace ssdq
