#include "formats/text_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "tests/support/error_of.h"

namespace ssdq {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kFixtures = "tests/fixtures/text/";

using testing_support::error_of;

std::string temp_path(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return join_path(root ? root : "/tmp", name);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, [&](int fd) { write_all(fd, bytes.data(), bytes.size(), path); });
}

std::string zstd_frame(const std::string& bytes, int level = 3) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  size_t size = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), level);
  if (ZSTD_isError(size)) throw std::runtime_error(ZSTD_getErrorName(size));
  out.resize(size);
  return out;
}

TEST(TextFormat, FromFileName) {
  EXPECT_EQ(text_format_of("a/b.jsonl"), TextFormat::kJsonLines);
  EXPECT_EQ(text_format_of("b.jsonl.zst"), TextFormat::kJsonLines);
  EXPECT_EQ(text_format_of("b.json"), TextFormat::kJsonLines);
  EXPECT_EQ(text_format_of("b.json.zst"), TextFormat::kJsonLines);
  EXPECT_EQ(text_format_of("x.txt.zst"), TextFormat::kPlain);
  EXPECT_EQ(text_format_of("x.zst"), TextFormat::kPlain);
  EXPECT_EQ(text_format_of("wiki.test.raw"), TextFormat::kPlain);
  EXPECT_EQ(text_format_of("jsonl"), TextFormat::kPlain);
  EXPECT_TRUE(is_zstd_compressed("b.jsonl.zst"));
  EXPECT_FALSE(is_zstd_compressed("b.zst.jsonl"));
}

TEST(TextData, PlainFileIsOneDocumentWithBytesUnchanged) {
  const std::string bytes = read_file(kFixtures + "plain.txt");
  ASSERT_THAT(bytes, HasSubstr("\r\n"));
  EXPECT_THAT(read_documents(kFixtures + "plain.txt"), ElementsAre(bytes));
}

TEST(TextData, CompressedPlainFile) {
  EXPECT_THAT(read_documents(kFixtures + "plain.txt.zst"), ElementsAre(read_file(kFixtures + "plain.txt")));
}

TEST(TextData, EmptyFilesHaveNoDocuments) {
  EXPECT_TRUE(read_documents(kFixtures + "empty.jsonl").empty());
  // Plain: documented choice, an empty file is no document rather than one empty one.
  EXPECT_TRUE(read_documents(kFixtures + "empty.txt").empty());
}

TEST(TextData, EmptyZstdFileIsTruncated) {
  const std::string path = temp_path("empty.jsonl.zst");
  write_bytes(path, "");
  EXPECT_THAT(error_of([&] { read_documents(path); }), AllOf(HasSubstr(path), HasSubstr("truncated zstd data")));
}

TEST(TextData, CrlfAndBlankLines) {
  EXPECT_THAT(read_documents(kFixtures + "crlf-and-blank-lines.jsonl"),
              ElementsAre("one", "two\r\nlines", "", "last, no newline"));
}

TEST(TextData, RealPileJsonLines) {
  const auto documents = read_documents(kFixtures + "pile-real-3docs.jsonl");
  ASSERT_EQ(documents.size(), 3u);
  EXPECT_THAT(documents[0], StartsWith("It is done, and submitted. You can play \xe2\x80\x9cSurvival of the Tas"));
  EXPECT_EQ(documents[0].size(), 13424u);
  EXPECT_THAT(documents[1], StartsWith("Catalonia election: Puigdemont calls for talks with Spain"));
  EXPECT_THAT(documents[2], StartsWith("Roman Catholic Diocese of Tambacounda\n\nThe Roman Catholic Di"));
  EXPECT_EQ(documents[2].size(), 1039u);
}

TEST(TextData, RealPileZstdIsTheValDocument) {
  // SOURCES.md: the .zst is the Pile val file, whose only document is line 2 of pile-real-3docs.jsonl.
  const auto compressed = read_documents(kFixtures + "pile-val-first-doc.jsonl.zst");
  ASSERT_EQ(compressed.size(), 1u);
  EXPECT_EQ(compressed[0], read_documents(kFixtures + "pile-real-3docs.jsonl").at(1));
  EXPECT_EQ(compressed[0].size(), 6750u);
}

TEST(TextData, MultiFrameZstdWithALineAcrossFrames) {
  const auto documents = read_documents(kFixtures + "multi-frame.jsonl.zst");
  EXPECT_EQ(documents, read_documents(kFixtures + "multi-frame.jsonl"));
  ASSERT_EQ(documents.size(), 6u);
  EXPECT_EQ(documents[3], "document 3: lorem ipsum lorem ipsum lorem ipsum lorem ipsum ");
}

