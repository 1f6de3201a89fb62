// The quantized CUDA backend against the quantized CPU runtime (its specification): every recipe
// × bit width on synthetic models with two and four B/C groups (prefill logits, decode steps
// after a prefill, a batch of two), and the bundled model's NLL for every recipe × bit width.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "pipeline/quantize_model.h"
#include "formats/error.h"
#include "formats/safetensors.h"
#include "formats/tokenizer.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/quantized_fixtures.h"

namespace ssdq {
namespace {

using namespace testing_models;

// Logits of `length` tokens of each of `batch` sequences from a zero state, then of `steps`
// single-token decode steps continuing them (rows appended after the prefill rows).
std::vector<float> run(const Backend& backend, const std::vector<int32_t>& tokens, int64_t batch, int64_t length,
                       int64_t steps) {
  const int64_t V = backend.config().vocab_size, total = length + steps;
  std::vector<float> logits(batch * total * V);
  auto state = backend.new_state(batch);
  std::vector<int32_t> prefill(batch * length);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < length; ++t) prefill[b * length + t] = tokens[b * total + t];
  std::vector<float> block(batch * length * V);
  ForwardOutputs out;
  out.logits = block.data();
  backend.forward(prefill.data(), length, *state, out);
  for (int64_t b = 0; b < batch; ++b)
    std::copy_n(block.data() + b * length * V, length * V, logits.data() + b * total * V);
  std::vector<float> step(batch * V);
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int32_t> next(batch);
    for (int64_t b = 0; b < batch; ++b) next[b] = tokens[b * total + length + s];
    ForwardOutputs one;
    one.logits = step.data();
    backend.forward(next.data(), 1, *state, one);
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(step.data() + b * V, V, logits.data() + (b * total + length + s) * V);
  }
  return logits;
}

// Mean |Δ| / max |ref| over all logits: a last-bit difference can move an int8 value one step,
// which moves a few logits visibly; the mean says whether the two runs compute the same model.
double mean_relative(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += std::abs(double(a[i]) - ref[i]);
    scale = std::max(scale, std::abs(double(ref[i])));
  }
  return diff / a.size() / scale;
}

class EveryRecipe : public ::testing::TestWithParam<int64_t> {};

TEST_P(EveryRecipe, MatchesTheCpuRuntime) {
  testing::require_device();
  const int64_t groups = GetParam();
  const ModelWeights w = random_weights(synthetic_config(groups), 17);
  const CalibrationFile calib = calibration_in_memory(w, 4, 80, 2);
  constexpr int64_t kBatch = 2, kLength = 90, kSteps = 6;
  const std::vector<int32_t> tokens = random_tokens(kBatch * (kLength + kSteps), 256, 99);
  for (RecipeName recipe : kRecipes)
    for (BitWidth bits : kBits) {
      const std::string name = std::string(recipe_name(recipe)) + " " + bit_width_name(bits);
      const auto m = std::make_shared<QuantizedModel>(quantize_model(w, calib, synthetic_model_options(recipe, bits)));
      const std::vector<float> cpu = run(CpuBackend(m), tokens, kBatch, kLength, kSteps);
      const std::vector<float> gpu = run(CudaBackend(m, CudaBackendOptions{}), tokens, kBatch, kLength, kSteps);
      const double max_rel = max_relative(gpu, cpu), mean_rel = mean_relative(gpu, cpu);
      std::printf("%ld groups, %-14s GPU vs CPU: max %.2e, mean %.2e of max |logit|\n", static_cast<long>(groups),
                  name.c_str(), max_rel, mean_rel);
      const bool int8 = bits == BitWidth::kW8A8 || bits == BitWidth::kW4A8;
      // Measured on an H100: int8 means ≤ 1.1e-4 and maxima ≤ 1.3e-2 (an int8 value one step off
      // next to a rounding boundary); fp16 activations ≤ 1.8e-4 and ≤ 1.2e-3 (fp16 GEMMs).
      EXPECT_LT(mean_rel, 5e-4) << name;
      EXPECT_LT(max_rel, int8 ? 0.05 : 5e-3) << name;
    }
}

INSTANTIATE_TEST_SUITE_P(Groups, EveryRecipe, ::testing::Values(2, 4));

