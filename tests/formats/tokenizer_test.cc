#include "formats/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/unicode_nfc.h"
#include "tests/support/error_of.h"

namespace ssdq {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kTokenizerPath[] = "examples/mamba2-tiny/tokenizer.json";
constexpr char kFixtureDir[] = "tests/fixtures/tokenizer/";
constexpr char kWikiText2TestPath[] = "examples/wikitext-2-raw/wiki.test.raw";

const Tokenizer& neox() {
  static const Tokenizer tokenizer = Tokenizer::from_file(kTokenizerPath);
  return tokenizer;
}

json load_fixture(const std::string& name) { return json::parse(read_file(std::string(kFixtureDir) + name)); }

const json& neox_fixtures() {
  static const json fixtures = load_fixture("gpt-neox-20b.fixtures.json");
  return fixtures;
}

std::vector<int32_t> ids_of(const json& ids) { return ids.get<std::vector<int32_t>>(); }

std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

// Index of the first difference, for a readable failure on long id lists.
size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

using testing_support::error_of;

TEST(Tokenizer, KnowsTheGptNeoxVocabulary) {
  EXPECT_EQ(neox().vocab_size(), 50277);
  EXPECT_EQ(neox().token_id("<|endoftext|>"), 0);
  EXPECT_EQ(neox().token_id("<|padding|>"), 1);
  EXPECT_EQ(neox().token_id("\xC4\xA0the"), 253);  // "Ġthe"
  EXPECT_EQ(neox().token_id("  "), 50276);
  EXPECT_EQ(neox().token_id(std::string(24, ' ')), 50254);
  EXPECT_EQ(neox().token_id("no such token"), std::nullopt);
}

TEST(Tokenizer, EncodesTheTrickyFixtures) {
  const json& cases = neox_fixtures().at("tricky");
  ASSERT_EQ(cases.size(), 25u);
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> expected = ids_of(c.at("ids"));
    const std::vector<int32_t> ids = neox().encode(text);
    EXPECT_EQ(ids, expected) << "text: " << text;
    EXPECT_EQ(neox().decode(ids), text);
  }
}

TEST(Tokenizer, EncodesThePileDocumentsSeparately) {
  const json& expected = neox_fixtures().at("pile_real3_ids");
  std::istringstream lines(read_file(std::string(kFixtureDir) + "pile-real-3docs.jsonl"));
  std::string line;
  size_t doc = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    ASSERT_LT(doc, expected.size());
    const std::string text = json::parse(line).at("text").get<std::string>();
    const std::vector<int32_t> want = ids_of(expected[doc]);
    const std::vector<int32_t> ids = neox().encode(text);
    EXPECT_EQ(ids.size(), want.size()) << "doc " << doc;
    EXPECT_EQ(first_difference(ids, want), want.size()) << "doc " << doc;
    EXPECT_EQ(neox().decode(ids), text) << "doc " << doc;
    ++doc;
  }
  EXPECT_EQ(doc, 3u);
}

TEST(Tokenizer, EncodesTheWholeWikiText2TestSplit) {
  const std::string text = read_file(kWikiText2TestPath);
  ASSERT_EQ(text.size(), 1290590u);
  const std::vector<int32_t> want = ids_of(neox_fixtures().at("wikitext2_test_ids"));
  ASSERT_EQ(want.size(), 287159u);
  // A fresh tokenizer, so that this runs with a cold word cache and then a warm one.
  const Tokenizer tokenizer = Tokenizer::from_file(kTokenizerPath);
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    EXPECT_EQ(ids.size(), want.size()) << "pass " << pass;
    EXPECT_EQ(first_difference(ids, want), want.size()) << "pass " << pass;
  }
  EXPECT_TRUE(tokenizer.decode(want) == text);
}

TEST(Tokenizer, MatchesHfOnNonNfcLongAndRandomText) {
  const json fixture = load_fixture("hf_extra_cases.json");
  const json& cases = fixture.at("cases");
  ASSERT_GE(cases.size(), 300u);
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(neox().encode(text), ids_of(c.at("ids"))) << "text: " << text;
  }
}

