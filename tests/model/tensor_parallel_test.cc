// The sharding plan of tensor parallelism: which sizes divide a model, what each rank holds, and
// that the shards put back together are the model.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include "formats/error.h"
#include "model/model_weights.h"
#include "model/synthetic_configs.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using testing_models::synthetic_config;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallelPlan, ValidSizesOfThePublishedShapes) {
  const Mamba2Config c = ssdq::synthetic_config("mamba2-2.7b");  // 80 heads, 1 group, vocabulary 50,288
  EXPECT_EQ(valid_tensor_parallel_sizes(c, 16), (std::vector<int>{1, 2, 4, 8, 16}));
  const std::string message = error_of([&] { plan_tensor_parallel(c, 3); });
  EXPECT_NE(message.find("--tp 3: 80 heads, 1 group, vocabulary 50288"), std::string::npos) << message;
  EXPECT_NE(message.find("valid: --tp 2, 4, 8, 16"), std::string::npos) << message;
  // 5 divides the heads but not the vocabulary of the vocab-parallel head.
  EXPECT_NE(error_of([&] { plan_tensor_parallel(c, 5); }), "");
  EXPECT_NE(error_of([&] { plan_tensor_parallel(c, 0); }), "");
}

TEST(TensorParallelPlan, GroupsSplitOrShared) {
  // 16 heads; 4 groups: split over 2 or 4 ranks, shared by 2 ranks each at 8.
  const Mamba2Config c = synthetic_config(4);
  const TensorParallelPlan two = plan_tensor_parallel(c, 2), eight = plan_tensor_parallel(c, 8);
  EXPECT_TRUE(two.groups_split);
  EXPECT_EQ(two.local_groups(), 2);
  EXPECT_EQ(two.first_group(1), 2);
  EXPECT_FALSE(eight.groups_split);
  EXPECT_EQ(eight.local_groups(), 1);
  EXPECT_EQ(eight.ranks_per_norm_group(), 2);
  EXPECT_EQ(eight.first_group(5), 2);  // heads 10-11 lie in group 2 (4 heads a group)
  // Groups that neither split evenly nor share evenly are refused: 24 heads in 4 groups over 6 ranks.
  Mamba2Config odd = synthetic_config(4);
  odd.d_model = 192;
  odd.vocab_size = 768;
  const std::string message = error_of([&] { plan_tensor_parallel(odd, 6); });
  EXPECT_NE(message.find("24 heads, 4 groups"), std::string::npos) << message;
  EXPECT_NE(message.find("valid: --tp 2, 4, 8, 12, 24"), std::string::npos) << message;
}

TEST(TensorParallelPlan, ShardsHoldTheirHeadsAndUnshardToTheModel) {
  for (int64_t groups : {1, 2, 4, 8}) {
    for (int tp : {2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "ngroups " << groups << ", tp " << tp);
      const Mamba2Config c = synthetic_config(groups);
      const ModelWeights w = random_weights(c, 7);
      const TensorParallelPlan plan = plan_tensor_parallel(c, tp);
      std::vector<ModelWeights> shards;
      for (int r = 0; r < tp; ++r) shards.push_back(shard_weights(w, plan, r));
      const Mamba2Config& local = shards[0].config;
      EXPECT_EQ(local.d_inner(), c.d_inner() / tp);
      EXPECT_EQ(local.nheads(), c.nheads() / tp);
      EXPECT_EQ(local.ngroups, groups % tp == 0 ? groups / tp : 1);
      const LayerWeights& l0 = shards[1].layers[0];
      EXPECT_EQ(static_cast<int64_t>(l0.in_proj.size()), local.d_in_proj() * c.d_model);
      EXPECT_EQ(static_cast<int64_t>(l0.conv_weight.size()), local.conv_dim() * c.d_conv);
      EXPECT_EQ(static_cast<int64_t>(l0.out_proj.size()), c.d_model * local.d_inner());
      EXPECT_EQ(static_cast<int64_t>(shards[1].lm_head.size()), c.vocab_size / tp * c.d_model);
      // Rank 1's first z row is the model's row d_inner / tp; its first dt row the model's head H / tp.
      EXPECT_TRUE(std::equal(l0.in_proj.begin(), l0.in_proj.begin() + c.d_model,
                             w.layers[0].in_proj.begin() + local.d_inner() * c.d_model));
      EXPECT_EQ(l0.A[0], w.layers[0].A[local.nheads()]);
      const ModelWeights back = unshard_weights(shards, c, plan);
      EXPECT_EQ(back.embedding, w.embedding);
      EXPECT_EQ(back.lm_head, w.lm_head);
      EXPECT_EQ(back.norm_f, w.norm_f);
      for (int64_t l = 0; l < c.n_layer; ++l) {
        const LayerWeights &a = back.layers[l], &b = w.layers[l];
        EXPECT_EQ(a.in_proj, b.in_proj);
        EXPECT_EQ(a.out_proj, b.out_proj);
        EXPECT_EQ(a.conv_weight, b.conv_weight);
        EXPECT_EQ(a.conv_bias, b.conv_bias);
        EXPECT_EQ(a.dt_bias, b.dt_bias);
        EXPECT_EQ(a.A, b.A);
        EXPECT_EQ(a.D, b.D);
        EXPECT_EQ(a.gated_norm, b.gated_norm);
        EXPECT_EQ(a.norm, b.norm);
      }
    }
  }
}

TEST(TensorParallelPlan, UnshardRefusesDisagreeingCopies) {
  const Mamba2Config c = synthetic_config(1);
  const ModelWeights w = random_weights(c, 3);
  const TensorParallelPlan plan = plan_tensor_parallel(c, 2);
  std::vector<ModelWeights> shards = {shard_weights(w, plan, 0), shard_weights(w, plan, 1)};
  // Both ranks hold the one B/C group; rank 1's B row differs.
  const Mamba2Config local = shards[1].config;
  shards[1].layers[0].in_proj[(2 * local.d_inner()) * c.d_model] += 1.0f;
  EXPECT_NE(error_of([&] { unshard_weights(shards, c, plan); }).find("differs"), std::string::npos);
  shards.pop_back();
  EXPECT_NE(error_of([&] { unshard_weights(shards, c, plan); }), "");
}

}  // namespace
}  // namespace ssdq
