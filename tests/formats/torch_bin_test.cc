#include "formats/torch_bin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/unpickler.h"
#include "formats/zip_reader.h"
#include "tests/support/error_of.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

const char* const kTorch1Dir = "tests/fixtures/torch";
const char* const kTorch2Dir = "tests/fixtures/torch/torch2";

// Every fixture make_fixtures.py writes; the torch2 folder must hold the same set.
const std::vector<std::string> kReadable = {
    "dtypes.bin",    "tied.bin",      "parameters.bin", "offset.bin",    "noncontig.bin", "edge_shapes.bin",
    "nested.bin",    "protocol4.bin", "protocol5.bin",  "v3_dtypes.bin", "zip64.bin",
};

struct Refusal {
  std::string file;
  std::string message;  // a part of the expected error
};

const std::vector<Refusal> kRefused = {
    {"legacy_format.bin", "legacy (non-zip) torch.save format is not supported"},
    {"evil_posix_system.bin", "data.pkl: forbidden pickle global 'posix.system'"},
    {"evil_subprocess_popen.bin", "data.pkl: forbidden pickle global 'subprocess.Popen'"},
    {"evil_builtins_eval.bin", "data.pkl: forbidden pickle global 'builtins.eval'"},
    // getattr is admitted only on a Megatron enum class; str (protocol 2: __builtin__.unicode) is refused by name.
    {"evil_builtin_getattr.bin", "data.pkl: forbidden pickle global '__builtin__.unicode'"},
    {"truncated.bin", "no end-of-central-directory record"},
    {"cd_past_end.bin", "central directory (offset"},
    {"compressed_entry.bin", "is compressed (deflate); only stored (uncompressed) entries are supported"},
    {"size_exceeds_storage.bin",
     "tensor 'w': size [3, 3] with stride [3, 1] at offset 0 reaches past storage '0' (4 elements of F32)"},
    {"offset_past_storage.bin", "tensor 'w': size [2] with stride [1] at offset 3 reaches past storage '0'"},
    {"storage_missing.bin", "tensor 'w': storage '7' has no zip entry 'storage_missing/data/7'"},
    {"storage_size_mismatch.bin", "has 16 bytes, but the pickle says 8 elements of F32 (32 bytes)"},
    {"big_endian.bin", "saved big-endian (byteorder 'big')"},
    {"call_storage_class.bin", "pickle global 'torch.FloatStorage' cannot be called"},
    {"self_reference.bin", "'self.self.self"},
    {"duplicate_names.bin", "two tensors are named 'a.b'"},
};

struct Buffer {
  std::shared_ptr<const std::string> bytes;
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(bytes->data()); }
  size_t size() const { return bytes->size(); }
  bool contains(const uint8_t* p) const { return p >= data() && p < data() + size(); }
};

Buffer load(const std::string& path) { return {std::make_shared<const std::string>(read_file(path))}; }

TensorMap parse(const Buffer& buffer, const std::string& label) {
  return parse_torch_bin(buffer.bytes, buffer.data(), buffer.size(), label);
}

using testing_support::error_of;

nlohmann::json expected_json(const std::string& dir) {
  return nlohmann::json::parse(read_file(join_path(dir, "expected.json")));
}

double float_at(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return t.as<float>()[i];
    case DType::F64: return t.as<double>()[i];
    case DType::F16: return half_to_float(t.as<uint16_t>()[i]);
    case DType::BF16: return bf16_to_float(t.as<uint16_t>()[i]);
    case DType::F8_E4M3: return fp8_e4m3_to_float(t.data[i]);
    case DType::F8_E5M2: return fp8_e5m2_to_float(t.data[i]);
    default: ADD_FAILURE() << "not a float dtype"; return 0;
  }
}

int64_t int_at(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::BOOL:
    case DType::U8: return t.data[i];
    case DType::I8: return t.as<int8_t>()[i];
    case DType::I16: return t.as<int16_t>()[i];
    case DType::U16: return t.as<uint16_t>()[i];
    case DType::I32: return t.as<int32_t>()[i];
    case DType::U32: return t.as<uint32_t>()[i];
    case DType::I64: return t.as<int64_t>()[i];
    default: ADD_FAILURE() << "not an int dtype"; return 0;
  }
}

