#include "formats/gpt2_pretokenizer.h"

#include <array>
#include <cstdint>

#include "formats/unicode_text.h"

namespace ssdq {
namespace {

using unicode::CharClass;

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      classes[c] = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      classes[c] = CharClass::kNumber;
    } else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) {
      classes[c] = CharClass::kSpace;
    } else {
      classes[c] = CharClass::kOther;
    }
  }
  return classes;
}
constexpr std::array<CharClass, 128> kAsciiClasses = make_ascii_classes();

struct ClassedChar {
  CharClass char_class;
  uint32_t length;
};

inline ClassedChar char_at(const unsigned char* text, size_t available) {
  if (text[0] < 0x80) return {kAsciiClasses[text[0]], 1};
  const unicode::Utf8Char c = unicode::decode_utf8(text, available);
  return {unicode::char_class(c.codepoint), c.length};
}

// Length of the contraction ('s 't 're 've 'm 'll 'd, lower case only) starting at text[0] == '\'', or 0.
size_t contraction_length(const unsigned char* text, size_t available) {
  if (available >= 2) {
    const unsigned char c = text[1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  }
  if (available >= 3) {
    const unsigned char c1 = text[1], c2 = text[2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  }
  return 0;
}

}  // namespace

void split_gpt2_pretokens(std::string_view text, std::vector<std::string_view>& pieces) {
  pieces.clear();
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t pos = 0;
  while (pos < size) {
    const size_t start = pos;
    if (bytes[pos] == '\'') {
      const size_t length = contraction_length(bytes + pos, size - pos);
      if (length != 0) {
        pieces.push_back(text.substr(start, length));
        pos += length;
        continue;
      }
    }
    ClassedChar first = char_at(bytes + pos, size - pos);
    size_t run_start = pos;
    if (bytes[pos] == ' ' && pos + 1 < size) {  // the optional leading space of the three run alternatives
      const ClassedChar next = char_at(bytes + pos + 1, size - pos - 1);
      if (next.char_class != CharClass::kSpace) {
        first = next;
        run_start = pos + 1;
      }
    }
    if (first.char_class != CharClass::kSpace) {  // ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+
      size_t end = run_start + first.length;
      while (end < size) {
        const ClassedChar c = char_at(bytes + end, size - end);
        if (c.char_class != first.char_class) break;
        end += c.length;
      }
      pieces.push_back(text.substr(start, end - start));
      pos = end;
      continue;
    }
    // \s+(?!\S) keeps the last space of a run that a non-space follows (it can start the next word);
    // a single space before a non-space falls through to \s+.
    size_t end = pos;
    size_t last_char_start = pos;
    while (end < size) {
      const ClassedChar c = char_at(bytes + end, size - end);
      if (c.char_class != CharClass::kSpace) break;
      last_char_start = end;
      end += c.length;
    }
    if (end < size && last_char_start > start) end = last_char_start;
    pieces.push_back(text.substr(start, end - start));
    pos = end;
  }
}

}  // namespace ssdq
