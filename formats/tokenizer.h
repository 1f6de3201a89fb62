// The GPT-NeoX tokenizer: byte-level BPE read from a HF tokenizers `tokenizer.json` (model BPE, normalizer NFC
// or none, ByteLevel pre-tokenizer and decoder, added tokens). encode gives the ids HF tokenizers gives with
// default settings, less any post-processor template (no BOS/EOS is added).
//
// Text is UTF-8. Ill-formed UTF-8 is not an error: encode reads it the way Python's
// bytes.decode("utf-8", errors="replace") does (each maximal ill-formed subsequence becomes U+FFFD) and gives
// the ids HF tokenizers gives for that string; so decode(encode(s)) == s holds for well-formed s only.
// decode concatenates the exact bytes of each id (ids that split a character give ill-formed UTF-8 where HF
// would show U+FFFD) and writes special tokens as their text.
//
// A SentencePiece model (`tokenizer.model`, Llama / Mistral / Megatron) is the other kind: it runs
// through libsentencepiece (formats/sentencepiece_model.h) behind the same interface.
//
// A Tokenizer is cheap to copy (copies share the loaded model) and safe to use from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ssdq {

class SentencePieceModel;

class Tokenizer {
 public:
  // A tokenizer.json or a SentencePiece model, told apart by their bytes (from_bytes).
  static Tokenizer from_file(const std::string& path);
  // label names the source in error messages (a path, or anything else).
  static Tokenizer from_json(std::string_view json, const std::string& label);
  static Tokenizer from_sentencepiece(std::string_view model_bytes, const std::string& label);
  static Tokenizer from_bytes(std::string_view bytes, const std::string& label);
  // The token that ends a document: SentencePiece's eos (</s>), else <|endoftext|> or </s>.
  std::optional<int32_t> end_of_text() const;
  // "sentencepiece" or "tokenizer.json (byte-level BPE)", for reports.
  std::string kind() const;

  // Added tokens (special or not, e.g. "<|endoftext|>") are matched inside the text.
  std::vector<int32_t> encode(std::string_view text) const;
  // Fails with an Error on an id outside the vocabulary.
  std::string decode(const int32_t* ids, size_t count) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // Highest id + 1 (50277 for GPT-NeoX).
  int32_t vocab_size() const;
  // Id of an added token's content or of a vocabulary entry in its byte-level spelling ("Ġthe").
  std::optional<int32_t> token_id(std::string_view token) const;

  struct Model;  // the loaded tokenizer, defined in tokenizer.cc

 private:
  explicit Tokenizer(std::shared_ptr<const Model> model) : model_(std::move(model)) {}
  explicit Tokenizer(std::shared_ptr<const SentencePieceModel> model) : sentencepiece_(std::move(model)) {}
  std::shared_ptr<const Model> model_;                        // tokenizer.json, or
  std::shared_ptr<const SentencePieceModel> sentencepiece_;  // a SentencePiece model
};

}  // namespace ssdq
