// Tensor parallelism on the CPU's virtual ranks against the model on one rank: prefill logits,
// decode steps, NLL and the state API, for groups split over the ranks and groups they share.
#include "runtime/cpu_tensor_parallel.h"

#include <gtest/gtest.h>

#include "formats/error.h"
#include "model/model_weights.h"
#include "pipeline/quantize_model.h"
#include "runtime/communicator.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_block.h"
#include "tests/support/quantized_fixtures.h"
#include "tests/support/test_models.h"

#include <thread>

namespace ssdq {
namespace {

using testing_models::max_relative;
using testing_models::random_tokens;
using testing_models::synthetic_config;

// Logits of a prefill of `length` tokens then `steps` decode steps of each of `batch` sequences.
std::vector<float> run(const Backend& backend, const std::vector<int32_t>& tokens, int64_t batch, int64_t length,
                       int64_t steps) {
  const int64_t V = backend.config().vocab_size;
  auto state = backend.new_state(batch);
  std::vector<float> logits(batch * length * V), out;
  std::vector<int32_t> prompt;
  for (int64_t b = 0; b < batch; ++b)
    prompt.insert(prompt.end(), tokens.begin() + b * (length + steps), tokens.begin() + b * (length + steps) + length);
  ForwardOutputs o;
  o.logits = logits.data();
  backend.forward(prompt.data(), length, *state, o);
  out = logits;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int32_t> step(batch);
    for (int64_t b = 0; b < batch; ++b) step[b] = tokens[b * (length + steps) + length + s];
    std::vector<float> step_logits(batch * V);
    o.logits = step_logits.data();
    backend.forward(step.data(), 1, *state, o);
    out.insert(out.end(), step_logits.begin(), step_logits.end());
  }
  return out;
}

TEST(CpuTensorParallel, EqualsOneRank) {
  for (int64_t groups : {1, 2, 4, 8}) {
    for (int tp : {2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "ngroups " << groups << ", tp " << tp);
      const Mamba2Config c = synthetic_config(groups);
      const ModelWeights w = random_weights(c, 11);
      const CpuBackend one(w);
      const CpuTensorParallelBackend sharded(w, tp);
      const int64_t batch = 2, length = 45, steps = 3;  // 45 tokens: a chunk of 32 and a partial one
      const std::vector<int32_t> tokens = random_tokens(batch * (length + steps), c.vocab_size, 5);
      // Only the summation order differs (out_proj split over ranks, norm sums combined).
      EXPECT_LT(max_relative(run(sharded, tokens, batch, length, steps), run(one, tokens, batch, length, steps)), 2e-5);
    }
  }
}

TEST(CpuTensorParallel, NllArgmaxAndStateCopies) {
  const Mamba2Config c = synthetic_config(1);
  const ModelWeights w = random_weights(c, 2);
  const CpuBackend one(w);
  const CpuTensorParallelBackend sharded(w, 4);
  const int64_t length = 20;
  const std::vector<int32_t> tokens = random_tokens(length + 1, c.vocab_size, 9);
  std::vector<double> nll_one(length), nll_tp(length);
  std::vector<int32_t> arg_one(length), arg_tp(length);
  for (auto [backend, nll, arg] : {std::make_tuple(static_cast<const Backend*>(&one), &nll_one, &arg_one),
                                   std::make_tuple(static_cast<const Backend*>(&sharded), &nll_tp, &arg_tp)}) {
    auto state = backend->new_state(1);
    ForwardOutputs o;
    o.targets = tokens.data() + 1;
    o.nll = nll->data();
    o.argmax = arg->data();
    backend->forward(tokens.data(), length, *state, o);
  }
  for (int64_t t = 0; t < length; ++t) EXPECT_NEAR(nll_tp[t], nll_one[t], 1e-4 * std::abs(nll_one[t]));
  EXPECT_EQ(arg_tp, arg_one);

  // Every rank's state rows move with the state API: a copied row decodes as its source does.
  auto state = sharded.new_state(2);
  const int32_t first[2] = {tokens[0], tokens[1]};
  sharded.forward(first, 1, *state, {});
  state->copy_rows(*state, {0}, {1});
  std::vector<float> logits(2 * c.vocab_size);
  ForwardOutputs o;
  o.logits = logits.data();
  const int32_t next[2] = {tokens[2], tokens[2]};
  sharded.forward(next, 1, *state, o);
  EXPECT_TRUE(std::equal(logits.begin(), logits.begin() + c.vocab_size, logits.begin() + c.vocab_size));
  EXPECT_EQ(sharded.state_bytes_per_sequence(), one.state_bytes_per_sequence() +
                                                    (sharded.plan().tp - 1) * c.n_layer * 2 * c.d_state *
                                                        (c.d_conv - 1) * sizeof(float));
}

TEST(VirtualRanks, SumInRankOrderGivesEveryRankTheSameBits) {
  VirtualRanks ranks(3);
  std::vector<std::vector<float>> data = {{1e8f, 1.f}, {-1e8f, 2.f}, {1.f, 3.f}};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] { ranks.rank(r).all_reduce_sum(data[r].data(), 2); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(data[r][0], (0.f + 1e8f) + -1e8f + 1.f);  // rank order: (1e8 - 1e8) + 1
    EXPECT_EQ(data[r][1], 6.f);
  }
}

}  // namespace
}  // namespace ssdq