// Decode at a batch whose state update runs in many waves (80 sequences × 16 heads, dstate 128:
// more blocks than a GPU holds at once), where the int8 state takes the kernel with packed rows
// (kernels/ssd_state_update.cu): SSDi8's one scale a channel, Quamba2's one a (cluster, n).
TEST(LargeBatchDecode, MatchesTheCpuRuntime) {
  testing::require_device();
  Mamba2Config config = synthetic_config(2);
  config.d_state = 128;
  const ModelWeights w = random_weights(config, 23);
  const CalibrationFile calib = calibration_in_memory(w, 4, 80, 2);
  constexpr int64_t kBatch = 80, kLength = 12, kSteps = 4;
  const std::vector<int32_t> tokens = random_tokens(kBatch * (kLength + kSteps), 256, 7);
  for (RecipeName recipe : {RecipeName::kSsdi8, RecipeName::kQuamba2}) {
    const auto m = std::make_shared<QuantizedModel>(quantize_model(w, calib, synthetic_model_options(recipe, BitWidth::kW8A8)));
    const std::vector<float> cpu = run(CpuBackend(m), tokens, kBatch, kLength, kSteps);
    const std::vector<float> gpu = run(CudaBackend(m, CudaBackendOptions{}), tokens, kBatch, kLength, kSteps);
    const double max_rel = max_relative(gpu, cpu), mean_rel = mean_relative(gpu, cpu);
    std::printf("batch %ld, %-8s W8A8 GPU vs CPU: max %.2e, mean %.2e of max |logit|\n", static_cast<long>(kBatch),
                recipe_name(recipe), max_rel, mean_rel);
    EXPECT_LT(mean_rel, 5e-4) << recipe_name(recipe);
    EXPECT_LT(max_rel, 0.05) << recipe_name(recipe);
  }
}

// A synthetic model the chunked scan takes (headdim 32 and chunk 64, unlike EveryRecipe's headdim
// 16), its calibration, and prompts of 150 tokens (two chunk boundaries) followed by decode steps.
struct ChunkedSsdCase {
  static constexpr int64_t kBatch = 2, kLength = 150, kSteps = 4;
  ModelWeights weights = random_weights(config(), 31);
  CalibrationFile calib = calibration_in_memory(weights, 4, 160, 2);
  std::vector<int32_t> tokens = random_tokens(kBatch * (kLength + kSteps), 256, 5);

  static Mamba2Config config() {
    Mamba2Config c = synthetic_config(2);
    c.headdim = 32;
    c.chunk_size = 64;
    return c;
  }
  // {max, mean} relative difference of the GPU's logits from the CPU runtime's.
  std::pair<double, double> gpu_vs_cpu(const std::shared_ptr<const QuantizedModel>& m) const {
    const std::vector<float> cpu = run(CpuBackend(m), tokens, kBatch, kLength, kSteps);
    const std::vector<float> gpu = run(CudaBackend(m, CudaBackendOptions{}), tokens, kBatch, kLength, kSteps);
    return {max_relative(gpu, cpu), mean_relative(gpu, cpu)};
  }
};

// The float-SSD recipes' prefill through the chunked scan, then decode steps by the recurrence
// from the state it leaves (int8 for the recipes that quantize it).
TEST(FloatSsdChunked, MatchesTheCpuRuntime) {
  testing::require_device();
  const ChunkedSsdCase t;
  for (RecipeName recipe : {RecipeName::kRtn, RecipeName::kHad, RecipeName::kQuamba2})
    for (BitWidth bits : kBits) {
      const std::string name = std::string(recipe_name(recipe)) + " " + bit_width_name(bits);
      const auto [max_rel, mean_rel] = t.gpu_vs_cpu(
          std::make_shared<QuantizedModel>(quantize_model(t.weights, t.calib, synthetic_model_options(recipe, bits))));
      std::printf("chunked float SSD, %-14s GPU vs CPU: max %.2e, mean %.2e of max |logit|\n", name.c_str(), max_rel,
                  mean_rel);
      // Measured on an H100: int8 activations means ≤ 3.6e-3, maxima ≤ 3.8e-2 (fp16 SSD operands move
      // int8 values downstream next to rounding boundaries; the fp32 recurrence gives ≤ 1.1e-4);
      // float activations ≤ 1.8e-4 and ≤ 1.5e-3.
      const bool int8 = bits == BitWidth::kW8A8 || bits == BitWidth::kW4A8;
      EXPECT_LT(mean_rel, int8 ? 6e-3 : 5e-4) << name;
      EXPECT_LT(max_rel, int8 ? 0.06 : 5e-3) << name;
    }
}

