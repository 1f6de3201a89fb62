#include <fmt/format.h>

#include <map>
#include <memory>

#include "formats/checkpoint.h"
#include "formats/hub_cache.h"
#include "tools/commands.h"

namespace ssdq::cli {
namespace {

void run_info(const std::string& model_dir) {
  const Checkpoint checkpoint = load_checkpoint(model_dir);
  const Mamba2Config& c = checkpoint.config;
  fmt::print("model      {}\n", model_dir);
  fmt::print("weights    {}\n", checkpoint.weights_path);
  fmt::print("config     {} spelling\n", c.spelling == ConfigSpelling::kMambaSsm ? "mamba_ssm" : "transformers");
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
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "Describe a checkpoint: config, derived widths, tensors (all shapes are checked).");
  cmd->add_option("--model", *model, "Checkpoint folder, or org/name[@revision] on the Hugging Face hub")->required();
  cmd->callback([model] { run_info(resolve_model_dir(*model)); });
}

}  // namespace ssdq::cli