TEST(TextData, LargeZstdStreamInManyChunks) {
  // Well past ZSTD_DStreamOutSize() (128 KiB), with one line longer than several output buffers.
  std::string jsonl;
  std::vector<std::string> expected;
  for (int i = 0; i < 40000; ++i) {
    expected.push_back("row " + std::to_string(i) + " of a long corpus");
    if (i == 20000) expected.back() += std::string(700000, 'x');
    jsonl += "{\"meta\": {\"i\": " + std::to_string(i) + "}, \"text\": \"" + expected.back() + "\"}\n";
  }
  const std::string path = temp_path("large.jsonl.zst");
  write_bytes(path, zstd_frame(jsonl.substr(0, 1000001)) + zstd_frame(jsonl.substr(1000001), 1));
  std::vector<std::string> documents;
  for_each_document(path, [&](std::string_view text) { documents.emplace_back(text); });
  EXPECT_TRUE(documents == expected);
}

TEST(TextData, ErrorInZstdStreamNamesTheRightLine) {
  std::string jsonl;
  for (int i = 1; i < 5000; ++i) jsonl += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  jsonl += "{\"text\": 5000}\n";
  const std::string path = temp_path("bad-line.jsonl.zst");
  write_bytes(path, zstd_frame(jsonl));
  size_t seen = 0;
  EXPECT_THAT(error_of([&] { for_each_document(path, [&](std::string_view) { ++seen; }); }),
              HasSubstr(path + ":5000: \"text\" is number, expected a string"));
  EXPECT_EQ(seen, 4999u);
}

TEST(TextData, TruncatedZstd) {
  EXPECT_THAT(error_of([] { read_documents(kFixtures + "truncated.jsonl.zst"); }),
              AllOf(HasSubstr("truncated.jsonl.zst"), HasSubstr("truncated zstd data: the file ends inside a frame")));
}

TEST(TextData, CorruptZstd) {
  EXPECT_THAT(error_of([] { read_documents(kFixtures + "corrupt.jsonl.zst"); }),
              AllOf(HasSubstr("corrupt.jsonl.zst"), HasSubstr("corrupt zstd data")));
}

TEST(TextData, GarbageWithZstdName) {
  EXPECT_THAT(error_of([] { read_documents(kFixtures + "plain.txt.zst.not"); }), HasSubstr("cannot open"));
  const std::string path = temp_path("not-really.txt.zst");
  write_bytes(path, "just some text, no zstd magic");
  EXPECT_THAT(error_of([&] { read_documents(path); }), AllOf(HasSubstr(path), HasSubstr("corrupt zstd data")));
}

struct BadLine {
  const char* file;
  const char* message;
};
void PrintTo(const BadLine& line, std::ostream* out) { *out << line.file; }

class TextDataBadLine : public ::testing::TestWithParam<BadLine> {};

TEST_P(TextDataBadLine, FailsNamingFileAndLine) {
  const std::string path = kFixtures + GetParam().file;
  const std::string message = error_of([&] { read_documents(path); });
  EXPECT_THAT(message, HasSubstr(path + GetParam().message));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TextDataBadLine,
    ::testing::Values(BadLine{"bad-json-line.jsonl", ":3: invalid JSON"},
                      BadLine{"no-text-field.jsonl", ":2: the object has no \"text\" member"},
                      BadLine{"text-not-string.jsonl", ":3: \"text\" is array, expected a string"},
                      BadLine{"not-an-object.jsonl", ":1: expected a JSON object with a string \"text\", got array"},
                      BadLine{"trailing-garbage.jsonl", ":1: invalid JSON"},
                      BadLine{"invalid-utf8.jsonl", ":1: invalid JSON"}),
    [](const ::testing::TestParamInfo<BadLine>& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.'));
      for (char& c : name)
        if (c == '-') c = '_';
      return name;
    });

TEST(TextData, ScalarLineIsNotAnObject) {
  const std::string path = temp_path("scalar.jsonl");
  write_bytes(path, "{\"text\": \"ok\"}\n\"just a string\"\n");
  EXPECT_THAT(error_of([&] { read_documents(path); }), HasSubstr(path + ":2: expected a JSON object"));
}

// --- sample_windows ---

std::vector<int32_t> concatenation(const std::vector<std::vector<int32_t>>& documents, int32_t separator) {
  std::vector<int32_t> all;
  for (const auto& document : documents) {
    if (document.empty()) continue;
    if (!all.empty()) all.push_back(separator);
    all.insert(all.end(), document.begin(), document.end());
  }
  return all;
}