void check_tensor(const std::string& where, const Tensor& t, const nlohmann::json& want, const Buffer& buffer) {
  SCOPED_TRACE(where);
  ASSERT_EQ(dtype_name(t.dtype), want["dtype"].get<std::string>());
  ASSERT_EQ(t.shape, want["shape"].get<Shape>());
  const auto& values = want["values"];
  ASSERT_EQ(static_cast<size_t>(t.numel()), values.size());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype_is_float(t.dtype)) {
      EXPECT_EQ(float_at(t, i), values[i].get<double>()) << "element " << i;
    } else if (t.dtype == DType::U64) {
      EXPECT_EQ(t.as<uint64_t>()[i], values[i].get<uint64_t>()) << "element " << i;
    } else {
      EXPECT_EQ(int_at(t, i), values[i].get<int64_t>()) << "element " << i;
    }
  }
  // Contiguous tensors are read in place; strided views are copied out.
  if (t.numel() > 0) {
    EXPECT_EQ(buffer.contains(t.data), want["contiguous"].get<bool>());
  }
}

void check_readable(const std::string& dir, const std::string& file, const nlohmann::json& want) {
  const std::string path = join_path(dir, file);
  SCOPED_TRACE(path);
  const Buffer buffer = load(path);
  TensorMap tensors;
  try {
    tensors = parse(buffer, path);
  } catch (const Error& error) {
    FAIL() << error.what();
  }
  std::set<std::string> got_names, want_names;
  for (const auto& entry : tensors) got_names.insert(entry.first);
  for (const auto& item : want.items()) want_names.insert(item.key());
  ASSERT_EQ(got_names, want_names);

  // Tensors of one storage, read in place, must sit at their element offsets from one base.
  std::map<int, const uint8_t*> storage_base;
  for (const auto& item : want.items()) {
    const Tensor& t = tensors.at(item.key());
    check_tensor(item.key(), t, item.value(), buffer);
    if (!item.value()["contiguous"].get<bool>() || t.numel() == 0) continue;
    const uint8_t* base = t.data - item.value()["offset"].get<int64_t>() * dtype_size(t.dtype);
    auto [it, first] = storage_base.emplace(item.value()["storage"].get<int>(), base);
    if (!first) {
      EXPECT_EQ(it->second, base) << item.key() << " is not read from its shared storage";
    }
  }
}

void check_refused(const std::string& dir, const Refusal& refusal, const nlohmann::json& info) {
  const std::string path = join_path(dir, refusal.file);
  SCOPED_TRACE(path);
  const std::string marker = info.value("marker", "");
  if (!marker.empty()) std::remove(marker.c_str());
  const Buffer buffer = load(path);
  std::string message = refusal.message;
  if (info.contains("entry")) message = "zip entry '" + info["entry"].get<std::string>() + "' " + message;
  EXPECT_THAT(error_of([&] { parse(buffer, path); }), HasSubstr(path + ": "));
  EXPECT_THAT(error_of([&] { parse(buffer, path); }), HasSubstr(message));
  if (!marker.empty()) {
    EXPECT_FALSE(file_exists(marker)) << "the payload ran: " << marker;
  }
}

void check_fixture_folder(const std::string& dir) {
  const nlohmann::json expected = expected_json(dir);
  std::set<std::string> listed, generated;
  for (const auto& file : kReadable) listed.insert(file);
  for (const auto& refusal : kRefused) listed.insert(refusal.file);
  for (const auto& item : expected["readable"].items()) generated.insert(item.key());
  for (const auto& item : expected["refused"].items()) generated.insert(item.key());
  ASSERT_EQ(listed, generated) << "the test's file list and make_fixtures.py disagree";

  for (const auto& file : kReadable) check_readable(dir, file, expected["readable"][file]);
  for (const auto& refusal : kRefused) check_refused(dir, refusal, expected["refused"][refusal.file]);
}