namespace ssdq {
namespace {

using testing_models::max_relative;
using testing_models::random_tokens;
using testing_models::synthetic_config;

// An rtn artifact of a synthetic model (int4 groups of 64: d_inner 256 splits into whole groups
// over 2 and 4 ranks).
QuantizedModel rtn_artifact(const ModelWeights& w, BitWidth bits) {
  const CalibrationFile calib = testing_models::calibration_in_memory(w, 2, 40, 3);
  return quantize_model(w, calib, testing_models::synthetic_model_options(RecipeName::kRtn, bits));
}

// Layers [first, last) of `model` sharded over `tp` virtual ranks (a thread each, as the backend
// runs them), every rank starting from `residual` [T, d_model] with zero states: each rank's
// residual after them.
std::vector<std::vector<float>> layers_on_ranks(const QuantizedModel& model, int tp, const std::vector<float>& residual,
                                                int64_t T, int64_t first, int64_t last) {
  const Mamba2Config& c = model.config;
  const TensorParallelPlan plan = plan_tensor_parallel(c, tp);
  VirtualRanks ranks(tp);
  std::vector<std::vector<float>> sharded(tp, residual);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r)
    threads.emplace_back([&, r] {
      const QuantizedModel shard = shard_quantized_model(model, plan, r);
      const Mamba2Config& local = shard.config;
      const BlockRank part = block_rank(c, plan, r, &ranks.rank(r));
      for (int64_t l = first; l < last; ++l) {
        std::vector<float> conv(local.conv_dim() * (local.d_conv - 1)), ssm(local.nheads() * local.headdim * local.d_state);
        cpu_block_forward(local, shard.layers[l], l, sharded[r].data(), T, conv.data(), ssm.data(), nullptr, &part);
      }
    });
  for (std::thread& t : threads) t.join();
  return sharded;
}

// Every layer of a sharded W8A8 artifact, run on virtual ranks as the backend runs them, leaves the
// residual stream the one-rank block leaves, bit for bit: the int32 products are summed across the
// ranks before scaling.
TEST(CpuTensorParallel, W8A8ArtifactLayersEqualOneRankBitForBit) {
  for (int64_t groups : {1, 2}) {
    for (int tp : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << "ngroups " << groups << ", tp " << tp);
      const ModelWeights w = random_weights(synthetic_config(groups), 17);
      const QuantizedModel model = rtn_artifact(w, BitWidth::kW8A8);
      const Mamba2Config& c = model.config;
      const int64_t T = 45, D = c.d_model;
      std::vector<float> residual(T * D);
      const std::vector<int32_t> tokens = random_tokens(T, c.vocab_size, 6);
      for (int64_t t = 0; t < T; ++t) model.embedding.row_to_float(tokens[t], residual.data() + t * D);
      std::vector<float> whole = residual;
      for (int64_t l = 0; l < c.n_layer; ++l) {
        std::vector<float> conv(c.conv_dim() * (c.d_conv - 1)), ssm(c.nheads() * c.headdim * c.d_state);
        cpu_block_forward(c, model.layers[l], l, whole.data(), T, conv.data(), ssm.data());
      }
      const auto sharded = layers_on_ranks(model, tp, residual, T, 0, c.n_layer);
      for (int r = 0; r < tp; ++r) EXPECT_EQ(sharded[r], whole) << "rank " << r;
    }
  }
}