// A layer whose int8 state scales put the chunked scan's fp16 state past its range (127·s_s above
// 32,752) prefills through the fp32 recurrence instead: its logits then agree with the CPU as
// EveryRecipe's do (≤ 1.1e-4), where the chunked scan leaves 2e-3 or more on this model
// (MatchesTheCpuRuntime); decode steps follow as usual.
TEST(FloatSsdChunked, LayersOutsideFp16RangeTakeTheRecurrence) {
  testing::require_device();
  const ChunkedSsdCase t;
  QuantizedModel q = quantize_model(t.weights, t.calib, synthetic_model_options(RecipeName::kQuamba2, BitWidth::kW8A8));
  for (QuantizedLayer& layer : q.layers) {
    ASSERT_TRUE(layer.ssm_state.is_int8());
    for (float& scale : layer.ssm_state.scales) scale = 300.f;
  }
  const auto [max_rel, mean_rel] = t.gpu_vs_cpu(std::make_shared<QuantizedModel>(std::move(q)));
  std::printf("quamba2 w8a8, state scales 300, GPU vs CPU: max %.2e, mean %.2e of max |logit|\n", max_rel, mean_rel);
  EXPECT_LT(mean_rel, 5e-4);
  EXPECT_LT(max_rel, 0.05);
}

// Head-to-toe artifacts (quantized embedding and lm_head): the CUDA backend reads the quantized
// head through qgemv W8A16 / W4A16 (prefill rows 16 at a time, decode rows), a float summation
// like the fp16 GEMM it replaces; logits against the CPU runtime as above.
TEST(HeadToToe, MatchesTheCpuRuntime) {
  testing::require_device();
  const ModelWeights w = random_weights(synthetic_config(2), 23);
  const CalibrationFile calib = calibration_in_memory(w, 4, 80, 2);
  constexpr int64_t kBatch = 2, kLength = 40, kSteps = 4;
  const std::vector<int32_t> tokens = random_tokens(kBatch * (kLength + kSteps), 256, 7);
  auto check = [&](const ModelWeights& weights, const CalibrationFile& file, BitWidth bits, int64_t group_size) {
    ExportOptions options = synthetic_model_options(RecipeName::kSsdi8, bits);
    options.recipe.quantize_embedding = options.recipe.quantize_lm_head = true;
    options.recipe.group_size = group_size;
    const auto m = std::make_shared<QuantizedModel>(quantize_model(weights, file, options));
    ASSERT_TRUE(m->lm_head.is_quantized());
    const std::vector<float> cpu = run(CpuBackend(m), tokens, kBatch, kLength, kSteps);
    const std::vector<float> gpu = run(CudaBackend(m, CudaBackendOptions{}), tokens, kBatch, kLength, kSteps);
    const double max_rel = max_relative(gpu, cpu), mean_rel = mean_relative(gpu, cpu);
    std::printf("head-to-toe ssdi8 %-5s group %4ld GPU vs CPU: max %.2e, mean %.2e of max |logit|\n", bit_width_name(bits),
                static_cast<long>(group_size), max_rel, mean_rel);
    EXPECT_LT(mean_rel, 5e-4) << bit_width_name(bits);
    EXPECT_LT(max_rel, bits == BitWidth::kW4A16 ? 5e-3 : 0.05) << bit_width_name(bits);
  };
  for (BitWidth bits : {BitWidth::kW8A8, BitWidth::kW4A8, BitWidth::kW4A16}) check(w, calib, bits, 64);
  // An int8 head grouped wider than the GEMV's 512 columns: its scales are repeated over sub-groups.
  Mamba2Config wide = synthetic_config(2, 1);
  wide.d_model = 1536;
  const ModelWeights wide_weights = random_weights(wide, 29);
  check(wide_weights, calibration_in_memory(wide_weights, 4, 80, 2), BitWidth::kW8A8, 1536);
}

// The bundled model's calibration for these tests: 2 WikiText-2 windows of 256 tokens.
CalibrationFile wikitext_calibration(const ModelWeights& w) {
  const Tokenizer tokenizer = Tokenizer::from_file("examples/mamba2-tiny/tokenizer.json");
  return calibration_in_memory(
      w, 2, 256, 5, sample_calibration_tokens({"examples/wikitext-2-raw/wiki.test.raw"}, tokenizer, 0, 2, 256, 5));
}

