#include "formats/safetensors.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "tests/support/error_of.h"

namespace ssdq {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kFixtures = "tests/fixtures/safetensors/";

// A fresh empty folder per test, removed with its contents afterwards.
class TempDir {
 public:
  TempDir() {
    const char* root = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(root ? root : "/tmp") + "/safetensors_test.XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!mkdtemp(buffer.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buffer.data();
  }
  ~TempDir() {
    for (const auto& name : list()) ::unlink(join_path(path_, name).c_str());
    ::rmdir(path_.c_str());
  }
  std::string file(const std::string& name) const { return join_path(path_, name); }
  std::set<std::string> list() const {
    std::set<std::string> names;
    if (DIR* dir = ::opendir(path_.c_str())) {
      while (dirent* entry = ::readdir(dir))
        if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) names.insert(entry->d_name);
      ::closedir(dir);
    }
    return names;
  }

 private:
  std::string path_;
};

using testing_support::error_of;

std::vector<uint8_t> bytes_of(const Tensor& tensor) { return {tensor.data, tensor.data + tensor.nbytes()}; }

// Distinct, recognisable bytes for each tensor.
Tensor patterned(DType dtype, Shape shape, uint8_t salt) {
  Tensor probe;
  probe.dtype = dtype;
  probe.shape = shape;
  std::vector<uint8_t> bytes(probe.nbytes());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + salt);
  return Tensor::own(dtype, std::move(shape), std::move(bytes));
}

const std::vector<DType> kAllDTypes = {DType::BOOL, DType::U8,  DType::I8,   DType::I16, DType::U16,
                                       DType::I32,  DType::U32, DType::I64,  DType::U64, DType::F16,
                                       DType::BF16, DType::F32, DType::F64,  DType::F8_E4M3, DType::F8_E5M2};

TEST(Safetensors, RoundTripsEveryDTypeWithMetadata) {
  TempDir dir;
  TensorMap tensors;
  uint8_t salt = 1;
  for (DType dtype : kAllDTypes) {
    // Odd element counts, so a naive name-ordered layout would misalign the wider types.
    tensors.emplace(std::string("t_") + std::string(dtype_name(dtype)), patterned(dtype, {3, 5}, salt++));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\""}};
  const std::string path = dir.file("all.safetensors");
  write_safetensors(path, tensors, metadata);

  SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    const Tensor& actual = file.tensors.at(name);
    EXPECT_EQ(actual.dtype, expected.dtype);
    EXPECT_EQ(actual.shape, expected.shape);
    EXPECT_EQ(bytes_of(actual), bytes_of(expected));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(actual.data) % dtype_size(actual.dtype), 0u);
    EXPECT_TRUE(actual.keepalive);
  }
  EXPECT_EQ(dir.list(), std::set<std::string>{"all.safetensors"});
}

TEST(Safetensors, WriterPadsHeaderToEightBytesAndPacksDataWithoutGaps) {
  TempDir dir;
  TensorMap tensors;
  tensors.emplace("a_byte", patterned(DType::U8, {3}, 1));
  tensors.emplace("b_double", patterned(DType::F64, {2}, 2));
  tensors.emplace("c_half", patterned(DType::F16, {1}, 3));
  const std::string path = dir.file("layout.safetensors");
  write_safetensors(path, tensors);

  const std::string raw = read_file(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, raw.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + header_size + 3 + 16 + 2);
  const std::string header = raw.substr(8, header_size);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
  // Widest first, then name: b_double [0,16), c_half [16,18), a_byte [18,21).
  EXPECT_THAT(header, HasSubstr("\"b_double\":{\"data_offsets\":[0,16]"));
  EXPECT_THAT(header, HasSubstr("\"c_half\":{\"data_offsets\":[16,18]"));
  EXPECT_THAT(header, HasSubstr("\"a_byte\":{\"data_offsets\":[18,21]"));
  EXPECT_LT(header.find("a_byte"), header.find("b_double"));  // header keys sorted by name
}

TEST(Safetensors, EmptyAndScalarTensors) {
  TempDir dir;
  TensorMap tensors;
  tensors.emplace("empty_rows", Tensor::from_f32({0, 4}, {}));
  tensors.emplace("empty_cols", Tensor::own(DType::I64, {3, 0}, {}));
  tensors.emplace("scalar", Tensor::from_f64({}, {2.5}));
  Tensor no_data;  // zero elements need no bytes at all
  no_data.dtype = DType::BF16;
  no_data.shape = {0};
  tensors.emplace("null_empty", no_data);
  const std::string path = dir.file("edge.safetensors");
  write_safetensors(path, tensors);

  SafetensorsFile file = read_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 4u);
  EXPECT_EQ(file.tensors.at("empty_rows").shape, (Shape{0, 4}));
  EXPECT_EQ(file.tensors.at("empty_rows").nbytes(), 0u);
  EXPECT_EQ(file.tensors.at("empty_cols").shape, (Shape{3, 0}));
  EXPECT_EQ(file.tensors.at("null_empty").dtype, DType::BF16);
  const Tensor& scalar = file.tensors.at("scalar");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.as<double>()[0], 2.5);
}

