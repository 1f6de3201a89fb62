#include "quant/recipe.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "formats/error.h"
#include "model/hadamard.h"

namespace ssdq {

const char* recipe_name(RecipeName recipe) {
  switch (recipe) {
    case RecipeName::kRtn: return "rtn";
    case RecipeName::kHad: return "had";
    case RecipeName::kQuamba2: return "quamba2";
    case RecipeName::kSsdi8: return "ssdi8";
  }
  return "?";
}

const char* bit_width_name(BitWidth bits) {
  switch (bits) {
    case BitWidth::kW8A8: return "w8a8";
    case BitWidth::kW4A8: return "w4a8";
    case BitWidth::kW4A16: return "w4a16";
    case BitWidth::kFp16: return "fp16";
  }
  return "?";
}

RecipeName parse_recipe_name(const std::string& text) {
  for (RecipeName r : {RecipeName::kRtn, RecipeName::kHad, RecipeName::kQuamba2, RecipeName::kSsdi8})
    if (text == recipe_name(r)) return r;
  fail("unknown recipe \"{}\"; choose rtn, had, quamba2 or ssdi8", text);
}

BitWidth parse_bit_width(const std::string& text) {
  for (BitWidth b : {BitWidth::kW8A8, BitWidth::kW4A8, BitWidth::kW4A16, BitWidth::kFp16})
    if (text == bit_width_name(b)) return b;
  fail("unknown bit width \"{}\"; choose w8a8, w4a8, w4a16 or fp16", text);
}

const std::vector<std::string>& keep_float_choices() {
  static const std::vector<std::string> choices = {"in_proj.in", "conv.in",      "ssd.x",     "ssd.B",
                                                   "ssd.C",      "ssd.dt",       "ssd.state", "ssd.x_scaled",
                                                   "ssd.cb",     "out_proj.in",  "weights"};
  return choices;
}

bool RecipeOptions::int8_activations(int64_t layer) const {
  if (bits != BitWidth::kW8A8 && bits != BitWidth::kW4A8) return false;
  return std::find(w4a16_layers.begin(), w4a16_layers.end(), layer) == w4a16_layers.end();
}

bool RecipeOptions::keeps_float(const std::string& point) const {
  return std::find(keep_float.begin(), keep_float.end(), point) != keep_float.end();
}

void RecipeOptions::validate_tp_blocks(int64_t heads, int64_t d_inner) const {
  if (tp_blocks == 1) return;
  if (tp_blocks < 1 || tp_blocks > 64) fail("--tp-blocks must be in 1..64, got {}", tp_blocks);
  if (!uses_transforms())
    fail("--tp-blocks: the {} recipe{} has no online Hadamard transform; its artifacts shard under --tp as they are",
         recipe_name(recipe), quantized() ? "" : " at fp16");
  if (heads % tp_blocks != 0)
    fail("--tp-blocks {}: the model's {} heads do not split into {} blocks of whole heads", tp_blocks, heads, tp_blocks);
  if (!hadamard_size_supported(d_inner / tp_blocks))
    fail("--tp-blocks {}: no Hadamard transform of size {} ({} channels / {}); sizes are K·2^m with K 1, 12, 20 or 28",
         tp_blocks, d_inner / tp_blocks, d_inner, tp_blocks);
}

void RecipeOptions::validate(int64_t n_layer, int64_t heads_per_group, int64_t headdim) const {
  if (recipe == RecipeName::kRtn && gptq.value_or(false))
    fail("--gptq: the rtn recipe rounds weights to nearest by definition; use had, quamba2 or ssdi8");
  if (!quantized() && (quantize_embedding || quantize_lm_head))
    fail("--quantize-embedding / --quantize-lm-head need quantized weights, not --bits fp16");
  if (group_size <= 0 || group_size > (int64_t{1} << 20)) fail("--group-size must be in 1..1048576, got {}", group_size);
  if (!(damp >= 0 && damp < 1)) fail("--damp must be in [0, 1), got {}", damp);
  if (eta && !(*eta >= 0 && *eta <= 1)) fail("--eta must be in [0, 1], got {}", *eta);
  if (eta && recipe != RecipeName::kSsdi8) fail("--eta applies to the ssdi8 recipe only");
  if (!(x_scaled_clip > 0 && x_scaled_clip <= 1)) fail("--x-scaled-clip must be in (0, 1], got {}", x_scaled_clip);
  if (x_scaled_clip != 1.0 && recipe != RecipeName::kSsdi8) fail("--x-scaled-clip applies to the ssdi8 recipe only");
  if (recipe == RecipeName::kQuamba2 && uses_transforms()) {
    const RecipeOptions r = resolved(heads_per_group, headdim);
    if (*r.head_clusters < 1 || *r.head_clusters > heads_per_group)
      fail("--head-clusters must be in 1..{} (heads per B/C group), got {}", heads_per_group, *r.head_clusters);
    if (*r.channel_clusters < 1 || *r.channel_clusters > headdim)
      fail("--channel-clusters must be in 1..{} (headdim), got {}", headdim, *r.channel_clusters);
  }
  if (auto_w4a16_layers != 0) {
    if (bits != BitWidth::kW4A8) fail("--w4a16-layers auto:K mixes W4A16 layers into a w4a8 model; --bits is {}", bit_width_name(bits));
    if (!w4a16_layers.empty()) fail("--w4a16-layers: give layers or auto:K, not both");
    if (auto_w4a16_layers < 1 || auto_w4a16_layers > n_layer)
      fail("--w4a16-layers auto:K: K must be in 1..{} (the model's layers), got {}", n_layer, auto_w4a16_layers);
  }
  if (!w4a16_layers.empty()) {
    if (bits != BitWidth::kW4A8) fail("--w4a16-layers mixes W4A16 layers into a w4a8 model; --bits is {}", bit_width_name(bits));
    for (int64_t layer : w4a16_layers)
      if (layer < 0 || layer >= n_layer) fail("--w4a16-layers: layer {} is outside 0..{}", layer, n_layer - 1);
  }
  for (const std::string& point : keep_float)
    if (std::find(keep_float_choices().begin(), keep_float_choices().end(), point) == keep_float_choices().end())
      fail("--keep-float: unknown point \"{}\"", point);
}

RecipeOptions RecipeOptions::resolved(int64_t heads_per_group, int64_t headdim) const {
  RecipeOptions r = *this;
  if (recipe == RecipeName::kQuamba2 && uses_transforms()) {
    if (!r.head_clusters) r.head_clusters = std::min(default_clusters(), heads_per_group);
    if (!r.channel_clusters) r.channel_clusters = std::min(default_clusters(), headdim);
  } else {
    r.head_clusters.reset();
    r.channel_clusters.reset();
  }
  return r;
}

std::string RecipeOptions::to_json() const {
  nlohmann::json out = {
      {"name", recipe_name(recipe)},
      {"bits", bit_width_name(bits)},
      {"quantize_embedding", quantize_embedding},
      {"quantize_lm_head", quantize_lm_head},
      {"gptq", uses_gptq()},
      {"group_size", group_size},
      {"act_order", act_order},
      {"damp", damp},
      {"head_clusters", head_clusters ? nlohmann::json(*head_clusters) : nlohmann::json(nullptr)},
      {"channel_clusters", channel_clusters ? nlohmann::json(*channel_clusters) : nlohmann::json(nullptr)},
      {"mean_correction_eta", mean_correction_eta()},
      {"act_clip", act_clip.name()},
      {"x_scaled_clip", x_scaled_clip},
      {"w4a16_layers", w4a16_layers},
      {"w4a16_layers_auto", auto_w4a16_layers},
      {"residual_rotation", uses_transforms()},
      {"rotation_seed", rotation_seed ? nlohmann::json(*rotation_seed) : nlohmann::json(nullptr)},
      {"keep_float", keep_float},
      {"tp_blocks", tp_blocks},
  };
  return out.dump();
}

}  // namespace ssdq
