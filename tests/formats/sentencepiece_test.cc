// SentencePiece tokenizers through libsentencepiece: a BPE model with byte fallback trained by
// Debian's spm_train gives, through ssdq's Tokenizer, the ids the library's Python binding gives
// (tests/fixtures/sentencepiece/SOURCES.md); bad model files are refused naming the file; a model
// folder's tokenizer.model is preferred over its tokenizer.json; the base64 that embeds a model
// in an artifact round-trips.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/base64.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/tokenizer.h"
#include "model/model_loader.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

constexpr char kModel[] = "tests/fixtures/sentencepiece/tiny_bpe.model";
constexpr char kExpected[] = "tests/fixtures/sentencepiece/expected_ids.json";

std::string temp_dir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::filesystem::create_directories(path);
  return path;
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

TEST(SentencePiece, IdsEqualThePythonBindingsOnTheFixtures) {
  const Tokenizer tokenizer = Tokenizer::from_file(kModel);
  const nlohmann::json expected = nlohmann::json::parse(read_file(kExpected));
  EXPECT_EQ(tokenizer.kind(), "sentencepiece");
  EXPECT_EQ(tokenizer.vocab_size(), expected["vocab_size"].get<int32_t>());
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = tokenizer.encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tokenizer.decode(ids), c["decoded"].get<std::string>()) << text;
  }
  for (const auto& [piece, id] : expected["pieces"].items()) EXPECT_EQ(tokenizer.token_id(piece), id.get<int32_t>()) << piece;
  EXPECT_EQ(tokenizer.token_id("no such piece"), std::nullopt);
  EXPECT_EQ(tokenizer.end_of_text(), 2);  // </s>
  EXPECT_THAT([&] { tokenizer.decode(std::vector<int32_t>{5, 400}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("token id 400 at position 1 is outside the vocabulary (0..399)")));
}

TEST(SentencePiece, BadModelFilesAreRefusedNamingTheFile) {
  const std::string dir = temp_dir("bad_sentencepiece");
  const std::string bytes = read_file(kModel);
  const std::string truncated = dir + "/truncated.model";
  write(truncated, bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT([&] { Tokenizer::from_file(truncated); },
              ::testing::ThrowsMessage<Error>(HasSubstr(truncated + ": not a readable SentencePiece model")));
  const std::string garbage = dir + "/garbage.model";
  write(garbage, std::string("\x0a\xff\xff\xff\xff\x0f", 6));
  EXPECT_THAT([&] { Tokenizer::from_file(garbage); },
              ::testing::ThrowsMessage<Error>(HasSubstr(garbage + ": not a readable SentencePiece model")));
  EXPECT_THAT([&] { Tokenizer::from_sentencepiece("", "empty.model"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("empty.model: the SentencePiece model is empty")));
}

// A model the protobuf parser accepts but the library's trie builder throws on (Darts' own
// exception type, not a Status): a unigram model (trainer_spec.model_type = 1, merged in by a
// second trainer_spec field) with a normal piece that starts with a NUL byte, which the trie reads
// as a zero-length key (one more repeated `pieces` entry: piece "\0b", score 0.0, type NORMAL = 1).
TEST(SentencePiece, AModelTheLibraryThrowsOnIsRefusedNamingTheFile) {
  const std::string piece_message("\x0a\x02" "\0b" "\x15\x00\x00\x00\x00" "\x18\x01", 11);
  const std::string entry = std::string("\x0a") + static_cast<char>(piece_message.size()) + piece_message;
  const std::string bytes = read_file(kModel) + entry + std::string("\x12\x02\x18\x01", 4);
  EXPECT_THAT([&] { Tokenizer::from_sentencepiece(bytes, "nul_piece.model"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("nul_piece.model: not a readable SentencePiece model")));
}

TEST(SentencePiece, AModelFoldersTokenizerModelIsPreferredOverItsJson) {
  const std::string dir = temp_dir("both_tokenizers");
  write(dir + "/tokenizer.model", read_file(kModel));
  write(dir + "/tokenizer.json", read_file("examples/mamba2-tiny/tokenizer.json"));
  const TokenizerSource found = find_tokenizer(dir, "", 400);
  EXPECT_EQ(found.label, dir + "/tokenizer.model");
  EXPECT_EQ(Tokenizer::from_bytes(found.bytes, found.label).kind(), "sentencepiece");
  // --tokenizer names the other one.
  const TokenizerSource json = find_tokenizer(dir, dir + "/tokenizer.json", 50288);
  EXPECT_EQ(Tokenizer::from_bytes(json.bytes, json.label).kind(), "tokenizer.json (byte-level BPE)");
}

TEST(Base64, RoundTripsEveryLengthAndRefusesBadText) {
  std::string bytes;
  for (int n = 0; n < 70; ++n) {
    EXPECT_EQ(base64_decode(base64_encode(bytes), "t"), bytes) << n;
    bytes += static_cast<char>(n * 37 + 11);
  }
  EXPECT_EQ(base64_encode("Man"), "TWFu");
  EXPECT_EQ(base64_encode("Ma"), "TWE=");
  EXPECT_EQ(base64_encode("M"), "TQ==");
  EXPECT_THAT([] { base64_decode("TWF", "meta"); }, ::testing::ThrowsMessage<Error>(HasSubstr("meta: base64 text")));
  EXPECT_THAT([] { base64_decode("TW!u", "meta"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'!' at offset 2 is not a base64 character")));
}

}  // namespace
}  // namespace ssdq