TEST(TorchBin, Torch1Fixtures) { check_fixture_folder(kTorch1Dir); }

TEST(TorchBin, Torch2Fixtures) {
  if (!file_exists(join_path(kTorch2Dir, "expected.json")))
    GTEST_SKIP() << kTorch2Dir << " is absent (written by make_fixtures.py under PyTorch 2.x)";
  check_fixture_folder(kTorch2Dir);
}

TEST(TorchBin, ReadTorchBinMapsTheFile) {
  const std::string path = join_path(kTorch1Dir, "tied.bin");
  const TensorMap tensors = read_torch_bin(path);
  ASSERT_EQ(tensors.count("embedding.weight"), 1u);
  EXPECT_EQ(tensors.at("embedding.weight").data, tensors.at("lm_head.weight").data);
  // The map stays alive with the tensors.
  EXPECT_NE(tensors.at("embedding.weight").keepalive, nullptr);
  EXPECT_THAT(error_of([] { read_torch_bin("tests/fixtures/torch/no_such_file.bin"); }),
              HasSubstr("tests/fixtures/torch/no_such_file.bin: cannot open"));
}

// Every truncation and every single-byte flip of the readable fixtures either parses or throws
// ssdq::Error: no crash, no other exception, no read outside the buffer (run under ASan to see).
TEST(TorchBin, DamagedFilesFailCleanly) {
  size_t parsed = 0, refused = 0;
  for (const auto& file : kReadable) {
    const std::string original = read_file(join_path(kTorch1Dir, file));
    auto attempt = [&](std::string bytes) {
      auto owner = std::make_shared<const std::string>(std::move(bytes));
      try {
        parse_torch_bin(owner, reinterpret_cast<const uint8_t*>(owner->data()), owner->size(), file);
        ++parsed;
      } catch (const Error&) {
        ++refused;
      }
    };
    for (size_t length = 0; length < original.size(); ++length) attempt(original.substr(0, length));
    for (size_t at = 0; at < original.size(); ++at) {
      std::string flipped = original;
      flipped[at] = static_cast<char>(flipped[at] ^ 0xff);
      attempt(std::move(flipped));
    }
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(parsed, 0u);  // flips inside tensor data leave the file readable
}

// ---------------------------------------------------------------- the bundled real model

TEST(TorchBin, Mamba2TinyCheckpoint) {
  const std::string dir = "examples/mamba2-tiny";
  const auto config = nlohmann::json::parse(read_file(join_path(dir, "config.json")));
  const int64_t d_model = config["d_model"], n_layer = config["n_layer"], vocab = config["vocab_size"];
  const auto& ssm = config["ssm_cfg"];
  const int64_t d_state = ssm["d_state"], headdim = ssm["headdim"], ngroups = ssm["ngroups"];
  const int64_t d_conv = ssm["d_conv"], expand = ssm["expand"];
  // Derived widths, docs KEYS.md section 2.
  const int64_t d_inner = expand * d_model, nheads = d_inner / headdim;
  const int64_t conv_dim = d_inner + 2 * ngroups * d_state;
  const int64_t in_proj_rows = 2 * d_inner + 2 * ngroups * d_state + nheads;

  std::map<std::string, Shape> want = {
      {"backbone.embedding.weight", {vocab, d_model}},
      {"backbone.norm_f.weight", {d_model}},
      {"lm_head.weight", {vocab, d_model}},
  };
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string layer = "backbone.layers." + std::to_string(i) + ".";
    want[layer + "norm.weight"] = {d_model};
    want[layer + "mixer.in_proj.weight"] = {in_proj_rows, d_model};
    want[layer + "mixer.conv1d.weight"] = {conv_dim, 1, d_conv};
    want[layer + "mixer.conv1d.bias"] = {conv_dim};
    want[layer + "mixer.dt_bias"] = {nheads};
    want[layer + "mixer.A_log"] = {nheads};
    want[layer + "mixer.D"] = {nheads};
    want[layer + "mixer.norm.weight"] = {d_inner};
    want[layer + "mixer.out_proj.weight"] = {d_model, d_inner};
  }

  const auto start = std::chrono::steady_clock::now();
  const TensorMap tensors = read_torch_bin(join_path(dir, "pytorch_model.bin"));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("read_ms", std::to_string(ms));

  ASSERT_EQ(tensors.size(), want.size());
  for (const auto& [name, shape] : want) {
    SCOPED_TRACE(name);
    ASSERT_EQ(tensors.count(name), 1u);
    const Tensor& t = tensors.at(name);
    EXPECT_EQ(t.dtype, DType::BF16);
    EXPECT_EQ(t.shape, shape);
    bool finite = true;
    for (int64_t i = 0; i < t.numel(); ++i) finite &= std::isfinite(bf16_to_float(t.as<uint16_t>()[i]));
    EXPECT_TRUE(finite);
  }
  const Tensor& embedding = tensors.at("backbone.embedding.weight");
  const Tensor& lm_head = tensors.at("lm_head.weight");
  EXPECT_EQ(lm_head.data, embedding.data);  // one shared storage, read in place
  EXPECT_EQ(std::memcmp(lm_head.data, embedding.data, embedding.nbytes()), 0);
}

