#include "formats/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <exception>

#include "formats/error.h"

namespace ssdq {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel(std::string_view bytes, const std::string& label)
    : impl_(std::make_unique<Impl>()), label_(label) {
  if (bytes.empty()) fail("{}: the SentencePiece model is empty", label);
  sentencepiece::util::Status status;
  // The library reports most refusals as a Status, but its trie builder (Darts) throws its own
  // exception for some pieces (one starting with a NUL byte is a zero-length key).
  try {
    status = impl_->processor.LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    fail("{}: not a readable SentencePiece model ({})", label, e.what());
  }
  if (!status.ok()) fail("{}: not a readable SentencePiece model ({})", label, status.ToString());
  if (impl_->processor.GetPieceSize() < 1) fail("{}: the SentencePiece model has no pieces", label);
}

SentencePieceModel::~SentencePieceModel() = default;

std::vector<int32_t> SentencePieceModel::encode(std::string_view text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status = impl_->processor.Encode(text, &ids);
  if (!status.ok()) fail("{}: SentencePiece could not encode the text ({})", label_, status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceModel::decode(const int32_t* ids, size_t count) const {
  const int32_t vocab = vocab_size();
  std::vector<int> list(count);
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      fail("{}: token id {} at position {} is outside the vocabulary (0..{})", label_, ids[i], i, vocab - 1);
    list[i] = ids[i];
  }
  std::string text;
  const sentencepiece::util::Status status = impl_->processor.Decode(list, &text);
  if (!status.ok()) fail("{}: SentencePiece could not decode the ids ({})", label_, status.ToString());
  return text;
}

int32_t SentencePieceModel::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::optional<int32_t> SentencePieceModel::piece_id(std::string_view piece) const {
  const int id = impl_->processor.PieceToId(piece);
  // PieceToId answers unk_id for a piece it does not know; only "<unk>" itself is that piece.
  if (impl_->processor.IsUnknown(id) && impl_->processor.IdToPiece(id) != piece) return std::nullopt;
  return id;
}

std::optional<int32_t> SentencePieceModel::end_of_text() const {
  const int id = impl_->processor.eos_id();
  if (id < 0) return std::nullopt;
  return id;
}

bool SentencePieceModel::looks_like_model(std::string_view bytes) {
  return !bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x0a;
}

}  // namespace ssdq
