#include "formats/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <unordered_map>

#include "formats/added_tokens.h"
#include "formats/bpe.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/gpt2_pretokenizer.h"
#include "formats/sentencepiece_model.h"
#include "formats/unicode_nfc.h"
#include "formats/unicode_text.h"
#include "formats/word_cache.h"

namespace ssdq {

using nlohmann::json;

namespace {

constexpr int64_t kMaxTokenId = (int64_t{1} << 21) - 1;  // 8x the largest real vocabularies; bounds the id tables
constexpr size_t kMaxAddedTokens = 1 << 16;
constexpr size_t kCacheWords = 1 << 16;
constexpr size_t kCacheWordBytes = 64;
// The largest real tokenizer.json files are a few tens of MB and about six levels deep; the caps
// bound what a hostile file can make the JSON parser hold, and json::dump (recursive) print.
constexpr size_t kMaxTokenizerJsonBytes = size_t{128} << 20;
constexpr int kMaxJsonDepth = 64;

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for U+0100 onwards, in byte order.
std::array<uint32_t, 256> make_byte_to_codepoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? b : next_extra++;
  }
  return map;
}
const std::array<uint32_t, 256> kByteToCodepoint = make_byte_to_codepoint();
constexpr uint32_t kByteLevelCodepointLimit = 0x144;  // every code point of the map is below this

std::string byte_symbol(unsigned char byte) {
  std::string symbol;
  unicode::append_utf8(symbol, kByteToCodepoint[byte]);
  return symbol;
}

// The bytes a vocabulary entry stands for. Like HF's ByteLevel decoder, an entry with a character outside the
// byte-level alphabet decodes to its own UTF-8 bytes.
std::string byte_level_to_bytes(std::string_view token) {
  static const std::array<int, kByteLevelCodepointLimit> codepoint_to_byte = [] {
    std::array<int, kByteLevelCodepointLimit> map{};
    map.fill(-1);
    for (int b = 0; b < 256; ++b) map[kByteToCodepoint[b]] = b;
    return map;
  }();
  std::string bytes;
  const auto* text = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t pos = 0; pos < token.size();) {
    const unicode::Utf8Char c = unicode::decode_utf8(text + pos, token.size() - pos);
    if (c.codepoint >= kByteLevelCodepointLimit || codepoint_to_byte[c.codepoint] < 0) return std::string(token);
    bytes.push_back(static_cast<char>(codepoint_to_byte[c.codepoint]));
    pos += c.length;
  }
  return bytes;
}

// A JSON value or a token shortened for an error message.
std::string brief(std::string_view text) {
  constexpr size_t kMax = 60;
  return text.size() <= kMax ? std::string(text) : std::string(text.substr(0, kMax)) + "...";
}
std::string brief_json(const json& value) { return brief(value.dump()); }

const json* member(const json& object, const char* key) {
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? nullptr : &*found;
}

bool flag(const json& object, const char* key, bool fallback, const std::string& where) {
  const json* value = member(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) fail("{}.{} is {}, expected true or false", where, key, brief_json(*value));
  return value->get<bool>();
}

