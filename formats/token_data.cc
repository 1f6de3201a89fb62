#include "formats/token_data.h"

#include "formats/error.h"
#include "formats/text_data.h"

namespace ssdq {

int32_t end_of_text_id(const Tokenizer& tokenizer, const std::string& label) {
  const auto id = tokenizer.end_of_text();
  if (!id) fail("{}: the tokenizer has no end-of-text token (<|endoftext|> or </s>) to separate documents", label);
  return *id;
}

std::vector<std::vector<int32_t>> tokenize_documents(const std::string& path, const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> documents;
  for_each_document(path, [&](std::string_view text) { documents.push_back(tokenizer.encode(text)); });
  if (documents.empty()) fail("{}: no documents (the file is empty)", path);
  return documents;
}

std::vector<int32_t> tokenize_data_file(const std::string& path, const Tokenizer& tokenizer) {
  const auto documents = tokenize_documents(path, tokenizer);
  if (documents.size() == 1) return documents.front();
  const int32_t separator = end_of_text_id(tokenizer, path);
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (i) tokens.push_back(separator);
    tokens.insert(tokens.end(), documents[i].begin(), documents[i].end());
  }
  return tokens;
}

}  // namespace ssdq
