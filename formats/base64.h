// Standard base64 (RFC 4648, with padding) for binary data inside JSON metadata, e.g. a
// SentencePiece model embedded in an artifact.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "formats/error.h"

namespace ssdq {

inline std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// Fails naming `what` on text that is not canonical padded base64.
inline std::string base64_decode(std::string_view text, const std::string& what) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) fail("{}: base64 text of {} characters is not a multiple of 4", what, text.size());
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int d = k < 4 - pad ? value(text[i + k]) : 0;
      if (d < 0) fail("{}: '{}' at offset {} is not a base64 character", what, text[i + k], i + k);
      v = v << 6 | static_cast<uint32_t>(d);
    }
    for (size_t k = 0; k < 3 - pad; ++k) out += static_cast<char>((v >> (16 - 8 * k)) & 255);
  }
  return out;
}

}  // namespace ssdq