TEST(Safetensors, EmptyCheckpoint) {
  TempDir dir;
  write_safetensors(dir.file("none.safetensors"), {});
  SafetensorsFile file = read_safetensors(dir.file("none.safetensors"));
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
}

TEST(Safetensors, ReadsCommittedValidFixture) {
  SafetensorsFile file = read_safetensors(kFixtures + "valid.safetensors");
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.metadata.at("format"), "pt");
  const Tensor& weight = file.tensors.at("weight");
  EXPECT_EQ(weight.dtype, DType::F32);
  EXPECT_EQ(weight.to_f32(), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.25f}));
  const Tensor& bias = file.tensors.at("bias");
  EXPECT_EQ(bias.dtype, DType::I8);
  EXPECT_EQ(bias.to_f32(), (std::vector<float>{1, 2, -1}));
}

TEST(Safetensors, MisalignedTensorIsCopiedToAlignedMemory) {
  // Same file placed at an odd address: tensor data cannot be used in place.
  const std::string raw = read_file(kFixtures + "valid.safetensors");
  auto buffer = std::make_shared<std::vector<uint8_t>>(raw.size() + 1);
  std::memcpy(buffer->data() + 1, raw.data(), raw.size());
  SafetensorsFile file = parse_safetensors(buffer, buffer->data() + 1, raw.size(), "shifted");
  const Tensor& weight = file.tensors.at("weight");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(weight.data) % 4, 0u);
  EXPECT_EQ(weight.to_f32(), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.25f}));
  // I8 needs no alignment and stays inside the buffer.
  const Tensor& bias = file.tensors.at("bias");
  EXPECT_GE(bias.data, buffer->data());
  EXPECT_LT(bias.data, buffer->data() + buffer->size());
}

TEST(Safetensors, GoldenLogitsOfTheTinyModel) {
  SafetensorsFile file = read_safetensors("tests/fixtures/golden/golden-wikitext2-first512.safetensors");
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_THAT(file.metadata.at("note"), HasSubstr("float64 reference forward"));

  const Tensor& tokens = file.tensors.at("tokens");
  EXPECT_EQ(tokens.dtype, DType::I32);
  EXPECT_EQ(tokens.shape, (Shape{512}));
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    ASSERT_GE(tokens.as<int32_t>()[i], 0);
    ASSERT_LT(tokens.as<int32_t>()[i], 50288);
  }

  const Tensor& logits = file.tensors.at("logits_rows_0_7");
  EXPECT_EQ(logits.dtype, DType::F64);
  EXPECT_EQ(logits.shape, (Shape{8, 50288}));
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_TRUE(std::isfinite(logits.as<double>()[i])) << i;

  const Tensor& nll = file.tensors.at("nll");
  EXPECT_EQ(nll.dtype, DType::F64);
  EXPECT_EQ(nll.shape, (Shape{511}));
  const double* values = nll.as<double>();
  // examples/mamba2-tiny/REFERENCE.md: mean NLL 5.1553.
  EXPECT_NEAR(std::accumulate(values, values + 511, 0.0) / 511, 5.1553, 5e-4);
}

struct BadFixture {
  const char* file;
  std::vector<const char*> message_parts;
};
void PrintTo(const BadFixture& fixture, std::ostream* out) { *out << fixture.file; }

class SafetensorsBadInput : public ::testing::TestWithParam<BadFixture> {};

