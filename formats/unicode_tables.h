// Unicode data for the tokenizer, generated from Python's unicode database by
// tests/fixtures/tokenizer/generate_unicode_tables.py into unicode_tables.cc. Every table is sorted by code point.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ssdq::unicode {

// The classes of the GPT-2 pre-tokenizer regex: \p{L}, \p{N}, \s (Oniguruma's), and everything else.
enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct ClassRange {
  uint32_t first, last;
  CharClass char_class;
};
struct CombiningClassRange {
  uint32_t first, last;
  uint8_t combining_class;
};
struct CodepointRange {
  uint32_t first, last;
};
// Full canonical decomposition of `codepoint`: kDecompositionData[offset .. offset + length).
struct Decomposition {
  uint32_t codepoint;
  uint16_t offset;
  uint8_t length;
};
// Primary composites (canonical pairs that NFC recomposes), sorted by (first, second).
struct Composition {
  uint32_t first, second, composite;
};

extern const char kClassUnicodeVersion[];
extern const char kNfcUnicodeVersion[];

// Ranges of letters, numbers and spaces; a code point in no range is kOther.
extern const ClassRange kClassRanges[];
extern const size_t kClassRangeCount;
// Ranges of non-zero canonical combining class.
extern const CombiningClassRange kCombiningClassRanges[];
extern const size_t kCombiningClassRangeCount;
// Code points that are not (NFC_Quick_Check=Yes and ccc=0); text without any of them is already NFC.
extern const CodepointRange kNfcUnsafeRanges[];
extern const size_t kNfcUnsafeRangeCount;
// Hangul syllables are not in these tables (they decompose and compose algorithmically).
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const uint32_t kDecompositionData[];
extern const size_t kDecompositionDataSize;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace ssdq::unicode
