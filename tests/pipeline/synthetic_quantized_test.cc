// Synthetic quantized models (the benchmarks' stand-ins for checkpoints not at hand): every
// recipe × bit width validates, carries the recipe's formats, runs to finite logits on the CPU
// runtime, and is the same for the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "pipeline/synthetic_quantized.h"
#include "runtime/cpu_backend.h"
#include "tests/support/quantized_fixtures.h"
#include "tests/support/recipe_cases.h"

namespace ssdq {
namespace {

using namespace testing_models;

TEST(SyntheticQuantized, EveryRecipeRunsWithItsFormats) {
  const Mamba2Config c = synthetic_config(2);
  const std::vector<int32_t> tokens = random_tokens(40, c.vocab_size, 3);
  for (const RecipeCase& recipe_case : synthetic_recipe_cases()) {
    const RecipeOptions& o = recipe_case.options;
    const BitWidth bits = o.bits;
    const RecipeName recipe = o.recipe;
    const std::string name = recipe_case.name;
    const auto m = std::make_shared<QuantizedModel>(synthetic_quantized_model(c, o, 5));
    const QuantizedLayer& layer = m->layers[0];
    const bool int8 = bits == BitWidth::kW8A8 || bits == BitWidth::kW4A8;
    EXPECT_EQ(layer.in_proj_in.is_int8(), int8) << name;
    EXPECT_EQ(layer.in_proj.is_quantized(), bits != BitWidth::kFp16) << name;
    if (bits == BitWidth::kW4A8 || bits == BitWidth::kW4A16) {
      EXPECT_EQ(layer.in_proj.quantized.bits, QuantBits::kInt4) << name;
    }
    EXPECT_EQ(layer.ssd_mode == SsdMode::kSsdi8, int8 && recipe == RecipeName::kSsdi8) << name;
    EXPECT_EQ(layer.ssm_state.is_int8(), int8 && (recipe == RecipeName::kQuamba2 || recipe == RecipeName::kSsdi8))
        << name;
    const CpuBackend backend(m);
    std::vector<float> logits(tokens.size() * c.vocab_size);
    auto state = backend.new_state(1);
    ForwardOutputs out;
    out.logits = logits.data();
    backend.forward(tokens.data(), static_cast<int64_t>(tokens.size()), *state, out);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(SyntheticQuantized, IsDeterministicForASeed) {
  RecipeOptions o;
  o.recipe = RecipeName::kQuamba2;
  o.bits = BitWidth::kW4A8;
  o.group_size = 64;
  o.head_clusters = 2;
  const Mamba2Config c = synthetic_config(2);
  expect_same_model(synthetic_quantized_model(c, o, 9), synthetic_quantized_model(c, o, 9));
}

}  // namespace
}  // namespace ssdq
