// The caps that keep a small hostile file from making a reader allocate gigabytes, loop for
// long or overflow the stack (issue 5, item 3). Each cap fails with an Error that names the file
// and the limit. Caps that older tests already cover (safetensors header length, pickle stack,
// marks, memo, string and pickle sizes) are not repeated here.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/config.h"
#include "formats/error.h"
#include "formats/safetensors.h"
#include "formats/tokenizer.h"
#include "formats/torch_bin.h"
#include "formats/unpickler.h"
#include "formats/zip_reader.h"
#include "fuzz/fuzz_support.h"
#include "tests/support/error_of.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

using testing_support::error_of;

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// A file of `size` bytes that takes no disk space (all zeros, a hole).
std::string sparse_file(const std::string& name, off_t size) {
  const std::string path = temp_path(name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, size), 0);
  ::close(fd);
  return path;
}

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// ------------------------------------------------------------------------------------------- JSON

TEST(ResourceLimits, SafetensorsHeaderNestingIsCapped) {
  // The header is parsed fine either way; printing the bad data_offsets in the error would
  // recurse once per level and overflow the stack.
  std::string header = R"({"t": {"dtype": "F32", "shape": [], "data_offsets": )" + nested_arrays(100000) + "}}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header;
  auto owner = std::make_shared<std::string>(file);
  EXPECT_THAT(error_of([&] {
                parse_safetensors(owner, reinterpret_cast<const uint8_t*>(owner->data()), owner->size(), "deep.st");
              }),
              HasSubstr("deep.st: header: JSON nested more than 64 levels deep"));
}

TEST(ResourceLimits, SafetensorsIndexSizeAndNestingAreCapped) {
  const std::string big = sparse_file("model.safetensors.index.json", (off_t{64} << 20) + 1);
  EXPECT_THAT(error_of([&] { read_safetensors_index(big); }),
              HasSubstr("model.safetensors.index.json: 67108865 bytes is larger than the limit of 67108864 bytes"));
  const std::string deep = temp_path("deep.index.json");
  FILE* out = std::fopen(deep.c_str(), "w");
  std::fputs((R"({"weight_map": )" + nested_arrays(100000) + "}").c_str(), out);
  std::fclose(out);
  EXPECT_THAT(error_of([&] { read_safetensors_index(deep); }), HasSubstr("JSON nested more than 64 levels deep"));
}

TEST(ResourceLimits, ConfigSizeAndNestingAreCapped) {
  EXPECT_THAT(error_of([&] { parse_config_json(std::string((1 << 20) + 1, ' '), "big/config.json"); }),
              HasSubstr("big/config.json: 1048577 bytes is too large for a config.json (the limit is 1048576 bytes)"));
  const std::string big = sparse_file("config.json", off_t{8} << 30);  // never read: the size is checked first
  EXPECT_THAT(error_of([&] { load_config(big); }), HasSubstr("8589934592 bytes is too large for a config.json"));
  EXPECT_THAT(error_of([&] { parse_config_json(R"({"d_model": )" + nested_arrays(100000) + "}", "c.json"); }),
              HasSubstr("c.json: JSON nested more than 64 levels deep"));
}

