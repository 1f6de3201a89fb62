// Tensor parallelism on 2 GPUs against one GPU (tests/gpu/BUILD.bazel: a multi-GPU test): the
// bundled model's logits, greedy tokens and perplexity, each rank's SSM state against one GPU's
// heads, graph replay against eager steps, state snapshots, a grouped model whose gated norm stays
// local, the same checks over 4 GPUs where 4 are visible, and the errors a user meets (more ranks
// than GPUs).
#include "runtime/cuda_tensor_parallel.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "formats/error.h"
#include "model/model_loader.h"
#include "runtime/cuda_backend.h"
#include "tests/gpu/model_test_util.h"
#include "tests/support/compare.h"

namespace ssdq {
namespace {

using testing::golden_tokens;
using testing::logits_of;
using testing::mean_nll;
using testing::greedy;
using testing::visible_gpus;

std::vector<char> device_bytes(const void* p, size_t bytes) {
  std::vector<char> out(bytes);
  EXPECT_EQ(cudaMemcpy(out.data(), p, bytes, cudaMemcpyDefault), cudaSuccess);
  return out;
}

class TinyModelTp2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    weights_ = load_model("examples/mamba2-tiny").weights;
    if (visible_gpus() < 2) return;
    one_ = new CudaBackend(*weights_, CudaBackendOptions{});
    two_ = new CudaTensorParallelBackend(*weights_, 2, CudaBackendOptions{});
  }
  static void TearDownTestSuite() {
    delete one_;
    delete two_;
  }
  void SetUp() override { ASSERT_GE(visible_gpus(), 2) << "this test needs 2 GPUs (run it on a multi-GPU machine)"; }
  static std::shared_ptr<const ModelWeights> weights_;
  static CudaBackend* one_;
  static CudaTensorParallelBackend* two_;
};
std::shared_ptr<const ModelWeights> TinyModelTp2::weights_;
CudaBackend* TinyModelTp2::one_ = nullptr;
CudaTensorParallelBackend* TinyModelTp2::two_ = nullptr;

TEST_F(TinyModelTp2, LogitsMatchOneGpu) {
  const auto tokens = golden_tokens(300);  // prefill across the 256-token chunk boundary, batch 2
  const double err = testing::max_relative_difference(logits_of(*two_, tokens, 2), logits_of(*one_, tokens, 2));
  std::printf("TP2 vs TP1: max |Δlogit| / max |logit| = %.3g\n%s\n", err, two_->device_name().c_str());
  EXPECT_NE(two_->describe_plan(2, 150).find("lm_head vocab-parallel"), std::string::npos);
  // bf16 activations: the folded norm rounds out_proj's input before the scale, one GPU after it.
  EXPECT_LT(err, 2e-2);
}

TEST_F(TinyModelTp2, PerplexityWithinOneTenthPercentOfOneGpu) {
  const auto tokens = golden_tokens(512);
  const double ppl1 = std::exp(mean_nll(*one_, tokens)), ppl2 = std::exp(mean_nll(*two_, tokens));
  std::printf("perplexity: TP1 %.4f TP2 %.4f (%+.4f %%)\n", ppl1, ppl2, 100 * (ppl2 / ppl1 - 1));
  EXPECT_NEAR(ppl2, ppl1, ppl1 * 1e-3);
}

TEST_F(TinyModelTp2, GreedyTokensIdentical) {
  const auto tokens = golden_tokens(512);
  for (int64_t start : {0, 100, 300}) {
    const std::vector<int32_t> prompt(tokens.begin() + start, tokens.begin() + start + 48);
    EXPECT_EQ(greedy(*two_, prompt, 48), greedy(*one_, prompt, 48)) << "prompt at token " << start;
  }
}

TEST_F(TinyModelTp2, EachRanksStateIsOneGpusHeads) {
  const auto tokens = golden_tokens(200);
  auto s1 = one_->new_state(2);
  auto s2 = two_->new_state(2);
  one_->forward(tokens.data(), 100, *s1, ForwardOutputs{});
  two_->forward(tokens.data(), 100, *s2, ForwardOutputs{});
  const Mamba2Config& c = weights_->config;
  const int64_t H = c.nheads(), P = c.headdim, N = c.d_state, L = c.n_layer, batch = 2;
  const auto t1 = s1->tensors(), t2 = s2->tensors();  // per layer: conv, ssm; TP2: rank 0's, then rank 1's
  ASSERT_EQ(t2.size(), 2 * t1.size());
  for (int64_t l = 0; l < L; ++l) {
    const StateTensor& whole = t1[2 * l + 1];
    const auto ref = device_bytes(whole.data, whole.bytes_per_sequence * batch);
    for (int rank = 0; rank < 2; ++rank) {
      const StateTensor& part = t2[rank * 2 * L + 2 * l + 1];
      ASSERT_EQ(part.bytes_per_sequence * 2, whole.bytes_per_sequence);
      const auto got = device_bytes(part.data, part.bytes_per_sequence * batch);
      double worst = 0, scale = 0;
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < H / 2 * P * N; ++i) {
          float a, e;
          std::memcpy(&a, got.data() + (b * (H / 2) * P * N + i) * 4, 4);
          std::memcpy(&e, ref.data() + (b * H * P * N + rank * (H / 2) * P * N + i) * 4, 4);
          worst = std::max(worst, double(std::abs(a - e)));
          scale = std::max(scale, double(std::abs(e)));
        }
      EXPECT_LT(worst, 2e-2 * scale) << "layer " << l << " rank " << rank;
    }
  }
}

