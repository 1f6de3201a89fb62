// Unicode Normalization Form C, with the Unicode 9.0 data that HF tokenizers' NFC normalizer has
// (see tests/fixtures/tokenizer/generate_unicode_tables.py).
#pragma once

#include <string>
#include <string_view>

namespace ssdq::unicode {

// Returns text in NFC: text itself when it is already NFC by the quick check, else a view of `storage`,
// which receives the normalized bytes. Ill-formed UTF-8 comes out as U+FFFD (see decode_utf8).
std::string_view nfc_normalize(std::string_view text, std::string& storage);

}  // namespace ssdq::unicode
