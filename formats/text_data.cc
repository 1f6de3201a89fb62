#include "formats/text_data.h"

#include <zstd.h>

#include <algorithm>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/file_io.h"

namespace ssdq {
namespace {

using nlohmann::json;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string_view without_zst(std::string_view path) {
  return ends_with(path, ".zst") ? path.substr(0, path.size() - 4) : path;
}

// nlohmann parse errors quote what was read; keep messages to one short line.
std::string shortened(std::string message) {
  constexpr size_t kMaxChars = 300;
  if (message.size() > kMaxChars) message = message.substr(0, kMaxChars) + "...";
  return message;
}

// SAX consumer that keeps only the top-level "text" member of one JSON line, so a line's other
// fields (Pile "meta") are never built into a DOM.
class TextMemberFinder {
 public:
  std::string root_type;            // type of the whole line's value
  std::string text_type;            // type of the last top-level "text" member, empty when absent
  std::string text;
  std::string error;

  bool null() { return scalar("null"); }
  bool boolean(bool) { return scalar("boolean"); }
  bool number_integer(json::number_integer_t) { return scalar("number"); }
  bool number_unsigned(json::number_unsigned_t) { return scalar("number"); }
  bool number_float(json::number_float_t, const json::string_t&) { return scalar("number"); }
  bool binary(json::binary_t&) { return scalar("binary"); }
  bool string(json::string_t& value) {
    if (depth_ == 1 && key_is_text_) text = std::move(value);
    return scalar("string");
  }
  bool start_object(std::size_t) { return open("object"); }
  bool start_array(std::size_t) { return open("array"); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& name) {
    key_is_text_ = depth_ == 1 && name == "text";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = shortened(e.what());
    return false;
  }

 private:
  bool scalar(const char* type) {
    note_value(type);
    return depth_ > 0;  // a bare scalar line: stop, it is not an object
  }
  bool open(const char* type) {
    note_value(type);
    ++depth_;
    return root_type == "object";
  }
  bool close() {
    --depth_;
    return true;
  }
  void note_value(const char* type) {
    if (depth_ == 0) root_type = type;
    if (depth_ == 1 && key_is_text_) {
      text_type = type;
      key_is_text_ = false;
    }
  }

  int depth_ = 0;
  bool key_is_text_ = false;
};

class JsonLinesReader {
 public:
  JsonLinesReader(const std::string& path, const std::function<void(std::string_view)>& on_document)
      : path_(path), on_document_(on_document) {}

  void line(std::string_view text) {
    ++line_number_;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;
    TextMemberFinder finder;
    json::sax_parse(text.begin(), text.end(), &finder);
    if (!finder.root_type.empty() && finder.root_type != "object")
      fail("{}:{}: expected a JSON object with a string \"text\", got {}", path_, line_number_, finder.root_type);
    if (!finder.error.empty()) fail("{}:{}: invalid JSON: {}", path_, line_number_, finder.error);
    if (finder.text_type.empty()) fail("{}:{}: the object has no \"text\" member", path_, line_number_);
    if (finder.text_type != "string")
      fail("{}:{}: \"text\" is {}, expected a string", path_, line_number_, finder.text_type);
    on_document_(finder.text);
  }

  size_t line_number() const { return line_number_; }

