// The whole WikiText-2 test file (287,158 scored tokens) at ctx 2048 against the float64
// reference perplexity of examples/mamba2-tiny/REFERENCE.md, within 0.1 %.
#include <gtest/gtest.h>

#include "formats/token_data.h"
#include "formats/tokenizer.h"
#include "runtime/cpu_backend.h"
#include "runtime/eval_ppl.h"
#include "model/model_loader.h"

namespace ssdq {
namespace {

TEST(TinyModelPerplexity, WholeWikiTextAtCtx2048WithinPointOnePercent) {
  const Tokenizer tokenizer = Tokenizer::from_file("examples/mamba2-tiny/tokenizer.json");
  const std::vector<int32_t> tokens = tokenize_data_file("examples/wikitext-2-raw/wiki.test.raw", tokenizer);
  ASSERT_EQ(tokens.size(), 287159u);
  CpuBackend backend(load_model("examples/mamba2-tiny").weights);
  const PerplexityResult result = evaluate_perplexity(backend, tokens, EvalOptions{});
  EXPECT_EQ(result.scored_tokens, 287158);
  EXPECT_NEAR(result.perplexity.mean, 202.71862025654306, 202.71862025654306 * 1e-3);
  std::printf("whole file: ppl %.4f, %.0f tokens/s\n", result.perplexity.mean, result.tokens_per_second());
}

}  // namespace
}  // namespace ssdq