int32_t token_id_value(const json& value, const std::string& where) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTokenId) {
    fail("{} is {}, expected an id in 0..{}", where, brief_json(value), kMaxTokenId);
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace

struct Tokenizer::Model {
  std::string label;
  bool nfc = false;
  AddedTokenMatcher raw_added;         // added tokens with "normalized": false, matched in the text as given
  AddedTokenMatcher normalized_added;  // the others, matched in the normalized text
  std::unordered_map<std::string, int32_t> vocab;  // byte-level spelling -> id
  std::unordered_map<std::string, int32_t> added;  // content -> id
  std::vector<std::string> id_bytes;               // what each id decodes to
  std::vector<bool> id_known;
  std::unique_ptr<BpeMerger> merger;
  mutable WordCache cache{kCacheWords, kCacheWordBytes};

  void encode_segment(std::string_view segment, std::vector<int32_t>& ids,
                      std::vector<std::string_view>& words) const;
};

namespace {

void read_options(const json& root, Tokenizer::Model& model) {
  const std::string& label = model.label;
  if (const json* normalizer = member(root, "normalizer")) {
    if (!normalizer->is_object() || normalizer->value("type", json()) != "NFC") {
      fail("{}: normalizer {} is not supported (only NFC or none)", label, brief_json(*normalizer));
    }
    model.nfc = true;
  }
  const json* pre_tokenizer = member(root, "pre_tokenizer");
  if (pre_tokenizer == nullptr || !pre_tokenizer->is_object() ||
      pre_tokenizer->value("type", json()) != "ByteLevel") {
    const json type = pre_tokenizer && pre_tokenizer->is_object() ? pre_tokenizer->value("type", json()) : json();
    if (type.is_string())
      fail("{}: pre_tokenizer type {} is not supported (only ByteLevel, the GPT-2 / GPT-NeoX family){}", label,
           brief_json(type),
           type == "Metaspace" ? "; for a Llama / Mistral-family tokenizer put its tokenizer.model beside it or pass "
                                 "--tokenizer tokenizer.model"
                               : "");
    fail("{}: pre_tokenizer is {}, expected a ByteLevel pre-tokenizer", label,
         pre_tokenizer ? brief_json(*pre_tokenizer) : "missing");
  }
  if (flag(*pre_tokenizer, "add_prefix_space", false, label + ": pre_tokenizer")) {
    fail("{}: pre_tokenizer.add_prefix_space true is not supported", label);
  }
  if (!flag(*pre_tokenizer, "use_regex", true, label + ": pre_tokenizer")) {
    fail("{}: pre_tokenizer.use_regex false is not supported", label);
  }
  if (const json* decoder = member(root, "decoder")) {
    if (!decoder->is_object() || decoder->value("type", json()) != "ByteLevel") {
      fail("{}: decoder {} is not supported (only ByteLevel)", label, brief_json(*decoder));
    }
  }
}

void read_vocab(const json& bpe, Tokenizer::Model& model) {
  const std::string& label = model.label;
  const json* vocab = member(bpe, "vocab");
  if (vocab == nullptr || !vocab->is_object()) fail("{}: missing object model.vocab", label);
  if (vocab->size() > static_cast<size_t>(kMaxTokenId)) fail("{}: model.vocab has too many entries", label);
  std::vector<const std::string*> token_of_id;
  for (const auto& [token, value] : vocab->items()) {
    const int32_t id = token_id_value(value, fmt::format("{}: model.vocab[\"{}\"]", label, brief(token)));
    if (static_cast<size_t>(id) >= token_of_id.size()) token_of_id.resize(static_cast<size_t>(id) + 1, nullptr);
    if (token_of_id[id] != nullptr) {
      fail("{}: model.vocab: \"{}\" and \"{}\" have the same id {}", label, brief(*token_of_id[id]), brief(token),
           id);
    }
    token_of_id[id] = &model.vocab.emplace(token, id).first->first;
  }
  model.id_bytes.resize(token_of_id.size());
  model.id_known.assign(token_of_id.size(), false);
  for (size_t id = 0; id < token_of_id.size(); ++id) {
    if (token_of_id[id] == nullptr) continue;
    model.id_bytes[id] = byte_level_to_bytes(*token_of_id[id]);
    model.id_known[id] = true;
  }
}

int32_t merge_part_id(const Tokenizer::Model& model, const std::string& part, size_t index,
                      const std::string& left, const std::string& right) {
  const auto found = model.vocab.find(part);
  if (found == model.vocab.end()) {
    fail("{}: model.merges[{}] \"{} {}\": unknown token \"{}\"", model.label, index, brief(left), brief(right),
         brief(part));
  }
  return found->second;
}

void read_merges(const json& bpe, Tokenizer::Model& model) {
  const std::string& label = model.label;
  const json* merges = member(bpe, "merges");
  if (merges == nullptr || !merges->is_array()) fail("{}: missing array model.merges", label);
  if (merges->size() > static_cast<size_t>(kMaxTokenId)) fail("{}: model.merges has too many entries", label);
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const auto found = model.vocab.find(byte_symbol(static_cast<unsigned char>(b)));
    byte_ids[b] = found == model.vocab.end() ? -1 : found->second;
    // GPT-NeoX has no symbol for the bytes that well-formed UTF-8 never contains; encode never meets them.
    const bool in_utf8 = b < 0xC0 || (b >= 0xC2 && b <= 0xF4);
    if (byte_ids[b] < 0 && in_utf8) {
      fail("{}: model.vocab has no byte-level symbol \"{}\" for byte 0x{:02X}", label,
           byte_symbol(static_cast<unsigned char>(b)), b);
    }
  }
  std::vector<BpeMerge> parsed;
  parsed.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& merge = (*merges)[i];
    std::string left, right;
    if (merge.is_string()) {  // "left right", the format of tokenizers before 0.20
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos) {
        left = text.substr(0, space);
        right = text.substr(space + 1);
      }
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    if (left.empty() || right.empty()) {
      fail("{}: model.merges[{}] is {}, expected \"left right\" or [\"left\", \"right\"]", label, i, brief_json(merge));
    }
    const int32_t left_id = merge_part_id(model, left, i, left, right);
    const int32_t right_id = merge_part_id(model, right, i, left, right);
    const auto merged = model.vocab.find(left + right);
    if (merged == model.vocab.end()) {
      fail("{}: model.merges[{}] \"{} {}\": merged token \"{}\" is not in model.vocab", label, i, brief(left),
           brief(right), brief(left + right));
    }
    parsed.push_back(BpeMerge{left_id, right_id, merged->second});
  }
  model.merger = std::make_unique<BpeMerger>(byte_ids, parsed);
}