// One layer of a sharded artifact from the same input residual as one rank's: W4A8's int4 groups
// carry each rank's own scales, so a rank holding a single group a row (tp 4: 64 columns, groups of
// 64) must still sum scaled outputs, not int32 products. The rotated recipes in blocks too.
TEST(CpuTensorParallel, GroupedInt4LayersMatchOneRank) {
  const ModelWeights w = random_weights(synthetic_config(2), 29);
  const CalibrationFile calib = testing_models::calibration_in_memory(w, 2, 40, 3);
  for (RecipeName recipe : {RecipeName::kRtn, RecipeName::kSsdi8})
    for (BitWidth bits : {BitWidth::kW4A8, BitWidth::kW4A16})
      for (int tp : {2, 4}) {
        SCOPED_TRACE(::testing::Message() << recipe_name(recipe) << " " << bit_width_name(bits) << ", tp " << tp);
        ExportOptions o = testing_models::synthetic_model_options(recipe, bits);
        if (recipe != RecipeName::kRtn) o.recipe.tp_blocks = 4;
        const QuantizedModel model = quantize_model(w, calib, o);
        const Mamba2Config& c = model.config;
        const int64_t T = 45, D = c.d_model;
        std::vector<float> input(T * D);
        const std::vector<int32_t> tokens = random_tokens(T, c.vocab_size, 6);
        for (int64_t t = 0; t < T; ++t) model.embedding.row_to_float(tokens[t], input.data() + t * D);
        for (int64_t l = 0; l < c.n_layer; ++l) {
          std::vector<float> whole = input;
          std::vector<float> conv(c.conv_dim() * (c.d_conv - 1)), ssm(c.nheads() * c.headdim * c.d_state);
          cpu_block_forward(c, model.layers[l], l, whole.data(), T, conv.data(), ssm.data());
          const auto sharded = layers_on_ranks(model, tp, input, T, l, l + 1);
          double worst = 0, scale = 0;
          for (size_t i = 0; i < whole.size(); ++i) {
            worst = std::max(worst, double(std::abs(whole[i] - sharded[0][i])));
            scale = std::max(scale, double(std::abs(whole[i])));
          }
          EXPECT_LT(worst, 1e-3 * scale) << "layer " << l;
          for (int r = 1; r < tp; ++r) EXPECT_EQ(sharded[r], sharded[0]) << "rank " << r << ", layer " << l;
          input = whole;
        }
      }
}

TEST(CpuTensorParallel, W8A8ArtifactEqualsOneRank) {
  // The layers agree bit for bit (above); the lm_head, computed in vocabulary slices, may round
  // its dot products differently.
  for (int tp : {2, 4}) {
    const ModelWeights w = random_weights(synthetic_config(1), 17);
    const QuantizedModel model = rtn_artifact(w, BitWidth::kW8A8);
    const CpuBackend one(std::make_shared<const QuantizedModel>(model));
    const CpuTensorParallelBackend sharded(model, tp);
    const std::vector<int32_t> tokens = random_tokens(2 * (45 + 3), w.config.vocab_size, 6);
    EXPECT_LT(max_relative(run(sharded, tokens, 2, 45, 3), run(one, tokens, 2, 45, 3)), 1e-6) << "tp " << tp;
  }
}

