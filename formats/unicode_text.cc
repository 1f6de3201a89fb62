#include "formats/unicode_text.h"

#include <algorithm>

namespace ssdq::unicode {
namespace {

// The last range whose first code point is <= codepoint, or nullptr.
template <typename Range>
const Range* range_containing(const Range* ranges, size_t count, uint32_t codepoint) {
  const Range* end = ranges + count;
  const Range* after = std::upper_bound(ranges, end, codepoint,
                                        [](uint32_t cp, const Range& range) { return cp < range.first; });
  if (after == ranges) return nullptr;
  const Range* candidate = after - 1;
  return codepoint <= candidate->last ? candidate : nullptr;
}

}  // namespace

void append_utf8(std::string& out, uint32_t codepoint) {
  if (codepoint < 0x80) {
    out.push_back(static_cast<char>(codepoint));
  } else if (codepoint < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (codepoint >> 6)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else if (codepoint < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (codepoint >> 12)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (codepoint >> 18)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  }
}

std::string_view replace_invalid_utf8(std::string_view text, std::string& storage) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {  // the common case: no copy
    if (bytes[pos] < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Char c = decode_utf8(bytes + pos, text.size() - pos);
    if (!c.valid) break;
    pos += c.length;
  }
  if (pos == text.size()) return text;
  storage.assign(text.data(), pos);
  while (pos < text.size()) {
    const Utf8Char c = decode_utf8(bytes + pos, text.size() - pos);
    if (c.valid) {
      storage.append(text.data() + pos, c.length);
    } else {
      append_utf8(storage, kReplacementCharacter);
    }
    pos += c.length;
  }
  return storage;
}

CharClass char_class(uint32_t codepoint) {
  const ClassRange* range = range_containing(kClassRanges, kClassRangeCount, codepoint);
  return range ? range->char_class : CharClass::kOther;
}

uint8_t combining_class(uint32_t codepoint) {
  if (codepoint < kCombiningClassRanges[0].first) return 0;
  const CombiningClassRange* range =
      range_containing(kCombiningClassRanges, kCombiningClassRangeCount, codepoint);
  return range ? range->combining_class : 0;
}

bool nfc_unsafe(uint32_t codepoint) {
  if (codepoint < kNfcUnsafeRanges[0].first) return false;
  return range_containing(kNfcUnsafeRanges, kNfcUnsafeRangeCount, codepoint) != nullptr;
}

}  // namespace ssdq::unicode
