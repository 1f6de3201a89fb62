// Encode/decode throughput of a tokenizer (tokenizer.json or a SentencePiece model) on one core.
//   bazel run -c opt //tests:tokenizer_bench -- [TEXT_FILE [TOKENIZER]]
// Defaults: the WikiText-2 test split and the bundled GPT-NeoX tokenizer.json; relative paths given on the
// command line are taken from the directory `bazel run` was started in. Reports the first encode (empty
// word cache), the best of 5 warm encodes of the whole file, encoding it line by line (many small calls), and
// decode.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string user_path(const char* arg) {
  const char* start_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (arg[0] == '/' || start_dir == nullptr) return arg;
  return ssdq::join_path(start_dir, arg);
}

void report(const char* what, double seconds, size_t bytes, size_t tokens) {
  fmt::print("{:<28} {:8.4f} s  {:8.2f} MB/s  {:10.0f} tokens/s\n", what, seconds, bytes / seconds / 1e6,
             tokens / seconds);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string text_path = argc > 1 ? user_path(argv[1]) : "examples/wikitext-2-raw/wiki.test.raw";
  const std::string tokenizer_path = argc > 2 ? user_path(argv[2]) : "examples/mamba2-tiny/tokenizer.json";
  try {
    auto start = std::chrono::steady_clock::now();
    const ssdq::Tokenizer tokenizer = ssdq::Tokenizer::from_file(tokenizer_path);
    fmt::print("load {}: {:.3f} s\n", tokenizer_path, seconds_since(start));
    const std::string text = ssdq::read_file(text_path);
    fmt::print("text {}: {} bytes\n", text_path, text.size());

    start = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tokenizer.encode(text);
    report("encode, cold cache", seconds_since(start), text.size(), ids.size());

    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
      start = std::chrono::steady_clock::now();
      ids = tokenizer.encode(text);
      best = std::min(best, seconds_since(start));
    }
    report("encode, warm cache (best/5)", best, text.size(), ids.size());

    std::vector<std::string_view> lines;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = std::min(text.find('\n', pos), text.size() - 1) + 1;
      lines.push_back(std::string_view(text).substr(pos, end - pos));
      pos = end;
    }
    start = std::chrono::steady_clock::now();
    size_t line_tokens = 0;
    for (std::string_view line : lines) line_tokens += tokenizer.encode(line).size();
    report(fmt::format("encode, {} lines", lines.size()).c_str(), seconds_since(start), text.size(), line_tokens);

    start = std::chrono::steady_clock::now();
    const std::string decoded = tokenizer.decode(ids);
    report("decode", seconds_since(start), decoded.size(), ids.size());
    if (decoded != text) {
      fmt::print(stderr, "decode(encode(text)) differs from the text\n");
      return 1;
    }
  } catch (const ssdq::Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}