TEST(CpuTensorParallel, W4A8W4A16AndFp16ArtifactsMatchOneRank) {
  // int4 groups and float projections sum fp32 partial outputs across the ranks: the summation
  // order changes, which can move an int8 activation by one step. Mean NLL over the window.
  for (BitWidth bits : {BitWidth::kW4A8, BitWidth::kW4A16, BitWidth::kFp16}) {
    for (int tp : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << "bits " << static_cast<int>(bits) << ", tp " << tp);
      const ModelWeights w = random_weights(synthetic_config(2), 19);
      const QuantizedModel model = rtn_artifact(w, bits);
      const CpuBackend one(std::make_shared<const QuantizedModel>(model));
      const CpuTensorParallelBackend sharded(model, tp);
      const std::vector<int32_t> tokens = random_tokens(80, w.config.vocab_size, 7);
      const double a = testing_models::mean_nll(sharded, tokens), b = testing_models::mean_nll(one, tokens);
      EXPECT_NEAR(a, b, 1e-3 * b);
    }
  }
}

TEST(CpuTensorParallel, RotatedRecipesExportedInBlocksMatchOneRank) {
  // export --tp-blocks B: out_proj's input rotated by I_B ⊗ H_{E/B}, so ranks holding whole blocks
  // rotate their channels alone; --tp B and --tp B/2 (two blocks a rank) against one rank.
  const ModelWeights w = random_weights(synthetic_config(2), 29);
  const CalibrationFile calib = testing_models::calibration_in_memory(w, 2, 40, 3);
  const std::vector<int32_t> tokens = random_tokens(80, w.config.vocab_size, 8);
  for (RecipeName recipe : {RecipeName::kHad, RecipeName::kQuamba2, RecipeName::kSsdi8}) {
    for (BitWidth bits : {BitWidth::kW8A8, BitWidth::kW4A8}) {
      ExportOptions o = testing_models::synthetic_model_options(recipe, bits);
      o.recipe.tp_blocks = 4;
      const QuantizedModel model = quantize_model(w, calib, o);
      ASSERT_EQ(model.layers[0].hadamard_blocks, 4);
      const CpuBackend one(std::make_shared<const QuantizedModel>(model));
      const double b = testing_models::mean_nll(one, tokens);
      for (int tp : {2, 4}) {
        SCOPED_TRACE(::testing::Message() << recipe_name(recipe) << " " << bit_width_name(bits) << ", tp " << tp);
        const CpuTensorParallelBackend sharded(model, tp);
        EXPECT_NEAR(testing_models::mean_nll(sharded, tokens), b, 1e-3 * b);
      }
    }
  }
}

TEST(CpuTensorParallel, RefusesWhatCannotBeSharded) {
  const ModelWeights w = random_weights(synthetic_config(2), 23);
  const CalibrationFile calib = testing_models::calibration_in_memory(w, 2, 40, 3);
  // had rotates out_proj's input over all of d_inner.
  const QuantizedModel had =
      quantize_model(w, calib, testing_models::synthetic_model_options(RecipeName::kHad, BitWidth::kW8A8));
  EXPECT_THROW(
      {
        try {
          CpuTensorParallelBackend sharded(had, 2);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("over 1 blocks of 256 channels"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("export the artifact with --tp-blocks 2"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  // int4 groups of 64 straddle 8 ranks' 32 columns.
  const QuantizedModel w4 = rtn_artifact(w, BitWidth::kW4A8);
  EXPECT_THROW(
      {
        try {
          CpuTensorParallelBackend sharded(w4, 8);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("weight groups of 64 columns straddle"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace ssdq