TEST(ResourceLimits, ConfigSizesCannotOverflowOrDivideByZero) {
  auto error = [](const std::string& text) { return error_of([&] { parse_config_json(text, "c.json"); }); };
  // transformers spelling: num_heads is checked against expand * hidden_size / head_dim.
  EXPECT_THAT(error(R"({"hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 16, "state_size": 16,
                        "head_dim": 0, "n_groups": 1, "num_heads": 8})"),
              HasSubstr("c.json: headdim = 0 is out of range (1..1024)"));
  EXPECT_THAT(error(R"({"hidden_size": 4611686018427387904, "num_hidden_layers": 2, "vocab_size": 16,
                        "state_size": 16, "head_dim": 64, "n_groups": 1, "expand": 4})"),
              HasSubstr("c.json: d_model = 4611686018427387904 is out of range"));
  // mamba_ssm spelling: d_ssm is checked against expand * d_model.
  EXPECT_THAT(error(R"({"d_model": 4611686018427387904, "n_layer": 2, "vocab_size": 16,
                        "ssm_cfg": {"expand": 4, "d_ssm": 1}})"),
              HasSubstr("c.json: d_model = 4611686018427387904 is out of range"));
  // Padding the vocabulary to a multiple of 16 must not overflow.
  EXPECT_THAT(error(R"({"d_model": 256, "n_layer": 2, "vocab_size": 9223372036854775807})"),
              HasSubstr("c.json: vocab_size = 9223372036854775807 is out of range"));
  EXPECT_THAT(error(R"({"d_model": 256, "n_layer": 2, "vocab_size": 16, "pad_vocab_size_multiple": 9223372036854775807})"),
              HasSubstr("c.json: pad_vocab_size_multiple must be in 1..16777216, got 9223372036854775807"));
  // Whole floats beyond int64 and integers beyond int64 are refused, not cast.
  EXPECT_THAT(error(R"({"d_model": 1e300, "n_layer": 2, "vocab_size": 16})"),
              HasSubstr("c.json: field 'd_model' must be an integer, got 1e+300"));
  EXPECT_THAT(error(R"({"d_model": 18446744073709551615, "n_layer": 2, "vocab_size": 16})"),
              HasSubstr("c.json: field 'd_model' = 18446744073709551615 is too large"));
}

TEST(ResourceLimits, TokenizerJsonSizeAndNestingAreCapped) {
  const std::string big = sparse_file("tokenizer.json", (off_t{128} << 20) + 1);
  EXPECT_THAT(error_of([&] { Tokenizer::from_file(big); }),
              HasSubstr("tokenizer.json: 134217729 bytes is larger than the limit of 134217728 bytes"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(R"({"normalizer": )" + nested_arrays(100000) + "}", "t.json"); }),
              HasSubstr("t.json: JSON nested more than 64 levels deep"));
}

// ----------------------------------------------------------------------------------- torch.save

// Pickle protocol 2 opcodes, enough to build a state dict by hand.
struct Pickle {
  std::string bytes = "\x80\x02";
  Pickle& op(const std::string& code) { return bytes += code, *this; }
  Pickle& str(const std::string& text) {
    bytes += 'X';
    for (int i = 0; i < 4; ++i) bytes += static_cast<char>((text.size() >> (8 * i)) & 0xff);
    bytes += text;
    return *this;
  }
  Pickle& put(uint8_t index) { return bytes += 'q', bytes += static_cast<char>(index), *this; }
  Pickle& get(uint8_t index) { return bytes += 'h', bytes += static_cast<char>(index), *this; }
  // A 1-element float32 tensor over storage "0".
  Pickle& tensor() {
    op("ctorch._utils\n_rebuild_tensor_v2\n(");
    op("(").str("storage").op("ctorch\nFloatStorage\n").str("0").str("cpu").op("K\x01tQ");
    op(std::string("K\x00K\x01\x85K\x01\x85\x89", 9)).op("ccollections\nOrderedDict\n)R");
    return op("tR");
  }
};

TensorMap load_pickle(const std::string& pickle) {
  auto zip = std::make_shared<std::vector<uint8_t>>(fuzz::make_stored_zip(
      {{"archive/data.pkl", std::vector<uint8_t>(pickle.begin(), pickle.end())},
       {"archive/data/0", std::vector<uint8_t>(4, 0)}}));
  return parse_torch_bin(zip, zip->data(), zip->size(), "shared.bin");
}

