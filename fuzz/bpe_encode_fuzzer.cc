// Encoding and decoding with the real GPT-NeoX tokenizer (the bundled model's tokenizer.json):
// for well-formed UTF-8 already in NFC, decode(encode(text)) must give the text back; arbitrary
// ids (the input read as int32s) must decode or fail with an Error.
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/error.h"
#include "formats/tokenizer.h"
#include "formats/unicode_nfc.h"
#include "formats/unicode_text.h"

namespace {
std::unique_ptr<ssdq::Tokenizer> tokenizer;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer = std::make_unique<ssdq::Tokenizer>(ssdq::Tokenizer::from_file("examples/mamba2-tiny/tokenizer.json"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tokenizer->encode(text);
  const std::string decoded = tokenizer->decode(ids);
  std::string repaired, normalized;
  const bool well_formed = unicode::replace_invalid_utf8(text, repaired).data() == text.data();
  if (well_formed && unicode::nfc_normalize(text, normalized) == text && decoded != text) __builtin_trap();

  std::vector<int32_t> raw(size / sizeof(int32_t));
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * sizeof(int32_t));
  try {
    tokenizer->decode(raw);
  } catch (const Error&) {
  }
  return 0;
}
