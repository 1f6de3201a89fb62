// Tokenizer::from_json on arbitrary text; an accepted tokenizer encodes its own input and a few
// fixed strings, and decodes what it encoded and the first ids of its vocabulary.
#include <algorithm>
#include <string_view>
#include <vector>

#include "formats/error.h"
#include "formats/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Tokenizer tokenizer = Tokenizer::from_json(text, "fuzz/tokenizer.json");
    for (std::string_view sample : {text, std::string_view("Hello world, it's 2024!\n\n  <|endoftext|> caf\xc3\xa9"),
                                    std::string_view("\xff\xfe a\xcc\x81 \xe2\x80\x8b")}) {
      const std::vector<int32_t> ids = tokenizer.encode(sample);
      tokenizer.decode(ids);
    }
    for (int32_t id = 0; id < std::min(tokenizer.vocab_size(), 512); ++id) {
      try {
        tokenizer.decode(&id, 1);
      } catch (const Error&) {  // ids the vocabulary skips
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