TEST(ResourceLimits, TorchTensorNamesPerSharedObjectAreCapped) {
  // L0 = [t, t], L(k+1) = [Lk, Lk]: 2^(k+1) paths to one tensor from a few hundred bytes.
  Pickle pickle;
  pickle.tensor().put(1).op("0");
  for (int level = 0; level < 21; ++level)
    pickle.op("](").get(static_cast<uint8_t>(level + 1)).get(static_cast<uint8_t>(level + 1)).op("e")
        .put(static_cast<uint8_t>(level + 2)).op("0");
  pickle.op("}").str("a").get(22).op("s.");
  ASSERT_LT(pickle.bytes.size(), 600u);
  EXPECT_THAT(error_of([&] { load_pickle(pickle.bytes); }),
              HasSubstr("shared.bin: more than 1048576 tensor names (shared sub-objects are named once per path)"));

  Pickle small;  // the same shape 4 levels deep is fine: 16 names for one tied tensor
  small.tensor().put(1).op("0");
  for (int level = 0; level < 3; ++level)
    small.op("](").get(static_cast<uint8_t>(level + 1)).get(static_cast<uint8_t>(level + 1)).op("e")
        .put(static_cast<uint8_t>(level + 2)).op("0");
  small.op("}").str("a").get(4).op("s.");
  const TensorMap tensors = load_pickle(small.bytes);
  EXPECT_EQ(tensors.size(), 8u);
  EXPECT_EQ(tensors.at("a.0.1.0").data, tensors.at("a.1.1.1").data);
}

TEST(ResourceLimits, TorchTensorNameLengthIsCapped) {
  // {K: {K: {K: t}}} with a 2000-byte key K, stored once and fetched from the memo.
  Pickle pickle;
  pickle.str(std::string(2000, 'k')).put(1).op("0");
  pickle.op("}").get(1).op("}").get(1).op("}").get(1).tensor().op("sss.");
  EXPECT_THAT(error_of([&] { load_pickle(pickle.bytes); }), HasSubstr("is longer than 4096 bytes"));
}

long max_rss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(ResourceLimits, UnpicklerDoesNotCopyADictKeyPerDict) {
  // One 1 MiB key used in 600 dicts: the dicts' key indexes must not hold 600 copies.
  Pickle pickle;
  pickle.str(std::string(1 << 20, 'k')).put(1).op("0").op("](");
  for (int i = 0; i < 600; ++i) pickle.op("}").get(1).op("N").op("s");
  pickle.op("e.");
  const long before = max_rss_kib();
  Unpickler vm(reinterpret_cast<const uint8_t*>(pickle.bytes.data()), pickle.bytes.size(), "keys.pkl");
  EXPECT_EQ(vm.load()->items.size(), 600u);
  EXPECT_LT(max_rss_kib() - before, 200 * 1024) << "peak memory grew by more than 200 MiB";
}

TEST(ResourceLimits, ZipEntryCountIsCapped) {
  // A ZIP64 end record claiming 2^40 entries in an empty central directory.
  std::string zip;
  auto put = [&](uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) zip += static_cast<char>((value >> (8 * i)) & 0xff);
  };
  put(0x06064b50, 4), put(44, 8), put(45, 2), put(45, 2), put(0, 4), put(0, 4);
  put(uint64_t{1} << 40, 8), put(uint64_t{1} << 40, 8), put(0, 8), put(0, 8);   // zip64 end of directory
  put(0x07064b50, 4), put(0, 4), put(0, 8), put(1, 4);                            // its locator
  put(0x06054b50, 4), put(0, 2), put(0, 2), put(0xffff, 2), put(0xffff, 2), put(0xffffffff, 4),
      put(0xffffffff, 4), put(0, 2);                                              // end of directory
  EXPECT_THAT(error_of([&] { ZipReader(reinterpret_cast<const uint8_t*>(zip.data()), zip.size(), "many.zip"); }),
              HasSubstr("many.zip: zip lists 1099511627776 entries, more than the limit of 1048576"));
}

}  // namespace
}  // namespace ssdq