// ---------------------------------------------------------------- the pickle VM on hand-written opcodes

std::string bytes(std::initializer_list<int> codes) {
  std::string out;
  for (int code : codes) out += static_cast<char>(code);
  return out;
}

std::string unpickle_error(const std::string& pickle) {
  return error_of([&] {
    Unpickler vm(reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size(), "t.pkl");
    vm.load();
  });
}

TEST(Unpickler, RefusesAGlobalAtItsOwnOpcode) {
  // Never called, still refused: nothing after the GLOBAL runs.
  EXPECT_THAT(unpickle_error("\x80\x02" "cos\nsystem\n."),
              HasSubstr("t.pkl: forbidden pickle global 'os.system' (opcode at byte 2)"));
  EXPECT_THAT(unpickle_error("(ios\nsystem\n."), HasSubstr("forbidden pickle global 'os.system' (INST)"));
  EXPECT_THAT(unpickle_error("\x80\x04\x8c\x02os\x8c\x06system\x93."), HasSubstr("forbidden pickle global 'os.system'"));
  EXPECT_THAT(unpickle_error("ctorch\nload\n."), HasSubstr("forbidden pickle global 'torch.load'"));
  EXPECT_THAT(unpickle_error("ctorch._utils\n_rebuild_device_tensor_from_numpy\n."),
              HasSubstr("forbidden pickle global 'torch._utils._rebuild_device_tensor_from_numpy'"));
  EXPECT_THAT(unpickle_error("ccollections\nOrderedDict\n)\x81."),
              HasSubstr("object construction from 'collections.OrderedDict' is not admitted"));
  EXPECT_THAT(unpickle_error("ccollections\nOrderedDict\n)o."), HasSubstr("OBJ (object construction) is not supported"));
  // Megatron's admitted classes stay data: a megatron.* global outside the enum modules, or an
  // enum called with anything but one value, is refused.
  EXPECT_THAT(unpickle_error("cmegatron.training\nget_args\n."), HasSubstr("forbidden pickle global 'megatron.training.get_args'"));
  EXPECT_THAT(unpickle_error("cmegatron.core.enums\nModelType\n(NNtR."),
              HasSubstr("only an enum member (one int or str) is admitted"));
  EXPECT_THAT(unpickle_error("c__builtin__\ngetattr\nctorch\nfloat32\nX" + bytes({4, 0, 0, 0}) + "size\x86R."),
              HasSubstr("getattr is admitted only to name a member of a Megatron-LM enum, not on a 'torch.float32'"));
  EXPECT_THAT(unpickle_error("c_codecs\nencode\n(" + bytes({'X', 1, 0, 0, 0, 'a', 'X', 4, 0, 0, 0}) + "utf8tR."),
              HasSubstr("only as encode(text, \"latin1\")"));
  EXPECT_THAT(unpickle_error("\x82\x01."), HasSubstr("extension registry"));
  EXPECT_THAT(unpickle_error("I1\n."), HasSubstr("unsupported pickle opcode 0x49 ('I')"));
}

