// Each recipe's default options fit every model shape the readers accept: quamba2's clusters are
// clamped to the heads per B/C group and to headdim, options a recipe does not use are neither
// checked nor recorded, and an export with nothing but --recipe and --bits succeeds for B/C
// groups G ∈ {1, 2, 4, 8} and heads per group from 1 to 64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "pipeline/mixed_precision.h"
#include "pipeline/quantize_model.h"
#include "formats/error.h"
#include "quant/recipe.h"
#include "runtime/cpu_backend.h"
#include "tests/support/quantized_fixtures.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;
using namespace testing_models;


RecipeOptions defaults(RecipeName recipe, BitWidth bits) {
  RecipeOptions o;
  o.recipe = recipe;
  o.bits = bits;
  return o;
}

TEST(DefaultOptions, ValidForEveryGroupCountAndHeadsPerGroup) {
  for (int64_t heads_per_group = 1; heads_per_group <= 64; ++heads_per_group)
    for (int64_t headdim : {1, 2, 3, 16, 64, 128})
      for (RecipeName recipe : kRecipes)
        for (BitWidth bits : kBits) {
          const RecipeOptions o = defaults(recipe, bits);
          EXPECT_NO_THROW(o.validate(4, heads_per_group, headdim))
              << recipe_name(recipe) << " " << bit_width_name(bits) << " heads/group " << heads_per_group;
          const RecipeOptions r = o.resolved(heads_per_group, headdim);
          if (recipe == RecipeName::kQuamba2 && bits != BitWidth::kFp16) {
            const int64_t clusters = bits == BitWidth::kW8A8 ? 8 : 4;  // chosen by KL (docs/ACCURACY.md)
            EXPECT_EQ(*r.head_clusters, std::min<int64_t>(clusters, heads_per_group));
            EXPECT_EQ(*r.channel_clusters, std::min<int64_t>(clusters, headdim));
          } else {
            EXPECT_FALSE(r.head_clusters || r.channel_clusters) << recipe_name(recipe) << " records clusters it ignores";
          }
        }
}

TEST(DefaultOptions, ClustersGivenExplicitlyAreStillCheckedForQuamba2Only) {
  RecipeOptions o = defaults(RecipeName::kQuamba2, BitWidth::kW8A8);
  o.head_clusters = 4;
  try {
    o.validate(4, 3, 64);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--head-clusters must be in 1..3 (heads per B/C group), got 4"));
  }
  o.recipe = RecipeName::kSsdi8;  // the ssdi8 recipe does not cluster: nothing to check
  EXPECT_NO_THROW(o.validate(4, 3, 64));
  EXPECT_EQ(nlohmann::json::parse(o.resolved(3, 64).to_json())["head_clusters"], nullptr);
}

// (groups, heads per group, headdim): d_inner = heads · headdim and d_model = d_inner / 2 are
// Hadamard orders (K · 2^m, K ∈ {1, 12, 20, 28}).
struct Shape {
  int64_t groups, heads_per_group, headdim;
};

TEST(DefaultOptions, EveryRecipeExportsAndRunsOnUnusualShapes) {
  for (const Shape& s : {Shape{1, 1, 256}, Shape{2, 3, 32}, Shape{4, 5, 16}, Shape{8, 7, 4}, Shape{8, 64, 2}}) {
    Mamba2Config c;
    c.ngroups = s.groups;
    c.headdim = s.headdim;
    c.d_model = s.groups * s.heads_per_group * s.headdim / 2;
    c.n_layer = 2;
    c.vocab_size = 128;
    c.d_state = 16;
    c.chunk_size = 16;
    const ModelWeights w = random_weights(c, 3);
    const CalibrationFile calib = calibration_in_memory(w, 2, 40, 4);
    const std::vector<int32_t> tokens = random_tokens(33, c.vocab_size, 5);
    for (RecipeName recipe : kRecipes)
      for (BitWidth bits : kBits) {
        const std::string name = fmt::format("G {} × {} heads × headdim {}: {} {}", s.groups, s.heads_per_group,
                                             s.headdim, recipe_name(recipe), bit_width_name(bits));
        ExportOptions o;
        o.recipe = defaults(recipe, bits);
        std::shared_ptr<QuantizedModel> m;
        try {
          m = std::make_shared<QuantizedModel>(quantize_model(w, calib, o));
        } catch (const Error& e) {
          ADD_FAILURE() << name << ": " << e.what();
          continue;
        }
        EXPECT_TRUE(std::isfinite(mean_nll(CpuBackend(m), tokens))) << name;
      }
  }
}

