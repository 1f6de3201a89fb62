// The GPT-NeoX-20B tokenizer (tokenizer.json, HF tokenizers format; examples/SOURCES.md) compiled
// into the binary: official mamba_ssm checkpoints ship without a tokenizer, and every Mamba-2 of
// state-spaces was trained with this one, so ssdq works on them from any folder.
#pragma once

#include <string_view>

namespace ssdq {

// The file's bytes, unchanged.
std::string_view builtin_gpt_neox_tokenizer_json();

}  // namespace ssdq