TEST(Unpickler, DecodesScalarsAndSharesMemoizedValues) {
  // {"a": [-1 (BININT), 65535 (BININT2), -32768 (LONG1 00 80), 2**70 (LONG1, 9 bytes), True, None, 0.5], "b": memo 1}
  const std::string pickle =
      bytes({0x80, 2, '}', 'q', 0, 'X', 1, 0, 0, 0, 'a', ']', 'q', 1, '(', 'J', 0xff, 0xff, 0xff, 0xff, 'M', 0xff,
             0xff, 0x8a, 2, 0x00, 0x80, 0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x88, 'N', 'G', 0x3f, 0xe0, 0, 0, 0,
             0, 0, 0, 'e', 's', 'X', 1, 0, 0, 0, 'b', 'h', 1, 's', '.'});
  Unpickler vm(reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size(), "t.pkl");
  const PickleValuePtr root = vm.load();
  using Kind = PickleValue::Kind;
  ASSERT_EQ(root->kind, Kind::Dict);
  ASSERT_EQ(root->entries.size(), 2u);
  EXPECT_EQ(root->entries[0].first->text, "a");
  const PickleValuePtr list = root->entries[0].second;
  EXPECT_EQ(root->entries[1].second, list);  // BINGET returns the same object
  ASSERT_EQ(list->items.size(), 7u);
  EXPECT_EQ(list->items[0]->int_value, -1);
  EXPECT_EQ(list->items[1]->int_value, 65535);
  EXPECT_EQ(list->items[2]->int_value, -32768);
  EXPECT_EQ(list->items[3]->kind, Kind::BigInt);
  EXPECT_EQ(list->items[4]->kind, Kind::Bool);
  EXPECT_EQ(list->items[4]->int_value, 1);
  EXPECT_EQ(list->items[5]->kind, Kind::None);
  EXPECT_EQ(list->items[6]->float_value, 0.5);
}

// argparse.Namespace as protocol 2 writes it (NEWOBJ, then BUILD with its __dict__), holding an
// enum member and bytes through _codecs.encode: rebuilt as data, nothing called.
TEST(Unpickler, RebuildsANamespaceAsData) {
  const std::string pickle = bytes({0x80, 2}) + "cargparse\nNamespace\n)" + bytes({0x81}) + "}(" +
                             bytes({'X', 11, 0, 0, 0}) + "hidden_size" + bytes({'M', 0x00, 0x10}) +
                             bytes({'X', 4, 0, 0, 0}) + "type" + "cmegatron.core.enums\nModelType\n" +
                             bytes({'K', 1, 0x85, 'R'}) + bytes({'X', 4, 0, 0, 0}) + "blob" + "c_codecs\nencode\n" +
                             bytes({'X', 2, 0, 0, 0, 0xc3, 0xbf, 'X', 6, 0, 0, 0}) + "latin1" + bytes({0x86, 'R'}) +
                             "ub.";
  Unpickler vm(reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size(), "t.pkl");
  const PickleValuePtr root = vm.load();
  using Kind = PickleValue::Kind;
  ASSERT_EQ(root->kind, Kind::Object);
  EXPECT_EQ(root->text, "argparse.Namespace");
  ASSERT_EQ(root->entries.size(), 3u);
  EXPECT_EQ(root->entries[0].second->int_value, 4096);
  EXPECT_EQ(root->entries[1].second->kind, Kind::Object);
  EXPECT_EQ(root->entries[1].second->text, "megatron.core.enums.ModelType");
  EXPECT_EQ(root->entries[1].second->items.at(0)->int_value, 1);
  EXPECT_EQ(root->entries[2].second->kind, Kind::Bytes);
  EXPECT_EQ(root->entries[2].second->text, "\xff");
}

