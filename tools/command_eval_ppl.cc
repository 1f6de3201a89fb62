#include <fmt/format.h>

#include <memory>

#include "formats/error.h"
#include "formats/token_data.h"
#include "formats/tokenizer.h"
#include "runtime/backend_factory.h"
#include "runtime/eval_ppl.h"
#include "model/model_loader.h"
#include "runtime/parallel.h"
#include "runtime/progress.h"
#include "model/quantized_artifact.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/model_source.h"

namespace ssdq::cli {
namespace {

struct EvalPplFlags {
  ModelSourceFlags source;
  std::string data;
  int64_t ctx = 2048, max_tokens = 0, batch = 0;
  int threads = 0;
  bool quiet = false;
};

void run_eval_ppl(const EvalPplFlags& flags) {
  if (flags.threads > 0) set_thread_count(flags.threads);
  const ModelSource source = load_model_source("eval-ppl", flags.source);
  fmt::print("{}", source.description);
  const std::unique_ptr<Backend>& backend = source.backend;
  const Tokenizer& tokenizer = *source.tokenizer;
  const std::vector<int32_t> tokens = tokenize_data_file(flags.data, tokenizer);
  const int64_t used = flags.max_tokens > 0 ? std::min<int64_t>(flags.max_tokens, tokens.size()) : tokens.size();
  fmt::print("data    {}: {} tokens, evaluating {} at ctx {}\n", flags.data, tokens.size(), used, flags.ctx);
  std::fflush(stdout);

  ProgressBar progress("eval-ppl", used - 1, "tok", !flags.quiet);
  EvalOptions options;
  options.ctx = flags.ctx;
  options.max_tokens = flags.max_tokens;
  options.batch = flags.batch > 0 ? flags.batch : default_eval_batch(flags.source.device);
  options.on_progress = [&](int64_t done, int64_t) { progress.update(done); };
  const PerplexityResult result = evaluate_perplexity(*backend, tokens, options);
  progress.finish();
  const std::string where =
      backend->name() == "cpu" ? fmt::format("cpu, {} threads", thread_count()) : backend->name();
  fmt::print("perplexity {:.4f} · {} scored tokens in {} windows · {:.0f} tokens/s ({}, {:.1f} s)\n", result.perplexity,
             result.scored_tokens, result.windows, result.tokens_per_second(), where, result.seconds);
}

}  // namespace

void add_eval_ppl_command(CLI::App& app) {
  auto flags = std::make_shared<EvalPplFlags>();
  CLI::App* cmd = app.add_subcommand(
      "eval-ppl",
      "Perplexity of a model on a text file: the file tokenized as one string, windows of --ctx tokens, each "
      "from a zero state, ppl = exp(mean NLL of the next token).");
  add_model_source_options(cmd, flags->source);
  cmd->add_option("--data", flags->data, "Text file: plain text, or JSON lines with \"text\" (.jsonl, .jsonl.zst)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--ctx", flags->ctx, "Window length in tokens")->capture_default_str()->check(whole_number(1));
  cmd->add_option("--max-tokens", flags->max_tokens, "Use only the first N tokens (0: all)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--batch", flags->batch, "Windows run together (0: one per CPU thread, 16 on a GPU)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--threads", flags->threads, "CPU threads (0: all cores, or SSDQ_THREADS)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_flag("--quiet", flags->quiet, "No progress bar");
  cmd->callback([flags] { run_eval_ppl(*flags); });
}

}  // namespace ssdq::cli
