#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/hub_cache.h"
#include "runtime/backend_factory.h"
#include "runtime/all_reduce_bench.h"
#include "runtime/bench.h"
#include "model/tensor_parallel.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_tensor_parallel.h"
#include "pipeline/synthetic_quantized.h"
#include "quant/recipe.h"
#include "runtime/cuda_measure.h"
#include "model/quantized_artifact.h"
#include "model/model_loader.h"
#include "runtime/progress.h"
#include "model/synthetic_configs.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/json_report.h"

namespace ssdq::cli {
namespace {

using nlohmann::json;

struct BenchFlags {
  std::string model, synthetic, artifact, recipe, bits, device = "cuda", module = "model", json_path;
  std::vector<int64_t> batches = {1};
  std::vector<int64_t> ssd_batches = {1, 2, 4, 8, 16, 32}, ssd_lengths = {256, 512, 1024, 2048};
  std::vector<int64_t> prompts = {1024};  // each timed with every batch size, on one model build
  int64_t gen = 128;
  int64_t group_size = RecipeOptions{}.group_size;
  int repeats = 3;
  uint64_t seed = 0;
  bool head_to_toe = false;
  bool show_plan = false;
  std::vector<int64_t> verify_windows;  // speculative verify windows to time against a step
  double acceptance = 0;                // with verify windows: speculation simulated at this rate
  bool as_generate = false;             // verify windows as greedy generate runs them
  bool replay_apart = false;            // windows replayed apart, after a copy of the state
  std::vector<int64_t> drafts{1};       // with verify windows: rows a sequence (generate's --drafts)
  std::vector<int64_t> tp = {1};        // tensor-parallel sizes, each timed on its own model build
};

json ceilings_json(const DeviceCeilings& c) {
  return {{"copy_gb_per_s", c.copy_gb_per_s}, {"bf16_tflop_per_s", c.bf16_tflop_per_s}};
}

Mamba2Config config_of(const BenchFlags& flags) {
  if (!flags.synthetic.empty()) return synthetic_config(flags.synthetic);
  if (!flags.artifact.empty()) return read_quantized_artifact(flags.artifact).model->config;
  return load_checkpoint(flags.model).config;
}

// What the report names the model.
std::string model_label(const BenchFlags& flags) {
  std::string label = !flags.artifact.empty() ? flags.artifact
                      : flags.synthetic.empty() ? flags.model
                                                : "synthetic " + flags.synthetic;
  if (!flags.recipe.empty()) label += " " + flags.recipe + " " + flags.bits;
  if (flags.head_to_toe) label += " head-to-toe";
  if (!flags.recipe.empty() && flags.group_size != RecipeOptions{}.group_size)
    label += " group " + std::to_string(flags.group_size);
  const int64_t widest = *std::max_element(flags.tp.begin(), flags.tp.end());
  if (!flags.recipe.empty() && flags.recipe != "rtn" && flags.bits != "fp16" && widest > 1)
    label += fmt::format(" (Hadamard in {} blocks)", widest);
  return label;
}

// What the builds of one bench share: the checkpoint's weights or the quantized model (an
// artifact, or --recipe's synthetic one), each loaded or made once, and the model's config.
struct BenchModel {
  std::shared_ptr<const ModelWeights> weights;
  std::shared_ptr<const QuantizedModel> quantized;
  Mamba2Config config;
};

// The synthetic model in --recipe's formats. A rotated recipe's online Hadamard runs in as many
// blocks as the largest --tp (export --tp-blocks), so that every --tp of one run times the same model.
std::shared_ptr<const QuantizedModel> synthetic_quantized(const BenchFlags& flags) {
  if (flags.synthetic.empty()) fail("--recipe/--bits time a synthetic quantized model: give --synthetic NAME too");
  RecipeOptions recipe;
  recipe.recipe = parse_recipe_name(flags.recipe);
  recipe.bits = parse_bit_width(flags.bits);
  recipe.quantize_embedding = recipe.quantize_lm_head = flags.head_to_toe;
  recipe.group_size = flags.group_size;
  if (flags.head_to_toe && !recipe.quantized()) fail("--head-to-toe needs quantized weights, not --bits fp16");
  const int64_t widest = *std::max_element(flags.tp.begin(), flags.tp.end());
  if (recipe.uses_transforms()) recipe.tp_blocks = widest;
  return std::make_shared<const QuantizedModel>(
      synthetic_quantized_model(synthetic_config(flags.synthetic), recipe, flags.seed));
}

// The backend to time: a checkpoint or synthetic model (FP, bf16 on the GPU), an artifact, or a
// synthetic model in a recipe's formats; what it needs loaded or made on the first build, into `model`.
std::unique_ptr<Backend> bench_backend(const BenchFlags& flags, const DeviceSpec& device, int tp, BenchModel& model) {
  if (tp > 1 && !device.cuda) fail("bench --tp {}: tensor parallelism is timed on GPUs (--device cuda)", tp);
  if (!flags.recipe.empty() && !device.cuda) fail("--synthetic needs --device cuda");
  if (!flags.model.empty() && !model.weights) model.weights = load_model(flags.model).weights;
  if (!model.quantized && !flags.artifact.empty()) model.quantized = read_quantized_artifact(flags.artifact).model;
  if (!model.quantized && !flags.recipe.empty()) model.quantized = synthetic_quantized(flags);
  BackendPreferences preferences;
  preferences.rows_alone = flags.as_generate;
  preferences.replay_in_window = !flags.replay_apart;
  CudaBackendOptions cuda_options = cuda_backend_options(device.index, preferences);
  if (tp > 1) {
    if (model.quantized) return std::make_unique<CudaTensorParallelBackend>(*model.quantized, tp, cuda_options);
    if (!flags.synthetic.empty())
      return std::make_unique<CudaTensorParallelBackend>(synthetic_config(flags.synthetic), flags.seed, tp, cuda_options);
    return std::make_unique<CudaTensorParallelBackend>(*model.weights, tp, cuda_options);
  }
  if (!flags.artifact.empty()) return make_quantized_backend(flags.device, model.quantized, preferences);
  if (model.quantized) return std::make_unique<CudaBackend>(model.quantized, cuda_options);
  if (!flags.synthetic.empty()) {
    if (!device.cuda) fail("--synthetic needs --device cuda (random weights are made on the GPU)");
    return std::make_unique<CudaBackend>(synthetic_config(flags.synthetic), flags.seed, cuda_options);
  }
  return make_backend(flags.device, model.weights, preferences);
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
  for (int64_t l : flags.ssd_lengths)  // (32, 2048) from both lists is timed once
    if (std::find(shapes.begin(), shapes.end(), std::pair<int64_t, int64_t>{32, l}) == shapes.end()) shapes.emplace_back(32, l);
  const bool ssdi8 = !flags.recipe.empty();
  if (ssdi8 && flags.recipe != "ssdi8") fail("--module ssd --recipe: only ssdi8 has its own SSD kernel");
  fmt::print("path: {}\n", ssdi8 ? "SSDi8 integer chunked SSD (fp16 x, int8 B and C, int8 state)" : "FP chunked SSD (bf16)");
  const auto timings = measure_ssd_module(config, shapes, device.index, std::max(flags.repeats, 5),
                                          ssdi8 ? SsdModulePath::kSsdi8 : SsdModulePath::kFloat);
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
  write_json_report(flags.json_path, {{"module", "ssd"},
                               {"path", ssdi8 ? "ssdi8" : "fp"},
                               {"ceilings", ceilings_json(ceilings)},
                               {"rows", rows}});
}

// Times one build (tensor-parallel size `tp`) and returns its JSON report; `runs` receives its
// rows, per prompt length.
json run_model_on(const BenchFlags& flags, const DeviceSpec& device, const DeviceCeilings& ceilings, int tp,
                  BenchModel& model, std::vector<std::pair<int64_t, std::vector<ModelBenchRow>>>& runs) {
  const std::unique_ptr<Backend> backend = bench_backend(flags, device, tp, model);
  model.config = backend->config();
  const Mamba2Config& config = backend->config();
  const bool cuda = backend->on_device();
  fmt::print("model   {}\n        {}\n", model_label(flags), config.summary());
  if (cuda)
    fmt::print("device  {} · copy {:.0f} GB/s · bf16 GEMM {:.0f} TFLOP/s (measured)\n", backend->device_name(),
               ceilings.copy_gb_per_s, ceilings.bf16_tflop_per_s);
  const size_t weight_bytes = cuda ? backend->memory().weight_bytes : 0;
  if (cuda) fmt::print("weights {:.3f} GiB on the device\n", weight_bytes / double(1 << 30));
  const double state_bytes = static_cast<double>(backend->state_bytes_per_sequence());
  ModelBenchOptions options;
  options.batches = flags.batches;
  options.gen = flags.gen;
  options.repeats = flags.repeats;
  options.seed = flags.seed;
  ProgressBar progress("bench", static_cast<int64_t>(flags.batches.size() * flags.prompts.size()), "runs");
  int64_t done = 0;
  // (prompt length, a row per batch size); a row's peak memory is the high-water mark so far.
  for (const int64_t prompt : flags.prompts) {
    options.prompt = prompt;
    runs.emplace_back(prompt, bench_model(*backend, options, [&](ModelBenchRow& row) {
                        if (cuda) row.peak_bytes = backend->memory().peak_bytes;
                        progress.update(++done);
                      }));
  }
  progress.finish();
  json out = json::array();
  for (const auto& [prompt, rows] : runs) {  // a table per prompt length, each under its own header line
    if (runs.size() > 1) fmt::print("prompt {} tokens\n", prompt);
    fmt::print("{:>5} {:>10} {:>10} {:>12} {:>12} {:>9} {:>10} {:>9} {:>9}\n", "batch", "TTFT ms", "TPOT ms",
               "prefill t/s", "decode t/s", "peak GiB", "TPOT floor", "floor/TPOT", "prefill %");
    for (const auto& r : rows) {
      // Decode reads every weight once and each sequence's state (read + write) per step.
      const double floor_ms = cuda ? (weight_bytes + 2.0 * r.batch * state_bytes) / (ceilings.copy_gb_per_s * 1e6) : 0;
      const double prefill_share =
          cuda ? model_flops(config, r.batch * prompt) / (r.ttft_ms * 1e9) / ceilings.bf16_tflop_per_s : 0;
      fmt::print("{:>5} {:>10.2f} {:>10.3f} {:>12.0f} {:>12.0f} {:>9.2f} {:>10.3f} {:>8.0f}% {:>8.0f}%\n", r.batch,
                 r.ttft_ms, r.tpot_ms, r.prefill_tokens_per_s, r.decode_tokens_per_s, r.peak_bytes / double(1 << 30),
                 floor_ms, r.tpot_ms > 0 ? 100 * floor_ms / r.tpot_ms : 0, 100 * prefill_share);
      out.push_back(json{{"batch", r.batch}, {"prompt", prompt}, {"gen", flags.gen}, {"ttft_ms", r.ttft_ms},
                     {"tpot_ms", r.tpot_ms}, {"prefill_tokens_per_s", r.prefill_tokens_per_s},
                     {"decode_tokens_per_s", r.decode_tokens_per_s}, {"peak_bytes", r.peak_bytes},
                     {"tpot_floor_ms", floor_ms}, {"prefill_fraction_of_bf16_rate", prefill_share}});
    }
  }
  json verify = json::array();
  if (!flags.verify_windows.empty()) {
    if (flags.as_generate)
      fmt::print("verify windows as greedy generate runs them (each row computed as alone; one call where that "
                 "window gives a step's bits, else token by token; each position's argmax copied back)\n");
    else
      fmt::print("verify windows ({}; logits of every position copied back, as generate uses them when sampling)\n",
                 backend->runs_window() ? "one multi-token call, Activation Replay on partial acceptance"
                                        : "token by token on this backend");
    const bool simulated = flags.acceptance > 0;
    fmt::print("{:>5} {:>6} {:>7} {:>9} {:>10} {:>8} {:>16} {:>8}{}\n", "batch", "drafts", "window", "step ms",
               "verify ms", "÷ step",
               "verify+replay ms", "÷ step",
               simulated ? fmt::format(" {:>13} {:>10} {:>9}", "tokens/window", "window ms", "speed-up") : "");
    for (const VerifyBenchRow& r :
         bench_verify(*backend, flags.batches, flags.verify_windows, flags.gen, flags.seed, flags.acceptance,
                      flags.as_generate, flags.drafts)) {
      const double speedup = simulated ? r.tokens_per_window * r.step_ms / r.window_ms : 0;
      fmt::print("{:>5} {:>6} {:>7} {:>9.3f} {:>10.3f} {:>8.2f} {:>16.3f} {:>8.2f}{}\n", r.batch, r.drafts, r.window,
                 r.step_ms,
                 r.verify_ms, r.verify_ms / r.step_ms, r.verify_replay_ms, r.verify_replay_ms / r.step_ms,
                 simulated ? fmt::format(" {:>13.2f} {:>10.3f} {:>8.2f}×", r.tokens_per_window, r.window_ms, speedup) : "");
      json row{{"batch", r.batch}, {"drafts", r.drafts}, {"window", r.window}, {"step_ms", r.step_ms}, {"verify_ms", r.verify_ms},
               {"verify_replay_ms", r.verify_replay_ms}};
      if (simulated) {
        row["acceptance"] = flags.acceptance;
        row["tokens_per_window"] = r.tokens_per_window;
        row["window_ms"] = r.window_ms;
        row["speedup"] = speedup;
      }
      verify.push_back(row);
    }
  }
  // After the timings: planning a shape reserves its workspace, which the peak column would count.
  if (flags.show_plan) {  // what each timed shape runs: the prefill of each prompt length, then decode
    for (const int64_t batch : flags.batches) {
      for (const int64_t prompt : flags.prompts) fmt::print("{}", backend->describe_plan(batch, prompt));
      fmt::print("{}", backend->describe_plan(batch, 1));
    }
  }
  return {{"module", "model"},      {"model", model_label(flags)}, {"device", backend->device_name()},
          {"tp", tp},               {"ceilings", ceilings_json(ceilings)}, {"weight_bytes", weight_bytes},
          {"rows", out},            {"verify", verify}};
}

// The all-reduce after each layer's out_proj, alone: the model's d_model wide, --batch rows, over
// the largest --tp; each route's µs per call and, times the layers, per decode step.
void run_all_reduce_module(const BenchFlags& flags, const DeviceSpec& device) {
  const Mamba2Config config = config_of(flags);
  const int tp = static_cast<int>(*std::max_element(flags.tp.begin(), flags.tp.end()));
  const TensorParallelPlan plan = plan_tensor_parallel(config, tp);
  const bool folded = plan.ranks_per_norm_group() > 1;
  std::string group;
  const auto timings = measure_all_reduce(tp, device.index, config.d_model, folded, flags.batches, 64,
                                          std::max(flags.repeats, 5), &group);
  fmt::print("all-reduce of out_proj's rows into the residual: {} floats a row{}, {} layers\n{}\n", config.d_model,
             folded ? " + the folded norm's sum" : "", config.n_layer, group);
  fmt::print("{:>6} {:>10} {:>16} {:>16} {:>12} {:>12} {:>16}\n", "rows", "bytes", "one-shot graph µs",
             "one-shot eager µs", "NCCL graph µs", "NCCL eager µs", "per step (engine's route)");
  json rows = json::array();
  for (const AllReduceTiming& t : timings) {
    auto cell = [](double us) { return us > 0 ? fmt::format("{:.2f}", us) : std::string("-"); };
    fmt::print("{:>6} {:>10} {:>17} {:>17} {:>13} {:>13} {:>13.1f} µs\n", t.rows, t.bytes, cell(t.one_shot_graph_us),
               cell(t.one_shot_eager_us), cell(t.nccl_graph_us), cell(t.nccl_eager_us), t.engine_graph_us() * config.n_layer);
    rows.push_back(json{{"rows", t.rows}, {"bytes", t.bytes}, {"one_shot_graph_us", t.one_shot_graph_us},
                        {"one_shot_eager_us", t.one_shot_eager_us}, {"nccl_graph_us", t.nccl_graph_us},
                        {"nccl_eager_us", t.nccl_eager_us}});
  }
  write_json_report(flags.json_path, {{"module", "allreduce"}, {"tp", tp}, {"group", group}, {"rows", rows}});
}

void run_model(const BenchFlags& flags, const DeviceSpec& device) {
  DeviceCeilings ceilings;
  if (device.cuda) ceilings = measure_device_ceilings(device.index);
  BenchModel model;
  if (flags.tp.size() == 1) {
    std::vector<std::pair<int64_t, std::vector<ModelBenchRow>>> runs;
    write_json_report(flags.json_path,
                      run_model_on(flags, device, ceilings, static_cast<int>(flags.tp[0]), model, runs));
    return;
  }
  // Several sizes: each build in turn (the previous one freed first), then each size against the first.
  json reports = json::array();
  std::vector<std::vector<std::pair<int64_t, std::vector<ModelBenchRow>>>> by_tp(flags.tp.size());
  for (size_t i = 0; i < flags.tp.size(); ++i) {
    fmt::print("── tensor parallel: {} GPU{} ──\n", flags.tp[i], flags.tp[i] == 1 ? "" : "s");
    reports.push_back(run_model_on(flags, device, ceilings, static_cast<int>(flags.tp[i]), model, by_tp[i]));
  }
  fmt::print("against --tp {}:\n{:>4} {:>7} {:>5} {:>11} {:>11} {:>14}\n", flags.tp[0], "tp", "prompt", "batch",
             "TTFT ×", "TPOT ×", "decode t/s ×");
  for (size_t i = 1; i < flags.tp.size(); ++i)
    for (size_t p = 0; p < by_tp[i].size(); ++p)
      for (size_t b = 0; b < by_tp[i][p].second.size(); ++b) {
        const ModelBenchRow& base = by_tp[0][p].second[b];
        const ModelBenchRow& r = by_tp[i][p].second[b];
        fmt::print("{:>4} {:>7} {:>5} {:>11.3f} {:>11.3f} {:>14.3f}\n", flags.tp[i], by_tp[i][p].first, r.batch,
                   r.ttft_ms / base.ttft_ms, r.tpot_ms / base.tpot_ms, r.decode_tokens_per_s / base.decode_tokens_per_s);
      }
  // The all-reduces' share of a decode step: the layers' all-reduces of each batch's rows timed
  // alone (in graphs, after the builds are freed), against the step they belong to.
  json shares = json::array();
  const Mamba2Config& config = model.config;
  for (size_t i = 1; i < flags.tp.size(); ++i) {
    const int tp = static_cast<int>(flags.tp[i]);
    const bool shared_norm = plan_tensor_parallel(config, tp).ranks_per_norm_group() > 1;
    // The FP model folds a shared gated norm's sums into out_proj's all-reduce; an artifact
    // all-reduces them first (rows × groups floats, timed here as rows × 4).
    const bool artifact = !flags.recipe.empty() || !flags.artifact.empty();
    const auto timings =
        measure_all_reduce(tp, device.index, config.d_model, shared_norm && !artifact, flags.batches, 64, 5, nullptr);
    const auto norm_timings = shared_norm && artifact
                                  ? measure_all_reduce(tp, device.index, 4, false, flags.batches, 64, 5, nullptr)
                                  : std::vector<AllReduceTiming>{};
    for (size_t b = 0; b < timings.size(); ++b) {
      const AllReduceTiming& t = timings[b];
      const double norm_us = norm_timings.empty() ? 0 : norm_timings[b].engine_graph_us();
      const double call_us = t.engine_graph_us() + norm_us;
      const double step_us = call_us * config.n_layer, tpot_us = 1000 * by_tp[i][0].second[b].tpot_ms;
      fmt::print("--tp {} batch {}: all-reduces {:.1f} µs a step ({} × {:.2f} µs alone{}) = {:.1f} % of TPOT\n", tp,
                 t.rows, step_us, config.n_layer, call_us,
                 norm_us > 0 ? fmt::format(", of which {:.2f} the gated norm's sums", norm_us) : "",
                 100 * step_us / tpot_us);
      shares.push_back(json{{"tp", tp}, {"batch", t.rows}, {"all_reduce_us_per_step", step_us}, {"tpot_us", tpot_us}});
    }
  }
  write_json_report(flags.json_path, {{"module", "model"}, {"tensor_parallel", reports}, {"all_reduce_share", shares}});
}

void run_bench(const BenchFlags& flags) {
  if (!flags.model.empty() + !flags.synthetic.empty() + !flags.artifact.empty() != 1)
    fail("bench: give exactly one of --model, --synthetic or --artifact");
  if (flags.module == "model" && flags.recipe.empty() != flags.bits.empty())
    fail("bench: --recipe and --bits go together");
  if (flags.acceptance > 0 && flags.verify_windows.empty())
    fail("bench: --accept simulates speculation in the verify windows: give --verify too");
  if (flags.replay_apart && flags.verify_windows.empty())
    fail("bench: --replay-apart changes how verify windows replay: give --verify too");
  if (flags.drafts != std::vector<int64_t>{1} && flags.verify_windows.empty())
    fail("bench: --drafts sets the rows a sequence of the verify windows: give --verify too");
  if (flags.as_generate && flags.verify_windows.empty())
    fail("bench: --as-generate times the verify windows as generate runs them: give --verify too");
  if (flags.head_to_toe && (flags.recipe.empty() || flags.module != "model"))
    fail("bench: --head-to-toe quantizes a synthetic model's embedding and lm_head: give --recipe and --bits");
  for (const int64_t prompt : flags.prompts)  // refused before any timing, so nothing is half written
    if (prompt < 1) fail("bench: --prompt {}: every prompt length must be at least 1", prompt);
  const DeviceSpec device = parse_device(flags.device);
  if (flags.module == "ssd") {
    if (!device.cuda) fail("--module ssd times the CUDA kernels: use --device cuda");
    run_ssd_module(flags, device);
  } else if (flags.module == "allreduce") {
    if (!device.cuda) fail("--module allreduce times GPUs: use --device cuda");
    run_all_reduce_module(flags, device);
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
      "bench",
      "Latency: TTFT for --prompt tokens and TPOT over --gen greedy steps per batch size and prompt length, or the SSD "
      "module alone.");
  cmd->add_option("--model", flags->model, "Checkpoint folder, or org/name[@revision] on the Hugging Face hub");
  cmd->add_option("--synthetic", flags->synthetic, synthetic_help);
  cmd->add_option("--artifact", flags->artifact, "Quantized model written by ssdq export (.ssdq)");
  cmd->add_option("--recipe", flags->recipe,
                  "With --synthetic: random weights in this recipe's formats (rtn, had, quamba2, ssdi8); with "
                  "--module ssd: ssdi8 times SSDi8's integer SSD");
  cmd->add_option("--bits", flags->bits, "With --recipe: w8a8, w4a8, w4a16 or fp16");
  cmd->add_flag("--head-to-toe", flags->head_to_toe,
                "With --recipe: also quantize the embedding and lm_head (as export's --quantize-embedding "
                "--quantize-lm-head)");
  cmd->add_option("--group-size", flags->group_size, "With --recipe: input columns per int4 weight scale (as export's)")
      ->capture_default_str()
      ->check(whole_number(1));
  cmd->add_option("--device", flags->device, "cuda, cuda:N or cpu")->capture_default_str();
  cmd->add_option("--batch", flags->batches, "Batch sizes, comma separated")->delimiter(',')->capture_default_str()->check(whole_number(1));
  cmd->add_option("--prompt", flags->prompts,
                  "Prompt tokens per sequence, comma separated (each length timed with every batch size on one "
                  "model build)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gen", flags->gen, "Generated tokens per sequence")->capture_default_str()->check(whole_number(1));
  cmd->add_option("--module", flags->module,
                  "model (end to end), ssd (the SSD prefill kernels alone) or allreduce (the tensor-parallel "
                  "all-reduce alone: --batch rows of d_model over --tp GPUs, one-shot and NCCL)")
      ->check(CLI::IsMember({"model", "ssd", "allreduce"}))
      ->capture_default_str();
  cmd->add_option("--ssd-batches", flags->ssd_batches, "--module ssd: batch sizes at length 2048")->delimiter(',');
  cmd->add_option("--ssd-lengths", flags->ssd_lengths, "--module ssd: lengths at batch 32")->delimiter(',');
  cmd->add_option("--repeats", flags->repeats, "Timed repeats (median reported)")->capture_default_str()->check(whole_number(1));
  cmd->add_option("--tp", flags->tp,
                  "Tensor-parallel sizes to time, each on its own build, e.g. 1,2 (on GPUs K, K+1, … of --device "
                  "cuda:K; the FP model, an --artifact, or a --recipe's synthetic artifact, rotated in as many blocks "
                  "as the largest size); the later ones are compared with the first")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(8)))
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed of the random prompt and synthetic weights")->capture_default_str();
  cmd->add_option("--json", flags->json_path, "Also write every figure to this JSON file");
  cmd->add_option("--verify", flags->verify_windows,
                  "Also time speculative verify windows of these token counts (comma separated; a window is the "
                  "pending token + K drafts) against a plain step, --gen iterations each, per batch size")
      ->delimiter(',')
      ->check(whole_number(1, 64));
  cmd->add_option("--accept", flags->acceptance,
                  "With --verify: also simulate speculative decoding in which each draft token is accepted with this "
                  "probability (0 < p <= 1; random tokens, so the model's choices are not compared) and report the "
                  "tokens a window yields and the speed-up over plain steps")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--as-generate", flags->as_generate,
                "With --verify: time steps and windows as greedy `generate` runs them: every row computed as it is "
                "alone (a window of up to 16 rows of the FP model then gives single steps' bits in one call; larger "
                "ones are verified token by token) and only each position's argmax copied back");
  cmd->add_option("--drafts", flags->drafts,
                  "With --verify: drafts a sequence, each timed (comma separated; generate's --drafts): a window "
                  "verifies batch x drafts rows and every row takes the kept row's tokens; the step stays one row "
                  "a sequence")
      ->delimiter(',')
      ->check(whole_number(1, 8))
      ->capture_default_str();
  cmd->add_flag("--replay-apart", flags->replay_apart,
                "With --verify on CUDA: copy the state before each window and replay a partial acceptance in "
                "launches of its own, instead of inside the next window's (what the runtime did before; to compare)");
  cmd->add_flag("--show-plan", flags->show_plan,
                "Print what each timed shape runs (prefill and decode of every batch size), layer by layer");
  cmd->callback([flags] { flags->model = flags->model.empty() ? "" : resolve_model_dir(flags->model), run_bench(*flags); });
}

}  // namespace ssdq::cli
