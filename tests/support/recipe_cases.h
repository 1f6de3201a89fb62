// Every recipe × bit width with the options the synthetic-model tests use: int4 groups of 64 and
// two head clusters (the synthetic models have few heads); the name is for failure messages.
#pragma once

#include <string>
#include <vector>

#include "quant/recipe.h"

namespace ssdq::testing_models {

struct RecipeCase {
  std::string name;
  RecipeOptions options;
};

inline std::vector<RecipeCase> synthetic_recipe_cases() {
  std::vector<RecipeCase> cases;
  for (RecipeName recipe : {RecipeName::kRtn, RecipeName::kHad, RecipeName::kQuamba2, RecipeName::kSsdi8})
    for (BitWidth bits : {BitWidth::kW8A8, BitWidth::kW4A8, BitWidth::kW4A16, BitWidth::kFp16}) {
      RecipeOptions o;
      o.recipe = recipe;
      o.bits = bits;
      o.group_size = 64;
      o.head_clusters = 2;
      cases.push_back({std::string(recipe_name(recipe)) + " " + bit_width_name(bits), o});
    }
  return cases;
}

}  // namespace ssdq::testing_models