std::vector<std::vector<int32_t>> sample_corpus() {
  std::vector<std::vector<int32_t>> documents;
  for (int32_t d = 0; d < 7; ++d) {
    std::vector<int32_t> tokens;
    for (int32_t t = 0; t < 3 + 5 * d; ++t) tokens.push_back(100 * (d + 1) + t);
    documents.push_back(tokens);
    if (d == 3) documents.emplace_back();  // left out: no double separator
  }
  return documents;
}

TEST(SampleWindows, SameSeedSameWindowsOtherSeedOthers) {
  const auto documents = sample_corpus();
  const auto a = sample_windows(documents, -1, 50, 16, 1234);
  EXPECT_EQ(a, sample_windows(documents, -1, 50, 16, 1234));
  EXPECT_NE(a, sample_windows(documents, -1, 50, 16, 1235));
}

TEST(SampleWindows, EveryWindowIsAContiguousPieceOfTheConcatenation) {
  const auto documents = sample_corpus();
  const auto all = concatenation(documents, -1);
  ASSERT_EQ(all.size(), 3u * 7 + 5 * 21 + 6);
  for (size_t length : {size_t{1}, size_t{7}, size_t{40}, all.size()}) {
    const auto windows = sample_windows(documents, -1, 200, length, 99 + length);
    ASSERT_EQ(windows.size(), 200u);
    for (const auto& window : windows) {
      ASSERT_EQ(window.size(), length);
      EXPECT_NE(std::search(all.begin(), all.end(), window.begin(), window.end()), all.end());
    }
  }
}

TEST(SampleWindows, StartsFollowTheDocumentedDraw) {
  // One document of 13 tokens, windows of 6: 8 starts, a power of two, so the draw is rng() % 8.
  std::vector<int32_t> tokens(13);
  for (int32_t i = 0; i < 13; ++i) tokens[i] = i;
  const auto windows = sample_windows({tokens}, -1, 100, 6, 77);
  std::mt19937_64 rng(77);
  for (const auto& window : windows) EXPECT_EQ(window.front(), static_cast<int32_t>(rng() % 8));
}

TEST(SampleWindows, CoversEveryStartIncludingTheLast) {
  const std::vector<std::vector<int32_t>> documents = {{1, 2, 3}, {4, 5, 6, 7}};  // 1 2 3 S 4 5 6 7
  std::map<int32_t, int> first_token_counts;
  for (const auto& window : sample_windows(documents, 0, 6000, 3, 5)) {
    ++first_token_counts[window.front()];
    if (window.front() == 0) {
      EXPECT_EQ(window, (std::vector<int32_t>{0, 4, 5}));
    }
    if (window.front() == 5) {
      EXPECT_EQ(window, (std::vector<int32_t>{5, 6, 7}));
    }
  }
  ASSERT_EQ(first_token_counts.size(), 6u);  // starts 0..5 (first tokens 1 2 3 S 4 5)
  for (const auto& [token, count] : first_token_counts) {
    EXPECT_GT(count, 850) << token;   // expected 1000 each
    EXPECT_LT(count, 1150) << token;
  }
}

TEST(SampleWindows, WholeCorpusWhenLengthEqualsSize) {
  const std::vector<std::vector<int32_t>> documents = {{1, 2}, {}, {3}};
  const auto windows = sample_windows(documents, 9, 3, 4, 0);
  for (const auto& window : windows) EXPECT_EQ(window, (std::vector<int32_t>{1, 2, 9, 3}));
}

TEST(SampleWindows, UniformBelowHandlesEdgeBounds) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(uniform_below(rng, 1), 0u);
  const uint64_t huge = (uint64_t{1} << 63) + 12345;  // rejects almost half the draws
  for (int i = 0; i < 100; ++i) EXPECT_LT(uniform_below(rng, huge), huge);
}

TEST(SampleWindows, CorpusTooSmall) {
  EXPECT_THAT(error_of([] { sample_windows({{1, 2}, {3}}, 0, 1, 5, 1); }),
              HasSubstr("the corpus has 4 tokens (2 non-empty documents with separators), fewer than the window length 5"));
  EXPECT_THAT(error_of([] { sample_windows({}, 0, 1, 1, 1); }), HasSubstr("the corpus has 0 tokens"));
  EXPECT_THAT(error_of([] { sample_windows({{1}}, 0, 1, 0, 1); }), HasSubstr("window length must be positive"));
  EXPECT_TRUE(sample_windows({{1, 2, 3}}, 0, 0, 3, 1).empty());
}

}  // namespace
}  // namespace ssdq
