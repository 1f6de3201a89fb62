#include "tools/model_source.h"

#include <fmt/format.h>

#include "formats/error.h"
#include "formats/hub_cache.h"
#include "model/model_loader.h"
#include "model/synthetic_configs.h"
#include "model/quantized_artifact.h"
#include "runtime/backend_factory.h"
#include "runtime/cpu_tensor_parallel.h"
#include "runtime/cuda_tensor_parallel.h"
#include "tools/flag_checks.h"

namespace ssdq::cli {

void add_model_source_options(CLI::App* command, ModelSourceFlags& flags) {
  CLI::Option* model = command->add_option("--model", flags.model,
                                           "Checkpoint folder (config.json + weights), or org/name[@revision] on the hub");
  command->add_option("--artifact", flags.artifact, "Quantized model written by ssdq export (.ssdq); instead of --model")
      ->check(CLI::ExistingFile)
      ->excludes(model);
  command->add_option("--tokenizer", flags.tokenizer,
                      "tokenizer.json or SentencePiece tokenizer.model (default: the model folder's tokenizer.model, then tokenizer.json, or the one the artifact embeds, else the built-in GPT-NeoX-20B)");
  command->add_option("--device", flags.device, "cpu, cuda or cuda:N")->capture_default_str();
  command
      ->add_option("--tp", flags.tp,
                   "Tensor-parallel ranks: the model sharded over N ranks (heads split, out_proj summed across "
                   "them; docs/TENSOR_PARALLEL.md). With --device cuda[:K], N GPUs (K, K+1, …), one thread each; "
                   "with --device cpu, N threads run the CPU specification of sharded execution. An artifact of had, "
                   "quamba2 or ssdi8 needs ssdq export --tp-blocks N (or a multiple of N)")
      ->check(whole_number(1, 1024))
      ->capture_default_str();
}

std::string model_or_synthetic(const std::string& command, const std::string& model, const std::string& synthetic) {
  if (model.empty() == synthetic.empty()) fail("{} needs exactly one of --model and --synthetic", command);
  if (model.empty()) {
    synthetic_config(synthetic);  // an unknown name fails here, listing the known ones
    return synthetic_model_dir(synthetic);
  }
  return resolve_model_dir(model);
}

namespace {

// `model` (the FP weights or an artifact) over `tp` ranks: GPUs from --device's index on (each
// rank's engine made with the command's preferences), or virtual ranks on the CPU.
template <typename Model>
void use_tensor_parallel(ModelSource& source, const Model& model, int tp, const DeviceSpec& spec,
                         const BackendPreferences& preferences) {
  if (spec.cuda) {
    source.backend =
        std::make_unique<CudaTensorParallelBackend>(model, tp, cuda_backend_options(spec.index, preferences));
    source.description += fmt::format("        tensor parallel: {} GPUs\n", tp);
  } else {
    source.backend = std::make_unique<CpuTensorParallelBackend>(model, tp);
    source.description += fmt::format("        tensor parallel: {} virtual ranks\n", tp);
  }
}

}  // namespace

ModelSource load_model_source(const std::string& command, const ModelSourceFlags& flags) {
  const std::string model = flags.model.empty() ? "" : resolve_model_dir(flags.model, flags.model_flag);
  const std::string& artifact = flags.artifact;
  const std::string& tokenizer = flags.tokenizer;
  const std::string& device = flags.device;
  if (model.empty() == artifact.empty()) fail("{} needs exactly one of --model and --artifact", command);
  const DeviceSpec spec = parse_device(device);  // an unknown device is refused before anything is read
  ModelSource source;
  std::string tokenizer_label;
  const auto tokenizer_line = [&] {
    return fmt::format("        tokenizer {}: {}, {} ids\n", tokenizer_label, source.tokenizer->kind(),
                       source.tokenizer->vocab_size());
  };
  if (!artifact.empty()) {
    const LoadedArtifact loaded = read_quantized_artifact(artifact);
    if (!tokenizer.empty()) {
      source.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(tokenizer));
      tokenizer_label = tokenizer;
    } else if (!loaded.tokenizer_bytes.empty()) {
      tokenizer_label = artifact + " (embedded)";
      source.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_bytes(loaded.tokenizer_bytes, tokenizer_label));
    } else {
      fail("{}: the artifact embeds no tokenizer; pass --tokenizer PATH", artifact);
    }
    source.description = fmt::format("artifact {}\n        recipe {}\n        {}\n", artifact, loaded.description.recipe,
                                     loaded.model->config.summary()) +
                         tokenizer_line();
    if (flags.tp > 1) {
      use_tensor_parallel(source, *loaded.model, flags.tp, spec, flags.preferences);
    } else {
      source.backend = make_quantized_backend(device, loaded.model, flags.preferences);
    }
    return source;
  }
  const LoadedModel loaded = load_model(model);
  const TokenizerSource found = find_tokenizer(model, tokenizer, loaded.weights->config.vocab_size);
  source.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_bytes(found.bytes, found.label));
  tokenizer_label = found.label;
  source.description =
      fmt::format("model   {} ({})\n        {}\n", model, loaded.weights_path, loaded.weights->config.summary()) +
      tokenizer_line();
  if (flags.tp > 1) {
    use_tensor_parallel(source, *loaded.weights, flags.tp, spec, flags.preferences);
  } else {
    source.backend = make_backend(device, loaded.weights, flags.preferences);
  }
  return source;
}

}  // namespace ssdq::cli