void read_bpe(const json& root, Tokenizer::Model& model) {
  const std::string& label = model.label;
  const json* bpe = member(root, "model");
  if (bpe == nullptr || !bpe->is_object()) fail("{}: missing object \"model\"", label);
  if (const json* type = member(*bpe, "type"); type != nullptr && *type != "BPE") {
    fail("{}: model.type is {}, expected \"BPE\"", label, brief_json(*type));
  }
  if (const json* dropout = member(*bpe, "dropout")) {
    fail("{}: model.dropout {} is not supported (only null)", label, brief_json(*dropout));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* value = member(*bpe, key);
    if (value != nullptr && *value != "") fail("{}: model.{} {} is not supported", label, key, brief_json(*value));
  }
  if (flag(*bpe, "ignore_merges", false, label + ": model")) {
    fail("{}: model.ignore_merges true is not supported", label);
  }
  read_vocab(*bpe, model);
  read_merges(*bpe, model);
}

void read_added_tokens(const json& root, Tokenizer::Model& model) {
  const std::string& label = model.label;
  const json* tokens = member(root, "added_tokens");
  if (tokens == nullptr) return;
  if (!tokens->is_array()) fail("{}: added_tokens is {}, expected an array", label, brief_json(*tokens));
  if (tokens->size() > kMaxAddedTokens) fail("{}: added_tokens has more than {} entries", label, kMaxAddedTokens);
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& token = (*tokens)[i];
    const std::string where = fmt::format("{}: added_tokens[{}]", label, i);
    if (!token.is_object()) fail("{} is {}, expected an object", where, brief_json(token));
    const json* id_value = member(token, "id");
    if (id_value == nullptr) fail("{}: missing \"id\"", where);
    const int32_t id = token_id_value(*id_value, where + ".id");
    const json* content_value = member(token, "content");
    if (content_value == nullptr || !content_value->is_string() ||
        content_value->get_ref<const std::string&>().empty()) {
      fail("{}: \"content\" must be a non-empty string", where);
    }
    std::string content = content_value->get<std::string>();
    for (const char* key : {"single_word", "lstrip", "rstrip"}) {
      if (flag(token, key, false, where)) fail("{} (\"{}\"): {} true is not supported", where, brief(content), key);
    }
    const bool special = flag(token, "special", false, where);
    const bool normalized = flag(token, "normalized", !special, where);
    if (normalized && model.nfc) {
      std::string storage;
      content = std::string(unicode::nfc_normalize(content, storage));
    }
    AddedTokenMatcher& matcher = normalized ? model.normalized_added : model.raw_added;
    if (!matcher.add(content, id)) fail("{}: \"{}\" appears twice in added_tokens", where, brief(content));
    model.added[content] = id;
    if (static_cast<size_t>(id) >= model.id_bytes.size()) {
      model.id_bytes.resize(static_cast<size_t>(id) + 1);
      model.id_known.resize(static_cast<size_t>(id) + 1, false);
    }
    model.id_bytes[id] = content;
    model.id_known[id] = true;
  }
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  const auto file = MappedFile::open(path);
  return from_bytes(file->view(), path);
}

