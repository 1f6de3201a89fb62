// Everything a command needs to run a checkpoint folder: config, FP32 weights, tokenizer.
#pragma once

#include <memory>
#include <string>

#include "formats/checkpoint.h"
#include "formats/tokenizer.h"
#include "model/model_weights.h"

namespace ssdq {

// tokenizer.json from `override` if given, else from the model folder; the error says what
// to pass when neither exists (official mamba_ssm checkpoints ship without one).
std::string find_tokenizer(const std::string& model_dir, const std::string& override_path);

struct LoadedModel {
  std::string dir, weights_path;
  std::shared_ptr<const ModelWeights> weights;
};

LoadedModel load_model(const std::string& model_dir);

}  // namespace ssdq
