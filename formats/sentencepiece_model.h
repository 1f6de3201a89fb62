// A SentencePiece tokenizer (`tokenizer.model`: the serialized ModelProto of Llama, Mistral and
// NVIDIA's Megatron models) run by the field's own library, libsentencepiece; ssdq does not
// re-implement it. Encoding adds no BOS/EOS (as Tokenizer::encode for tokenizer.json).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ssdq {

class SentencePieceModel {
 public:
  // `bytes`: the serialized model; `label` names it in errors. Fails with an Error on bytes the
  // library cannot parse (truncated, not a SentencePiece model).
  SentencePieceModel(std::string_view bytes, const std::string& label);
  ~SentencePieceModel();

  std::vector<int32_t> encode(std::string_view text) const;
  // Fails on an id outside the vocabulary.
  std::string decode(const int32_t* ids, size_t count) const;
  int32_t vocab_size() const;
  // The id of a piece ("▁the", "<s>"); nothing for a piece the vocabulary lacks.
  std::optional<int32_t> piece_id(std::string_view piece) const;
  // The model's eos id (</s>), when it has one.
  std::optional<int32_t> end_of_text() const;

  // Whether bytes look like a serialized SentencePiece model rather than JSON (a protobuf message
  // starts with field 1, `pieces`: the byte 0x0a).
  static bool looks_like_model(std::string_view bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string label_;
};

}  // namespace ssdq
