// The quantization recipes of docs/QUANTIZATION.md ("Recipes") as options, and what each one quantizes where. Pure:
// the export driver (pipeline/quantize_model.h) applies them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quant/activation_clipping.h"

namespace ssdq {

enum class RecipeName { kRtn, kHad, kQuamba2, kSsdi8 };
enum class BitWidth { kW8A8, kW4A8, kW4A16, kFp16 };

const char* recipe_name(RecipeName recipe);
const char* bit_width_name(BitWidth bits);
RecipeName parse_recipe_name(const std::string& text);  // fails listing the choices
BitWidth parse_bit_width(const std::string& text);

// Activation points a user may keep in floating point (fp16) for ablations, plus "weights"
// (projections kept fp16) — `--keep-float`.
const std::vector<std::string>& keep_float_choices();

struct RecipeOptions {
  RecipeName recipe = RecipeName::kRtn;
  BitWidth bits = BitWidth::kW8A8;
  bool quantize_embedding = false;  // head-to-toe: per-row embedding at the weight bit width
  bool quantize_lm_head = false;    // head-to-toe: per-group (group_size) lm_head, weight-only
  std::optional<bool> gptq;         // unset: on for 4-bit weights of had/quamba2/ssdi8
  int64_t group_size = 128;         // int4 weight groups along the input dimension
  bool act_order = false;           // GPTQ act-order (implies static groups)
  double damp = 0.01;               // GPTQ damping, fraction of mean(diag H)
  // quamba2 sort-and-cluster m (per B/C group) and n (per head cluster); unset: the default
  // clamped to the model (see resolved()). Other recipes neither use nor check them.
  std::optional<int64_t> head_clusters, channel_clusters;
  // The defaults, chosen by KL divergence on the bundled model (docs/ACCURACY.md, "Sweeps"):
  // 8 × 8 at W8A8 (−5 % KL against 4 × 4), 4 × 4 with int4 weights (8 × 8 was 0.8 % worse).
  int64_t default_clusters() const { return bits == BitWidth::kW8A8 ? 8 : 4; }
  std::optional<double> eta;        // ssdi8 mean correction factor; unset: 0.15; 0 disables
  // How each static int8 activation scale's clip is chosen: the 99.99th percentile of |x| by
  // default, the best of absmax / percentile / mse by KL divergence on held-out calibration text
  // for every recipe at W8A8 (docs/ACCURACY.md, "Activation clipping").
  ActClip act_clip = ActClip{ActClip::Mode::kPercentile, 99.99};
  double x_scaled_clip = 1.0;       // ssdi8: X_scaled's int8 scale = clip · absmax / 127 (clip ≤ 1 saturates outliers)
  std::vector<int64_t> w4a16_layers;  // w4a8 layers run with fp16 activations (mixed precision)
  // w4a8: choose w4a16_layers automatically, the K layers whose int8 activations cost the most
  // KL divergence on calibration samples (pipeline/mixed_precision.h); 0: off.
  int64_t auto_w4a16_layers = 0;
  std::optional<uint64_t> rotation_seed;  // residual rotation Q = diag(±1)·H/√D with signs from this seed
  std::vector<std::string> keep_float;    // ablation: points (or "weights") left in fp16
  // The online Hadamard at out_proj's input as I_B ⊗ H_{E/B} (B = tp_blocks): each block of E/B
  // channels rotated alone, so that --tp B (or a divisor of B) shards it (export --tp-blocks).
  int64_t tp_blocks = 1;

  // Resolved choices.
  bool weights_int4() const { return bits == BitWidth::kW4A8 || bits == BitWidth::kW4A16; }
  bool quantized() const { return bits != BitWidth::kFp16; }
  bool uses_transforms() const { return quantized() && recipe != RecipeName::kRtn; }
  bool uses_gptq() const { return quantized() && recipe != RecipeName::kRtn && gptq.value_or(weights_int4()); }
  double mean_correction_eta() const { return recipe == RecipeName::kSsdi8 && quantized() ? eta.value_or(0.15) : 0.0; }
  bool int8_activations(int64_t layer) const;
  bool keeps_float(const std::string& point) const;

  // These options with every default that depends on the model's shape filled in: quamba2's
  // clusters min(default_clusters(), heads per group) and min(default_clusters(), headdim) unless
  // given (so the defaults fit any model), unused options cleared. The exporters resolve before validating and record this.
  RecipeOptions resolved(int64_t heads_per_group, int64_t headdim) const;

  // Fails with a message naming the flag when options contradict each other or the model
  // (layer indices beyond n_layer, clusters beyond the heads per group or headdim).
  void validate(int64_t n_layer, int64_t heads_per_group, int64_t headdim) const;
  // tp_blocks against the model: a rotated recipe, blocks of whole heads, a Hadamard size there is.
  void validate_tp_blocks(int64_t heads, int64_t d_inner) const;
  // Every option, resolved defaults included, as a JSON object string (the artifact's "recipe").
  std::string to_json() const;
};

}  // namespace ssdq