TEST(Tokenizer, ReadsIllFormedUtf8AsPythonsReplaceDecoding) {
  const json fixture = load_fixture("hf_extra_cases.json");
  const json& cases = fixture.at("ill_formed_utf8");
  ASSERT_GE(cases.size(), 10u);
  for (const json& c : cases) {
    const std::string bytes = from_hex(c.at("hex").get<std::string>());
    EXPECT_EQ(neox().encode(bytes), ids_of(c.at("ids"))) << "hex: " << c.at("hex").get<std::string>();
  }
  // Each maximal ill-formed subsequence is one U+FFFD, so the text decodes with U+FFFD in its place.
  EXPECT_EQ(neox().decode(neox().encode("a\xFF" "b\xE2\x82")), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_EQ(neox().encode("x\xC0\xAF"), neox().encode("x\xEF\xBF\xBD\xEF\xBF\xBD"));
}

TEST(Tokenizer, DecodeRoundTripsEveryValidFixtureString) {
  const json fixture = load_fixture("hf_extra_cases.json");
  for (const json& c : fixture.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    std::string normalized;
    // encode normalizes to NFC first, so a round trip gives back the NFC form of non-NFC text.
    const std::string expected(unicode::nfc_normalize(text, normalized));
    EXPECT_EQ(neox().decode(neox().encode(text)), expected) << "text: " << text;
  }
}

TEST(Tokenizer, SpecialTokensAreMatchedInsideText) {
  const std::vector<int32_t> ids = neox().encode("a<|endoftext|>b<|padding|><|endoftext|>");
  EXPECT_EQ(ids, (std::vector<int32_t>{66, 0, 67, 1, 0}));
  EXPECT_EQ(neox().decode(ids), "a<|endoftext|>b<|padding|><|endoftext|>");
  // A partial special token is ordinary text (ids from HF tokenizers).
  EXPECT_EQ(neox().encode("<|endoftext|"), (std::vector<int32_t>{29, 93, 423, 1171, 1156, 93}));
}

TEST(Tokenizer, ThreadsShareOneTokenizer) {
  const json& tricky = neox_fixtures().at("tricky");
  const std::string text = read_file(kWikiText2TestPath).substr(0, 200000);
  const Tokenizer tokenizer = Tokenizer::from_file(kTokenizerPath);
  const std::vector<int32_t> want = neox().encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<int> tricky_failures(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      const Tokenizer copy = tokenizer;
      results[t] = copy.encode(text);
      for (const json& c : tricky) {
        if (copy.encode(c.at("text").get<std::string>()) != ids_of(c.at("ids"))) ++tricky_failures[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t t = 0; t < results.size(); ++t) {
    EXPECT_TRUE(results[t] == want) << "thread " << t;
    EXPECT_EQ(tricky_failures[t], 0) << "thread " << t;
  }
}

TEST(Nfc, MatchesHfNormalizer) {
  const json fixture = load_fixture("nfc_cases.json");
  const json& cases = fixture.at("cases");
  ASSERT_GT(cases.size(), 9000u);
  size_t changed = 0;
  for (const json& c : cases) {
    const std::string input = c[0].get<std::string>();
    const std::string expected = c[1].get<std::string>();
    std::string storage;
    EXPECT_EQ(std::string(unicode::nfc_normalize(input, storage)), expected) << "input: " << input;
    changed += input != expected;
  }
  EXPECT_GT(changed, 4000u);  // the fixture really exercises decomposition, reordering and composition
}

TEST(Nfc, NormalizesOnlyTheStretchesThatNeedIt) {
  // All cases in one text, separated by spaces (a space never composes), give the same results: this checks
  // that normalizing stretch by stretch inside a long text agrees with normalizing each case alone.
  const json fixture = load_fixture("nfc_cases.json");
  std::string joined_input = "start", joined_expected = "start";
  for (const json& c : fixture.at("cases")) {
    joined_input += " " + c[0].get<std::string>();
    joined_expected += " " + c[1].get<std::string>();
  }
  std::string storage;
  EXPECT_TRUE(unicode::nfc_normalize(joined_input, storage) == joined_expected);
  EXPECT_EQ(std::string(unicode::nfc_normalize("abc e\xCC\x81 \xE1\x84\x80\xE1\x85\xA1 end", storage)),
            "abc \xC3\xA9 \xEA\xB0\x80 end");
}

TEST(Nfc, ReturnsNormalizedTextWithoutCopying) {
  const std::string text = "na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC plain";
  std::string storage = "untouched";
  const std::string_view result = unicode::nfc_normalize(text, storage);
  EXPECT_EQ(result.data(), text.data());
  EXPECT_EQ(storage, "untouched");
}

// A small byte-level BPE tokenizer.json: the 256 byte symbols (ids 0..255 in byte order), "ab" (256),
// "abc" (258, leaving 257 unused), merges "a b" and "ab c", and one special token.
json small_tokenizer() {
  json vocab = json::object();
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? b : next_extra++;
    std::string symbol;
    if (cp < 0x80) {
      symbol.push_back(static_cast<char>(cp));
    } else {
      symbol.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      symbol.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[symbol] = b;
  }
  vocab["ab"] = 256;
  vocab["abc"] = 258;
  return json{
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array({{{"id", 259}, {"content", "<eos>"}, {"special", true}, {"normalized", false}}})},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", "ab c"})}}},
  };
}

std::string load_error(const json& tokenizer_json) {
  return error_of([&] { Tokenizer::from_json(tokenizer_json.dump(), "small.json"); });
}

TEST(Tokenizer, LoadsASmallTokenizer) {
  const Tokenizer tokenizer = Tokenizer::from_json(small_tokenizer().dump(), "small.json");
  EXPECT_EQ(tokenizer.vocab_size(), 260);
  EXPECT_EQ(tokenizer.encode("abcab<eos>b"), (std::vector<int32_t>{258, 256, 259, 'b'}));
  EXPECT_EQ(tokenizer.decode({258, 256, 259}), "abcab<eos>");
  EXPECT_EQ(tokenizer.token_id("<eos>"), 259);
  // Merges may also be written as pairs (the format of newer tokenizers versions).
  json pairs = small_tokenizer();
  pairs["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"ab", "c"})});
  EXPECT_EQ(Tokenizer::from_json(pairs.dump(), "pairs.json").encode("abc"), (std::vector<int32_t>{258}));
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  EXPECT_THAT(error_of([] { neox().decode({12092, 50277}); }),
              HasSubstr("cannot decode id 50277 at position 1: not in the vocabulary (ids 0..50276)"));
  EXPECT_THAT(error_of([] { neox().decode({-1}); }), HasSubstr("cannot decode id -1 at position 0"));
  EXPECT_THAT(error_of([] { neox().decode({12092, 50277}); }), HasSubstr(kTokenizerPath));
  const Tokenizer small = Tokenizer::from_json(small_tokenizer().dump(), "small.json");
  EXPECT_THAT(error_of([&] { small.decode({257}); }),
              HasSubstr("small.json: cannot decode id 257 at position 0: not in the vocabulary"));
}

TEST(Tokenizer, RejectsAMissingFile) {
  EXPECT_THAT(error_of([] { Tokenizer::from_file("tests/fixtures/tokenizer/no-such-tokenizer.json"); }),
              HasSubstr("no-such-tokenizer.json: cannot open"));
}

TEST(Tokenizer, RejectsInvalidJson) {
  EXPECT_THAT(error_of([] { Tokenizer::from_json("{\"model\": {", "broken.json"); }),
              HasSubstr("broken.json: invalid JSON"));
  EXPECT_THAT(error_of([] { Tokenizer::from_json("[1, 2]", "array.json"); }),
              HasSubstr("array.json: expected a JSON object at the top level"));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(deep, "deep.json"); }),
              HasSubstr("deep.json: JSON nested more than 64 levels deep"));
}