TEST(Unpickler, EnforcesItsCaps) {
  EXPECT_THAT(unpickle_error(std::string(Unpickler::kMaxStackDepth + 1, 'N') + "."),
              HasSubstr("stack deeper than 65536"));
  EXPECT_THAT(unpickle_error(std::string(Unpickler::kMaxMarkDepth + 1, '(')), HasSubstr("more than 1024 nested MARKs"));
  EXPECT_THAT(unpickle_error(bytes({'X', 0xff, 0xff, 0xff, 0x7f})), HasSubstr("longer than the limit of 16777216"));
  std::string memo = "N";
  for (uint32_t i = 0; i <= Unpickler::kMaxMemoEntries; ++i)
    memo += bytes({'r', int(i & 0xff), int((i >> 8) & 0xff), int((i >> 16) & 0xff), int(i >> 24)});
  EXPECT_THAT(unpickle_error(memo + "."), HasSubstr("memo has more than 1048576 entries"));
  const std::string huge(Unpickler::kMaxPickleBytes + 1, 'N');
  EXPECT_THAT(unpickle_error(huge), HasSubstr("more than the limit of 67108864"));
}

TEST(Unpickler, RefusesMalformedStreams) {
  EXPECT_THAT(unpickle_error("h\x05."), HasSubstr("memo entry 5 was never stored"));
  EXPECT_THAT(unpickle_error(bytes({'X', 10, 0, 0, 0, 'a', 'b', 'c'})), HasSubstr("pickle is truncated"));
  EXPECT_THAT(unpickle_error(bytes({'X', 2, 0, 0, 0, 0xc3, 0x28, '.'})), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(unpickle_error("\x80\x02N"), HasSubstr("pickle ends without STOP (opcode at byte 3)"));
  EXPECT_THAT(unpickle_error("NN."), HasSubstr("STOP with 2 values and 0 marks"));
  EXPECT_THAT(unpickle_error("a"), HasSubstr("stack underflow"));
  EXPECT_THAT(unpickle_error("](Na."), HasSubstr("stack underflow"));  // APPEND cannot reach below a MARK
  EXPECT_THAT(unpickle_error("]}b."), HasSubstr("BUILD (setting object state) on a list is not supported"));
  EXPECT_THAT(unpickle_error("cargparse\nNamespace\n)\x81]b."), HasSubstr("'argparse.Namespace': object state is a list"));
  EXPECT_THAT(unpickle_error("\x80\x06N."), HasSubstr("unsupported pickle protocol 6"));
  EXPECT_THAT(unpickle_error("NN\x86Q."), HasSubstr("persistent id is not ('storage'"));
  EXPECT_THAT(unpickle_error("ctorch._utils\n_rebuild_tensor_v2\n)R."), HasSubstr("takes 6 or 7 arguments, got 0"));
  EXPECT_THAT(unpickle_error("ctorch\nfloat32\n)R."), HasSubstr("pickle global 'torch.float32' cannot be called"));
}

TEST(Unpickler, DeepAndCyclicValuesAreFreedWithoutRecursion) {
  // 200000 nested 1-tuples: destroying them recursively would overflow the stack.
  const std::string deep = "K\x00" + std::string(200000, '\x85') + ".";
  {
    Unpickler vm(reinterpret_cast<const uint8_t*>(deep.data()), deep.size(), "deep.pkl");
    EXPECT_EQ(vm.load()->kind, PickleValue::Kind::Tuple);
  }
  // A list that contains itself.
  const std::string cycle = bytes({']', 'q', 0, 'h', 0, 'a', '.'});
  Unpickler vm(reinterpret_cast<const uint8_t*>(cycle.data()), cycle.size(), "cycle.pkl");
  const PickleValuePtr list = vm.load();
  ASSERT_EQ(list->items.size(), 1u);
  EXPECT_EQ(list->items[0], list);
}

// ---------------------------------------------------------------- the zip reader on hand-built archives

struct ZipItem {
  ZipItem(std::string name, std::string data, uint16_t flags = 0, std::string local_name = "")
      : name(std::move(name)), data(std::move(data)), flags(flags), local_name(std::move(local_name)) {}
  std::string name;
  std::string data;
  uint16_t flags;
  std::string local_name;  // if set, the local header names this instead
};

void put16(std::string& out, uint32_t v) { out += bytes({int(v & 0xff), int((v >> 8) & 0xff)}); }
void put32(std::string& out, uint32_t v) { put16(out, v & 0xffff), put16(out, v >> 16); }

std::string make_zip(const std::vector<ZipItem>& items, int16_t claimed_entries = -1) {
  std::string out, central;
  for (const auto& item : items) {
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const std::string& local_name = item.local_name.empty() ? item.name : item.local_name;
    put32(out, 0x04034b50), put16(out, 20), put16(out, item.flags), put16(out, 0), put32(out, 0), put32(out, 0);
    put32(out, item.data.size()), put32(out, item.data.size()), put16(out, local_name.size()), put16(out, 0);
    out += local_name + item.data;
    put32(central, 0x02014b50), put16(central, 20), put16(central, 20), put16(central, item.flags);
    put16(central, 0), put32(central, 0), put32(central, 0), put32(central, item.data.size());
    put32(central, item.data.size()), put16(central, item.name.size()), put16(central, 0), put16(central, 0);
    put16(central, 0), put16(central, 0), put32(central, 0), put32(central, offset);
    central += item.name;
  }
  const uint32_t directory = static_cast<uint32_t>(out.size());
  out += central;
  const uint16_t count = claimed_entries >= 0 ? claimed_entries : items.size();
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0), put16(out, count), put16(out, count);
  put32(out, central.size()), put32(out, directory), put16(out, 0);
  return out;
}

