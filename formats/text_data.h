// Text corpora for calibration and evaluation: plain text or JSON lines (the Pile's
// {"text": ..., "meta": ...} layout), optionally zstd-compressed, and random token windows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace ssdq {

enum class TextFormat { kPlain, kJsonLines };

// Longest document (plain) or line (JSON lines) accepted from a .zst file, which has to be buffered.
inline constexpr size_t kMaxDecompressedDocumentBytes = size_t{1} << 30;

// Format from the name: *.jsonl, *.json (also followed by .zst) -> JSON lines; anything else plain.
TextFormat text_format_of(const std::string& path);
bool is_zstd_compressed(const std::string& path);

// Calls on_document(text) for each document.
// Plain: the whole file is one document, bytes unchanged; an empty file has no documents (like an
// empty JSON lines file, and because an empty document has nothing to calibrate on).
// JSON lines: one object per line with a string "text" (any other keys ignored); lines that are
// empty or whitespace are skipped, CRLF line ends are fine (\r is JSON whitespace); a line that is not one
// JSON object or has no string "text" -> Error naming file:line.
// *.zst is decompressed as a stream (any number of frames); truncated or corrupt data, or an empty
// .zst file (no frame, as the zstd tool says) -> Error. `text` is valid only during the call; on an
// Error, the documents before the bad spot have already been passed on.
void for_each_document(const std::string& path, const std::function<void(std::string_view text)>& on_document);
std::vector<std::string> read_documents(const std::string& path);

// `count` windows of exactly `length` token ids from the documents concatenated with `separator`
// between consecutive documents (empty documents are left out, so no two separators meet). Starts
// are uniform over all total - length + 1 valid offsets, drawn from std::mt19937_64(seed) with a
// rejection-sampled bounded draw, so a seed gives the same windows on every platform. Fails when
// length is 0 or the concatenation has fewer than `length` tokens.
std::vector<std::vector<int32_t>> sample_windows(const std::vector<std::vector<int32_t>>& documents, int32_t separator,
                                                 size_t count, size_t length, uint64_t seed);

// Uniform integer in [0, bound), bound > 0: rng() % bound after rejecting the low 2^64 mod bound
// outputs. Exposed for tests.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound);

}  // namespace ssdq
