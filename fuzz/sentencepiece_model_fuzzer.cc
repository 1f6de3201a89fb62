// Tokenizer::from_sentencepiece on arbitrary bytes (libsentencepiece parses them; ssdq must turn
// every refusal into an Error); an accepted model encodes its own input and fixed strings, and
// decodes what it encoded and the first ids of its vocabulary.
#include <algorithm>
#include <string_view>
#include <vector>

#include "formats/error.h"
#include "formats/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const Tokenizer tokenizer = Tokenizer::from_sentencepiece(bytes, "fuzz/tokenizer.model");
    for (std::string_view sample : {bytes, std::string_view("Hello world, it's 2024!\n\n  </s> caf\xc3\xa9"),
                                    std::string_view("\xff\xfe a\xcc\x81 \xe2\x80\x8b \xf0\x9f\x99\x82")}) {
      const std::vector<int32_t> ids = tokenizer.encode(sample);
      tokenizer.decode(ids);
    }
    for (int32_t id = 0; id < std::min(tokenizer.vocab_size(), 512); ++id) tokenizer.decode(&id, 1);
    tokenizer.end_of_text();
  } catch (const Error&) {
  }
  return 0;
}
