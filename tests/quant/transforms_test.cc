// Function-preserving weight transforms on synthetic models with two B/C groups: the CPU
// backend's logits before and after each transform agree within 1e-5 (max |Δ| / max |ref|).
#include "quant/transforms.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "formats/error.h"
#include "model/hadamard.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_ops.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

constexpr double kTolerance = 1e-5;

Mamba2Config small_config(int64_t d_model, bool tied) {
  Mamba2Config c;
  c.d_model = d_model;
  c.n_layer = 2;
  c.vocab_size = 96;
  c.d_state = 32;
  c.headdim = 16;
  c.ngroups = 2;
  c.expand = 2;
  c.chunk_size = 16;
  c.tie_embeddings = tied;
  return c;
}

std::vector<float> logits_of(const ModelWeights& weights) {
  CpuBackend backend(std::make_shared<ModelWeights>(weights));
  std::mt19937 rng(7);
  std::vector<int32_t> tokens(37);  // two full chunks of 16 and a partial one
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % weights.config.vocab_size);
  std::vector<float> logits(tokens.size() * weights.config.vocab_size);
  auto state = backend.new_state(1);
  ForwardOutputs out;
  out.logits = logits.data();
  backend.forward(tokens.data(), static_cast<int64_t>(tokens.size()), *state, out);
  return logits;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - ref[i]));
    scale = std::max(scale, std::abs(double(ref[i])));
  }
  return diff / scale;
}

// Heads shuffled within their B/C group, channels shuffled within each head.
HeadPermutation random_permutation(const Mamba2Config& c, uint32_t seed) {
  std::mt19937 rng(seed);
  HeadPermutation perm = identity_head_permutation(c.nheads(), c.headdim);
  const int64_t per_group = c.heads_per_group();
  for (int64_t g = 0; g < c.ngroups; ++g)
    std::shuffle(perm.heads.begin() + g * per_group, perm.heads.begin() + (g + 1) * per_group, rng);
  for (int64_t h = 0; h < c.nheads(); ++h)
    std::shuffle(perm.channels.begin() + h * c.headdim, perm.channels.begin() + (h + 1) * c.headdim, rng);
  return perm;
}

struct ModelCase {
  int64_t d_model;
  bool tied;
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << "d_model " << c.d_model << (c.tied ? " tied" : " untied"); }

class TransformsTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    weights_ = random_weights(small_config(GetParam().d_model, GetParam().tied), 42);
    reference_ = logits_of(weights_);
  }
  void expect_same_logits(const ModelWeights& transformed, const char* what) {
    const double rel = max_rel(logits_of(transformed), reference_);
    EXPECT_LT(rel, kTolerance) << what;
    std::printf("d_model %ld %s: %s max|Δ|/max|ref| = %.3g\n", static_cast<long>(GetParam().d_model),
                GetParam().tied ? "tied" : "untied", what, rel);
  }
  ModelWeights weights_;
  std::vector<float> reference_;
};

TEST_P(TransformsTest, NormFusion) {
  ModelWeights w = weights_;
  fuse_norm_weights(w);
  for (const LayerWeights& layer : w.layers)
    EXPECT_TRUE(std::all_of(layer.norm.begin(), layer.norm.end(), [](float v) { return v == 1.0f; }));
  EXPECT_TRUE(std::all_of(w.norm_f.begin(), w.norm_f.end(), [](float v) { return v == 1.0f; }));
  EXPECT_FALSE(w.config.tie_embeddings);
  ASSERT_EQ(w.lm_head.size(), w.embedding.size());
  EXPECT_NE(w.lm_head, w.embedding);
  expect_same_logits(w, "norm fusion");
}

TEST_P(TransformsTest, ResidualRotation) {
  ModelWeights plain = weights_;
  fuse_norm_weights(plain);
  ModelWeights signed_ = plain;
  rotate_residual(plain, {});
  expect_same_logits(plain, "norm fusion + Hadamard rotation");
  rotate_residual(signed_, random_signs(signed_.config.d_model, 5));
  expect_same_logits(signed_, "norm fusion + signed Hadamard rotation");
  EXPECT_NE(plain.embedding, signed_.embedding);
}

