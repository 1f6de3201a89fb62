// UTF-8 decoding and per-code-point Unicode properties (from unicode_tables.cc) for the tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "formats/unicode_tables.h"

namespace ssdq::unicode {

constexpr uint32_t kReplacementCharacter = 0xFFFD;

struct Utf8Char {
  uint32_t codepoint;
  uint32_t length;  // >= 1
  bool valid;
};

// Decodes one character at text[0 .. available), available >= 1. Well-formed means the Unicode standard's
// table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence. An ill-formed
// sequence gives U+FFFD with the length of its maximal subpart (the longest prefix that could still have
// begun a well-formed character, at least one byte), as Python's errors="replace" does.
inline Utf8Char decode_utf8(const unsigned char* text, size_t available) {
  const uint32_t b0 = text[0];
  if (b0 < 0x80) return {b0, 1, true};
  uint32_t low = 0x80, high = 0xBF, length = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) low = 0xA0;
    if (b0 == 0xED) high = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) low = 0x90;
    if (b0 == 0xF4) high = 0x8F;
  } else {
    return {kReplacementCharacter, 1, false};
  }
  uint32_t codepoint = b0 & (0x7F >> length);
  for (uint32_t i = 1; i < length; ++i) {
    const uint32_t byte = i < available ? text[i] : 0;
    if (byte < low || byte > high) return {kReplacementCharacter, i, false};
    codepoint = (codepoint << 6) | (byte & 0x3F);
    low = 0x80;
    high = 0xBF;
  }
  return {codepoint, length, true};
}

// Returns text when it is well-formed UTF-8, else a view of `storage` holding text with every ill-formed
// subsequence (see decode_utf8) replaced by U+FFFD.
std::string_view replace_invalid_utf8(std::string_view text, std::string& storage);

// Appends the UTF-8 form of codepoint (<= U+10FFFF).
void append_utf8(std::string& out, uint32_t codepoint);

CharClass char_class(uint32_t codepoint);
uint8_t combining_class(uint32_t codepoint);
// False when NFC can never change a text made of such characters (NFC_Quick_Check=Yes and ccc=0).
bool nfc_unsafe(uint32_t codepoint);

}  // namespace ssdq::unicode
