// Text data files turned into token ids: a plain file is tokenized as one string (docs/ACCURACY.md, "Protocol");
// JSON-lines documents are tokenized one by one and joined with the end-of-text token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tokenizer.h"

namespace ssdq {

std::vector<int32_t> tokenize_data_file(const std::string& path, const Tokenizer& tokenizer);
// The documents of a data file, each tokenized (for calibration sampling).
std::vector<std::vector<int32_t>> tokenize_documents(const std::string& path, const Tokenizer& tokenizer);
// "<|endoftext|>" of the tokenizer, or an Error naming `label` if it has none.
int32_t end_of_text_id(const Tokenizer& tokenizer, const std::string& label);

}  // namespace ssdq