TEST(Tokenizer, RejectsAMissingModelVocabOrMerges) {
  json no_model = small_tokenizer();
  no_model.erase("model");
  EXPECT_THAT(load_error(no_model), HasSubstr("small.json: missing object \"model\""));
  json no_vocab = small_tokenizer();
  no_vocab["model"].erase("vocab");
  EXPECT_THAT(load_error(no_vocab), HasSubstr("small.json: missing object model.vocab"));
  json no_merges = small_tokenizer();
  no_merges["model"].erase("merges");
  EXPECT_THAT(load_error(no_merges), HasSubstr("small.json: missing array model.merges"));
}

TEST(Tokenizer, RejectsBadMerges) {
  json unknown = small_tokenizer();
  unknown["model"]["merges"][1] = "ab zz";
  EXPECT_THAT(load_error(unknown), HasSubstr("small.json: model.merges[1] \"ab zz\": unknown token \"zz\""));
  json unmerged = small_tokenizer();
  unmerged["model"]["merges"][1] = "b c";
  EXPECT_THAT(load_error(unmerged),
              HasSubstr("small.json: model.merges[1] \"b c\": merged token \"bc\" is not in model.vocab"));
  json malformed = small_tokenizer();
  malformed["model"]["merges"][0] = "abc";
  EXPECT_THAT(load_error(malformed),
              HasSubstr("small.json: model.merges[0] is \"abc\", expected \"left right\" or [\"left\", \"right\"]"));
}