TEST_F(TinyModelTp2, GraphReplayEqualsEagerSteps) {
  const auto tokens = golden_tokens(64);
  auto run = [&](bool graphs) {
    CudaBackendOptions options;
    options.use_graphs = graphs;
    return testing::two_sequence_steps(CudaTensorParallelBackend(*weights_, 2, options), tokens, 24, 32);
  };
  const auto eager = run(false), graph = run(true);
  EXPECT_EQ(eager.first, graph.first);
  EXPECT_EQ(eager.second, graph.second);  // bit-identical: the same kernels and the same summation order
}

TEST_F(TinyModelTp2, SnapshotRestoresEveryRank) {
  const auto tokens = golden_tokens(80);
  auto state = two_->new_state(2), snapshot = two_->new_state(2);
  two_->forward(tokens.data(), 30, *state, ForwardOutputs{});
  snapshot->copy_all(*state);
  const int64_t V = two_->config().vocab_size;
  std::vector<float> first(2 * V), again(2 * V);
  const int32_t step[2] = {tokens[40], tokens[41]};
  ForwardOutputs out;
  out.logits = first.data();
  two_->forward(step, 1, *state, out);
  two_->forward(step, 1, *state, ForwardOutputs{});
  state->copy_rows(*snapshot, {1, 0}, {1, 0});  // row copies through the per-rank streams
  out.logits = again.data();
  two_->forward(step, 1, *state, out);
  EXPECT_EQ(first, again);
}

// The bundled model over 4 GPUs where 4 are visible (issue: TP4 runs): logits, perplexity and
// greedy tokens against one GPU, as TinyModelTp2 checks 2.
TEST(TinyModelTp4, MatchesOneGpu) {
  if (visible_gpus() < 4) GTEST_SKIP() << "needs 4 GPUs; " << visible_gpus() << " visible";
  const auto weights = load_model("examples/mamba2-tiny").weights;
  const CudaBackend one(*weights, CudaBackendOptions{});
  const CudaTensorParallelBackend four(*weights, 4, CudaBackendOptions{});
  const auto tokens = golden_tokens(300);
  const double err = testing::max_relative_difference(logits_of(four, tokens, 2), logits_of(one, tokens, 2));
  const auto eval = golden_tokens(512);
  const double ppl1 = std::exp(mean_nll(one, eval)), ppl4 = std::exp(mean_nll(four, eval));
  std::printf("TP4 vs TP1: max |Δlogit| / max |logit| = %.3g; perplexity TP1 %.4f TP4 %.4f (%+.4f %%)\n", err, ppl1,
              ppl4, 100 * (ppl4 / ppl1 - 1));
  EXPECT_LT(err, 2e-2);
  EXPECT_NEAR(ppl4, ppl1, ppl1 * 1e-3);
  for (int64_t start : {0, 100, 300}) {
    const std::vector<int32_t> prompt(eval.begin() + start, eval.begin() + start + 48);
    EXPECT_EQ(greedy(four, prompt, 48), greedy(one, prompt, 48)) << "prompt at token " << start;
  }
}

TEST(GroupedModelTp2, LocalNormMatchesOneGpu) {
  ASSERT_GE(visible_gpus(), 2) << "this test needs 2 GPUs";
  Mamba2Config c = load_model("examples/mamba2-tiny").weights->config;
  c.ngroups = 2;  // groups split over the ranks: each rank's gated norm is whole
  const ModelWeights weights = random_weights(c, 7);
  CudaBackend one(weights, CudaBackendOptions{});
  CudaTensorParallelBackend two(weights, 2, CudaBackendOptions{});
  EXPECT_NE(two.describe_plan(1, 1).find("gated norm local"), std::string::npos);
  const auto tokens = golden_tokens(96);
  const double err = testing::max_relative_difference(logits_of(two, tokens, 2), logits_of(one, tokens, 2));
  std::printf("grouped TP2 vs TP1: %.3g\n", err);
  EXPECT_LT(err, 2e-2);
}

TEST(TensorParallelErrors, MoreRanksThanGpusNamesTheCount) {
  const auto weights = load_model("examples/mamba2-tiny").weights;
  const int gpus = visible_gpus();
  try {
    CudaTensorParallelBackend backend(*weights, 8, CudaBackendOptions{});
    if (gpus < 8) FAIL() << "8 ranks on " << gpus << " GPUs were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 8 CUDA devices"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ssdq