TEST_P(TransformsTest, HeadReordering) {
  ModelWeights w = weights_;
  for (int64_t l = 0; l < w.config.n_layer; ++l) reorder_heads(w.layers[l], w.config, random_permutation(w.config, 10 + l));
  EXPECT_NE(w.layers[0].out_proj, weights_.layers[0].out_proj);
  expect_same_logits(w, "head reordering");
}

TEST_P(TransformsTest, AllTogether) {
  ModelWeights w = weights_;
  fuse_norm_weights(w);
  rotate_residual(w, random_signs(w.config.d_model, 9));
  for (int64_t l = 0; l < w.config.n_layer; ++l) reorder_heads(w.layers[l], w.config, random_permutation(w.config, 20 + l));
  expect_same_logits(w, "fusion + rotation + reordering");

  // Online Hadamard at out_proj.in: the backend has none yet, so check the out_proj product:
  // y·Wᵀ == (y·H/√E)·(W·H/√E)ᵀ.
  const int64_t D = w.config.d_model, E = w.config.d_inner(), T = 11;
  ModelWeights fused = w;
  fuse_out_proj_hadamard(fused);
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> y(T * E), y_rotated, ref(T * D), out(T * D);
  for (float& v : y) v = normal(rng);
  y_rotated = y;
  apply_hadamard_rows(y_rotated.data(), T, E, true);
  for (int64_t l = 0; l < w.config.n_layer; ++l) {
    cpu::matmul_wt(y.data(), w.layers[l].out_proj.data(), ref.data(), T, E, D);
    cpu::matmul_wt(y_rotated.data(), fused.layers[l].out_proj.data(), out.data(), T, E, D);
    const double rel = max_rel(out, ref);
    EXPECT_LT(rel, kTolerance) << "layer " << l;
    std::printf("d_model %ld: online Hadamard out_proj layer %ld max|Δ|/max|ref| = %.3g\n",
                static_cast<long>(D), static_cast<long>(l), rel);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TransformsTest,
                         ::testing::Values(ModelCase{64, true},    // D = 64, E = 128: powers of two
                                           ModelCase{48, true},    // D = 48 = 12·4, E = 96 = 12·8
                                           ModelCase{48, false}),  // an untied lm_head
                         [](const auto& info) {
                           return "d" + std::to_string(info.param.d_model) + (info.param.tied ? "_tied" : "_untied");
                         });

TEST(Transforms, RotationNeedsFusedNorms) {
  ModelWeights w = random_weights(small_config(64, true), 1);
  const ModelWeights before = w;
  EXPECT_THAT([&] { rotate_residual(w, {}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("layers.0.norm is not fused (entry 0 is")));
  EXPECT_EQ(w.embedding, before.embedding);
  EXPECT_EQ(w.layers[0].in_proj, before.layers[0].in_proj);
}

TEST(Transforms, RotationNeedsASupportedWidth) {
  Mamba2Config c = small_config(36, true);  // 36 = 9·4 has no Hadamard matrix here
  c.headdim = 12;
  ModelWeights w = random_weights(c, 1);
  fuse_norm_weights(w);
  const ModelWeights before = w;
  EXPECT_THAT([&] { rotate_residual(w, {}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no Hadamard matrix of order 36")));
  EXPECT_THAT([&] { rotate_residual(w, std::vector<float>(35, 1.0f)); }, ::testing::Throws<Error>());
  EXPECT_THAT([&] { fuse_out_proj_hadamard(w); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no Hadamard matrix of order 72")));
  EXPECT_EQ(w.embedding, before.embedding);
  EXPECT_EQ(w.layers[1].out_proj, before.layers[1].out_proj);
}

TEST(Transforms, RejectsBadSigns) {
  ModelWeights w = random_weights(small_config(64, true), 1);
  fuse_norm_weights(w);
  EXPECT_THAT([&] { rotate_residual(w, std::vector<float>(63, 1.0f)); },
              ::testing::ThrowsMessage<Error>(HasSubstr("63 signs for d_model 64")));
  std::vector<float> signs(64, 1.0f);
  signs[3] = 0.5f;
  EXPECT_THAT([&] { rotate_residual(w, signs); }, ::testing::ThrowsMessage<Error>(HasSubstr("sign 0.5 is not +1 or -1")));
}

TEST(Transforms, RejectsHeadsLeavingTheirGroup) {
  const Mamba2Config c = small_config(64, true);  // 8 heads, 2 groups of 4
  ModelWeights w = random_weights(c, 1);
  HeadPermutation perm = identity_head_permutation(c.nheads(), c.headdim);
  std::swap(perm.heads[3], perm.heads[4]);
  const std::vector<float> before = w.layers[0].in_proj;
  EXPECT_THAT([&] { reorder_heads(w.layers[0], c, perm); },
              ::testing::ThrowsMessage<Error>(HasSubstr("head 4 moves to position 3, outside its B/C group of 4 heads")));
  EXPECT_EQ(w.layers[0].in_proj, before);
  perm = identity_head_permutation(c.nheads(), c.headdim);
  perm.channels[17] = 0;  // head 1 now has channel 0 twice
  EXPECT_THAT([&] { reorder_heads(w.layers[0], c, perm); },
              ::testing::ThrowsMessage<Error>(HasSubstr("channels of a head repeats 0")));
  perm = identity_head_permutation(c.nheads(), c.headdim);
  perm.heads.pop_back();
  EXPECT_THAT([&] { reorder_heads(w.layers[0], c, perm); },
              ::testing::ThrowsMessage<Error>(HasSubstr("do not match 8 heads of 16 channels")));
}

TEST(Transforms, RejectsMalformedWeights) {
  ModelWeights w = random_weights(small_config(64, true), 1);
  w.layers[1].out_proj.pop_back();
  EXPECT_THAT([&] { fuse_norm_weights(w); },
              ::testing::ThrowsMessage<Error>(HasSubstr("layers.1.out_proj has 8191 values, expected 8192")));
}

// Layers and blocks of table rows on several threads give the bits of one thread (a vocabulary
// of two whole blocks of rows and a part, an untied head, signs and Hadamard blocks).
TEST(Transforms, ThreadsDoNotChangeTheBits) {
  Mamba2Config c = small_config(64, false);
  c.vocab_size = 9000;
  c.n_layer = 3;
  const ModelWeights original = random_weights(c, 5);
  const std::vector<float> signs = random_signs(c.d_model, 2);
  auto transformed = [&](const ParallelFor& parallel) {
    ModelWeights w = original;
    fuse_norm_weights(w, parallel);
    rotate_residual(w, signs, parallel);
    fuse_out_proj_hadamard(w, 2, parallel);
    return w;
  };
  const ModelWeights one = transformed({});
  // Items in reverse order, as threads may run them.
  const ModelWeights many = transformed([](int64_t count, const std::function<void(int64_t)>& body) {
    for (int64_t i = count - 1; i >= 0; --i) body(i);
  });
  EXPECT_EQ(one.embedding, many.embedding);
  EXPECT_EQ(one.lm_head, many.lm_head);
  EXPECT_EQ(one.norm_f, many.norm_f);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    EXPECT_EQ(one.layers[l].in_proj, many.layers[l].in_proj) << l;
    EXPECT_EQ(one.layers[l].out_proj, many.layers[l].out_proj) << l;
    EXPECT_EQ(one.layers[l].norm, many.layers[l].norm) << l;
  }
  EXPECT_NE(one.embedding, original.embedding);
}

TEST(Transforms, RandomSignsAreSeededPlusMinusOne) {
  const std::vector<float> a = random_signs(256, 3), b = random_signs(256, 3), c = random_signs(256, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const auto minus = std::count(a.begin(), a.end(), -1.0f), plus = std::count(a.begin(), a.end(), 1.0f);
  EXPECT_EQ(minus + plus, 256);
  EXPECT_GT(minus, 64);
  EXPECT_GT(plus, 64);
}

}  // namespace
}  // namespace ssdq