TEST(Tokenizer, RejectsBadVocabIds) {
  json negative = small_tokenizer();
  negative["model"]["vocab"]["ab"] = -3;
  EXPECT_THAT(load_error(negative), HasSubstr("small.json: model.vocab[\"ab\"] is -3, expected an id in 0..2097151"));
  json huge = small_tokenizer();
  huge["model"]["vocab"]["ab"] = 4000000000u;
  EXPECT_THAT(load_error(huge), HasSubstr("model.vocab[\"ab\"] is 4000000000, expected an id"));
  json text_id = small_tokenizer();
  text_id["model"]["vocab"]["ab"] = "256";
  EXPECT_THAT(load_error(text_id), HasSubstr("model.vocab[\"ab\"] is \"256\", expected an id"));
  json shared = small_tokenizer();
  shared["model"]["vocab"]["abc"] = 256;
  EXPECT_THAT(load_error(shared), HasSubstr("have the same id 256"));
  json no_byte = small_tokenizer();
  no_byte["model"]["vocab"].erase("A");
  EXPECT_THAT(load_error(no_byte), HasSubstr("small.json: model.vocab has no byte-level symbol \"A\" for byte 0x41"));
}

TEST(Tokenizer, RejectsUnsupportedSettings) {
  json lowercase = small_tokenizer();
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_THAT(load_error(lowercase), HasSubstr("small.json: normalizer {\"type\":\"Lowercase\"} is not supported"));
  json prefix = small_tokenizer();
  prefix["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_THAT(load_error(prefix), HasSubstr("pre_tokenizer.add_prefix_space true is not supported"));
  json whitespace = small_tokenizer();
  whitespace["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_THAT(load_error(whitespace), HasSubstr("pre_tokenizer type \"Whitespace\" is not supported (only ByteLevel"));
  json wordpiece = small_tokenizer();
  wordpiece["model"]["type"] = "WordPiece";
  EXPECT_THAT(load_error(wordpiece), HasSubstr("model.type is \"WordPiece\", expected \"BPE\""));
  json dropout = small_tokenizer();
  dropout["model"]["dropout"] = 0.1;
  EXPECT_THAT(load_error(dropout), HasSubstr("model.dropout 0.1 is not supported"));
  json lstrip = small_tokenizer();
  lstrip["added_tokens"][0]["lstrip"] = true;
  EXPECT_THAT(load_error(lstrip), HasSubstr("added_tokens[0] (\"<eos>\"): lstrip true is not supported"));
  json empty = small_tokenizer();
  empty["added_tokens"][0]["content"] = "";
  EXPECT_THAT(load_error(empty), HasSubstr("added_tokens[0]: \"content\" must be a non-empty string"));
  json bad_id = small_tokenizer();
  bad_id["added_tokens"][0]["id"] = -1;
  EXPECT_THAT(load_error(bad_id), HasSubstr("added_tokens[0].id is -1, expected an id"));
}

}  // namespace
}  // namespace ssdq

namespace ssdq {
namespace {

// A Llama / Mistral-family tokenizer.json (made by Hugging Face tokenizers:
// tests/fixtures/tokenizer_llama/make_fixture.py) is refused naming the component ssdq's
// byte-level BPE does not run; such models ship a tokenizer.model that is used instead.
TEST(Tokenizer, RefusesAByteFallbackTokenizerNamingTheComponent) {
  const std::string path = "tests/fixtures/tokenizer_llama/byte_fallback_tokenizer.json";
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(read_file(path), path); }),
              ::testing::AllOf(::testing::HasSubstr(path), ::testing::HasSubstr("pre_tokenizer type \"Metaspace\" is not supported"),
                               ::testing::HasSubstr("tokenizer.model")));
}

}  // namespace
}  // namespace ssdq
