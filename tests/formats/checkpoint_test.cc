// Checkpoint folders in every layout: the bundled mamba_ssm pytorch_model.bin, the same weights
// rewritten in transformers' naming as one safetensors file and as shards, and bad folders.
#include "formats/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/safetensors.h"

namespace ssdq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ssdq-ckpt-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const Checkpoint& bundled() {
  static const Checkpoint checkpoint = load_checkpoint("examples/mamba2-tiny");
  return checkpoint;
}

TensorMap in_transformers_naming(const TensorMap& tensors) {
  TensorMap out;
  for (const auto& [name, tensor] : tensors)
    out[name == "backbone.embedding.weight" ? "backbone.embeddings.weight" : name] = tensor;
  out["lm_head.weight"] = tensors.at("backbone.embedding.weight");
  return out;
}

void expect_same_tensors(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& other = b.at(name);
    EXPECT_EQ(tensor.shape, other.shape) << name;
    EXPECT_EQ(tensor.dtype, other.dtype) << name;
    EXPECT_EQ(0, std::memcmp(tensor.data, other.data, tensor.nbytes())) << name;
  }
}

TEST(Checkpoint, BundledMambaSsmBin) {
  const Checkpoint& c = bundled();
  EXPECT_THAT(c.weights_path, HasSubstr("pytorch_model.bin"));
  EXPECT_EQ(c.tensors.size(), 2u + 4u * 9u);  // embedding, norm_f and 9 per layer; tied lm_head dropped
  EXPECT_EQ(c.tensors.at("backbone.layers.3.mixer.in_proj.weight").shape, (Shape{1288, 256}));
  EXPECT_EQ(c.tensors.at("backbone.embedding.weight").dtype, DType::BF16);
}

TEST(Checkpoint, TransformersSafetensorsLayoutLoadsToTheSameTensors) {
  TempDir dir;
  fs::copy_file("examples/mamba2-tiny/hf/config.json", dir.file("config.json"));
  write_safetensors(dir.file("model.safetensors"), in_transformers_naming(bundled().tensors));
  const Checkpoint c = load_checkpoint(dir.path());
  EXPECT_EQ(c.config.spelling, ConfigSpelling::kTransformers);
  expect_same_tensors(c.tensors, bundled().tensors);
}

TEST(Checkpoint, ShardedSafetensorsWithIndex) {
  TempDir dir;
  fs::copy_file("examples/mamba2-tiny/config.json", dir.file("config.json"));
  TensorMap first, second;
  std::string weight_map;
  for (const auto& [name, tensor] : bundled().tensors) {
    const bool early = name.find("layers.0.") != std::string::npos || name.find("layers.1.") != std::string::npos;
    const char* shard = early ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    (early ? first : second)[name] = tensor;
    weight_map += fmt::format("{}\"{}\": \"{}\"", weight_map.empty() ? "" : ", ", name, shard);
  }
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), first);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), second);
  write_file_atomic(dir.file("model.safetensors.index.json"), [&](int fd) {
    const std::string index = fmt::format("{{\"metadata\": {{}}, \"weight_map\": {{{}}}}}", weight_map);
    write_all(fd, index.data(), index.size(), "index");
  });
  const Checkpoint c = load_checkpoint(dir.path());
  expect_same_tensors(c.tensors, bundled().tensors);
}

// Mistral's layout (Mamba-Codestral-7B-v0.1 as mistral_inference downloads it): params.json and
// consolidated.safetensors in mamba_ssm names; here the bundled model written that way.
TEST(Checkpoint, MistralParamsAndConsolidatedSafetensors) {
  TempDir dir;
  write_file_atomic(dir.file("params.json"), [&](int fd) {
    const std::string params = R"({"dim": 256, "n_layers": 4, "vocab_size": 50277, "n_groups": 1, "rms_norm": true,
        "residual_in_fp32": true, "fused_add_norm": true, "pad_vocab_size_multiple": 16, "tie_embeddings": true,
        "model_type": "mamba"})";
    write_all(fd, params.data(), params.size(), "params");
  });
  write_safetensors(dir.file("consolidated.safetensors"), bundled().tensors);
  const Checkpoint c = load_checkpoint(dir.path());
  EXPECT_EQ(c.layout, "Mistral (consolidated.safetensors)");
  EXPECT_EQ(c.config.spelling, ConfigSpelling::kMistralParams);
  expect_same_tensors(c.tensors, bundled().tensors);
}

std::string load_error(const std::string& dir) {
  try {
    load_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, WrongShapeNamesTheTensor) {
  TempDir dir;
  fs::copy_file("examples/mamba2-tiny/config.json", dir.file("config.json"));
  TensorMap tensors = bundled().tensors;
  tensors["backbone.layers.2.mixer.D"] = Tensor::from_f32({9}, std::vector<float>(9, 1.0f));
  write_safetensors(dir.file("model.safetensors"), tensors);
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("tensor 'backbone.layers.2.mixer.D' has shape [9], the config implies [8]"));
}

TEST(Checkpoint, MissingAndUnexpectedTensors) {
  TempDir dir;
  fs::copy_file("examples/mamba2-tiny/config.json", dir.file("config.json"));
  TensorMap tensors = bundled().tensors;
  tensors.erase("backbone.norm_f.weight");
  write_safetensors(dir.file("model.safetensors"), tensors);
  EXPECT_THAT(load_error(dir.path()), HasSubstr("missing tensor 'backbone.norm_f.weight'"));
  tensors = bundled().tensors;
  tensors["backbone.layers.0.mixer.extra"] = Tensor::from_f32({1}, {0.f});
  write_safetensors(dir.file("model.safetensors"), tensors);
  EXPECT_THAT(load_error(dir.path()), HasSubstr("unexpected tensor 'backbone.layers.0.mixer.extra'"));
}

TEST(Checkpoint, TiedHeadThatDiffersIsRefused) {
  TempDir dir;
  fs::copy_file("examples/mamba2-tiny/config.json", dir.file("config.json"));
  TensorMap tensors = bundled().tensors;
  const Tensor& embedding = tensors.at("backbone.embedding.weight");
  std::vector<uint8_t> bytes(embedding.data, embedding.data + embedding.nbytes());
  bytes[0] ^= 1;
  tensors["lm_head.weight"] = Tensor::own(embedding.dtype, embedding.shape, bytes);
  write_safetensors(dir.file("model.safetensors"), tensors);
  EXPECT_THAT(load_error(dir.path()), HasSubstr("lm_head.weight differs"));
}

TEST(Checkpoint, FolderErrors) {
  TempDir dir;
  EXPECT_THAT(load_error(dir.path()), HasSubstr("no config.json"));
  fs::copy_file("examples/mamba2-tiny/config.json", dir.file("config.json"));
  EXPECT_THAT(load_error(dir.path()), HasSubstr("no weights found"));
}

}  // namespace
}  // namespace ssdq