// The golden fixture's 512 WikiText-2 tokens.
std::vector<int32_t> golden_tokens() {
  const SafetensorsFile golden = read_safetensors("tests/fixtures/golden/golden-wikitext2-first512.safetensors");
  const Tensor& t = golden.tensors.at("tokens");
  return {t.as<int32_t>(), t.as<int32_t>() + t.numel()};
}

// The acceptance of docs/ACCURACY.md's artifacts in miniature: on the bundled model, calibrated on
// WikiText-2 windows, the CUDA backend's perplexity over the first 512 test tokens is within
// 0.5 % of the CPU runtime's.
TEST(BundledModel, PerplexityWithinHalfAPercentOfTheCpu) {
  testing::require_device();
  const ModelWeights w = tiny_model();
  const CalibrationFile calib = wikitext_calibration(w);
  const std::vector<int32_t> eval = golden_tokens();
  for (RecipeName recipe : kRecipes)
    for (BitWidth bits : kBits) {
      const std::string name = std::string(recipe_name(recipe)) + " " + bit_width_name(bits);
      ExportOptions o;
      o.recipe.recipe = recipe;
      o.recipe.bits = bits;
      const auto m = std::make_shared<QuantizedModel>(quantize_model(w, calib, o));
      const double cpu = mean_nll(CpuBackend(m), eval), gpu = mean_nll(CudaBackend(m, CudaBackendOptions{}), eval);
      std::printf("%-14s mean NLL CPU %.6f GPU %.6f (perplexity ratio %.5f)\n", name.c_str(), cpu, gpu,
                  std::exp(gpu - cpu));
      EXPECT_LT(std::abs(gpu - cpu), std::log(1.005)) << name;
    }
}

// export --tp-blocks: out_proj's input rotated in blocks (I_B ⊗ H_{E/B}) runs the gated norm and
// the rotation as separate launches on the GPU; the same tolerance against the CPU as above.
TEST(BundledModel, BlockRotationsMatchTheCpu) {
  testing::require_device();
  const ModelWeights w = tiny_model();
  const CalibrationFile calib = wikitext_calibration(w);
  const std::vector<int32_t> eval = golden_tokens();
  for (RecipeName recipe : {RecipeName::kHad, RecipeName::kQuamba2, RecipeName::kSsdi8})
    for (BitWidth bits : {BitWidth::kW8A8, BitWidth::kW4A8})
      for (int64_t blocks : {2, 4}) {
        const std::string name = fmt::format("{} {} in {} blocks", recipe_name(recipe), bit_width_name(bits), blocks);
        ExportOptions o;
        o.recipe.recipe = recipe;
        o.recipe.bits = bits;
        o.recipe.tp_blocks = blocks;
        const auto m = std::make_shared<QuantizedModel>(quantize_model(w, calib, o));
        const CudaBackend gpu_backend(m, CudaBackendOptions{});
        EXPECT_NE(gpu_backend.describe_plan(1, 1).find(fmt::format("rotation in {} blocks", blocks)), std::string::npos);
        const double cpu = mean_nll(CpuBackend(m), eval), gpu = mean_nll(gpu_backend, eval);
        std::printf("%-28s mean NLL CPU %.6f GPU %.6f (perplexity ratio %.5f)\n", name.c_str(), cpu, gpu,
                    std::exp(gpu - cpu));
        EXPECT_LT(std::abs(gpu - cpu), std::log(1.005)) << name;
      }
}

TEST(CudaBackendArtifact, RejectsAStateOfAnotherBackend) {
  testing::require_device();
  const ModelWeights w = random_weights(synthetic_config(2), 3);
  const CalibrationFile calib = calibration_in_memory(w, 2, 40, 1);
  const auto m = std::make_shared<QuantizedModel>(quantize_model(w, calib, synthetic_model_options(RecipeName::kRtn, BitWidth::kW8A8)));
  const CudaBackend gpu(m, CudaBackendOptions{});
  const CpuBackend cpu(m);
  auto state = cpu.new_state(1);
  const int32_t token = 1;
  EXPECT_THROW(gpu.forward(&token, 1, *state, ForwardOutputs{}), Error);
}

}  // namespace
}  // namespace ssdq
