// The GPT-2 pre-tokenizer regex of HF tokenizers' ByteLevel pre-tokenizer, written out by hand:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with Oniguruma's classes (unicode_tables.h), matched left to right, first alternative that matches.
#pragma once

#include <string_view>
#include <vector>

namespace ssdq {

// Replaces `pieces` with the pre-tokens of text; they cover text exactly, in order. An ill-formed UTF-8
// sequence counts as one character of the "other" class ([^\s\p{L}\p{N}]), like the U+FFFD it stands for.
void split_gpt2_pretokens(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace ssdq
