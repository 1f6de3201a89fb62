// The bundled trained model (examples/mamba2-tiny) on the CPU backend against the float64
// reference: golden logits and NLL of the first 512 WikiText-2 tokens, and the reference
// perplexities of examples/mamba2-tiny/REFERENCE.md (docs/ACCURACY.md "Protocol").
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "formats/safetensors.h"
#include "formats/token_data.h"
#include "formats/tokenizer.h"
#include "runtime/cpu_backend.h"
#include "runtime/eval_ppl.h"
#include "model/model_loader.h"
#include "tests/support/compare.h"

namespace ssdq {
namespace {

constexpr char kModel[] = "examples/mamba2-tiny";
constexpr char kWikiText[] = "examples/wikitext-2-raw/wiki.test.raw";
constexpr char kGolden[] = "tests/fixtures/golden/golden-wikitext2-first512.safetensors";

class TinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = new CpuBackend(load_model(kModel).weights);
    golden_ = new SafetensorsFile(read_safetensors(kGolden));
  }
  static void TearDownTestSuite() {
    delete backend_;
    delete golden_;
  }
  static std::vector<int32_t> golden_tokens() {
    const Tensor& t = golden_->tensors.at("tokens");
    return {t.as<int32_t>(), t.as<int32_t>() + t.numel()};
  }
  static CpuBackend* backend_;
  static SafetensorsFile* golden_;
};
CpuBackend* TinyModel::backend_ = nullptr;
SafetensorsFile* TinyModel::golden_ = nullptr;

TEST_F(TinyModel, LogitsOfFirstEightPositionsMatchFloat64Reference) {
  const std::vector<int32_t> tokens = golden_tokens();
  const int64_t V = backend_->config().vocab_size;
  const Tensor& reference = golden_->tensors.at("logits_rows_0_7");
  ASSERT_EQ(reference.shape, (Shape{8, V}));
  std::vector<float> logits(8 * V);
  auto state = backend_->new_state(1);
  ForwardOutputs out;
  out.logits = logits.data();
  backend_->forward(tokens.data(), 8, *state, out);
  for (int64_t row = 0; row < 8; ++row)
    EXPECT_LT(testing::max_relative_difference(logits.data() + row * V, reference.as<double>() + row * V, V), 1e-4)
        << "row " << row;
}

TEST_F(TinyModel, EveryNllOfFirst512TokensMatchesFloat64Reference) {
  const std::vector<int32_t> tokens = golden_tokens();
  const Tensor& reference = golden_->tensors.at("nll");
  ASSERT_EQ(reference.numel(), 511);
  std::vector<double> nll(511);
  auto state = backend_->new_state(1);
  ForwardOutputs out;
  out.targets = tokens.data() + 1;
  out.nll = nll.data();
  backend_->forward(tokens.data(), 511, *state, out);
  for (int64_t i = 0; i < 511; ++i) EXPECT_NEAR(nll[i], reference.as<double>()[i], 1e-3) << "position " << i;
}

TEST_F(TinyModel, PrefillThenDecodeEqualsPrefillOfWholeSequence) {
  const std::vector<int32_t> tokens = golden_tokens();
  const int64_t n = 300, m = 6, V = backend_->config().vocab_size;  // n crosses a 256-token chunk boundary
  std::vector<float> whole((n + m) * V), split((n + m) * V);
  auto whole_state = backend_->new_state(1);
  ForwardOutputs out;
  out.logits = whole.data();
  backend_->forward(tokens.data(), n + m, *whole_state, out);
  auto state = backend_->new_state(1);
  out.logits = split.data();
  backend_->forward(tokens.data(), n, *state, out);
  for (int64_t t = n; t < n + m; ++t) {
    out.logits = split.data() + t * V;
    backend_->forward(tokens.data() + t, 1, *state, out);
  }
  for (int64_t t = n; t < n + m; ++t)
    EXPECT_LT(testing::max_relative_difference(split.data() + t * V, whole.data() + t * V, V), 1e-4)
        << "position " << t;
}

double reference_perplexity(int64_t ctx, int64_t max_tokens) {
  const Tokenizer tokenizer = Tokenizer::from_file(std::string(kModel) + "/tokenizer.json");
  const std::vector<int32_t> tokens = tokenize_data_file(kWikiText, tokenizer);
  EvalOptions options;
  options.ctx = ctx;
  options.max_tokens = max_tokens;
  CpuBackend backend(load_model(kModel).weights);
  return evaluate_perplexity(backend, tokens, options).perplexity.mean;
}

// Values from examples/mamba2-tiny/REFERENCE.md (float64 forward of the same weights).
TEST(TinyModelPerplexity, Ctx2048First16384TokensWithinPointOnePercent) {
  EXPECT_NEAR(reference_perplexity(2048, 16384), 230.68211672811023, 230.68211672811023 * 1e-3);
}

TEST(TinyModelPerplexity, Ctx1024First16384TokensWithinPointOnePercent) {
  EXPECT_NEAR(reference_perplexity(1024, 16384), 241.12548750260137, 241.12548750260137 * 1e-3);
}

}  // namespace
}  // namespace ssdq
