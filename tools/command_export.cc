#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "pipeline/cuda_calibrate.h"
#include "pipeline/cuda_gptq.h"
#include "pipeline/cuda_layer_passes.h"
#include "pipeline/export_artifact.h"
#include "runtime/backend_factory.h"
#include "runtime/cuda_resources.h"
#include "formats/error.h"
#include "formats/hub_cache.h"
#include "runtime/parallel.h"
#include "runtime/progress.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/model_source.h"

namespace ssdq::cli {
namespace {

struct ExportFlags {
  ExportRequest request;
  ExportOptions options;
  std::string synthetic;
  std::string recipe, bits, act_clip = "percentile:99.99", device = "cpu", gemm = "fp32";
  std::vector<std::string> w4a16_layers;
  bool gptq = false, no_gptq = false;
  double eta = -1;
  int64_t rotation_seed = -1;
  int threads = 0;
  bool quiet = false;
};

void run_export(ExportFlags& flags) {
  const DeviceSpec device = parse_device(flags.device);  // an unknown device is refused before anything is read
  if (flags.gemm != "fp32" && !device.cuda) fail("--gemm {} needs --device cuda (the CPU computes in fp32)", flags.gemm);
  if (flags.threads > 0) set_thread_count(flags.threads);
  RecipeOptions& r = flags.options.recipe;
  r.recipe = parse_recipe_name(flags.recipe);
  r.bits = parse_bit_width(flags.bits);
  if (flags.gptq && flags.no_gptq) fail("--gptq and --no-gptq contradict each other");
  if (flags.gptq) r.gptq = true;
  if (flags.no_gptq) r.gptq = false;
  if (flags.eta >= 0) r.eta = flags.eta;
  if (flags.rotation_seed >= 0) r.rotation_seed = static_cast<uint64_t>(flags.rotation_seed);
  r.act_clip = ActClip::parse(flags.act_clip);
  for (const std::string& item : flags.w4a16_layers) {
    if (item.rfind("auto:", 0) == 0) {
      if (flags.w4a16_layers.size() != 1) fail("--w4a16-layers: give layers or auto:K, not both");
      r.auto_w4a16_layers = parse_whole_number("--w4a16-layers auto:K", item.substr(5));
    } else {
      r.w4a16_layers.push_back(parse_whole_number("--w4a16-layers", item));
    }
  }

  std::unique_ptr<ProgressBar> progress;
  std::string current_stage;
  // Each layer's line (below) counts from its first pass's first progress; the first layer's from the
  // first progress at all, after loading and placing the samples.
  ExportTimes layer_start_times;
  auto layer_start = std::chrono::steady_clock::now();
  bool layers_started = false;
  ExportTimes times;
  flags.options.on_progress = [&](const std::string& stage, int64_t done, int64_t total) {
    if (!layers_started) {
      layers_started = true;
      layer_start = std::chrono::steady_clock::now();
      layer_start_times = times;
    }
    if (stage != current_stage) {
      if (progress) progress->finish();
      progress = std::make_unique<ProgressBar>(stage, total, "samples", !flags.quiet);
      current_stage = stage;
    }
    progress->update(done);
  };
  size_t device_bytes = 0, gptq_bytes = 0;  // the passes' peak; GPTQ's buffers, held beside the samples' streams
  flags.options.times = &times;
  // A line a layer with where its time went, so a long export shows its per-layer cost as it runs.
  flags.options.on_layer_done = [&](const QuantizedModel& so_far) {
    if (flags.quiet) return;
    if (progress) progress->finish();
    progress.reset();
    current_stage.clear();
    const auto now = std::chrono::steady_clock::now();
    const double wall = std::chrono::duration<double>(now - layer_start).count();
    const ExportTimes& a = layer_start_times;
    const double passes = times.passes() - a.passes(), hessians = times.hessians - a.hessians,
                 weights = times.weights - a.weights;
    fmt::print("layer {}/{} in {:.2f} s: passes {:.2f} s (A {:.2f}, B {:.2f}, C {:.2f}), Hessians {:.2f} s, quantizing "
               "{:.2f} s (GPTQ's factor {:.2f} s, row pass {:.2f} s), the rest {:.2f} s\n",
               so_far.layers.size(), so_far.config.n_layer, wall, passes, times.observe - a.observe,
               times.out_proj_gram - a.out_proj_gram, times.advance - a.advance, hessians, weights,
               times.gptq_factor - a.gptq_factor, times.gptq_rows - a.gptq_rows,
               std::max(0.0, wall - passes - hessians - weights));
    std::fflush(stdout);
    layer_start_times = times;
    layer_start = now;
  };
  if (device.cuda) {
    select_cuda_device(device.index);  // an absent or too old device is refused before any work
    // The layer passes, and the FP forward of a subset of the samples, on one device.
    CudaCalibration gpu;
    gpu.device = device.index;
    gpu.tf32_gemms = flags.gemm == "tf32";
    gpu.on_device_memory = [&device_bytes](size_t bytes) { device_bytes = std::max(device_bytes, bytes); };
    flags.options.layer_passes = cuda_layer_passes(gpu);
    flags.options.gptq_factored_row_pass =
        cuda_gptq_factored_row_pass(device.index, [&times, &gptq_bytes](const GptqDeviceCall& call) {
          times.gptq_factor += call.factor_seconds;
          times.gptq_rows += call.row_pass_seconds;
          gptq_bytes = std::max(gptq_bytes, call.buffer_bytes);
        });
    flags.options.collect = [gpu](ModelWeights weights, const std::vector<int32_t>& tokens, int64_t samples,
                                  int64_t seqlen, const CollectOptions& o) {
      return collect_statistics_cuda(std::move(weights), tokens, samples, seqlen, o, gpu);
    };
    flags.request.forward = gpu.describe();
  }
  fmt::print("export {} with recipe {} at {} ({} threads{})\n", flags.request.model_dir, flags.recipe, flags.bits,
             thread_count(), device.cuda ? ", the layer passes on " + flags.request.forward : "");
  std::fflush(stdout);
  const ExportSummary summary = export_artifact(flags.request, flags.options, [](const std::string& note) {
    fmt::print("{}\n", note);
    std::fflush(stdout);
  });
  if (progress) progress->finish();
  if (summary.mixed_precision) {
    const MixedPrecisionChoice& m = *summary.mixed_precision;
    fmt::print("mixed precision: KL divergence on calibration samples, all layers W4A8 {:.5f}; with one layer's "
               "activations in fp16:",
               m.w4a8_kl);
    for (const LayerSensitivity& s : m.layers) fmt::print(" {}: {:.5f}", s.layer, s.kl);
    fmt::print("\n                 W4A16 layers chosen: {}\n", fmt::join(m.w4a16_layers, ", "));
  }
  fmt::print("wrote {} ({:.1f} MB): quantized in {:.1f} s over {} calibration samples of {} tokens{}\n",
             flags.request.out_path, summary.bytes / 1e6, summary.seconds, summary.samples, summary.seqlen,
             device_bytes ? fmt::format(", {:.1f} GiB of device memory at most ({:.1f} GiB of it GPTQ's buffers)",
                                        (device_bytes + gptq_bytes) / 1073741824.0, gptq_bytes / 1073741824.0)
                          : "");
  if (times.passes() > 0) {
    fmt::print("  of which {:.1f} s in the layer passes over the samples ({}: A {:.1f} s, B {:.1f} s, C {:.1f} s{}), {:.1f} s "
               "making GPTQ's Hessians from the Grams, {:.1f} s quantizing the projections ({}), {:.1f} s copying the layers for "
               "{} and waiting for its writes\n",
               times.passes(), device.cuda ? flags.request.forward : "cpu", times.observe, times.out_proj_gram,
               times.advance,
               device.cuda ? fmt::format(", {:.1f} s of them making each pass's engine", times.pass_setup) : "",
               times.hessians, times.weights,
               device.cuda ? fmt::format("of them {:.1f} s in GPTQ's inverse factor and {:.1f} s in its row pass, "
                                         "both on the device with their transfers",
                                         times.gptq_factor, times.gptq_rows)
                           : fmt::format("on {} CPU threads", thread_count()),
               summary.checkpoint_seconds, partial_export_path(flags.request.out_path));
    const double counted = times.prepare + times.streams + times.passes() + times.hessians + times.weights +
                           summary.checkpoint_seconds;
    fmt::print("  and {:.1f} s copying and transforming the weights, {:.1f} s placing the samples' residual streams, "
               "{:.1f} s the rest (activation scales, mean correction, the layers' copies)\n",
               times.prepare, times.streams, std::max(0.0, summary.seconds - counted));
  }
  fmt::print("  before: {:.1f} s reading the model and the statistics; after: {:.1f} s writing the artifact\n",
             summary.load_seconds, summary.write_seconds);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Quantize a model with a recipe (docs/QUANTIZATION.md) using a statistics file from `ssdq calibrate`, and write "
      "the .ssdq artifact (docs/ARTIFACT.md) that eval-ppl --artifact runs. rtn and fp16 take seconds; had, quamba2 "
      "and ssdi8 run the calibration samples through the model layer by layer (GPTQ Hessians, activation scales "
      "after the Hadamard transforms, SSDi8 mean correction); these keep their finished layers in OUT.partial, so an "
      "interrupted export run again resumes after its last finished layer.");
  RecipeOptions& r = flags->options.recipe;
  CLI::Option* model =
      cmd->add_option("--model", flags->request.model_dir, "Checkpoint folder (the one calibrated), or org/name[@revision]");
  cmd->add_option("--synthetic", flags->synthetic,
                  "Instead of --model: the random weights calibrate --synthetic NAME ran (mamba2-130m … mamba2-8b-like)")
      ->excludes(model);
  cmd->add_option("--calib", flags->request.calibration_path, "Statistics file written by ssdq calibrate")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--recipe", flags->recipe,
                  "rtn: round-to-nearest weights, per-tensor activations; had: + RMSNorm γ fusion, Hadamard "
                  "rotations, GPTQ at 4 bits; quamba2: had + sort-and-cluster x, per-group B/C, int8 decode state; "
                  "ssdi8: had + SSDi8's integer SSD and mean correction")
      ->required()
      ->check(CLI::IsMember({"rtn", "had", "quamba2", "ssdi8"}));
  cmd->add_option("--bits", flags->bits,
                  "w8a8 (int8 weights per output channel, int8 activations), w4a8 (int4 weights in groups of "
                  "--group-size, int8 activations), w4a16 (int4 weights, fp16 activations), fp16 (no quantization)")
      ->required()
      ->check(CLI::IsMember({"w8a8", "w4a8", "w4a16", "fp16"}));
  cmd->add_option("--out", flags->request.out_path, "Artifact to write (atomically)")->required();
  cmd->add_option("--tokenizer", flags->request.tokenizer_path,
                  "tokenizer.json or SentencePiece tokenizer.model to embed (default: the model folder's, as for "
                  "calibrate)");
  cmd->add_flag("--quantize-embedding", r.quantize_embedding,
                "Head-to-toe: quantize the embedding per row at the weight bit width");
  cmd->add_flag("--quantize-lm-head", r.quantize_lm_head,
                "Head-to-toe: quantize the lm_head per group (--group-size) at the weight bit width (weight-only)");
  cmd->add_flag("--gptq", flags->gptq, "Use GPTQ for the projections (default: on for 4-bit weights, not for rtn)");
  cmd->add_flag("--no-gptq", flags->no_gptq, "Round projections to nearest even at 4 bits too");
  cmd->add_option("--group-size", r.group_size, "Input columns per int4 weight scale")->capture_default_str()->check(whole_number(1));
  cmd->add_flag("--act-order", r.act_order, "GPTQ columns by decreasing Hessian diagonal (static groups)");
  cmd->add_option("--damp", r.damp, "GPTQ damping as a fraction of the mean Hessian diagonal")->capture_default_str();
  cmd->add_option("--head-clusters", r.head_clusters,
                  "quamba2: head clusters m per B/C group (default: 8 at w8a8, else 4; or the heads per group when fewer)")
      ->check(whole_number(1));
  cmd->add_option("--channel-clusters", r.channel_clusters,
                  "quamba2: headdim clusters n per head cluster (default: 8 at w8a8, else 4; or headdim when smaller)")
      ->check(whole_number(1));
  cmd->add_option("--act-clip", flags->act_clip,
                  "How each static int8 activation scale is set: absmax (the calibrated maximum), percentile:P (the "
                  "P-th percentile of |x|), or mse (the clip minimising the int8 error on the calibration data); "
                  "docs/ACCURACY.md")
      ->capture_default_str();
  cmd->add_option("--eta", flags->eta, "ssdi8: mean-correction factor η (default 0.15; 0 turns it off)");
  cmd->add_option("--x-scaled-clip", flags->options.recipe.x_scaled_clip,
                  "ssdi8 (ablation): X_scaled's int8 scale is this fraction of its calibrated absmax / 127; values "
                  "beyond it saturate (default 1: no clipping; docs/ACCURACY.md)");
  cmd->add_option("--tp-blocks", r.tp_blocks,
                  "had, quamba2, ssdi8: rotate out_proj's input in N independent blocks (I_N ⊗ H_{E/N}) so that the "
                  "artifact runs under --tp N or a divisor of N (docs/TENSOR_PARALLEL.md); 1: one rotation over all "
                  "channels, for --tp 1")
      ->capture_default_str()
      ->check(whole_number(1));
  cmd->add_option("--w4a16-layers", flags->w4a16_layers,
                  "w4a8 only: layers (0-based, comma-separated) that keep fp16 activations (Quamba2's mixed precision "
                  "W4A{8,16}), or auto:K for the K layers whose int8 activations cost the most KL divergence on "
                  "calibration samples")
      ->delimiter(',');
  cmd->add_option("--rotation-seed", flags->rotation_seed,
                  "Residual rotation Q = diag(±1)·H/√D with random signs from this seed (default: plain Hadamard)");
  cmd->add_option("--keep-float", r.keep_float,
                  "Ablation: leave these points in fp16 (comma-separated: in_proj.in, conv.in, ssd.x, ssd.B, ssd.C, "
                  "ssd.dt, ssd.state, ssd.x_scaled, ssd.cb, out_proj.in, weights)")
      ->delimiter(',');
  cmd->add_option("--calib-samples", flags->options.max_samples,
                  "Use the first N calibration samples for the layer-by-layer passes (0: all)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--device", flags->device,
                  "cpu, or cuda[:N]: had, quamba2 and ssdi8 run their layer passes on a GPU (each layer in fp32 over "
                  "the samples' residual streams kept on the device; GPTQ's Hessians, their Cholesky factors and GPTQ's "
                  "row pass there too); docs/QUANTIZATION.md says how close the artifacts come "
                  "to the CPU's")
      ->capture_default_str();
  cmd->add_option("--gemm", flags->gemm,
                  "With --device cuda: fp32 (strict fp32 projections and Hessians), or tf32 (both on tensor cores in "
                  "TF32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32"}));
  cmd->add_option("--checkpoint-seconds", flags->request.checkpoint_seconds,
                  "had, quamba2, ssdi8: rewrite OUT.partial (the finished layers, from which an interrupted export "
                  "resumes) after a layer when this many seconds have passed since the last write; 0: after every "
                  "layer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--threads", flags->threads, "CPU threads (0: all cores, or SSDQ_THREADS)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_flag("--quiet", flags->quiet, "No progress bars, and no line per finished layer with its time split");
  cmd->callback([flags] {
    flags->request.model_dir = model_or_synthetic("export", flags->request.model_dir, flags->synthetic);
    run_export(*flags);
  });
}

}  // namespace ssdq::cli