std::string zip_error(const std::string& zip) {
  return error_of([&] {
    ZipReader reader(reinterpret_cast<const uint8_t*>(zip.data()), zip.size(), "z.zip");
    for (const auto& entry : reader.entries()) reader.stored_bytes(entry);
  });
}

TEST(ZipReader, ListsAndReadsStoredEntries) {
  const std::string zip = make_zip({{"a/one", "first"}, {"a/two", "second entry"}});
  ZipReader reader(reinterpret_cast<const uint8_t*>(zip.data()), zip.size(), "z.zip");
  ASSERT_EQ(reader.entries().size(), 2u);
  const ZipEntry* two = reader.find("a/two");
  ASSERT_NE(two, nullptr);
  const ByteSpan span = reader.stored_bytes(*two);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(span.data), span.size), "second entry");
  EXPECT_EQ(reader.find("a/three"), nullptr);
}

TEST(ZipReader, RefusesBrokenArchives) {
  EXPECT_THAT(zip_error(""), HasSubstr("z.zip: not a zip file (0 bytes"));
  EXPECT_THAT(zip_error(std::string(100, 'x')), HasSubstr("no end-of-central-directory record"));
  EXPECT_THAT(zip_error(make_zip({{"x", "1"}, {"x", "2"}})), HasSubstr("two entries named 'x'"));
  EXPECT_THAT(zip_error(make_zip({{"x", "1", 1}})), HasSubstr("zip entry 'x' is encrypted"));
  EXPECT_THAT(zip_error(make_zip({{"x", "1", 0, "y"}})), HasSubstr("local header at byte 0 names a different entry"));
  EXPECT_THAT(zip_error(make_zip({{"x", "1"}}, 9)), HasSubstr("zip lists 9 entries but its central directory has only"));
  std::string oversized = make_zip({{"x", "12345"}});
  oversized[oversized.find("\x50\x4b\x01\x02") + 20] = '\x7f';  // compressed size 127 > the data area
  EXPECT_THAT(zip_error(oversized), HasSubstr("run past the end of the data area"));
}

}  // namespace
}  // namespace ssdq
