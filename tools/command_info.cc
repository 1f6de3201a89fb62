#include <fmt/format.h>

#include <map>
#include <memory>
#include <optional>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/hub_cache.h"
#include "formats/tokenizer.h"
#include "model/model_loader.h"
#include "tools/commands.h"

namespace ssdq::cli {
namespace {

void run_info(const std::string& model_dir, const std::string& tokenizer_path) {
  const Checkpoint checkpoint = load_checkpoint(model_dir);
  const Mamba2Config& c = checkpoint.config;
  fmt::print("model      {}\n", model_dir);
  fmt::print("layout     {}\n", checkpoint.layout);
  fmt::print("weights    {}\n", checkpoint.weights_path);
  fmt::print("config     {}\n", c.spelling == ConfigSpelling::kMambaSsm      ? "config.json, mamba_ssm spelling"
                                  : c.spelling == ConfigSpelling::kTransformers ? "config.json, transformers spelling"
                                  : c.spelling == ConfigSpelling::kMistralParams ? "Mistral's params.json"
                                                                                 : "Megatron-LM args (argparse.Namespace)");
  fmt::print("           {}\n", c.summary());
  fmt::print("derived    d_in_proj {} · conv_dim {} · heads per group {} · dt limit [{}, {}] · eps {}\n", c.d_in_proj(),
             c.conv_dim(), c.heads_per_group(), c.dt_min, c.dt_max, c.norm_eps);
  std::map<std::string, std::pair<int, int64_t>> by_dtype;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    auto& entry = by_dtype[std::string(dtype_name(tensor.dtype))];
    entry.first += 1;
    entry.second += tensor.numel();
  }
  for (const auto& [dtype, entry] : by_dtype)
    fmt::print("tensors    {} × {} ({:.2f} M elements)\n", entry.first, dtype, entry.second / 1e6);
  TokenizerSource source;
  std::optional<Tokenizer> found;
  try {
    source = find_tokenizer(model_dir, tokenizer_path, c.vocab_size);
    found.emplace(Tokenizer::from_bytes(source.bytes, source.label));
  } catch (const Error& e) {
    fmt::print("tokenizer  none usable: {}\n", e.what());
    return;
  }
  const Tokenizer& tokenizer = *found;
  fmt::print("tokenizer  {} · {} ids (model vocabulary {}) · end of text id {}\n           {}\n", tokenizer.kind(),
             tokenizer.vocab_size(), c.vocab_size,
             tokenizer.end_of_text() ? std::to_string(*tokenizer.end_of_text()) : std::string("none"), source.label);
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto tokenizer = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "info", "Describe a checkpoint: layout read, config, derived widths, tensors (all shapes are checked), tokenizer.");
  cmd->add_option("--model", *model,
                  "Checkpoint folder (config.json + safetensors / pytorch_model.bin, or a Megatron-LM checkpoint), "
                  "or org/name[@revision] on the Hugging Face hub")
      ->required();
  cmd->add_option("--tokenizer", *tokenizer, "tokenizer.json or SentencePiece .model (default: found beside the weights)");
  cmd->callback([model, tokenizer] { run_info(resolve_model_dir(*model), *tokenizer); });
}

}  // namespace ssdq::cli