TEST_P(SafetensorsBadInput, FailsWithMessageNamingFileAndProblem) {
  const std::string path = kFixtures + GetParam().file;
  const std::string message = error_of([&] { read_safetensors(path); });
  EXPECT_THAT(message, HasSubstr(path));
  for (const char* part : GetParam().message_parts) EXPECT_THAT(message, HasSubstr(part));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, SafetensorsBadInput,
    ::testing::Values(
        BadFixture{"empty_file.safetensors", {"0 bytes is too short"}},
        BadFixture{"short_length.safetensors", {"3 bytes is too short"}},
        BadFixture{"header_past_end.safetensors", {"header length 4096 runs past the end of the file"}},
        BadFixture{"header_over_limit.safetensors", {"header length 200000000 exceeds the limit"}},
        BadFixture{"truncated_data.safetensors", {"tensor \"bias\"", "data_offsets [16, 19] run past the end of the data section (12 bytes)"}},
        BadFixture{"invalid_json.safetensors", {"header: invalid JSON"}},
        BadFixture{"header_not_object.safetensors", {"expected a JSON object, got array"}},
        BadFixture{"duplicate_tensor.safetensors", {"duplicate key \"weight\""}},
        BadFixture{"unknown_dtype.safetensors", {"tensor \"bias\"", "unknown dtype \"I4\""}},
        BadFixture{"wrong_span.safetensors", {"tensor \"weight\"", "span 16 bytes, but F32 [2, 3] needs 24 bytes"}},
        BadFixture{"offsets_outside.safetensors", {"tensor \"bias\"", "data_offsets [18, 21] run past the end of the data section (20 bytes)"}},
        BadFixture{"offsets_reversed.safetensors", {"tensor \"bias\"", "[19, 16] end before begin"}},
        BadFixture{"overlapping.safetensors", {"tensors \"weight\" [0, 16) and \"bias\" [14, 17) overlap"}},
        BadFixture{"missing_shape.safetensors", {"tensor \"weight\"", "missing field \"shape\""}},
        BadFixture{"missing_data_offsets.safetensors", {"tensor \"bias\"", "missing field \"data_offsets\""}},
        BadFixture{"negative_dim.safetensors", {"tensor \"bias\"", "shape entry: -3 is negative"}},
        BadFixture{"float_dim.safetensors", {"tensor \"bias\"", "expected a non-negative integer, got number 3.0"}},
        BadFixture{"shape_overflow.safetensors", {"tensor \"bias\"", "too many elements"}},
        BadFixture{"metadata_not_string.safetensors", {"__metadata__ \"step\": expected a string value, got number"}},
        BadFixture{"tensor_not_object.safetensors", {"tensor \"bias\"", "expected an object with dtype, shape, data_offsets, got string"}}),
    [](const ::testing::TestParamInfo<BadFixture>& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.'));
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

TEST(Safetensors, MissingFileIsAnError) {
  EXPECT_THAT(error_of([] { read_safetensors(kFixtures + "no_such.safetensors"); }),
              AllOf(HasSubstr("no_such.safetensors"), HasSubstr("cannot open")));
}

TEST(Safetensors, FailedWritesLeaveNoFile) {
  TempDir dir;
  TensorMap good;
  good.emplace("w", Tensor::from_f32({2}, {1, 2}));

  const std::string missing_folder = dir.file("no_such_folder/out.safetensors");
  EXPECT_THAT(error_of([&] { write_safetensors(missing_folder, good); }),
              AllOf(HasSubstr("no_such_folder/out.safetensors"), HasSubstr("cannot create")));

  TensorMap no_bytes;
  Tensor hollow;
  hollow.dtype = DType::F32;
  hollow.shape = {4};
  no_bytes.emplace("hollow", hollow);
  EXPECT_THAT(error_of([&] { write_safetensors(dir.file("hollow.safetensors"), no_bytes); }),
              AllOf(HasSubstr("hollow.safetensors"), HasSubstr("tensor \"hollow\""), HasSubstr("shape [4] but no data")));

  TensorMap negative;
  Tensor bent;
  bent.shape = {-1, 2};
  negative.emplace("bent", bent);
  EXPECT_THAT(error_of([&] { write_safetensors(dir.file("bent.safetensors"), negative); }),
              AllOf(HasSubstr("tensor \"bent\""), HasSubstr("negative dimension")));

  TensorMap reserved = good;
  reserved.emplace("__metadata__", Tensor::from_f32({1}, {0}));
  EXPECT_THAT(error_of([&] { write_safetensors(dir.file("reserved.safetensors"), reserved); }),
              HasSubstr("reserved for metadata"));

  TensorMap bad_name;
  bad_name.emplace("caf\xe9", Tensor::from_f32({1}, {0}));
  EXPECT_THAT(error_of([&] { write_safetensors(dir.file("latin1.safetensors"), bad_name); }),
              HasSubstr("must be UTF-8"));

  EXPECT_TRUE(dir.list().empty());
}

TEST(Safetensors, FailedOverwriteKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  TensorMap first;
  first.emplace("w", Tensor::from_f32({2}, {1, 2}));
  write_safetensors(path, first);
  const std::string before = read_file(path);

  TensorMap broken = first;
  Tensor hollow;
  hollow.shape = {8};
  broken.emplace("x", hollow);
  EXPECT_THROW(write_safetensors(path, broken), Error);
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(dir.list(), std::set<std::string>{"model.safetensors"});
}

// Two shards and an index, as transformers' save_pretrained(max_shard_size=...) lays them out.
void write_sharded(const TempDir& dir, const std::string& index_json) {
  TensorMap shard1, shard2;
  shard1.emplace("layers.0.weight", Tensor::from_f32({2, 2}, {1, 2, 3, 4}));
  shard1.emplace("embedding", Tensor::from_i32({3}, {7, 8, 9}));
  shard2.emplace("layers.1.weight", Tensor::from_f64({2}, {0.25, -0.5}));
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), shard1, {{"format", "pt"}});
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), shard2, {{"format", "pt"}, {"shard", "2"}});
  write_file_atomic(dir.file("model.safetensors.index.json"),
                    [&](int fd) { write_all(fd, index_json.data(), index_json.size(), "index"); });
}