 private:
  const std::string& path_;
  const std::function<void(std::string_view)>& on_document_;
  size_t line_number_ = 0;
};

void for_each_line(std::string_view text, const std::function<void(std::string_view)>& on_line) {
  while (!text.empty()) {
    size_t newline = text.find('\n');
    if (newline == std::string_view::npos) {
      on_line(text);
      return;
    }
    on_line(text.substr(0, newline));
    text.remove_prefix(newline + 1);
  }
}

// Streams the decompressed bytes of every frame to `consume`, one output buffer at a time.
void decompress_zstd(const MappedFile& file, const std::function<void(std::string_view)>& consume) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> context(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!context) fail("{}: cannot create a zstd decoder", file.path());
  std::vector<char> buffer(ZSTD_DStreamOutSize());
  ZSTD_inBuffer input{file.data(), file.size(), 0};
  size_t frame_remaining = 0;
  while (true) {
    ZSTD_outBuffer output{buffer.data(), buffer.size(), 0};
    frame_remaining = ZSTD_decompressStream(context.get(), &output, &input);
    if (ZSTD_isError(frame_remaining))
      fail("{}: corrupt zstd data (compressed byte {}): {}", file.path(), input.pos, ZSTD_getErrorName(frame_remaining));
    consume({buffer.data(), output.pos});
    // A full output buffer may leave decoded bytes inside the decoder even when the input is used up.
    if (input.pos == input.size && output.pos < output.size) break;
  }
  if (frame_remaining != 0)
    fail("{}: truncated zstd data: the file ends inside a frame ({} compressed bytes read)", file.path(), input.size);
}

void read_zstd_json_lines(const MappedFile& file, JsonLinesReader& reader) {
  std::string pending;
  decompress_zstd(file, [&](std::string_view chunk) {
    size_t scan_from = pending.size();
    pending.append(chunk);
    size_t line_start = 0;
    for (size_t newline; (newline = pending.find('\n', scan_from)) != std::string::npos; scan_from = line_start) {
      reader.line(std::string_view(pending).substr(line_start, newline - line_start));
      line_start = newline + 1;
    }
    pending.erase(0, line_start);
    if (pending.size() > kMaxDecompressedDocumentBytes)
      fail("{}:{}: line is longer than {} bytes", file.path(), reader.line_number() + 1, kMaxDecompressedDocumentBytes);
  });
  if (!pending.empty()) reader.line(pending);
}

std::string read_zstd_whole(const MappedFile& file) {
  std::string text;
  decompress_zstd(file, [&](std::string_view chunk) {
    if (chunk.size() > kMaxDecompressedDocumentBytes - text.size())
      fail("{}: decompressed document is longer than {} bytes", file.path(), kMaxDecompressedDocumentBytes);
    text.append(chunk);
  });
  return text;
}

}  // namespace

TextFormat text_format_of(const std::string& path) {
  std::string_view inner = without_zst(path);
  return ends_with(inner, ".jsonl") || ends_with(inner, ".json") ? TextFormat::kJsonLines : TextFormat::kPlain;
}

bool is_zstd_compressed(const std::string& path) { return ends_with(path, ".zst"); }

void for_each_document(const std::string& path, const std::function<void(std::string_view text)>& on_document) {
  auto file = MappedFile::open(path);
  const bool compressed = is_zstd_compressed(path);
  if (text_format_of(path) == TextFormat::kPlain) {
    if (!compressed) {
      if (file->size() > 0) on_document(file->view());
      return;
    }
    std::string text = read_zstd_whole(*file);
    if (!text.empty()) on_document(text);
    return;
  }
  JsonLinesReader reader(path, on_document);
  if (compressed) {
    read_zstd_json_lines(*file, reader);
  } else {
    for_each_line(file->view(), [&](std::string_view line) { reader.line(line); });
  }
}

std::vector<std::string> read_documents(const std::string& path) {
  std::vector<std::string> documents;
  for_each_document(path, [&](std::string_view text) { documents.emplace_back(text); });
  return documents;
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  if (bound == 0) fail("uniform_below: the bound must be positive");
  // 2^64 mod bound, computed in 64 bits; outputs below it would make small results more likely.
  const uint64_t rejected_below = (0 - bound) % bound;
  while (true) {
    const uint64_t draw = rng();
    if (draw >= rejected_below) return draw % bound;
  }
}

std::vector<std::vector<int32_t>> sample_windows(const std::vector<std::vector<int32_t>>& documents, int32_t separator,
                                                 size_t count, size_t length, uint64_t seed) {
  if (length == 0) fail("sample_windows: window length must be positive");
  std::vector<const std::vector<int32_t>*> parts;
  std::vector<size_t> part_start;  // offset of each document in the concatenation
  size_t total = 0;
  for (const auto& document : documents) {
    if (document.empty()) continue;
    if (!parts.empty()) ++total;  // separator before this document
    parts.push_back(&document);
    part_start.push_back(total);
    total += document.size();
  }
  if (total < length)
    fail("sample_windows: the corpus has {} tokens ({} non-empty documents with separators), fewer than the window length {}",
         total, parts.size(), length);

  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> windows(count);
  for (auto& window : windows) {
    size_t position = static_cast<size_t>(uniform_below(rng, total - length + 1));
    size_t part = static_cast<size_t>(std::upper_bound(part_start.begin(), part_start.end(), position) - part_start.begin()) - 1;
    window.reserve(length);
    while (window.size() < length) {
      if (position < part_start[part]) {  // the separator just before `part`
        window.push_back(separator);
        ++position;
        continue;
      }
      const auto& tokens = *parts[part];
      const size_t offset = position - part_start[part];
      const size_t take = std::min(tokens.size() - offset, length - window.size());
      window.insert(window.end(), tokens.begin() + offset, tokens.begin() + offset + take);
      position += take;
      ++part;
    }
  }
  return windows;
}

}  // namespace ssdq
