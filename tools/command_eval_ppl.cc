#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/token_data.h"
#include "formats/tokenizer.h"
#include "runtime/backend_factory.h"
#include "runtime/eval_ppl.h"
#include "runtime/parallel.h"
#include "runtime/progress.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/json_report.h"
#include "tools/model_source.h"

namespace ssdq::cli {
namespace {

using nlohmann::json;

struct EvalPplFlags {
  ModelSourceFlags source;
  std::string data, reference, reference_device, json_path;
  int64_t ctx = 2048, max_tokens = 0, batch = 0;
  int threads = 0;
  bool quiet = false;
};

json mean_json(const MeanWithError& m) { return json{{"mean", m.mean}, {"error", m.error}}; }

// The reference is a checkpoint folder (or hub name) or an artifact file, run on --reference-device.
ModelSource load_reference(const EvalPplFlags& flags) {
  ModelSourceFlags reference;
  const bool artifact = std::filesystem::is_regular_file(flags.reference);
  (artifact ? reference.artifact : reference.model) = flags.reference;
  reference.model_flag = "--reference";
  reference.device = flags.reference_device.empty() ? flags.source.device : flags.reference_device;
  return load_model_source("eval-ppl --reference", reference);
}

// Both models must see the same token ids: the data is tokenized by each model's tokenizer and
// the two sequences compared.
void check_same_tokens(const std::vector<int32_t>& tokens, const Tokenizer& reference_tokenizer,
                       const std::string& data) {
  const std::vector<int32_t> reference_tokens = tokenize_data_file(data, reference_tokenizer);
  const size_t n = std::min(tokens.size(), reference_tokens.size());
  size_t i = 0;
  while (i < n && tokens[i] == reference_tokens[i]) ++i;
  if (i < n || tokens.size() != reference_tokens.size())
    fail("{}: the reference model's tokenizer gives different token ids ({} vs {} tokens, first difference at token "
         "{}); the models cannot be compared position by position",
         data, tokens.size(), reference_tokens.size(), i);
}

void run_eval_ppl(const EvalPplFlags& flags) {
  if (flags.threads > 0) set_thread_count(flags.threads);
  const ModelSource source = load_model_source("eval-ppl", flags.source);
  fmt::print("{}", source.description);
  ModelSource reference;
  if (!flags.reference.empty()) {
    reference = load_reference(flags);
    fmt::print("reference\n{}", reference.description);
  }
  const std::vector<int32_t> tokens = tokenize_data_file(flags.data, *source.tokenizer);
  if (reference.backend) check_same_tokens(tokens, *reference.tokenizer, flags.data);
  const int64_t used = flags.max_tokens > 0 ? std::min<int64_t>(flags.max_tokens, tokens.size()) : tokens.size();
  fmt::print("data    {}: {} tokens, evaluating {} at ctx {}\n", flags.data, tokens.size(), used, flags.ctx);
  std::fflush(stdout);

  ProgressBar progress("eval-ppl", std::max<int64_t>(used - 1, 0), "tok", !flags.quiet);
  EvalOptions options;
  options.ctx = flags.ctx;
  options.max_tokens = flags.max_tokens;
  options.batch = flags.batch > 0 ? flags.batch : default_eval_batch(flags.source.device);
  options.on_progress = [&](int64_t done, int64_t) { progress.update(done); };
  const Backend& backend = *source.backend;
  const std::string where =
      backend.name() == "cpu" ? fmt::format("cpu, {} threads", thread_count()) : backend.device_name();
  json report{{"data", flags.data}, {"ctx", flags.ctx}, {"device", where}};

  if (!reference.backend) {
    const PerplexityResult result = evaluate_perplexity(backend, tokens, options);
    progress.finish();
    fmt::print("perplexity {:.4f} ± {:.4f} · {} scored tokens in {} windows · {:.0f} tokens/s ({}, {:.1f} s)\n",
               result.perplexity.mean, result.perplexity.error, result.scored_tokens, result.windows,
               result.tokens_per_second(), where, result.seconds);
    report.update({{"scored_tokens", result.scored_tokens},
                   {"windows", result.windows},
                   {"seconds", result.seconds},
                   {"perplexity", mean_json(result.perplexity)}});
    write_json_report(flags.json_path, report);
    return;
  }
  const ComparisonResult result = compare_models(backend, *reference.backend, tokens, options);
  progress.finish();
  const ComparisonSummary& s = result.summary;
  fmt::print("perplexity {:.4f} ± {:.4f} · reference {:.4f} ± {:.4f} · {} scored tokens in {} windows ({}, {:.1f} s)\n",
             s.perplexity.mean, s.perplexity.error, s.reference_perplexity.mean, s.reference_perplexity.error,
             s.positions, result.windows, where, result.seconds);
  fmt::print("ln(PPL/PPL_ref)   {:+.5f} ± {:.5f}  ({:+.3f} % perplexity)\n", s.log_ppl_ratio.mean, s.log_ppl_ratio.error,
             100 * std::expm1(s.log_ppl_ratio.mean));
  fmt::print("KL divergence     {:.6f} ± {:.6f} nats  (99th pct {:.5f}, 99.9th {:.5f}, max {:.4f})\n", s.kl.mean,
             s.kl.error, s.kl_p99, s.kl_p999, s.kl_max);
  fmt::print("top-1 agreement   {:.3f} ± {:.3f} %\n", 100 * s.top1_agreement.mean, 100 * s.top1_agreement.error);
  fmt::print("mean |Δp| target  {:.5f} ± {:.5f}\n", s.abs_delta_p.mean, s.abs_delta_p.error);
  report.update({{"scored_tokens", s.positions},
                 {"windows", result.windows},
                 {"seconds", result.seconds},
                 {"reference", flags.reference},
                 {"perplexity", mean_json(s.perplexity)},
                 {"reference_perplexity", mean_json(s.reference_perplexity)},
                 {"log_ppl_ratio", mean_json(s.log_ppl_ratio)},
                 {"kl_divergence",
                  {{"mean", s.kl.mean}, {"error", s.kl.error}, {"p99", s.kl_p99}, {"p999", s.kl_p999}, {"max", s.kl_max}}},
                 {"top1_agreement", mean_json(s.top1_agreement)},
                 {"abs_delta_p", mean_json(s.abs_delta_p)}});
  write_json_report(flags.json_path, report);
}

}  // namespace

void add_eval_ppl_command(CLI::App& app) {
  auto flags = std::make_shared<EvalPplFlags>();
  CLI::App* cmd = app.add_subcommand(
      "eval-ppl",
      "Perplexity of a model on a text file: the file tokenized as one string, windows of --ctx tokens, each "
      "from a zero state, ppl = exp(mean NLL of the next token), with its standard error. With --reference, both "
      "models run on the same windows and their next-token distributions are compared: KL divergence "
      "KL(reference || model) with its 99th / 99.9th percentiles, top-1 agreement, mean |Δp| of the correct token "
      "and ln(PPL/PPL_ref), each ± its standard error (positions treated as independent).");
  add_model_source_options(cmd, flags->source);
  cmd->add_option("--data", flags->data, "Text file: plain text, or JSON lines with \"text\" (.jsonl, .jsonl.zst)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--reference", flags->reference,
                  "Compare with this model: a checkpoint folder (or org/name on the hub) or an artifact (.ssdq)");
  cmd->add_option("--reference-device", flags->reference_device, "Device of the reference (default: --device)");
  cmd->add_option("--ctx", flags->ctx, "Window length in tokens")->capture_default_str()->check(whole_number(1));
  cmd->add_option("--max-tokens", flags->max_tokens, "Use only the first N tokens (0: all)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--batch", flags->batch,
                  "Windows run together (0: one per CPU thread, 16 on a GPU; with --reference also bounded by the "
                  "1 GiB of logits held for both models)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--threads", flags->threads, "CPU threads (0: all cores, or SSDQ_THREADS)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--json", flags->json_path, "Also write every figure to this JSON file");
  cmd->add_flag("--quiet", flags->quiet, "No progress bar");
  cmd->callback([flags] { run_eval_ppl(*flags); });
}

}  // namespace ssdq::cli