// A clip never widens a scale: every static int8 scale of an --act-clip percentile / mse export
// is at most the absmax export's where both see the same statistics (rtn: all of the calibration
// file's; the others: layer 0's input, the later layers being calibrated on the quantized layers
// before them), some are smaller, and the model runs.
TEST(ActClipExport, ClipsNeverWidenAScaleAndTheModelRuns) {
  const Mamba2Config c = synthetic_config(2);
  const ModelWeights w = random_weights(c, 3);
  const CalibrationFile calib = calibration_in_memory(w, 2, 64, 4);
  const std::vector<int32_t> tokens = random_tokens(65, c.vocab_size, 5);
  for (RecipeName recipe : kRecipes) {
    ExportOptions o;
    o.recipe = defaults(recipe, BitWidth::kW8A8);
    o.recipe.act_clip = ActClip::parse("absmax");
    const QuantizedModel absmax = quantize_model(w, calib, o);
    for (const char* mode : {"percentile:99.9", "mse"}) {
      const std::string name = std::string(recipe_name(recipe)) + " " + mode;
      o.recipe.act_clip = ActClip::parse(mode);
      const auto clipped = std::make_shared<QuantizedModel>(quantize_model(w, calib, o));
      EXPECT_LE(clipped->layers[0].in_proj_in.scales[0], absmax.layers[0].in_proj_in.scales[0]) << name;
      if (recipe == RecipeName::kRtn) {
        int64_t smaller = 0;
        for (int64_t l = 0; l < c.n_layer; ++l) {
          const QuantizedLayer &a = absmax.layers[l], &b = clipped->layers[l];
          for (const auto& [x, y] : {std::pair{&a.in_proj_in, &b.in_proj_in}, {&a.conv_in, &b.conv_in},
                                     {&a.ssd_x, &b.ssd_x}, {&a.ssd_B, &b.ssd_B}, {&a.out_proj_in, &b.out_proj_in}}) {
            ASSERT_EQ(x->scales.size(), y->scales.size());
            for (size_t k = 0; k < x->scales.size(); ++k) {
              EXPECT_LE(y->scales[k], x->scales[k]) << name << " layer " << l;
              smaller += y->scales[k] < x->scales[k];
            }
          }
        }
        EXPECT_GT(smaller, 0) << name;
      }
      EXPECT_TRUE(std::isfinite(mean_nll(CpuBackend(clipped), tokens))) << name;
    }
  }
}

// --w4a16-layers auto:K: the measured choice is the K layers whose fp16 activations lower the KL
// divergence the most, switching a layer never makes the model worse than all-W4A8 by more than
// noise, and the resolved options name those layers (and export them as W4A16).
TEST(AutoMixedPrecision, ChoosesTheLayersWhoseFp16ActivationsHelpMost) {
  const Mamba2Config c = synthetic_config(2, 4);
  const ModelWeights w = random_weights(c, 3);
  const CalibrationFile calib = calibration_in_memory(w, 3, 64, 4);
  ExportOptions o;
  o.recipe = defaults(RecipeName::kHad, BitWidth::kW4A8);
  o.recipe.auto_w4a16_layers = 2;
  MixedPrecisionChoice seen;
  const ExportOptions resolved = resolve_auto_w4a16_layers(w, calib, o, [&](const MixedPrecisionChoice& m) { seen = m; });
  ASSERT_EQ(seen.layers.size(), 4u);
  ASSERT_EQ(resolved.recipe.w4a16_layers.size(), 2u);
  EXPECT_EQ(resolved.recipe.auto_w4a16_layers, 0);
  EXPECT_EQ(resolved.recipe.w4a16_layers, seen.w4a16_layers);
  for (const LayerSensitivity& s : seen.layers) {
    EXPECT_GT(s.kl, 0);
    const bool chosen = std::count(seen.w4a16_layers.begin(), seen.w4a16_layers.end(), s.layer) > 0;
    for (const LayerSensitivity& other : seen.layers) {
      if (chosen && !std::count(seen.w4a16_layers.begin(), seen.w4a16_layers.end(), other.layer)) {
        EXPECT_LE(s.kl, other.kl) << "layer " << s.layer << " chosen over " << other.layer;
      }
    }
  }
  const QuantizedModel m = quantize_model(w, calib, resolved);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const bool fp16 = std::count(seen.w4a16_layers.begin(), seen.w4a16_layers.end(), l) > 0;
    EXPECT_EQ(m.layers[l].in_proj_in.is_int8(), !fp16) << "layer " << l;
  }
  o.recipe.bits = BitWidth::kW8A8;
  EXPECT_THAT([&] { resolve_auto_w4a16_layers(w, calib, o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("auto:K mixes W4A16 layers into a w4a8 model")));
  o.recipe.bits = BitWidth::kW4A8;
  o.recipe.auto_w4a16_layers = 5;
  EXPECT_THAT([&] { resolve_auto_w4a16_layers(w, calib, o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("K must be in 1..4")));
}

}  // namespace
}  // namespace ssdq
