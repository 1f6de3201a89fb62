#include <fmt/format.h>

#include <memory>

#include "pipeline/calibrate.h"
#include "pipeline/cuda_calibrate.h"
#include "runtime/backend_factory.h"
#include "runtime/cuda_resources.h"
#include "calib/calibration_file.h"
#include "formats/hub_cache.h"
#include "runtime/parallel.h"
#include "runtime/progress.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/model_source.h"

namespace ssdq::cli {
namespace {

struct CalibrateFlags {
  CalibrationRequest request;
  std::string out, synthetic, device = "cpu", gemm = "fp32";
  int threads = 0;
  bool quiet = false;
};

void run_calibrate(CalibrateFlags& flags) {
  const DeviceSpec device = parse_device(flags.device);  // an unknown device is refused before anything is read
  if (flags.threads > 0) set_thread_count(flags.threads);
  flags.request.ssdq_version = kSsdqVersion;
  fmt::print("calibrate {} on {} file(s): {} samples × {} tokens, seed {}, on {}\n", flags.request.model_dir,
             flags.request.data_files.size(), flags.request.samples, flags.request.seqlen, flags.request.seed,
             flags.device);
  std::fflush(stdout);
  ProgressBar progress("calibrate", flags.request.samples, "samples", !flags.quiet);
  CollectOptions options;
  options.on_progress = [&](int64_t done, int64_t) { progress.update(done); };
  if (flags.gemm != "fp32" && !device.cuda) fail("--gemm {} needs --device cuda (the CPU computes in fp32)", flags.gemm);
  if (device.cuda) select_cuda_device(device.index);  // an absent or too old device is refused before any work
  StatisticsCollector collect = collect_statistics;
  CudaCalibration gpu;
  gpu.device = device.index;
  gpu.tf32_gemms = flags.gemm == "tf32";
  size_t device_bytes = 0;
  gpu.on_device_memory = [&](size_t bytes) { device_bytes = bytes; };
  if (device.cuda)
    collect = [&](ModelWeights weights, const std::vector<int32_t>& tokens, int64_t samples, int64_t seqlen,
                  const CollectOptions& o) {
      return collect_statistics_cuda(std::move(weights), tokens, samples, seqlen, o, gpu);
    };
  const CalibrationFile file = run_calibration(flags.request, options, collect, device.cuda ? gpu.describe() : "cpu fp32");
  progress.finish();
  write_calibration_file(flags.out, file);
  fmt::print("wrote {}: statistics of {} layers over {} tokens ({:.1f} s of forward on {}{})\n", flags.out,
             file.config.n_layer, file.tokens.size(), file.provenance.seconds,
             device.cuda ? file.provenance.forward : fmt::format("{} threads", thread_count()),
             device.cuda ? fmt::format(", {:.1f} GiB of device memory at most", device_bytes / 1073741824.0) : "");
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Run the FP model over sampled windows of calibration text and record the statistics every recipe needs "
      "(per-channel maxima and means at each quantization point, the SSD internals of SSDi8) with the sampled token "
      "ids and their provenance. Deterministic for a seed, on any number of threads. With --device cuda the "
      "forwards run in fp32 on a GPU and the statistics are kept there (mamba2-130m, 512 × 2048 tokens: 21 s on an "
      "H200). Not resumable: it is one forward pass over the samples, about as long as evaluating their perplexity "
      "without the lm_head (the bundled 15 M-parameter model: 3.4 CPU-minutes for 512 × 2048 tokens), so an "
      "interrupted run, which leaves no file, is simply started again.");
  CalibrationRequest& r = flags->request;
  CLI::Option* model =
      cmd->add_option("--model", r.model_dir, "Checkpoint folder (config.json + weights), or org/name[@revision] on the hub");
  cmd->add_option("--synthetic", flags->synthetic,
                  "Instead of --model: random weights (seed 0) with the shapes of a known config — mamba2-130m, "
                  "mamba2-370m, mamba2-780m, mamba2-1.3b, mamba2-2.7b, mamba2-8b-like — to time calibrate and export "
                  "at real sizes; export takes the same --synthetic NAME")
      ->excludes(model);
  cmd->add_option("--data", r.data_files,
                  "Calibration text: plain text, or JSON lines with \"text\" (.jsonl, .jsonl.zst); several files are "
                  "joined in the order given, documents separated by the end-of-text token (<|endoftext|>, or </s>)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer", r.tokenizer_path,
                  "tokenizer.json or SentencePiece tokenizer.model (default: the model folder's tokenizer.model, then "
                  "tokenizer.json, else the built-in GPT-NeoX-20B)");
  cmd->add_option("--samples", r.samples, "Number of windows")->capture_default_str()->check(whole_number(1));
  cmd->add_option("--seqlen", r.seqlen, "Tokens per window")->capture_default_str()->check(whole_number(2, 1 << 20));
  cmd->add_option("--seed", r.seed, "Seed of the window sampler")->capture_default_str();
  cmd->add_option("--out", flags->out, "Statistics file to write (safetensors; written atomically)")->required();
  cmd->add_option("--device", flags->device,
                  "cpu, or cuda[:N]: the forwards in fp32 on a GPU (cuBLASLt fp32 GEMMs, the SSD's fp32 recurrence), "
                  "the statistics kept on the device; equal to the CPU's within fp32 summation order")
      ->capture_default_str();
  cmd->add_option("--gemm", flags->gemm,
                  "With --device cuda: fp32 (strict fp32 projections), or tf32 (the projections on tensor cores in "
                  "TF32, ~8x faster; statistics within ~1e-3 of fp32; recorded in the file's provenance)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32"}));
  cmd->add_option("--threads", flags->threads, "CPU threads (0: all cores, or SSDQ_THREADS)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_flag("--quiet", flags->quiet, "No progress bar");
  cmd->callback([flags] {
    flags->request.model_dir = model_or_synthetic("calibrate", flags->request.model_dir, flags->synthetic);
    run_calibrate(*flags);
  });
}

}  // namespace ssdq::cli
