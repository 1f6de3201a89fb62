#include "tools/model_source.h"

#include <fmt/format.h>

#include "formats/error.h"
#include "model/model_loader.h"
#include "model/quantized_artifact.h"
#include "runtime/backend_factory.h"

namespace ssdq::cli {

ModelSource load_model_source(const std::string& command, const std::string& model, const std::string& artifact,
                              const std::string& tokenizer, const std::string& device) {
  if (model.empty() == artifact.empty()) fail("{} needs exactly one of --model and --artifact", command);
  parse_device(device);  // an unknown device is refused before anything is read
  ModelSource source;
  if (!artifact.empty()) {
    const LoadedArtifact loaded = read_quantized_artifact(artifact);
    if (!tokenizer.empty()) {
      source.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(tokenizer));
    } else if (!loaded.tokenizer_json.empty()) {
      source.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_json(loaded.tokenizer_json, artifact + " (tokenizer)"));
    } else {
      fail("{}: the artifact embeds no tokenizer; pass --tokenizer PATH", artifact);
    }
    source.description = fmt::format("artifact {}\n        recipe {}\n        {}\n", artifact, loaded.description.recipe,
                                     loaded.model->config.summary());
    source.backend = make_quantized_backend(device, loaded.model);
    return source;
  }
  const LoadedModel loaded = load_model(model);
  source.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(find_tokenizer(model, tokenizer)));
  source.description =
      fmt::format("model   {} ({})\n        {}\n", model, loaded.weights_path, loaded.weights->config.summary());
  source.backend = make_backend(device, loaded.weights);
  return source;
}

}  // namespace ssdq::cli
