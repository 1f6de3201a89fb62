#include "formats/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "formats/unicode_text.h"

namespace ssdq::unicode {
namespace {

constexpr uint32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161, kHangulTBase = 0x11A7;
constexpr uint32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr uint32_t kHangulNCount = kHangulVCount * kHangulTCount;
constexpr uint32_t kHangulSCount = kHangulLCount * kHangulNCount;

void append_decomposition(uint32_t codepoint, std::vector<uint32_t>& out) {
  const uint32_t s_index = codepoint - kHangulSBase;
  if (codepoint >= kHangulSBase && s_index < kHangulSCount) {
    out.push_back(kHangulLBase + s_index / kHangulNCount);
    out.push_back(kHangulVBase + (s_index % kHangulNCount) / kHangulTCount);
    if (s_index % kHangulTCount != 0) out.push_back(kHangulTBase + s_index % kHangulTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* found = std::lower_bound(
      kDecompositions, end, codepoint, [](const Decomposition& d, uint32_t cp) { return d.codepoint < cp; });
  if (found != end && found->codepoint == codepoint) {
    out.insert(out.end(), kDecompositionData + found->offset, kDecompositionData + found->offset + found->length);
  } else {
    out.push_back(codepoint);
  }
}

// The primary composite of (first, second), or 0 when there is none.
uint32_t compose_pair(uint32_t first, uint32_t second) {
  if (first >= kHangulLBase && first < kHangulLBase + kHangulLCount && second >= kHangulVBase &&
      second < kHangulVBase + kHangulVCount) {
    return kHangulSBase + ((first - kHangulLBase) * kHangulVCount + (second - kHangulVBase)) * kHangulTCount;
  }
  if (first >= kHangulSBase && first < kHangulSBase + kHangulSCount && (first - kHangulSBase) % kHangulTCount == 0 &&
      second > kHangulTBase && second < kHangulTBase + kHangulTCount) {
    return first + (second - kHangulTBase);
  }
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* found = std::lower_bound(kCompositions, end, first, [&](const Composition& c, uint32_t) {
    return c.first < first || (c.first == first && c.second < second);
  });
  return found != end && found->first == first && found->second == second ? found->composite : 0;
}

// Stable sort of each run of non-starters by combining class (the canonical ordering algorithm).
void reorder_marks(std::vector<uint32_t>& codepoints) {
  size_t i = 0;
  while (i < codepoints.size()) {
    if (combining_class(codepoints[i]) == 0) {
      ++i;
      continue;
    }
    size_t run_end = i;
    while (run_end < codepoints.size() && combining_class(codepoints[run_end]) != 0) ++run_end;
    std::stable_sort(codepoints.begin() + static_cast<std::ptrdiff_t>(i),
                     codepoints.begin() + static_cast<std::ptrdiff_t>(run_end),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = run_end;
  }
}

// The canonical composition algorithm: each character joins the last starter unless a character between
// them blocks it (a starter, or a mark of the same or a higher combining class).
void compose(std::vector<uint32_t>& codepoints) {
  size_t out = 0;
  size_t starter = SIZE_MAX;
  uint8_t last_class = 0;
  for (size_t i = 0; i < codepoints.size(); ++i) {
    const uint32_t cp = codepoints[i];
    const uint8_t cp_class = combining_class(cp);
    if (starter != SIZE_MAX && (out - 1 == starter || (last_class != 0 && last_class < cp_class))) {
      const uint32_t composite = compose_pair(codepoints[starter], cp);
      if (composite != 0) {
        codepoints[starter] = composite;
        continue;
      }
    }
    if (cp_class == 0) starter = out;
    codepoints[out++] = cp;
    last_class = cp_class;
  }
  codepoints.resize(out);
}

// Normalizes a stretch that starts at a boundary and ends at one, appending the result to out.
void normalize_stretch(std::string_view stretch, std::vector<uint32_t>& codepoints, std::string& out) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(stretch.data());
  codepoints.clear();
  for (size_t pos = 0; pos < stretch.size();) {
    const Utf8Char c = decode_utf8(bytes + pos, stretch.size() - pos);
    append_decomposition(c.codepoint, codepoints);
    pos += c.length;
  }
  reorder_marks(codepoints);
  compose(codepoints);
  for (uint32_t cp : codepoints) append_utf8(out, cp);
}

}  // namespace

// A character with NFC_Quick_Check=Yes and combining class 0 ("safe") starts a boundary: nothing before it
// interacts with it or with what follows. So only the stretches from the last safe character before an unsafe
// one up to the next safe character need the full algorithm; everything else is copied as it is.
std::string_view nfc_normalize(std::string_view text, std::string& storage) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  std::vector<uint32_t> codepoints;
  size_t copied = 0;    // text[0 .. copied) is already in storage
  size_t boundary = 0;  // start of the last safe character seen
  bool changed = false;
  size_t pos = 0;
  while (pos < size) {
    if (bytes[pos] < 0x80) {
      boundary = pos++;
      continue;
    }
    Utf8Char c = decode_utf8(bytes + pos, size - pos);
    if (c.valid && !nfc_unsafe(c.codepoint)) {
      boundary = pos;
      pos += c.length;
      continue;
    }
    size_t end = pos + c.length;
    while (end < size) {
      c = decode_utf8(bytes + end, size - end);
      if (c.valid && !nfc_unsafe(c.codepoint)) break;
      end += c.length;
    }
    if (!changed) {
      storage.clear();
      storage.reserve(size + size / 8);
      changed = true;
    }
    const size_t start = std::max(boundary, copied);
    storage.append(text.data() + copied, start - copied);
    normalize_stretch(text.substr(start, end - start), codepoints, storage);
    copied = end;
    boundary = end;
    pos = end;
  }
  if (!changed) return text;
  storage.append(text.data() + copied, size - copied);
  return storage;
}

}  // namespace ssdq::unicode
