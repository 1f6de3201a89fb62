// A quantized model with random weights in a recipe's formats, for benchmarks of shapes whose
// weights are not at hand (`ssdq bench --synthetic NAME --recipe R --bits B`). Speed does not
// depend on the values, only on the formats and widths, so the weights are random integers with
// the scales of random_weights()' ranges (no GPTQ, no transforms), and the activation formats are
// the recipe's own (assign_activation_formats, quamba2's sort-and-cluster) from statistics of
// random rows of typical magnitude. Deterministic for a seed.
#pragma once

#include <cstdint>

#include "quant/recipe.h"
#include "model/quantized_model.h"

namespace ssdq {

QuantizedModel synthetic_quantized_model(const Mamba2Config& config, const RecipeOptions& recipe, uint64_t seed);

}  // namespace ssdq
