#include "model/model_loader.h"

#include "formats/error.h"
#include "formats/file_io.h"
#include "model/checkpoint_weights.h"

namespace ssdq {

std::string find_tokenizer(const std::string& model_dir, const std::string& override_path) {
  if (!override_path.empty()) {
    if (!file_exists(override_path)) fail("{}: tokenizer file not found", override_path);
    return override_path;
  }
  const std::string bundled = join_path(model_dir, "tokenizer.json");
  if (!file_exists(bundled))
    fail("{}: no tokenizer.json in the model folder; pass --tokenizer PATH (Mamba-2 uses the GPT-NeoX-20B "
         "tokenizer.json)",
         model_dir);
  return bundled;
}

LoadedModel load_model(const std::string& model_dir) {
  Checkpoint checkpoint = load_checkpoint(model_dir);
  LoadedModel model;
  model.dir = model_dir;
  model.weights_path = checkpoint.weights_path;
  model.weights = std::make_shared<const ModelWeights>(load_fp32_weights(checkpoint));
  return model;
}

}  // namespace ssdq
