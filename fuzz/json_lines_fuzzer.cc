// for_each_document on arbitrary file contents. The first input byte picks the file name (and so
// the format): 0 data.jsonl, 1 data.jsonl.zst, 2 data.txt, 3 data.txt.zst; the rest is the file.
#include <string>

#include "formats/error.h"
#include "formats/text_data.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  if (size == 0) return 0;
  static const char* const kNames[] = {"data.jsonl", "data.jsonl.zst", "data.txt", "data.txt.zst"};
  const std::string path = fuzz::write_scratch_file(kNames[data[0] % 4], data + 1, size - 1);
  try {
    size_t total = 0;
    for_each_document(path, [&](std::string_view text) {
      for (char c : text) total += static_cast<unsigned char>(c);
    });
    (void)total;
  } catch (const Error&) {
  }
  return 0;
}
