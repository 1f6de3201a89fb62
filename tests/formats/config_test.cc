// config.json in both spellings, the defaults of KEYS.md, and the errors for bad configs.
#include "formats/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "formats/error.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& json) {
  try {
    parse_config_json(json, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, MambaSsmSpellingWithDefaultsAndVocabPadding) {
  // The official state-spaces/mamba2-2.7b config (only ssm_cfg.layer set).
  const auto c = parse_config_json(R"({"d_model": 2560, "d_intermediate": 0, "n_layer": 64, "vocab_size": 50277,
      "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": true,
      "residual_in_fp32": true, "fused_add_norm": true, "pad_vocab_size_multiple": 16, "tie_embeddings": true})",
                                   "cfg.json");
  EXPECT_EQ(c.spelling, ConfigSpelling::kMambaSsm);
  EXPECT_EQ(c.vocab_size, 50288);
  EXPECT_EQ(c.d_state, 128);
  EXPECT_EQ(c.headdim, 64);
  EXPECT_EQ(c.ngroups, 1);
  EXPECT_EQ(c.nheads(), 80);
  EXPECT_EQ(c.d_in_proj(), 10576);  // KEYS.md §4
  EXPECT_EQ(c.conv_dim(), 5376);
  EXPECT_EQ(c.parameter_count(), 2702599680);
  EXPECT_TRUE(std::isinf(c.dt_max));
}

TEST(Config, TransformersSpellingWithInfinityTimeStepLimit) {
  const auto c = parse_config_json(R"({"model_type": "mamba2", "hidden_size": 256, "num_hidden_layers": 4,
      "vocab_size": 50288, "state_size": 128, "head_dim": 64, "n_groups": 1, "num_heads": 8, "expand": 2,
      "conv_kernel": 4, "chunk_size": 256, "tie_word_embeddings": true, "layer_norm_epsilon": 1e-05,
      "time_step_limit": [0.0, {"__float__": "Infinity"}]})",
                                   "cfg.json");
  EXPECT_EQ(c.spelling, ConfigSpelling::kTransformers);
  EXPECT_EQ(c.d_model, 256);
  EXPECT_EQ(c.nheads(), 8);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.dt_min, 0.0);
  EXPECT_TRUE(std::isinf(c.dt_max));
}

// mistralai/Mamba-Codestral-7B-v0.1's transformers config.json as transformers writes it: json.dumps
// puts a bare Infinity in time_step_limit (not JSON); norm_before_gate is ignored by transformers'
// Mamba2 (it gates before the norm), so it is accepted here.
TEST(Config, CodestralTransformersConfigWithBareInfinity) {
  const auto c = parse_config_json(R"({"architectures": ["Mamba2ForCausalLM"], "bos_token_id": 0, "chunk_size": 256,
      "conv_kernel": 4, "eos_token_id": 0, "expand": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 4096,
      "layer_norm_epsilon": 1e-05, "model_type": "mamba2", "n_groups": 8, "norm_before_gate": true,
      "num_heads": 128, "num_hidden_layers": 64, "residual_in_fp32": true, "rms_norm": true, "state_size": 128,
      "tie_word_embeddings": false, "time_step_limit": [0.0, Infinity], "time_step_rank": 256,
      "torch_dtype": "bfloat16", "use_bias": false, "use_conv_bias": true, "vocab_size": 32768,
      "note": "Infinity inside a string stays text"})",
                                   "cfg.json");
  EXPECT_EQ(c.d_model, 4096);
  EXPECT_EQ(c.n_layer, 64);
  EXPECT_EQ(c.ngroups, 8);
  EXPECT_EQ(c.nheads(), 128);
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(std::isinf(c.dt_max));
  EXPECT_THAT(error_of(R"({"hidden_size": NaNx})"), HasSubstr("not valid JSON"));
}

// Mistral's own params.json for Codestral Mamba (mistral_inference's MambaArgs): a mamba_ssm
// Mamba2 model with n_groups groups and every other SSM width at mamba_ssm's default.
TEST(Config, MistralParamsJson) {
  const auto c = parse_config_json(R"({"dim": 4096, "n_layers": 64, "vocab_size": 32768, "n_groups": 8,
      "rms_norm": true, "residual_in_fp32": true, "fused_add_norm": true, "pad_vocab_size_multiple": 1,
      "tie_embeddings": false, "model_type": "mamba"})",
                                   "params.json");
  EXPECT_EQ(c.spelling, ConfigSpelling::kMistralParams);
  EXPECT_EQ(c.d_model, 4096);
  EXPECT_EQ(c.n_layer, 64);
  EXPECT_EQ(c.ngroups, 8);
  EXPECT_EQ(c.d_state, 128);
  EXPECT_EQ(c.headdim, 64);
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_THAT(error_of(R"({"dim": 64, "n_layers": 2, "vocab_size": 16, "model_type": "transformer"})"),
              HasSubstr("model_type is \"transformer\", expected \"mamba\""));
}

TEST(Config, BundledConfigsOfTheTinyModelAgree) {
  const auto ssm = load_config("examples/mamba2-tiny/config.json");
  const auto hf = load_config("examples/mamba2-tiny/hf/config.json");
  EXPECT_EQ(ssm.d_model, hf.d_model);
  EXPECT_EQ(ssm.n_layer, hf.n_layer);
  EXPECT_EQ(ssm.vocab_size, hf.vocab_size);
  EXPECT_EQ(ssm.d_state, hf.d_state);
  EXPECT_EQ(ssm.nheads(), hf.nheads());
  EXPECT_EQ(ssm.tie_embeddings, hf.tie_embeddings);
}

TEST(Config, Errors) {
  EXPECT_THAT(error_of("{"), HasSubstr("cfg.json: not valid JSON"));
  EXPECT_THAT(error_of("[1]"), HasSubstr("expected a JSON object"));
  EXPECT_THAT(error_of(R"({"foo": 1})"), HasSubstr("missing field 'd_model'"));
  EXPECT_THAT(error_of(R"({"d_model": 256, "vocab_size": 10})"), HasSubstr("cfg.json: missing field 'n_layer'"));
  EXPECT_THAT(error_of(R"({"hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 10, "head_dim": 64, "n_groups": 1})"),
              HasSubstr("missing field 'state_size'"));
  EXPECT_THAT(error_of(R"({"d_model": "256", "n_layer": 2, "vocab_size": 10})"),
              HasSubstr("field 'd_model' must be an integer"));
  EXPECT_THAT(error_of(R"({"d_model": 100, "n_layer": 2, "vocab_size": 16})"),
              HasSubstr("not a multiple of headdim"));
  EXPECT_THAT(error_of(R"({"d_model": 256, "n_layer": 2, "vocab_size": 16, "ssm_cfg": {"ngroups": 3}})"),
              HasSubstr("not a multiple of ngroups"));
  EXPECT_THAT(error_of(R"({"d_model": 256, "n_layer": 2, "vocab_size": 16, "attn_layer_idx": [1]})"),
              HasSubstr("attention layers"));
  EXPECT_THAT(error_of(R"({"d_model": 256, "n_layer": 0, "vocab_size": 16})"), HasSubstr("n_layer = 0 is out of range"));
  EXPECT_THAT(error_of(R"({"hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 16, "state_size": 16,
      "head_dim": 64, "n_groups": 1, "num_heads": 7})"),
              HasSubstr("num_heads = 7"));
  EXPECT_THAT(error_of(R"({"model_type": "mamba", "hidden_size": 256})"), HasSubstr("expected \"mamba2\""));
}

}  // namespace
}  // namespace ssdq