Tokenizer Tokenizer::from_bytes(std::string_view bytes, const std::string& label) {
  if (SentencePieceModel::looks_like_model(bytes)) return from_sentencepiece(bytes, label);
  return from_json(bytes, label);
}

Tokenizer Tokenizer::from_sentencepiece(std::string_view model_bytes, const std::string& label) {
  return Tokenizer(std::make_shared<const SentencePieceModel>(model_bytes, label));
}

std::optional<int32_t> Tokenizer::end_of_text() const {
  if (sentencepiece_) return sentencepiece_->end_of_text();
  if (const auto id = token_id("<|endoftext|>")) return id;
  return token_id("</s>");
}

std::string Tokenizer::kind() const { return sentencepiece_ ? "sentencepiece" : "tokenizer.json (byte-level BPE)"; }

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& label) {
  if (text.size() > kMaxTokenizerJsonBytes)
    fail("{}: {} bytes is larger than the limit of {} bytes for a tokenizer.json", label, text.size(),
         kMaxTokenizerJsonBytes);
  const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) fail("{}: JSON nested more than {} levels deep", label, kMaxJsonDepth);
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), limit_depth);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", label, e.what());
  }
  if (!root.is_object()) fail("{}: expected a JSON object at the top level, found {}", label, root.type_name());
  auto model = std::make_shared<Model>();
  model->label = label;
  read_options(root, *model);
  read_bpe(root, *model);
  read_added_tokens(root, *model);
  return Tokenizer(std::move(model));
}

void Tokenizer::Model::encode_segment(std::string_view segment, std::vector<int32_t>& ids,
                                      std::vector<std::string_view>& words) const {
  split_gpt2_pretokens(segment, words);
  for (std::string_view word : words) {
    if (cache.append_cached(word, ids)) continue;
    const size_t first = ids.size();
    merger->encode_word(word, ids);
    cache.insert(word, ids.data() + first, ids.size() - first);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (sentencepiece_) return sentencepiece_->encode(text);
  const Model& model = *model_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 16);
  std::vector<std::string_view> words;
  std::string repaired_storage, normalized_storage;
  text = unicode::replace_invalid_utf8(text, repaired_storage);
  auto push_token = [&](int32_t id) { ids.push_back(id); };
  // Like HF: added tokens that skip normalization are found in the raw text first; each stretch between them
  // is normalized on its own and searched for the other added tokens; what remains is pre-tokenized.
  model.raw_added.split(
      text,
      [&](std::string_view piece) {
        const std::string_view normalized = model.nfc ? unicode::nfc_normalize(piece, normalized_storage) : piece;
        model.normalized_added.split(
            normalized, [&](std::string_view segment) { model.encode_segment(segment, ids, words); }, push_token);
      },
      push_token);
  return ids;
}

std::string Tokenizer::decode(const int32_t* ids, size_t count) const {
  if (sentencepiece_) return sentencepiece_->decode(ids, count);
  const Model& model = *model_;
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= model.id_known.size() || !model.id_known[id]) {
      fail("{}: cannot decode id {} at position {}: not in the vocabulary (ids 0..{})", model.label, id, i,
           vocab_size() - 1);
    }
    text += model.id_bytes[id];
  }
  return text;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }

int32_t Tokenizer::vocab_size() const {
  return sentencepiece_ ? sentencepiece_->vocab_size() : static_cast<int32_t>(model_->id_known.size());
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (sentencepiece_) return sentencepiece_->piece_id(token);
  const std::string key(token);
  if (const auto found = model_->added.find(key); found != model_->added.end()) return found->second;
  if (const auto found = model_->vocab.find(key); found != model_->vocab.end()) return found->second;
  return std::nullopt;
}

}  // namespace ssdq