const char* kIndex = R"({
  "metadata": {"total_size": 44},
  "weight_map": {
    "embedding": "model-00001-of-00002.safetensors",
    "layers.0.weight": "model-00001-of-00002.safetensors",
    "layers.1.weight": "model-00002-of-00002.safetensors"
  }
})";

TEST(SafetensorsIndex, ReadsShardedCheckpoint) {
  TempDir dir;
  write_sharded(dir, kIndex);
  SafetensorsFile file = read_safetensors_index(dir.file("model.safetensors.index.json"));
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors.at("layers.0.weight").to_f32(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(file.tensors.at("embedding").as<int32_t>()[2], 9);
  EXPECT_EQ(file.tensors.at("layers.1.weight").as<double>()[1], -0.5);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"shard", "2"}, {"total_size", "44"}}));
}

TEST(SafetensorsIndex, ShardMissingANamedTensor) {
  TempDir dir;
  std::string index = kIndex;
  index.replace(index.find("\"layers.1.weight\""), 17, "\"layers.2.weight\"");
  write_sharded(dir, index);
  const std::string message = error_of([&] { read_safetensors_index(dir.file("model.safetensors.index.json")); });
  EXPECT_THAT(message, AllOf(HasSubstr("model-00002-of-00002.safetensors"), HasSubstr("tensor \"layers.2.weight\" is missing")));
}

TEST(SafetensorsIndex, ShardHoldingATensorTheIndexDoesNotName) {
  TempDir dir;
  std::string index = kIndex;
  index.erase(index.find("\"embedding\""), std::string("\"embedding\": \"model-00001-of-00002.safetensors\",").size());
  write_sharded(dir, index);
  EXPECT_THAT(error_of([&] { read_safetensors_index(dir.file("model.safetensors.index.json")); }),
              AllOf(HasSubstr("model-00001-of-00002.safetensors"), HasSubstr("tensor \"embedding\" is not named in")));
}

TEST(SafetensorsIndex, TensorInTwoShards) {
  TempDir dir;
  std::string index = kIndex;
  index.replace(index.find("\"layers.1.weight\""), 0, "\"other\": \"model-00003-of-00003.safetensors\", ");
  write_sharded(dir, index);
  TensorMap third;
  third.emplace("other", Tensor::from_i32({1}, {0}));
  third.emplace("embedding", Tensor::from_i32({1}, {0}));  // also in shard 1, where the index puts it
  write_safetensors(dir.file("model-00003-of-00003.safetensors"), third);
  EXPECT_THAT(error_of([&] { read_safetensors_index(dir.file("model.safetensors.index.json")); }),
              AllOf(HasSubstr("model-00003-of-00003.safetensors: tensor \"embedding\" is in this shard"),
                    HasSubstr("puts it in shard model-00001-of-00002.safetensors")));
}

TEST(SafetensorsIndex, DuplicateNameInWeightMap) {
  TempDir dir;
  std::string index = kIndex;
  index.replace(index.find("\"layers.1.weight\""), 0, "\"embedding\": \"model-00002-of-00002.safetensors\", ");
  write_sharded(dir, index);
  EXPECT_THAT(error_of([&] { read_safetensors_index(dir.file("model.safetensors.index.json")); }),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("duplicate key \"embedding\"")));
}

TEST(SafetensorsIndex, MissingShardFile) {
  TempDir dir;
  std::string index = kIndex;
  index.replace(index.find("model-00002-of-00002"), 20, "model-00002-of-00003");
  write_sharded(dir, index);
  EXPECT_THAT(error_of([&] { read_safetensors_index(dir.file("model.safetensors.index.json")); }),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("model-00002-of-00003.safetensors"),
                    HasSubstr("does not exist")));
}

TEST(SafetensorsIndex, ShardNameOutsideTheFolder) {
  TempDir dir;
  std::string index = kIndex;
  index.replace(index.find("\"model-00002-of-00002"), 1, "\"../");
  write_sharded(dir, index);
  EXPECT_THAT(error_of([&] { read_safetensors_index(dir.file("model.safetensors.index.json")); }),
              HasSubstr("is not a file name in the index's folder"));
}

TEST(SafetensorsIndex, MissingWeightMap) {
  TempDir dir;
  write_sharded(dir, R"({"metadata": {}})");
  EXPECT_THAT(error_of([&] { read_safetensors_index(dir.file("model.safetensors.index.json")); }),
              HasSubstr("missing field \"weight_map\""));
}

}  // namespace
}  // namespace ssdq
