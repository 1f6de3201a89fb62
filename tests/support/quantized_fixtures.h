// Shared by the recipe and artifact tests: a calibration file made in memory for a synthetic
// model, field-by-field comparison of quantized models, and perplexity-style NLL of a backend.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "pipeline/calibrate.h"
#include "calib/calibration_file.h"
#include "pipeline/quantize_model.h"
#include "runtime/backend.h"
#include "model/quantized_model.h"
#include "tests/support/test_models.h"

namespace ssdq::testing_models {

inline constexpr RecipeName kRecipes[] = {RecipeName::kRtn, RecipeName::kHad, RecipeName::kQuamba2, RecipeName::kSsdi8};
inline constexpr BitWidth kBits[] = {BitWidth::kW8A8, BitWidth::kW4A8, BitWidth::kW4A16, BitWidth::kFp16};

// Statistics of `tokens` ([samples, seqlen]; random tokens when empty).
inline CalibrationFile calibration_in_memory(const ModelWeights& w, int64_t samples, int64_t seqlen, uint32_t seed,
                                             std::vector<int32_t> tokens = {}) {
  CalibrationFile file;
  file.config = w.config;
  file.provenance.samples = samples;
  file.provenance.seqlen = seqlen;
  file.provenance.seed = seed;
  file.provenance.data_files = {{tokens.empty() ? "random tokens" : "text", "-", 0}};
  file.provenance.ssdq_version = "test";
  file.tokens = tokens.empty() ? random_tokens(samples * seqlen, w.config.vocab_size, seed) : std::move(tokens);
  file.stats = collect_statistics(w, file.tokens, samples, seqlen);
  return file;
}

// The recipe options the synthetic-model tests use: int4 groups of 64, two head clusters (the
// synthetic models have few heads).
inline ExportOptions synthetic_model_options(RecipeName recipe, BitWidth bits) {
  ExportOptions o;
  o.recipe.recipe = recipe;
  o.recipe.bits = bits;
  o.recipe.group_size = 64;
  o.recipe.head_clusters = 2;
  return o;
}

// Mean NLL of every next token of `tokens` (one window from a zero state).
inline double mean_nll(const Backend& backend, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
  std::vector<double> nll(n);
  ForwardOutputs out;
  out.targets = tokens.data() + 1;
  out.nll = nll.data();
  auto state = backend.new_state(1);
  backend.forward(tokens.data(), n, *state, out);
  double sum = 0;
  for (double v : nll) sum += v;
  return sum / n;
}

inline void expect_same_weight(const WeightMatrix& a, const WeightMatrix& b, const std::string& what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.kind, b.kind) << what;
  EXPECT_EQ(a.dense, b.dense) << what;
  if (a.is_quantized() && b.is_quantized()) {
    EXPECT_EQ(a.quantized.bits, b.quantized.bits) << what;
    EXPECT_EQ(a.quantized.granularity, b.quantized.granularity) << what;
    EXPECT_EQ(a.quantized.group_size, b.quantized.group_size) << what;
    EXPECT_EQ(a.quantized.values, b.quantized.values) << what;
    EXPECT_EQ(a.quantized.scales, b.quantized.scales) << what;
  }
}

inline void expect_same_act(const ActQuant& a, const ActQuant& b, const std::string& what) {
  EXPECT_EQ(a.format, b.format) << what;
  EXPECT_EQ(a.scales, b.scales) << what;
  EXPECT_EQ(a.index, b.index) << what;
  if (a.is_int8()) {
    EXPECT_EQ(a.inner, b.inner) << what;
  }
}

inline void expect_same_model(const QuantizedModel& a, const QuantizedModel& b) {
  EXPECT_EQ(a.config.tie_embeddings, b.config.tie_embeddings);
  expect_same_weight(a.embedding, b.embedding, "embedding");
  expect_same_weight(a.lm_head, b.lm_head, "lm_head");
  EXPECT_EQ(a.norm_f, b.norm_f);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const QuantizedLayer& x = a.layers[l];
    const QuantizedLayer& y = b.layers[l];
    const std::string at = "layer " + std::to_string(l);
    EXPECT_EQ(x.norm, y.norm) << at;
    expect_same_weight(x.in_proj, y.in_proj, at + " in_proj");
    expect_same_weight(x.out_proj, y.out_proj, at + " out_proj");
    EXPECT_EQ(x.conv_weight, y.conv_weight) << at;
    EXPECT_EQ(x.conv_bias, y.conv_bias) << at;
    EXPECT_EQ(x.dt_bias, y.dt_bias) << at;
    EXPECT_EQ(x.A, y.A) << at;
    EXPECT_EQ(x.D, y.D) << at;
    EXPECT_EQ(x.gated_norm, y.gated_norm) << at;
    EXPECT_EQ(x.out_bias, y.out_bias) << at;
    EXPECT_EQ(x.online_hadamard, y.online_hadamard) << at;
    EXPECT_EQ(x.hadamard_blocks, y.hadamard_blocks) << at;
    EXPECT_EQ(x.ssd_mode, y.ssd_mode) << at;
    expect_same_act(x.in_proj_in, y.in_proj_in, at + " in_proj.in");
    expect_same_act(x.conv_in, y.conv_in, at + " conv.in");
    expect_same_act(x.ssd_x, y.ssd_x, at + " ssd.x");
    expect_same_act(x.ssd_B, y.ssd_B, at + " ssd.B");
    expect_same_act(x.ssd_C, y.ssd_C, at + " ssd.C");
    expect_same_act(x.ssd_dt, y.ssd_dt, at + " ssd.dt");
    expect_same_act(x.out_proj_in, y.out_proj_in, at + " out_proj.in");
    expect_same_act(x.ssm_state, y.ssm_state, at + " ssd.state");
    expect_same_act(x.x_scaled, y.x_scaled, at + " ssd.x_scaled");
    expect_same_act(x.cb, y.cb, at + " ssd.cb");
  }
}

}  // namespace ssdq::testing_models
