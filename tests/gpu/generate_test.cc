// Speculative decoding on both CUDA backends equals plain decoding on the same backend, token for
// token: greedy and sampled, the bundled model in bf16 and synthetic models of every recipe ×
// bit width, drafts accepted in every length 0…K, prompts of different lengths in one batch;
// several drafts per sequence (rows side by side) against plain decoding at as many rows.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "pipeline/synthetic_quantized.h"
#include "model/model_loader.h"
#include "runtime/cuda_backend.h"
#include "tests/support/recipe_cases.h"
#include "tests/runtime/speculation_checks.h"

namespace ssdq {
namespace {

using namespace testing_models;

TEST(CudaGenerate, SpeculativeIsPlainInBf16) {
  CudaBackendOptions options;
  const CudaBackend backend(*load_model(kTinyModel).weights, options);
  const std::vector<int64_t> histogram = expect_speculation_exact(backend, {}, "bf16 greedy");
  for (size_t j = 0; j < histogram.size(); ++j) EXPECT_GT(histogram[j], 0) << "no window accepted " << j << " drafts";
  GenerateOptions sampled;
  sampled.sampling = {0.8, 50, 0.95, 3};
  expect_speculation_exact(backend, sampled, "bf16 sampled");
}

TEST(CudaGenerate, SeveralDraftsPerSequenceAreExact) {
  const CudaBackend bf16(*load_model(kTinyModel).weights, CudaBackendOptions{});
  expect_speculation_exact(bf16, {}, "bf16 3 drafts", 3);
  GenerateOptions sampled;
  sampled.sampling = {0.8, 50, 0.95, 3};
  expect_speculation_exact(bf16, sampled, "bf16 2 drafts sampled", 2);
  const Mamba2Config c = synthetic_config(2);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const CudaBackend backend(std::make_shared<const QuantizedModel>(synthetic_quantized_model(c, recipe_case.options, 5)),
                              CudaBackendOptions{});
    expect_speculation_exact(backend, {}, recipe_case.name + " 2 drafts", 2);
  }
}

// A user's `--drafts N` on one prompt: the text of plain decoding at batch 1, not only of plain
// decoding at N rows, since generate's engine (rows_alone) computes up to 16 rows each as if alone.
TEST(CudaGenerate, SeveralDraftsGiveTheTextOfThePromptAlone) {
  CudaBackendOptions rows_alone;
  rows_alone.rows_alone = true;
  const CudaBackend bf16(*load_model(kTinyModel).weights, rows_alone);
  const int64_t V = bf16.config().vocab_size;
  for (const auto& prompt : prompts_of(V))
    for (int64_t drafts : {2, 3, 4}) {
      expect_speculation_exact(bf16, {}, "bf16 alone, " + std::to_string(drafts) + " drafts", drafts,
                               PlainReference::kItself, {prompt});
      GenerateOptions sampled;
      sampled.sampling = {0.8, 50, 0.95, 3};
      expect_speculation_exact(bf16, sampled, "bf16 alone sampled, " + std::to_string(drafts) + " drafts", drafts,
                               PlainReference::kItself, {prompt});
    }
}

// generate's engine (rows_alone) verifies a window of up to 16 rows in one call, whose rows get a
// step's bits (Backend::exact_window): one prompt at a time (windows of 5 rows), greedy and sampled,
// the text of plain decoding, with every accepted length 0…K among the windows.
TEST(CudaGenerate, ExactWindowsGiveThePlainText) {
  CudaBackendOptions rows_alone;
  rows_alone.rows_alone = true;
  const CudaBackend bf16(*load_model(kTinyModel).weights, rows_alone);
  ASSERT_TRUE(bf16.exact_window(1, 5));
  const int64_t V = bf16.config().vocab_size;
  std::vector<int64_t> histogram;
  for (const auto& prompt : prompts_of(V)) {
    const std::vector<int64_t> h =
        expect_speculation_exact(bf16, {}, "bf16 exact window", 1, PlainReference::kItself, {prompt});
    histogram.resize(h.size());
    for (size_t j = 0; j < h.size(); ++j) histogram[j] += h[j];
    GenerateOptions sampled;
    sampled.sampling = {0.8, 50, 0.95, 3};
    expect_speculation_exact(bf16, sampled, "bf16 exact window sampled", 1, PlainReference::kItself, {prompt});
  }
  for (size_t j = 0; j < histogram.size(); ++j) EXPECT_GT(histogram[j], 0) << "no window accepted " << j << " drafts";
}

TEST(CudaGenerate, SpeculativeIsPlainForEveryRecipeAndBits) {
  const Mamba2Config c = synthetic_config(2);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const RecipeOptions& o = recipe_case.options;
    const CudaBackend backend(std::make_shared<const QuantizedModel>(synthetic_quantized_model(c, o, 5)), CudaBackendOptions{});
    const std::string name = recipe_case.name;
    expect_speculation_exact(backend, {}, name + " greedy");
    GenerateOptions sampled;
    sampled.sampling = {1.0, 0, 1.0, 11};
    expect_speculation_exact(backend, sampled, name + " sampled");
  }
}

}  // namespace
}  // namespace ssdq
