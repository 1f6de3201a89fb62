// Everything a command needs to run a checkpoint folder: config, FP32 weights, tokenizer.
#pragma once

#include <memory>
#include <cstdint>
#include <string>

#include "formats/checkpoint.h"
#include "formats/tokenizer.h"
#include "model/model_weights.h"

namespace ssdq {

// The tokenizer of a model folder: --tokenizer when given, else the folder's tokenizer.model or
// tokenizer.model.v3 (SentencePiece, preferred where a tokenizer.json also exists, as the
// reference libraries do), else its tokenizer.json, else its one other *.model file (Megatron-LM
// releases), else the GPT-NeoX-20B tokenizer built into ssdq (official mamba_ssm checkpoints ship
// without one), refused when it has ids beyond the model's vocabulary and announced on stderr.
struct TokenizerSource {
  std::string bytes;   // the tokenizer.json text or the SentencePiece model (Tokenizer::from_bytes)
  std::string label;   // its path, or "the built-in GPT-NeoX-20B tokenizer"
  std::string sha256;  // of the text
};
TokenizerSource find_tokenizer(const std::string& model_dir, const std::string& override_path, int64_t vocab_size);

struct LoadedModel {
  std::string dir, weights_path;
  // The loader's own model: a caller that is its last user may move the tensors out (export does).
  std::shared_ptr<ModelWeights> weights;
  std::string weights_sha256;  // of the weights file; of the name for a synthetic model
};

// A checkpoint folder, or `synthetic_model_dir(NAME)`: random weights (random_weights, seed 0)
// with the shapes of a known config (model/synthetic_configs.h), for timing calibrate and export
// at real sizes without the weights; its "weights path" is that name (what provenance records).
LoadedModel load_model(const std::string& model_dir);
std::string synthetic_model_dir(const std::string& name);  // "synthetic:NAME"

}  // namespace ssdq
