#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "runtime/generate.h"
#include "runtime/parallel.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/json_report.h"
#include "runtime/model_drafter.h"
#include "tools/model_source.h"

namespace ssdq::cli {
namespace {

using nlohmann::json;

struct GenerateFlags {
  ModelSourceFlags source;
  std::string prompt, prompt_file, json_path, speculate = "off", draft_policy = "measured", draft_model,
      draft_artifact,
              verify = "exact", spec_method = "replay";
  std::vector<std::string> stop;
  int64_t max_new_tokens = 128, top_k = 0, draft = 6, drafts = 1, ngram_min = 1, ngram_max = 3;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  int threads = 0;
  bool prompt_given = false;  // --prompt was on the command line (possibly empty)
};

// The prompts: --prompt, or --prompt-file (plain text: one prompt; .jsonl: "prompt" or "text" of each line).
std::vector<std::string> read_prompts(const GenerateFlags& flags) {
  if (flags.prompt_given == !flags.prompt_file.empty()) fail("generate needs exactly one of --prompt and --prompt-file");
  if (!flags.prompt_file.empty() && flags.prompt_file.size() > 6 &&
      flags.prompt_file.compare(flags.prompt_file.size() - 6, 6, ".jsonl") == 0) {
    std::vector<std::string> prompts;
    const std::string text = read_file(flags.prompt_file);
    size_t line_number = 0, begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(begin, end - begin);
      begin = end + 1;
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json row;
      try {
        row = json::parse(line);
      } catch (const json::exception& e) {
        fail("{}:{}: not a JSON object: {}", flags.prompt_file, line_number, e.what());
      }
      const char* key = row.is_object() && row.contains("prompt") ? "prompt" : "text";
      if (!row.is_object() || !row.contains(key) || !row[key].is_string())
        fail("{}:{}: expected an object with a \"prompt\" or \"text\" string", flags.prompt_file, line_number);
      const std::string prompt = row[key].get<std::string>();
      if (prompt.empty()) fail("{}:{}: the prompt is empty", flags.prompt_file, line_number);
      prompts.push_back(prompt);
    }
    if (prompts.empty()) fail("{}: no prompts in the file", flags.prompt_file);
    return prompts;
  }
  const std::string prompt = flags.prompt_file.empty() ? flags.prompt : read_file(flags.prompt_file);
  if (prompt.empty()) fail("{}: the prompt is empty", flags.prompt_file.empty() ? "--prompt" : flags.prompt_file);
  return {prompt};
}

void run_generate(const GenerateFlags& flags) {
  if (flags.threads > 0) set_thread_count(flags.threads);
  const std::vector<std::string> prompts = read_prompts(flags);
  GenerateOptions options;
  options.max_new_tokens = flags.max_new_tokens;
  options.sampling.temperature = flags.temperature;
  options.sampling.top_k = flags.top_k;
  options.sampling.top_p = flags.top_p;
  options.sampling.seed = flags.seed;
  check_sampling_options(options.sampling);
  options.stop_strings = flags.stop;
  for (const std::string& stop : flags.stop)
    if (stop.empty()) fail("--stop: a stop string cannot be empty");
  const bool by_model = flags.speculate == "model";
  if (by_model == (flags.draft_model.empty() && flags.draft_artifact.empty()))
    fail(by_model ? "--speculate model needs --draft-model DIR or --draft-artifact FILE"
                  : "--draft-model and --draft-artifact are for --speculate model");
  if (flags.speculate == "ngram") {
    if (flags.ngram_min > flags.ngram_max)
      fail("--ngram-min {} is above --ngram-max {}", flags.ngram_min, flags.ngram_max);
    options.drafter = ngram_drafter({flags.draft, flags.ngram_min, flags.ngram_max}, flags.drafts);
    options.drafts = flags.drafts;
  } else if (flags.drafts != 1) {
    fail("--drafts {} is for --speculate ngram (a model drafter proposes one draft)", flags.drafts);
  }
  if (flags.speculate != "off") {
    options.max_draft = flags.draft;
    options.adaptive_draft = flags.draft_policy != "fixed";
    options.measured_payoff = flags.draft_policy == "measured";
    options.verify = flags.verify == "window" ? VerifyMode::kWindow : VerifyMode::kExact;
    if (flags.spec_method == "joint") {
      if (flags.verify == "window")
        fail("--spec-method joint recomputes the accepted tokens in the next pass, token by token: it takes "
             "--verify exact (the default), not window (Activation Replay's one-call window)");
      options.verify = VerifyMode::kJoint;
    }
  } else if (flags.spec_method != "replay") {
    fail("--spec-method {} is for --speculate ngram or model", flags.spec_method);
  }
  // Each prompt's text independent of its batch and of --drafts' rows, up to 16 rows on CUDA (the FP
  // model; an artifact's up to 4).
  ModelSourceFlags source_flags = flags.source;
  source_flags.preferences.rows_alone = true;
  const ModelSource source = load_model_source("generate", source_flags);
  std::fprintf(stderr, "%s", source.description.c_str());
  // The draft model: on the target's device, its vocabulary the target's.
  ModelSource draft;
  if (by_model) {
    ModelSourceFlags d;
    d.model = flags.draft_model;
    d.artifact = flags.draft_artifact;
    d.device = flags.source.device;
    d.model_flag = "--draft-model";
    draft = load_model_source("generate --speculate model", d);
    const int64_t target_vocab = source.backend->config().vocab_size, draft_vocab = draft.backend->config().vocab_size;
    if (draft_vocab != target_vocab)
      fail("{}: the draft's vocabulary has {} tokens, the model's {}; a draft must share the model's tokenizer",
           flags.draft_model.empty() ? flags.draft_artifact : flags.draft_model, draft_vocab, target_vocab);
    std::fprintf(stderr, "draft: %s", draft.description.c_str());
    options.drafter = model_drafter(*draft.backend, static_cast<int64_t>(prompts.size()), flags.draft, options.sampling);
  }
  const Tokenizer& tokenizer = *source.tokenizer;
  if (const auto eos = tokenizer.end_of_text()) options.stop_tokens.push_back(*eos);
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(tokenizer.encode(prompts[i]));
    if (ids.back().empty()) fail("prompt {} has no tokens", i);
  }
  // One prompt streams its text as it grows; several print each text when all are done.
  const bool stream = prompts.size() == 1;
  const std::vector<GeneratedText> results =
      generate(*source.backend, tokenizer, ids, options, [&](int64_t, const std::string& piece) {
        if (!stream) return;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
  json rows = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const GeneratedText& r = results[i];
    if (stream) {
      fmt::print("\n");
    } else {
      fmt::print("--- prompt {}\n{}\n", i, r.text);
    }
    std::string speculation;
    if (r.windows > 0)
      speculation = fmt::format(" · {} windows, {:.2f} drafts accepted each ({} of {})", r.windows,
                                double(r.accepted) / r.windows, r.accepted, r.drafted);
    std::fprintf(stderr, "%s\n",
                 fmt::format("prompt {}: {} tokens ({}) · TTFT {:.1f} ms · TPOT {:.2f} ms · {:.1f} tokens/s{}", i,
                             r.tokens.size(), r.finish_reason, r.ttft_ms, r.tpot_ms, r.tokens_per_second, speculation)
                     .c_str());
    rows.push_back(json{{"prompt", prompts[i]},
                        {"text", r.text},
                        {"token_ids", r.tokens},
                        {"finish_reason", r.finish_reason},
                        {"ttft_ms", r.ttft_ms},
                        {"tpot_ms", r.tpot_ms},
                        {"tokens_per_second", r.tokens_per_second},
                        {"speculation",
                         {{"windows", r.windows},
                          {"drafted", r.drafted},
                          {"accepted", r.accepted},
                          {"accepted_histogram", r.accepted_histogram},
                          {"paused_steps", r.paused_steps},
                          {"window_tokens_per_ms", r.window_tokens_per_ms},
                          {"step_tokens_per_ms", r.step_tokens_per_ms}}}});
  }
  write_json_report(flags.json_path, json{{"device", source.backend->device_name()}, {"results", rows}});
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate text from a prompt with a model or an artifact: greedy or sampled (temperature, top-k, top-p, "
      "seed), optional exact speculative decoding by prompt lookup. The text streams to stdout, figures to stderr.");
  add_model_source_options(cmd, flags->source);
  CLI::Option* prompt = cmd->add_option("--prompt", flags->prompt, "The prompt text");
  cmd->add_option("--prompt-file", flags->prompt_file,
                  "Plain text (one prompt), or .jsonl with \"prompt\" or \"text\" per line (many, run as one batch)")
      ->check(CLI::ExistingFile)
      ->excludes(prompt);
  cmd->add_option("--max-new-tokens", flags->max_new_tokens, "Tokens to generate at most per prompt")
      ->capture_default_str()
      ->check(whole_number(1));
  cmd->add_option("--temperature", flags->temperature, "0: greedy; above 0: sample from softmax(logits / T)")
      ->capture_default_str();
  cmd->add_option("--top-k", flags->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->add_option("--top-p", flags->top_p, "Sample among the most likely tokens whose mass reaches p (0 < p <= 1)")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed of the sampling (token t of prompt i uses (seed, i, t) alone)")
      ->capture_default_str();
  cmd->add_option("--stop", flags->stop, "Stop before this string (repeatable); the end-of-text token (<|endoftext|>, </s>) always stops");
  cmd->add_option("--speculate", flags->speculate,
                  "off; ngram: drafts by prompt lookup, a draft token kept where the model's own choice equals it "
                  "(the plain text); model: drafts of --draft-model or --draft-artifact (e.g. the model's own W4A8 "
                  "artifact), greedy (the plain text) or, at a --temperature, sampled and kept by speculative "
                  "sampling's rule (the model's distribution, not plain sampling's draws; docs/GENERATION.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "ngram", "model"}));
  cmd->add_option("--draft", flags->draft, "--speculate: draft tokens per verify window at most")
      ->capture_default_str()
      ->check(whole_number(1, 64));
  cmd->add_option("--drafts", flags->drafts,
                  "--speculate ngram: drafts verified side by side per sequence (the most recent match's "
                  "continuation, then the most frequent others), each in its own batch row; the row the model "
                  "follows furthest is kept")
      ->capture_default_str()
      ->check(whole_number(1, kMaxDraftsPerSequence));
  cmd->add_option("--draft-policy", flags->draft_policy,
                  "--speculate: adaptive (each sequence's draft grows while accepted, shrinks when not, and "
                  "pauses 1, 2, 4 … 64 tokens after windows that accept nothing); measured (adaptive, and "
                  "speculation also pauses while its windows yield fewer tokens per second than plain steps, as "
                  "measured during the run: never much slower than plain decoding); or fixed (every draft at its "
                  "full length)")
      ->capture_default_str()
      ->check(CLI::IsMember({"measured", "adaptive", "fixed"}));
  cmd->add_option("--verify", flags->verify,
                  "--speculate: exact (each window verified token by token: the plain tokens bit for bit) or "
                  "window (one multi-token call with Activation Replay on CUDA: faster on large models, equal "
                  "to plain decoding to rounding, so a near-tie can change the text; docs/GENERATION.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"exact", "window"}));
  cmd->add_option("--spec-method", flags->spec_method,
                  "--speculate: how a window that keeps fewer tokens than it verified rolls back: replay (the "
                  "state before the window restored and the kept tokens replayed) or joint (Joint Attainment: "
                  "the kept tokens recomputed in the next window's pass, token by token; the same tokens as "
                  "--verify exact; docs/GENERATION.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"replay", "joint"}));
  cmd->add_option("--draft-model", flags->draft_model,
                  "--speculate model: a checkpoint folder (same vocabulary) that drafts, on --device");
  cmd->add_option("--draft-artifact", flags->draft_artifact,
                  "--speculate model: an .ssdq artifact (same vocabulary) that drafts, on --device");
  cmd->add_option("--ngram-min", flags->ngram_min, "--speculate ngram: shortest suffix looked up")
      ->capture_default_str()
      ->check(whole_number(1));
  cmd->add_option("--ngram-max", flags->ngram_max, "--speculate ngram: longest suffix looked up")
      ->capture_default_str()
      ->check(whole_number(1));
  cmd->add_option("--json", flags->json_path, "Also write the texts, token ids and timings to this JSON file");
  cmd->add_option("--threads", flags->threads, "CPU threads (0: all cores, or SSDQ_THREADS)")
      ->capture_default_str()
      ->check(whole_number(0));
  cmd->callback([flags, prompt] {
    flags->prompt_given = prompt->count() > 0;
    run_generate(*flags);
  });
}

}  // namespace ssdq::cli
