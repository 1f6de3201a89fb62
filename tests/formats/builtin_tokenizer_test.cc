// The GPT-NeoX-20B tokenizer compiled into ssdq: the same bytes as the bundled tokenizer.json;
// chosen for a model folder without one (official mamba_ssm checkpoints), refused for a model
// whose vocabulary is smaller than the tokenizer's, never chosen over --tokenizer or the folder's.
#include <gtest/gtest.h>

#include "formats/builtin_tokenizer.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/tokenizer.h"
#include "model/model_loader.h"

namespace ssdq {
namespace {

constexpr char kBundled[] = "examples/mamba2-tiny/tokenizer.json";
constexpr char kNoTokenizer[] = "tests/fixtures/hub/mamba2-tiny-random";

TEST(BuiltinTokenizer, IsTheBundledGptNeoxTokenizer) {
  const std::string bundled = read_file(kBundled);
  ASSERT_EQ(builtin_gpt_neox_tokenizer_json().size(), bundled.size());
  EXPECT_TRUE(builtin_gpt_neox_tokenizer_json() == bundled);  // not EXPECT_EQ: no 2.4 MB diff on failure
}

TEST(BuiltinTokenizer, ServesAFolderWithoutOne) {
  const TokenizerSource source = find_tokenizer(kNoTokenizer, "", 50288);
  EXPECT_EQ(source.label, "the built-in GPT-NeoX-20B tokenizer");
  const Tokenizer tokenizer = Tokenizer::from_json(source.bytes, source.label);
  EXPECT_EQ(tokenizer.vocab_size(), 50277);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("Hello, world")), "Hello, world");
  EXPECT_EQ(source.sha256.size(), 64u);
}

TEST(BuiltinTokenizer, RefusedForASmallerVocabulary) {
  try {
    find_tokenizer(kNoTokenizer, "", 1000);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the model's vocabulary of 1000; pass --tokenizer PATH"),
              std::string::npos)
        << e.what();
  }
}

TEST(BuiltinTokenizer, TheFolderAndTheFlagComeFirst) {
  EXPECT_EQ(find_tokenizer("examples/mamba2-tiny", "", 50288).label, kBundled);
  EXPECT_EQ(find_tokenizer(kNoTokenizer, kBundled, 50288).label, kBundled);
  EXPECT_THROW(find_tokenizer(kNoTokenizer, "no/such/tokenizer.json", 50288), Error);
}

}  // namespace
}  // namespace ssdq
