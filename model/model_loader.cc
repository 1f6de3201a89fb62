#include "model/model_loader.h"

#include "model/synthetic_configs.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "formats/builtin_tokenizer.h"
#include "formats/digest.h"

#include "formats/error.h"
#include "formats/file_io.h"
#include "model/checkpoint_weights.h"

namespace ssdq {

TokenizerSource find_tokenizer(const std::string& model_dir, const std::string& override_path, int64_t vocab_size) {
  auto from_file = [](const std::string& path) {
    if (!file_exists(path)) fail("{}: tokenizer file not found", path);
    TokenizerSource source{read_file(path), path, ""};
    source.sha256 = file_sha256_hex(path);
    return source;
  };
  if (!override_path.empty()) return from_file(override_path);
  for (const char* name : {"tokenizer.model", "tokenizer.model.v3", "tokenizer.json"}) {
    const std::string bundled = join_path(model_dir, name);
    if (file_exists(bundled)) return from_file(bundled);
  }
  // Megatron-LM releases name the SentencePiece file after its corpus
  // (mt_nlg_plus_multilingual_ja_zh_the_stack_frac_015_256k.model).
  std::vector<std::string> models;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir, error))
    if (entry.is_regular_file() && entry.path().extension() == ".model") models.push_back(entry.path().string());
  std::sort(models.begin(), models.end());
  if (models.size() == 1) return from_file(models[0]);
  if (models.size() > 1)
    fail("{}: several SentencePiece files ({} and {}); pass the model's with --tokenizer PATH", model_dir, models[0],
         models[1]);
  TokenizerSource source{std::string(builtin_gpt_neox_tokenizer_json()), "the built-in GPT-NeoX-20B tokenizer", ""};
  const int32_t ids = Tokenizer::from_json(source.bytes, source.label).vocab_size();
  if (ids > vocab_size)
    fail("{}: no tokenizer.json in the model folder, and the built-in GPT-NeoX-20B tokenizer has {} ids, more than the "
         "model's vocabulary of {}; pass --tokenizer PATH",
         model_dir, ids, vocab_size);
  static bool announced = false;
  if (!announced) {
    std::fprintf(stderr, "ssdq: %s has no tokenizer.json; using the GPT-NeoX-20B tokenizer built into ssdq\n",
                 model_dir.c_str());
    announced = true;
  }
  Sha256 hash;
  hash.update(source.bytes.data(), source.bytes.size());
  source.sha256 = hash.hex_digest();
  return source;
}

namespace {
constexpr char kSyntheticPrefix[] = "synthetic:";
}

std::string synthetic_model_dir(const std::string& name) { return kSyntheticPrefix + name; }

LoadedModel load_model(const std::string& model_dir) {
  LoadedModel model;
  model.dir = model_dir;
  if (model_dir.rfind(kSyntheticPrefix, 0) == 0) {
    model.weights_path = model_dir;
    model.weights = std::make_shared<ModelWeights>(
        random_weights_threaded(synthetic_config(model_dir.substr(sizeof(kSyntheticPrefix) - 1)), 0));
    Sha256 hash;
    hash.update(model_dir.data(), model_dir.size());
    model.weights_sha256 = hash.hex_digest();
    return model;
  }
  Checkpoint checkpoint = load_checkpoint(model_dir);
  model.weights_path = checkpoint.weights_path;
  model.weights = std::make_shared<ModelWeights>(load_fp32_weights(checkpoint));
  model.weights_sha256 = file_sha256_hex(model.weights_path);
  return model;
}

}  // namespace ssdq
