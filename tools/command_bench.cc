#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/hub_cache.h"
#include "runtime/backend_factory.h"
#include "runtime/bench.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_measure.h"
#include "runtime/model_loader.h"
#include "runtime/progress.h"
#include "runtime/synthetic_configs.h"
#include "tools/commands.h"

namespace ssdq::cli {
namespace {

using nlohmann::json;

struct BenchFlags {
  std::string model, synthetic, device = "cuda", module = "model", json_path;
  std::vector<int64_t> batches = {1};
  std::vector<int64_t> ssd_batches = {1, 2, 4, 8, 16, 32}, ssd_lengths = {256, 512, 1024, 2048};
  int64_t prompt = 1024, gen = 128;
  int repeats = 3;
  uint64_t seed = 0;
};

void write_json(const std::string& path, const json& report) {
  if (path.empty()) return;
  const std::string text = report.dump(2) + "\n";
  write_file_atomic(path, [&](int fd) { write_all(fd, text.data(), text.size(), path); });
  fmt::print("wrote {}\n", path);
}

json ceilings_json(const DeviceCeilings& c) {
  return {{"copy_gb_per_s", c.copy_gb_per_s}, {"bf16_tflop_per_s", c.bf16_tflop_per_s}};
}

Mamba2Config config_of(const BenchFlags& flags) {
  if (!flags.synthetic.empty()) return synthetic_config(flags.synthetic);
  return load_checkpoint(flags.model).config;
}

void run_ssd_module(const BenchFlags& flags, const DeviceSpec& device) {
  const Mamba2Config config = config_of(flags);
  const DeviceCeilings ceilings = measure_device_ceilings(device.index);
  fmt::print("device copy {:.0f} GB/s · bf16 GEMM {:.0f} TFLOP/s (measured)\n", ceilings.copy_gb_per_s,
             ceilings.bf16_tflop_per_s);
  fmt::print("SSD module: heads {} × headdim {} · d_state {} · ngroups {} · chunk {}\n", config.nheads(), config.headdim,
             config.d_state, config.ngroups, config.chunk_size);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t b : flags.ssd_batches) shapes.emplace_back(b, 2048);
  for (int64_t l : flags.ssd_lengths) shapes.emplace_back(32, l);
  const auto timings = measure_ssd_module(config, shapes, device.index, std::max(flags.repeats, 5));
  json rows = json::array();
  fmt::print("{:>6} {:>6} {:>10} {:>10} {:>10} {:>10} {:>8}\n", "batch", "length", "ms", "TFLOP/s", "GB/s", "floor ms",
             "floor/ms");
  for (const auto& t : timings) {
    const double floor_ms = std::max(t.flops / (ceilings.bf16_tflop_per_s * 1e9), t.bytes / (ceilings.copy_gb_per_s * 1e6));
    fmt::print("{:>6} {:>6} {:>10.3f} {:>10.1f} {:>10.0f} {:>10.3f} {:>7.0f}%\n", t.batch, t.length, t.ms,
               t.flops / (t.ms * 1e9), t.bytes / (t.ms * 1e6), floor_ms, 100 * floor_ms / t.ms);
    rows.push_back(json{{"batch", t.batch}, {"length", t.length}, {"ms", t.ms}, {"flops", t.flops}, {"bytes", t.bytes},
                    {"floor_ms", floor_ms}});
  }
  write_json(flags.json_path, {{"module", "ssd"}, {"ceilings", ceilings_json(ceilings)}, {"rows", rows}});
}

void run_model(const BenchFlags& flags, const DeviceSpec& device) {
  std::unique_ptr<Backend> backend;
  DeviceCeilings ceilings;
  if (device.cuda) ceilings = measure_device_ceilings(device.index);
  CudaBackendOptions cuda_options;
  cuda_options.device = device.index;
  if (!flags.synthetic.empty()) {
    if (!device.cuda) fail("--synthetic needs --device cuda (random weights are made on the GPU)");
    backend = std::make_unique<CudaBackend>(synthetic_config(flags.synthetic), flags.seed, cuda_options);
  } else {
    backend = make_backend(flags.device, load_model(flags.model).weights);
  }
  const Mamba2Config& config = backend->config();
  auto* cuda = dynamic_cast<CudaBackend*>(backend.get());
  fmt::print("model   {}\n        {}\n", flags.synthetic.empty() ? flags.model : "synthetic " + flags.synthetic,
             config.summary());
  if (cuda)
    fmt::print("device  {} · copy {:.0f} GB/s · bf16 GEMM {:.0f} TFLOP/s (measured)\n", cuda->device_name(),
               ceilings.copy_gb_per_s, ceilings.bf16_tflop_per_s);
  const size_t weight_bytes = cuda ? cuda->memory().weight_bytes : 0;
  const double state_bytes = config.n_layer * (config.nheads() * config.headdim * config.d_state * 4.0 +
                                               config.conv_dim() * (config.d_conv - 1) * 2.0);
  ModelBenchOptions options;
  options.batches = flags.batches;
  options.prompt = flags.prompt;
  options.gen = flags.gen;
  options.repeats = flags.repeats;
  options.seed = flags.seed;
  ProgressBar progress("bench", static_cast<int64_t>(flags.batches.size()), "batch sizes");
  int64_t done = 0;
  const auto rows = bench_model(*backend, options, [&](ModelBenchRow& row) {
    if (cuda) row.peak_bytes = cuda->memory().peak_bytes;
    progress.update(++done);
  });
  progress.finish();
  json out = json::array();
  fmt::print("{:>5} {:>10} {:>10} {:>12} {:>12} {:>9} {:>10} {:>9} {:>9}\n", "batch", "TTFT ms", "TPOT ms", "prefill t/s",
             "decode t/s", "peak GiB", "TPOT floor", "floor/TPOT", "prefill %");
  for (const auto& r : rows) {
    // Decode reads every weight once and each sequence's state (read + write) per step.
    const double floor_ms = cuda ? (weight_bytes + 2.0 * r.batch * state_bytes) / (ceilings.copy_gb_per_s * 1e6) : 0;
    const double prefill_share =
        cuda ? model_flops(config, r.batch * flags.prompt) / (r.ttft_ms * 1e9) / ceilings.bf16_tflop_per_s : 0;
    fmt::print("{:>5} {:>10.2f} {:>10.3f} {:>12.0f} {:>12.0f} {:>9.2f} {:>10.3f} {:>8.0f}% {:>8.0f}%\n", r.batch,
               r.ttft_ms, r.tpot_ms, r.prefill_tokens_per_s, r.decode_tokens_per_s, r.peak_bytes / double(1 << 30),
               floor_ms, r.tpot_ms > 0 ? 100 * floor_ms / r.tpot_ms : 0, 100 * prefill_share);
    out.push_back(json{{"batch", r.batch}, {"prompt", flags.prompt}, {"gen", flags.gen}, {"ttft_ms", r.ttft_ms},
                   {"tpot_ms", r.tpot_ms}, {"prefill_tokens_per_s", r.prefill_tokens_per_s},
                   {"decode_tokens_per_s", r.decode_tokens_per_s}, {"peak_bytes", r.peak_bytes},
                   {"tpot_floor_ms", floor_ms}, {"prefill_fraction_of_bf16_rate", prefill_share}});
  }
  write_json(flags.json_path, {{"module", "model"},
                               {"model", flags.synthetic.empty() ? flags.model : flags.synthetic},
                               {"device", cuda ? cuda->device_name() : "cpu"},
                               {"ceilings", ceilings_json(ceilings)},
                               {"weight_bytes", weight_bytes},
                               {"rows", out}});
}

void run_bench(const BenchFlags& flags) {
  if (flags.model.empty() == flags.synthetic.empty()) fail("bench: give exactly one of --model or --synthetic");
  const DeviceSpec device = parse_device(flags.device);
  if (flags.module == "ssd") {
    if (!device.cuda) fail("--module ssd times the CUDA kernels: use --device cuda");
    run_ssd_module(flags, device);
  } else {
    run_model(flags, device);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  std::string synthetic_help = "Random weights with the shapes of a known config:";
  for (const auto& name : synthetic_config_names()) synthetic_help += " " + name;
  CLI::App* cmd = app.add_subcommand(
      "bench", "Latency: TTFT for --prompt tokens and TPOT over --gen greedy steps per batch size, or the SSD module alone.");
  cmd->add_option("--model", flags->model, "Checkpoint folder, or org/name[@revision] on the Hugging Face hub");
  cmd->add_option("--synthetic", flags->synthetic, synthetic_help);
  cmd->add_option("--device", flags->device, "cuda, cuda:N or cpu")->capture_default_str();
  cmd->add_option("--batch", flags->batches, "Batch sizes, comma separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--prompt", flags->prompt, "Prompt tokens per sequence")->capture_default_str();
  cmd->add_option("--gen", flags->gen, "Generated tokens per sequence")->capture_default_str();
  cmd->add_option("--module", flags->module, "model (end to end) or ssd (the SSD prefill kernels alone)")
      ->check(CLI::IsMember({"model", "ssd"}))
      ->capture_default_str();
  cmd->add_option("--ssd-batches", flags->ssd_batches, "--module ssd: batch sizes at length 2048")->delimiter(',');
  cmd->add_option("--ssd-lengths", flags->ssd_lengths, "--module ssd: lengths at batch 32")->delimiter(',');
  cmd->add_option("--repeats", flags->repeats, "Timed repeats (median reported)")->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed of the random prompt and synthetic weights")->capture_default_str();
  cmd->add_option("--json", flags->json_path, "Also write every figure to this JSON file");
  cmd->callback([flags] { flags->model = flags->model.empty() ? "" : resolve_model_dir(flags->model), run_bench(*flags); });
}

}  // namespace ssdq::cli
